#!/usr/bin/env python3
"""Generate planner/bridge/data/nemo2_defaults.json: what each NeMo 2 ``llm`` pretraining recipe factory megaplan
knows (planner.bridge.formats.NEMO2_FACTORIES) sets, at a pinned NeMo tag, in the keys of the mapping table's
NeMo 2 column (what ``nemo llm pretrain --factory NAME key=value`` overrides).

Reads NeMo's source from a git copy (never vendored, never run): ``nemo/collections/llm/recipes/<factory>.py``'s
``pretrain_recipe``, whose ``run.Partial`` names a trainer function (the file's own or one imported from a sibling
recipe module) called with keyword arguments over its parameter defaults; that function's
``run.Config(nl.MegatronStrategy, ...)`` and its ``ddp=run.Config(DistributedDataParallelConfig, ...)`` give the
parallel sizes and DDP overlaps, its ``run.Config(nl.Trainer, max_steps=...)`` the run's length; the
``run.Config(MockDataModule, ...)`` the batch and sequence; ``plugins=
bf16_mixed()`` (or MegatronMixedPrecision "bf16-mixed") the precision plugin (grad_reduce_in_fp32 on,
recipes/precision/mixed_precision.py); ``distributed_fused_adam_with_cosine_annealing`` the distributed optimizer
(recipes/optim/adam.py: use_distributed_optimizer=True); then ``recipe.<key> = <literal>`` statements of
``pretrain_recipe`` outside ``if performance_mode`` blocks. A value the source computes is left out.

    python scripts/dump_nemo2_defaults.py <NeMo git dir> v2.4.0
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.bridge.formats import NEMO2_FACTORIES  # noqa: E402
from planner.bridge.table import ROWS  # noqa: E402

OUT = ROOT / "planner" / "bridge" / "data" / "nemo2_defaults.json"
RECIPES = "nemo/collections/llm/recipes/"
STRATEGY = "trainer.strategy."
KNOWN = {key for row in ROWS for key in row.nemo2} | {"trainer.max_steps"}
PLUGINS = {"bf16_mixed": "bf16_mixed", "fp16_mixed": "fp16_mixed", "bf16-mixed": "bf16_mixed", "16-mixed": "fp16_mixed"}


def source(git: str, tag: str, path: str) -> ast.Module | None:
    run = subprocess.run(["git", "-C", git, "show", f"{tag}:{path}"], capture_output=True, text=True, check=False)
    return ast.parse(run.stdout) if run.returncode == 0 else None


def defaults(fn: ast.FunctionDef) -> dict:
    args = fn.args.args
    out = {}
    for a, d in zip(args[len(args) - len(fn.args.defaults) :], fn.args.defaults, strict=True):
        try:
            out[a.arg] = ast.literal_eval(d)
        except ValueError:
            out[a.arg] = ast.unparse(d)  # torch.bfloat16 and the like: kept as text
    return out


def value(node: ast.AST, scope: dict):
    if isinstance(node, ast.Name) and node.id in scope:
        return scope[node.id]
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def config_kwargs(body: list[ast.stmt], target: str, scope: dict) -> dict:
    """Keyword arguments of the first ``run.Config(<target>, ...)`` call in ``body`` (names from ``scope``)."""
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Call) and node.args and ast.unparse(node.args[0]).endswith(target):
            return {k.arg: k.value for k in node.keywords if k.arg}
    return {}


def trainer_function(tree: ast.Module, name: str, git: str, tag: str) -> ast.FunctionDef | None:
    local = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    if name in local:
        return local[name]
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            original = next(a.name for a in node.names if (a.asname or a.name) == name)
            other = source(git, tag, node.module.replace(".", "/") + ".py")
            if other is None:
                other = source(git, tag, node.module.replace(".", "/") + "/__init__.py")
            found = other and {n.name: n for n in other.body if isinstance(n, ast.FunctionDef)}.get(original)
            return found or None
    return None


def trainer_fields(fn: ast.FunctionDef, call: ast.Call, scope: dict) -> dict:
    params = defaults(fn) | {k.arg: value(k.value, scope) for k in call.keywords if k.arg}
    strategy = config_kwargs(fn.body, "MegatronStrategy", params)
    out = {STRATEGY + k: value(v, params) for k, v in strategy.items() if k != "ddp"}
    ddp = config_kwargs(fn.body, "DistributedDataParallelConfig", params)
    out |= {STRATEGY + "ddp." + k: value(v, params) for k, v in ddp.items()}
    trainer = config_kwargs(fn.body, "Trainer", params)
    if "max_steps" in trainer:  # the run's length (Lightning's Trainer(max_steps=...): optimizer steps)
        out["trainer.max_steps"] = value(trainer["max_steps"], params)
    plugin = trainer.get("plugins")
    if isinstance(plugin, ast.Call):
        name = ast.unparse(plugin.func).split(".")[-1]
        precision = next((value(k.value, params) for k in plugin.keywords if k.arg == "precision"), None)
        out["trainer.plugins"] = PLUGINS.get(precision or name)
    return out


def recipe_fields(git: str, tag: str, factory: str) -> dict:
    tree = source(git, tag, f"{RECIPES}{factory}.py")
    fn = tree and next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "pretrain_recipe"), None)
    if fn is None:
        return {}
    scope = defaults(fn)
    partial = next(n for n in ast.walk(fn) if isinstance(n, ast.Call) and ast.unparse(n.func) == "run.Partial")
    parts = {k.arg: k.value for k in partial.keywords if k.arg}
    out: dict = {}
    call = parts.get("trainer")
    trainer = isinstance(call, ast.Call) and trainer_function(tree, ast.unparse(call.func), git, tag)
    if trainer:
        out |= trainer_fields(trainer, call, scope)
    data = config_kwargs([ast.Expr(parts["data"])], "MockDataModule", scope) if "data" in parts else {}
    out |= {
        f"data.{k}": value(v, scope)
        for k, v in data.items()
        if k in ("seq_length", "global_batch_size", "micro_batch_size")
    }
    if "optim" in parts and "distributed_fused_adam" in ast.unparse(parts["optim"]):
        out[STRATEGY + "ddp.use_distributed_optimizer"] = True
    for node in fn.body:  # recipe.<key> = <literal> at the top level (not under performance_mode)
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            key = ast.unparse(node.targets[0])
            if key.startswith("recipe."):
                out[key.removeprefix("recipe.")] = value(node.value, scope)
    return {k: v for k, v in out.items() if k in KNOWN and v is not None}


def main() -> int:
    git, tag = sys.argv[1], sys.argv[2]
    data = {
        "tag": tag,
        "how": "scripts/dump_nemo2_defaults.py: NeMo's recipes/<factory>.py pretrain_recipe read at the tag (AST, "
        "never run): its trainer function's MegatronStrategy/DDP arguments and max_steps, MockDataModule batch and "
        "sequence, "
        "precision plugin, distributed optimizer, and recipe.<key> = <literal> outside performance_mode",
        "factories": {f: recipe_fields(git, tag, f) for f in NEMO2_FACTORIES},
    }
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
