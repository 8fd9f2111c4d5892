"""Read a Megatron-LM launch script or command line without running anything.

:func:`extract_launch` parses the text with ``bashlex`` and walks the syntax tree with a small
interpreter that only tracks variables: assignments, ``export``/``declare``, arrays and ``+=``,
``${X:-default}`` and friends, integer ``$((...))``, ``if``/``elif``/``else`` on ``[ ]``,
``[[ ]]`` and ``(( ))`` tests, ``case``, ``for ... in`` loops, functions, ``&&``/``||``,
``sh -c``/``eval`` strings and ``exit``. No command is ever executed.

bashlex cannot parse arrays, ``$((``, ``[[``, ``((`` or ``case`` (and loops on some unclosed
``${``); :class:`~planner.megatron.shell.rewrite.Rewriter` first turns those into marker commands and opaque
``${__mp_<kind><n>}`` parameters, so bashlex only ever sees simple words.

``source``/``.`` of a file, ``sbatch [options] FILE`` and ``bash FILE`` (``$0`` its path) are followed
when the file is one ``read_file`` gives (the importer's: where the path leads from the folder the
script runs in, beside the script, or in a folder above it, which then is where it runs); here-documents
and ``envsubst < A > B`` written to a file are kept (``LaunchLine.files``) and here-documents fed to
sbatch or a shell are interpreted. ``<fill-in>`` placeholders read as unset values. Associative arrays
(``declare -A``), name references (``local -n``) and ``[[ -v NAME[KEY] ]]`` are tracked.

Limits: files it cannot give are not read (``LaunchLine.unread``); ``$(...)`` and backquotes stay
unresolved placeholders except the few whose output follows from their words (``subst``: ``dirname``,
``readlink -f``, ``cd D && pwd``, moe-modelzoo's ``yq`` ...); file tests (``-f``, ``-d`` ...) are taken
as true; ``while``/``until`` run one pass, ``for`` at most 256 items; ``read``, ``shift``, ``set --``,
``IFS`` changes, globbing and ``~`` are ignored; ``set -e`` ends a script only at a function that fails;
indexed arrays are dense; arithmetic assigns (``(( x = y * 8 ))``, ``let``, ``+=``, ``++``/``--``, the comma
operator) but nests ``?:`` one level only, and a variable assigned from a command's output holds the expression,
unresolved (``LaunchLine.unevaluated`` says it); ``mapfile``/``readarray`` read a file or a here-string, never
standard input or ``<(command)`` (said the same way); ``select``, ``coproc`` and ``for ((...))`` do not parse.
A script that runs no pre-training entry point but another Python program (inference, fine-tuning on
``tasks/main.py``, a data tool; ``python -m MODULE`` too) is refused naming that program.
The first launch found wins; ``LaunchLine.launches`` says how many the script runs in all.

Modules: ``launch`` (the public types and the launchers' process-count options), ``rewrite``
(pre-parse rewrites and the bashlex parse), ``fields`` (expanded fields and variable values),
``expand`` (word and parameter expansion, arithmetic), ``conditions`` (``[ ]``/``[[ ]]``
tests) and ``interp`` (the interpreter that walks the tree and finds the launch).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace

from planner.megatron.shell.interp import Interp, Return, Stop
from planner.megatron.shell.launch import LaunchLine, ShellParseError, sbatch_directives

__all__ = ["LaunchLine", "ShellParseError", "count_launches", "extract_launch"]


def extract_launch(
    text: str, env: Mapping[str, str] | None = None, read_file: Callable[[str], str | None] | None = None
) -> LaunchLine:
    """Find the Megatron-LM launch in a shell script or command line, without running it.

    ``argv`` holds the arguments after the entry point (``pretrain_gpt.py``, any
    ``pretrain_*.py``/``train*.py``), or every word if the text is only flags. Process counts
    come from torchrun / ``python -m torch.distributed.run|launch``, srun/sbatch options and
    ``#SBATCH`` lines, mpirun or deepspeed, else a ``WORLD_SIZE`` variable. Variables in ``env``
    are pinned: they win over the script's own assignments and defaults. Variables with no
    value (``$1``) stay as placeholders in ``argv`` and are listed in ``unresolved``.

    Raises :class:`ShellParseError` if bashlex cannot parse the text or it holds neither an
    entry point nor flags.
    """
    interp = Interp(env or {}, sbatch_directives(text), read_file)
    try:
        interp.run_text(text)
    except (Stop, Return):
        pass
    if interp.launch is not None:
        launches = count_launches(text, env, read_file)
        if launches > 1:
            return replace(interp.launch, launches=launches)
        return interp.launch
    others = interp.others or [p for p in written_programs(text) if _kind(p)]  # one after an exit it took
    if others and not _bridge_hint(text):  # Bridge's launchers have their own options, said below
        raise ShellParseError(not_pretraining(others))
    if interp.flags:
        return interp.make_launch([], interp.flags, None)
    where = " before the script's exit" if interp.exited else ""
    if interp.exited and interp.exit_said:
        where += f' (it printed "{interp.exit_said}"; set what it asks for with --env NAME=VALUE)'

    unread = list(dict.fromkeys(interp.unread))
    hint = "" if interp.exited and interp.exit_said else _yq_hint(text, unread)  # what it printed says why
    if unread:
        where += f"; the script reads {', '.join(unread)}, which megaplan could not read" + (
            ""
            if hint
            else " (files are read where the script's paths lead, beside it or in a folder above it): put it "
            "beside the script, or set the "
            "variables it defines with --env NAME=VALUE"
        )
    hint = hint or _flags_variable_hint(interp)
    raise ShellParseError(
        f"no Megatron-LM entry point (pretrain_*.py, train*.py) or flags found{where}{hint}{_bridge_hint(text)}"
    )


PRETRAINING = "pretrain_*.py, train*.py"
OTHER_PROGRAMS = (  # (pattern on a program's path or module, what it is, why megaplan does not plan it)
    (
        r"infer|generat|text_gen|server|serve|chat|complet|sampl",
        "an inference program",
        "megaplan plans pre-training iterations (forward, backward, optimizer step), not inference",
    ),
    (
        r"(?:^|[/.])tasks[/.](?:\w+[/.])?main(?:\.py)?$|finetun|fine_tun|sft|rlhf|dpo|grpo|reward",
        "a fine-tuning or downstream-task program",
        "megaplan plans pre-training, not the task-specific models and data of fine-tuning",
    ),
    (r"eval|mmlu|bench|score", "an evaluation program", "megaplan plans pre-training, not evaluation"),
    (
        r"quantiz|prun|distil|export|convert|checkpoint|ckpt|merge|preprocess|tokeniz|download",
        "a checkpoint or data tool",
        "megaplan plans pre-training, and this tool trains nothing",
    ),
)


_WRITTEN = re.compile(
    r"(?:\bpython[\d.]*|\btorchrun|\btorch\.distributed\.(?:run|launch))\b[^\n;|&]*?"
    r"(?:\s-[A-Za-z]*m\s+([A-Za-z_][\w.]*)|\s([\w./-]+\.py)\b)"
)


def written_programs(text: str) -> list[str]:
    """The Python programs the script's text runs as written (``python X.py``, ``torchrun -m X``), lines joined at
    their backslashes: what a script that stops before its launch (``exit 1`` without its arguments) would run."""
    joined = re.sub(r"\\\n", " ", text)
    found = [m.group(1) or m.group(2) for m in _WRITTEN.finditer(joined)]
    return [p for p in dict.fromkeys(found) if p not in ("torch.distributed.run", "torch.distributed.launch")]


def _kind(program: str) -> tuple[str, str] | None:
    """What a program is and why megaplan does not plan it, by its name (OTHER_PROGRAMS); None if unknown."""
    return next(((what, why) for pattern, what, why in OTHER_PROGRAMS if re.search(pattern, program, re.I)), None)


def not_pretraining(programs: list[str]) -> str:
    """The one line for a script that runs Python programs but no pre-training entry point: the program, what
    it is, and why megaplan does not plan it (fresh user trial 8: an inference script was "no entry point", and
    one launched through ``$CMD`` "launches nothing")."""
    for program in programs:
        kind = _kind(program)
        if kind is not None:
            return f"the script runs {program}, {kind[0]}, not a pre-training entry point ({PRETRAINING}): {kind[1]}"
    named = ", ".join(programs[:3]) + (f" and {len(programs) - 3} more" if len(programs) > 3 else "")
    return (
        f"the script runs {named}, but no pre-training entry point ({PRETRAINING}): megaplan plans pre-training "
        "launches; give the script that launches one, or its flags with --megatron-args and --gpus N"
    )


def _flags_variable_hint(interp: Interp) -> str:
    """A file that only sets a model's flags in a variable, for the script that sources it to launch with
    (Megatron-LM's examples/post_training/modelopt/conf/*.sh, MODEL_ARGS): the variable, and how to give its
    flags (fresh user trial 8: "no entry point" alone did not say what to do)."""
    names = [
        name
        for name, var in interp.vars.items()
        if isinstance(var.value, (str, list)) and "--num-layers" in " ".join(var.items())
    ]
    if not names:
        return ""
    return (
        f"; it sets a model's Megatron-LM flags in {', '.join(names)} and launches nothing (the script that sources it "
        f'launches): give that script, or the flags with --megatron-args "$(. FILE; echo ${names[0]})" --gpus N'
    )


def _bridge_hint(text: str) -> str:
    """A script that runs Megatron-Bridge's performance launchers (scripts/performance/setup_experiment.py or
    run_script.py, as NVIDIA's dgxc-benchmarking launch.sh does): the options that read a Bridge run."""
    import re

    m = re.search(r"\b(setup_experiment|run_script)\.py\b", text)
    if m is None:
        return ""
    recipe = re.search(r"--model[_-]recipe[_-]name[ =]+([A-Za-z0-9_.]+)", text)
    named = f" (it names {recipe.group(1)})" if recipe else ""
    return (
        f"; it runs Megatron-Bridge's {m.group(0)}, not a Megatron-LM launch{named}: give the recipe with "
        "--bridge-recipe NAME --gpus N (a NAME megaplan does not know lists those it does), or its overrides with "
        "--bridge-config FILE"
    )


def count_launches(
    text: str, env: Mapping[str, str] | None = None, read_file: Callable[[str], str | None] | None = None
) -> int:
    """How many Megatron-LM launches the script runs, walked to its end (the same interpreter, each launch
    counted instead of stopping at the first; a ``bash FILE``'s ``exit`` ends that child only)."""
    counter = Interp(env or {}, sbatch_directives(text), read_file)
    counter.count_only = True
    try:
        counter.run_text(text)
    except (Stop, Return, ShellParseError):  # an exit, the step limit, or a later file bashlex cannot parse
        pass
    return counter.launches


YQ = re.compile(r"\$\(\s*yq\b")
MODELZOO_LAUNCHER = "sbatch_benchmarking.sh"  # Megatron-LM examples/moe-modelzoo: its flags come from a YAML via yq


def _yq_hint(text: str, unread: list[str]) -> str:
    """What to give instead when the flags come from a YAML through ``yq`` (never run here): the YAML."""
    if YQ.search(text):
        return (
            "; its flags come from a YAML through yq, which megaplan runs only for moe-modelzoo's expressions: pass "
            "the YAML itself as "
            "--megatron-args-file (a moe-modelzoo config's MODEL_ARGS are read), with --env for its ${VARIABLES}"
        )
    if any(path.rstrip("/").endswith(MODELZOO_LAUNCHER) for path in unread):
        return (
            f"; {MODELZOO_LAUNCHER} (Megatron-LM examples/moe-modelzoo) reads the model's flags from "
            "model_configs/benchmarking/$MODEL.yaml through yq: pass that YAML as --megatron-args-file, with --env "
            "TP=.. PP=.. EP=.. CP=.. MBS=.. GBS=.. as the script sets them, and --gpus N"
        )
    return ""
