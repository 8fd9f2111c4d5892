"""Dump the flags of older Megatron-LM releases and of the Megatron-DeepSpeed forks that today's
Megatron-LM parser does not have, into planner/megatron/data/fork_flags.json.

Each source's ``arguments.py`` is read with ``ast`` (never imported or run): every
``parser.add_argument("--flag", ...)`` call gives its spellings and whether it takes a value
(``store_true``/``store_false``/``store_const`` take none), its ``nargs`` and its ``choices``.
Run from a checkout with git mirrors of the three repositories:

    python scripts/dump_fork_flags.py NVIDIA_GIT_DIR MS_DEEPSPEED_GIT_DIR BIGSCIENCE_GIT_DIR
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

NVIDIA_RELEASES = (  # tags of NVIDIA/Megatron-LM, oldest first; the newest release that had a flag names it
    "v1.0",
    "v2.0",
    "v2.5",
    "v2.6",
    "23.04",
    "23.06",
    "core_v0.4.0",
    "core_v0.5.0",
    "core_v0.6.0",
    "core_v0.7.0",
    "core_v0.8.0",
    "core_v0.9.0",
    "core_v0.10.0",
    "core_v0.11.0",
    "core_v0.12.0",
    "core_v0.13.0",
    "core_v0.14.0",
    "core_v0.15.0",
    "core_v0.16.0",
    "core_v0.17.0",
    "core_v0.18.0",
    "core_v0.19.0",
)
NO_VALUE = {"store_true", "store_false", "store_const", "count", "help", "version"}


def git_show(git_dir: str, rev: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"{rev}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def git_rev(git_dir: str, rev: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, "rev-parse", rev], check=True, capture_output=True, text=True
    ).stdout.strip()


def arguments_path(git_dir: str, rev: str) -> str:
    names = subprocess.run(
        ["git", "--git-dir", git_dir, "ls-tree", "-r", "--name-only", rev], check=True, capture_output=True, text=True
    ).stdout.split()
    for candidate in ("megatron/training/arguments.py", "megatron/arguments.py"):
        if candidate in names:
            return candidate
    raise SystemExit(f"no arguments.py at {rev}")


def _literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def add_argument_calls(source: str) -> list[dict]:
    """Every add_argument call with string flags: spellings, takes_value, nargs, choices."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
        ):
            continue
        flags = [
            a.value
            for a in node.args
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
        ]
        if not flags:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        action = _literal(kw["action"]) if "action" in kw else None
        nargs = _literal(kw["nargs"]) if "nargs" in kw else None
        choices = _literal(kw["choices"]) if "choices" in kw else None
        out.append(
            {
                "flags": flags,
                "takes_value": action not in NO_VALUE,
                "nargs": nargs,
                "choices": list(choices) if isinstance(choices, (list, tuple)) else None,
            }
        )
    return out


def main(nvidia: str, msds: str, bsds: str) -> None:
    table = json.loads(Path("planner/megatron/data/megatron_arguments.json").read_text())
    today = {f for a in table["arguments"] for f in a["flags"]}
    sys.path.insert(0, ".")
    from planner.megatron.aliases import ALIASES

    known = today | set(ALIASES)
    flags: dict[str, dict] = {}
    sources: dict[str, str] = {}

    def add(dialect: str, git_dir: str, rev: str, repo: str) -> None:
        path = arguments_path(git_dir, rev)
        commit = git_rev(git_dir, rev)
        sources[dialect] = f"{repo} {path} at {commit}"
        for arg in add_argument_calls(git_show(git_dir, rev, path)):
            for flag in arg["flags"]:
                if flag.startswith("--") and flag not in known:
                    entry = {k: arg[k] for k in ("takes_value", "nargs", "choices")}
                    flags.setdefault(flag, {"dialects": [], **entry})["dialects"].append(dialect)

    for tag in NVIDIA_RELEASES:
        add(f"Megatron-LM {tag}", nvidia, tag, "NVIDIA/Megatron-LM")
    add(
        "Megatron-LM post-training (nvidia-modelopt)",
        nvidia,
        "d98e8a64ddf34856e74b24714e3bedb2f5a39553",
        "NVIDIA/Megatron-LM",
    )
    add("Megatron-DeepSpeed (Microsoft)", msds, "HEAD", "microsoft/Megatron-DeepSpeed")
    add("Megatron-DeepSpeed (BigScience)", bsds, "HEAD", "bigscience-workshop/Megatron-DeepSpeed")
    # the post-training group is in another file of the same commit
    sources["Megatron-LM post-training (nvidia-modelopt)"] = (
        "NVIDIA/Megatron-LM megatron/post_training/arguments.py at d98e8a64ddf34856e74b24714e3bedb2f5a39553"
    )
    for flag in list(flags):
        if "Megatron-LM post-training (nvidia-modelopt)" in flags[flag]["dialects"]:
            flags[flag]["dialects"].remove("Megatron-LM post-training (nvidia-modelopt)")
            if not flags[flag]["dialects"]:
                del flags[flag]
    for arg in add_argument_calls(
        git_show(nvidia, "d98e8a64ddf34856e74b24714e3bedb2f5a39553", "megatron/post_training/arguments.py")
    ):
        for flag in arg["flags"]:
            if flag.startswith("--") and flag not in known:
                entry = {k: arg[k] for k in ("takes_value", "nargs", "choices")}
                flags.setdefault(flag, {"dialects": [], **entry})["dialects"].append(
                    "Megatron-LM post-training (nvidia-modelopt)"
                )
    # DeepSpeed's own arguments, added to every Megatron-DeepSpeed parser by deepspeed.add_config_arguments
    # (deepspeed/__init__.py, _add_core_arguments): --deepspeed, --deepscale and --deepspeed_mpi take no value
    sources["DeepSpeed"] = "microsoft/DeepSpeed deepspeed/__init__.py _add_core_arguments"
    for flag, takes_value in (
        ("--deepspeed", False),
        ("--deepspeed_config", True),
        ("--deepscale", False),
        ("--deepscale_config", True),
        ("--deepspeed_mpi", False),
    ):
        flags.setdefault(flag, {"dialects": [], "takes_value": takes_value, "nargs": None, "choices": None})
        flags[flag]["dialects"].append("DeepSpeed")
    out = {
        "about": "flags of older Megatron-LM releases and of forks that today's parser does not have; written by "
        "scripts/dump_fork_flags.py, never edited by hand",
        "sources": sources,
        "flags": dict(sorted(flags.items())),
    }
    Path("planner/megatron/data/fork_flags.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"{len(flags)} flags from {len(sources)} sources")


if __name__ == "__main__":
    main(*sys.argv[1:4])
