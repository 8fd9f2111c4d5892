"""Commands on the catalogue and the model's fidelity: presets, validate, calibrate."""

from __future__ import annotations

import click

from planner.cli import cli, console, csv_option, echo_json, overwrite_option, progress, refuse_existing
from planner.cli.option_spec import IntRange
from planner.errors import PlannerError, counted
from planner.presets import KINDS, load_spec, preset_names, preset_text
from planner.report import fidelity as report_fidelity

FILE = click.Path(dir_okay=False, exists=True)
LOG_FILE = click.Path(dir_okay=False, exists=True, allow_dash=True)  # '-': standard input (ux12, ux13)


@cli.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def presets(ctx: click.Context, as_json: bool) -> None:
    """List the shipped model and hardware presets.

    \b
    Examples:
        megaplan presets
        megaplan presets models --json
        megaplan presets show llama3-70b
    """
    ctx.ensure_object(dict)["json"] = as_json
    if ctx.invoked_subcommand is None:
        _list_presets(list(KINDS), as_json)


def _list_presets(kinds: list[str], as_json: bool) -> None:
    from planner.report.catalog import SEP, PresetListing

    listing = {kind: {name: _facts(kind, name) for name in preset_names(kind)} for kind in kinds}
    if as_json:
        echo_json({kind: {name: SEP.join(facts) for name, facts in items.items()} for kind, items in listing.items()})
        return
    out = console()
    for kind, items in listing.items():
        out.print(PresetListing(kind, list(items.items())))


def _facts(kind: str, name: str) -> list[str]:
    """A preset's summary as the facts a line may break between."""
    spec = load_spec(KINDS[kind], name)
    if kind == "models":
        from planner.models.params import param_counts

        tr = spec.training
        counts = param_counts(spec)
        mtp = f" incl. {counts.mtp / 1e9:,.1f}B MTP" if counts.mtp else ""
        facts = [f"{counts.total / 1e9:,.1f}B params{mtp} ({counts.active / 1e9:,.1f}B active)"]
        facts.append(f"L {spec.num_layers}, h {spec.hidden_size}, a {spec.num_attention_heads}")
        facts += [f"{spec.num_experts} experts top-{spec.moe_router_topk}"] if spec.is_moe else []
        return facts + ([f"B {tr.global_batch} × s {tr.seq_len}"] if tr else [])
    return [spec.description or spec.gpu.name]  # prose: it wraps between words


def _lister(kind: str, examples: tuple[str, str]):
    """``megaplan presets models`` and ``megaplan presets hardware``."""

    @click.option("--json", "as_json", is_flag=True)
    @click.pass_context
    def list_kind(ctx: click.Context, as_json: bool) -> None:
        _list_presets([kind], as_json or ctx.obj["json"])

    doc = f"List {kind.removesuffix('s')} presets.\n\n\b\nExamples:\n    {examples[0]}\n    {examples[1]}\n"
    return presets.command(kind, help=doc)(list_kind)


presets_models = _lister("models", ("megaplan presets models", "megaplan presets models --json"))
presets_hardware = _lister("hardware", ("megaplan presets hardware", "megaplan presets show dgx-h100-superpod"))


@presets.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def presets_show(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show one preset (model or hardware) in full, by name or by the path of your own YAML file.

    \b
    Examples:
        megaplan presets show gpt3-175b
        megaplan presets show dgx-h100-superpod --json
        megaplan presets show ./my-model.yaml
    """
    kind, ref, text = _find_preset(name)
    if as_json or ctx.obj["json"]:
        echo_json(load_spec(KINDS[kind], ref).model_dump(mode="json"))
    else:
        click.echo(text.rstrip())


def _find_preset(name: str) -> tuple[str, str, str]:
    """(kind, reference, YAML text) of a preset name (any case) or a YAML file of either kind."""
    import difflib
    from pathlib import Path

    from planner.errors import PresetError
    from planner.presets import read_yaml_file

    if not name.strip():
        raise PlannerError("presets show: NAME is empty; give a preset name (`megaplan presets`) or a YAML path")
    path = Path(name).expanduser()
    if name.endswith((".yaml", ".yml")) or path.parent != Path(".") or path.exists():
        text = read_yaml_file(path, "preset")
        problems = []
        for kind, spec in KINDS.items():
            try:
                load_spec(spec, name)
                return kind, name, text
            except PresetError as err:
                problems.append(f"as {kind}: {str(err).removeprefix(str(path) + ': ')}")
        raise PlannerError(f"{name}: neither a model nor a hardware YAML ({'; '.join(problems)})")
    lower = {n.lower(): (k, n) for k in KINDS for n in preset_names(k)}
    if name.lower() in lower:
        kind, real = lower[name.lower()]
        return kind, real, preset_text(kind, real)
    within = [n for n in lower if len(name) >= 3 and name.lower() in n]  # h100, gb200, llama3 (as --hardware h100)
    if 0 < len(within) <= 4:  # `presets show h100` listed all 34 names where `--hardware h100` suggested one (qa21)
        kinds = {lower[n][0] for n in within}
        known = ", ".join(n for k in sorted(kinds) for n in preset_names(k))
        what = f"{next(iter(kinds)).removesuffix('s')} presets" if len(kinds) == 1 else "presets"
        near = ", ".join(lower[n][1] for n in within)
        raise PlannerError(
            f"unknown preset {name!r}; did you mean {'one of ' * (len(within) > 1)}{near}? {what}: {known}"
        )
    close = difflib.get_close_matches(name.lower(), list(lower), n=1, cutoff=0.6)
    if close:  # the presets of the kind it resembles (the whole list of both kinds was 540 characters)
        kind, near = lower[close[0]]
        known = ", ".join(preset_names(kind))
        raise PlannerError(f"unknown preset {name!r}; did you mean {near}? {kind.removesuffix('s')} presets: {known}")
    known = ", ".join(n for _, n in lower.values())
    raise PlannerError(f"unknown preset {name!r}; known: {known} (or a path to a YAML file)")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print {runs: [...], summary: {...}}.")
@click.option(
    "--regret/--no-regret",
    default=False,
    show_default=True,
    help="Also search each run's best plan and report how much faster it is predicted to be.",
)
@click.option(
    "--choice",
    is_flag=True,
    help="Instead: search each of NVIDIA's tuned recipes (model, GPUs, batch, sequence, precision) and show what "
    "rank 1 claims over its published throughput, and on what evidence.",
)
@csv_option
def validate(as_json: bool, regret: bool, choice: bool, as_csv: bool) -> None:
    """Predicted versus published for every Megatron-LM reference run, with errors: time and memory.

    --regret also searches each paper run's best plan; --choice searches NVIDIA's tuned recipes instead.

    \b
    Examples:
        megaplan validate
        megaplan validate --choice
        megaplan validate --csv > validation.csv
    """
    if choice and regret:
        raise click.UsageError("--choice and --regret: choose one (--choice searches NVIDIA's tuned recipes instead)")
    if choice:
        return _validate_choice(as_json, as_csv)
    from planner import parallel
    from planner.fidelity import validate as val
    from planner.fidelity.memory import rows_and_settings, validate_memory
    from planner.report.memory import memory_validation_view

    # the memory rows (the launch-script reader's) and the evidence settings: one more job of the first queue
    # validate shares between two processes (parallel.later): the same values
    other = parallel.later(rows_and_settings)
    result = val.validate(settings=lambda: other()[1])
    if regret:
        with progress("searching each run's best plan", total=len(result["runs"])) as step:
            val.add_regret(result, step=step)
    result["memory"] = validate_memory(rows=other()[0])
    if as_json:
        echo_json(result)
    elif as_csv:
        from planner.report.csv_out import validate_csv

        click.echo(validate_csv(result), nl=False)
    else:
        console().print(report_fidelity.validation_view(result))
        console().print(memory_validation_view(result["memory"]))


def _validate_choice(as_json: bool, as_csv: bool) -> None:
    from planner.fidelity.choice import CHOICE_RECIPES, validate_choice

    if as_csv:
        raise PlannerError("--choice: --csv is not available; use --json")
    with progress("searching each tuned recipe", total=len(CHOICE_RECIPES)) as step:
        result = validate_choice(step=step)
    if as_json:
        echo_json(result)
    else:
        console().print(report_fidelity.choice_view(result))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the fit as JSON.")
@click.option(
    "--write",
    "write_dir",
    type=click.Path(file_okay=False, exists=True),
    help="presets/hardware folder whose YAML files get the fitted values (a checkout's: the fits start from the "
    "presets megaplan reads).",
)
@click.option("--loso/--no-loso", default=True, show_default=True, help="Also fit without each source and predict it.")
@click.option(
    "--from-log",
    "logs",
    multiple=True,
    type=LOG_FILE,
    help="A Megatron-LM training log of your own (repeat for several runs; - reads it from a pipe): fit your "
    "cluster instead.",
)
@click.option(
    "--megatron-args-file",
    "scripts",
    multiple=True,
    type=LOG_FILE,
    help="The launch script of each --from-log run, in the same order (one script serves every log; - reads it "
    "from a pipe).",
)
@click.option("--hardware", help="With --from-log: the preset (or YAML) your cluster starts from; else fit only it.")
@click.option("--gpus", type=IntRange(min=1), help="With --from-log: the world size, if neither file says.")
@click.option(
    "--env",
    "env_pairs",
    multiple=True,
    metavar="VAR=VALUE",
    help="With --from-log: set a variable of the launch script (e.g. --env NNODES=8); repeatable.",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="With --from-log: the hardware YAML to write.")
@overwrite_option
@click.option("--force", is_flag=True, help="With --from-log: write --output even when the factors cannot reach a run.")
@click.option("--moe", "moe", is_flag=True, help="Fit the MoE rows' one factor (host time per per-expert op) instead.")
@click.option(
    "--nvfp4",
    "nvfp4",
    is_flag=True,
    help="Fit GB200's NVFP4 GEMM ratio on its NVFP4 rows instead (carried to DGX B200); after a dense refit.",
)
def calibrate(
    as_json, write_dir, loso, logs, scripts, hardware, gpus, env_pairs, output, overwrite, force, moe, nvfp4
) -> None:
    """Fit the hardware presets' efficiency factors, with their uncertainties, to the published runs
    (about 45 s on two cores, --no-loso a fifth of that); or, with --from-log, to your own runs (a
    few seconds); or, with --moe, the MoE rows' host time per expert op over the model families that agree, and
    H100's all-to-all (about 10 s); or, with --nvfp4, GB200's NVFP4 GEMM ratio.

    --from-log reads the lines Megatron-LM's training loop prints (any --log-interval; the first
    interval, which carries start-up, is left out; no batch-size ramp-up):

    \b
      iteration 20/100 | ... | elapsed time per iteration (ms): 5123.4 |
          throughput per GPU (TFLOP/s/GPU): 480.2 | ... |
          global batch size: 1024 | ...
      using world size: 64, data-parallel size: 8, ...        (optional)
      [Rank 0] ... memory (MB) | allocated: ... | max allocated: ...   (optional)

    A run the factors cannot reach within their bands is named with the assumption that likely
    differs (precision, overlap, GPU count, hardware) and nothing is written unless --force.

    \b
    Examples:
        megaplan calibrate --hardware gb200-nvl72 --no-loso
        megaplan calibrate --write presets/hardware
        megaplan calibrate --from-log train.log --megatron-args-file run.sh \\
            --hardware dgx-h100-superpod -o my-cluster.yaml
    """
    from planner.fidelity import calibrate as cal

    if write_dir and not (logs or scripts or output):
        _note_other_write_dir(write_dir)
    if nvfp4:
        given = {"--moe": moe, "--from-log": logs, "--megatron-args-file": scripts, "-o": output}
        given |= {"--hardware": hardware, "--env": env_pairs, "--gpus": gpus, "--force": force}
        if dropped := [name for name, value in given.items() if value]:
            raise PlannerError(f"--nvfp4 fits GB200's published NVFP4 rows: drop {' and '.join(dropped)}")
        from planner.fidelity.nvfp4_fit import run_nvfp4_calibration

        with progress("fitting GB200's NVFP4 GEMM ratio", total=1) as step:
            out = run_nvfp4_calibration(loso=loso, write_dir=write_dir)
            step("NVFP4 GEMM ratio: fitted")
        return echo_json(out) if as_json else console().print(report_fidelity.nvfp4_calibration_view(out))
    if moe:
        given = {"--from-log": logs, "--megatron-args-file": scripts, "-o": output, "--hardware": hardware}
        given |= {"--env": env_pairs, "--gpus": gpus, "--force": force}
        if dropped := [name for name, value in given.items() if value]:  # only those given (fresh user trial 10)
            raise PlannerError(f"--moe fits the published MoE rows: drop {' and '.join(dropped)}")
        from planner.fidelity.moe_fit import moe_calibration_steps, run_moe_calibration

        with progress("fitting the MoE host time", total=moe_calibration_steps(loso=loso)) as step:
            out = run_moe_calibration(loso=loso, write_dir=write_dir, step=_labelled(step, "MoE host time"))
        return echo_json(out) if as_json else console().print(report_fidelity.moe_calibration_view(out))

    if logs or scripts or output or env_pairs or gpus or force:
        _check_from_log_options(logs, write_dir, scripts=scripts, o=output, env=env_pairs, gpus=gpus, force=force)
        from planner.plan_sources import env_values

        env = env_values(env_pairs)
        return _from_logs(logs, scripts, hardware, (gpus, env), output, (overwrite, force), as_json)
    if hardware and hardware not in cal.FITTED:
        raise PlannerError(_not_fitted_why(hardware))
    total = cal.calibration_steps(loso=loso, only=hardware)  # the fits and the validation
    with progress("fitting the calibration to the published runs", total=total) as step:
        out = cal.run_calibration(loso=loso, write_dir=write_dir, only=hardware, step=_labelled(step, "calibration"))
    if as_json:
        echo_json(out)
    else:
        console().print(report_fidelity.calibration_view(out))


def _not_fitted_why(hardware: str) -> str:
    """Why ``calibrate --hardware`` cannot fit a preset: unknown, or a family member that carries a fitted preset's
    factors (its own runs, if any, are validated out of sample), named with the command that fits it."""
    from planner.fidelity import calibrate as cal
    from planner.fidelity.runs import load_runs
    from planner.presets import preset_names

    fitted = ", ".join(cal.FITTED)
    donor = next((d for d, members in cal.FAMILIES.items() if hardware in members), None)
    if hardware not in preset_names("hardware") or donor is None:
        return f"--hardware {hardware!r} has no published runs to fit; fitted presets: {fitted}"
    rows = sum(r.hardware == hardware for r in load_runs())
    plural = "s" if rows != 1 else ""
    held = f"its {rows} published run{plural} validated out of sample" if rows else "no run of its own"
    return (
        f"--hardware {hardware!r} is not fitted on its own runs: it carries {donor}'s factors ({held}); "
        f"fit that one with --hardware {donor}"
    )


def _note_other_write_dir(write_dir: str) -> None:
    """Every fit (dense, --moe, --nvfp4) starts from the presets megaplan reads, whatever --write names: written into
    another folder, each run replaces that folder's calibration sections with values fitted from the read ones, so
    a second kind of fit undoes the first's there. Said once on stderr when the folders differ."""
    from pathlib import Path

    from planner.presets import presets_root

    read = presets_root() / "hardware"
    if isinstance(read, Path) and Path(write_dir).resolve() != read.resolve():
        click.echo(
            f"megaplan: note: the fits start from the presets in {read}, not from {write_dir}'s; to chain --write, "
            f"--moe --write and --nvfp4 --write, write into {read}",
            err=True,
        )


def _check_from_log_options(logs, write_dir, **given) -> None:
    """The options of a fit on your own runs need --from-log, and --write is the published runs' fit:
    `calibrate --gpus 8` ran the 30-second fit on the published runs with --gpus dropped without a word."""
    if write_dir:
        raise PlannerError(
            "--write refits the shipped presets on the published runs; your own runs' fit goes to -o FILE"
        )
    if not logs:
        names = {"scripts": "--megatron-args-file", "o": "-o", "env": "--env", "gpus": "--gpus", "force": "--force"}
        flags = [names[k] for k, v in given.items() if v]
        raise PlannerError(
            f"{', '.join(flags)} {'goes' if len(flags) == 1 else 'go'} with --from-log: give the Megatron-LM log of "
            "at least one run of your own, or drop "
            f"{'it' if len(flags) == 1 else 'them'} to fit the published runs"
        )


def _launch_script(path: str):
    """A --from-log run's launch script, read as explain reads one (``-``: standard input), its warnings said."""
    from planner.plan_sources import read_launch_script

    script = read_launch_script(path, "calibrate --from-log train.log --megatron-args-file - ...")
    for warning in script.warnings:
        click.echo(f"megaplan: warning: {warning}", err=True)
    return script


def _labelled(step, what: str):
    """The progress bar's step, its line saying what was done last: "calibration: gb200-nvl72 fitted"."""
    return lambda description=None: step(f"{what}: {description}" if description else None)


def _log_pairs(logs, scripts) -> list[tuple[str, str]]:
    """Each --from-log with its launch script, a log named twice read once and said: the same run twice is one
    run, and it passed for two ("2 runs can fit 2 factors", σ as if measured twice)."""
    import os

    pairs = zip(logs, scripts if len(scripts) == len(logs) else scripts * len(logs), strict=True)
    seen: dict[str, tuple[str, str]] = {}
    twice = []
    for log, script in pairs:
        key = log if log == "-" else os.path.realpath(log)
        if key in seen:
            twice.append(log)
        else:
            seen[key] = (log, script)
    if twice:
        names = ", ".join(dict.fromkeys(twice))
        click.echo(f"megaplan: note: --from-log names {names} more than once; each log is one run", err=True)
    return list(seen.values())


def _from_logs(logs, scripts, hardware, gpus_env, output, overwrite_force, as_json) -> None:
    from pathlib import Path

    from planner.fidelity import from_log
    from planner.presets import load_hardware

    if not logs:
        raise PlannerError("--from-log: give the Megatron-LM log of at least one run of your own")
    for name, given, what in (("--from-log", logs, "log"), ("--megatron-args-file", scripts, "script")):
        if given.count("-") > 1:
            raise PlannerError(f"{name} -: standard input holds one {what}; give the others as files")
    if "-" in logs and "-" in scripts:
        raise PlannerError(
            "--from-log - and --megatron-args-file -: standard input holds one file; "
            "give the log or the script as a file"
        )
    if not scripts:
        raise PlannerError("--megatron-args-file: give the launch script of the --from-log run(s)")
    if len(scripts) not in (1, len(logs)):
        raise PlannerError(
            f"--megatron-args-file: give one script for every --from-log ({len(logs)}) "
            f"or one for all, not {len(scripts)}"
        )
    if not output:
        raise PlannerError("-o/--output: name the hardware YAML to write (for example my-cluster.yaml)")
    overwrite, force = overwrite_force
    refuse_existing("-o/--output", output, overwrite)
    hw = load_hardware(hardware or "dgx-h100-superpod")
    read = {path: _launch_script(path) for path in dict.fromkeys(scripts)}  # each once: '-' reads standard input
    gpus, env = gpus_env
    logged = [
        from_log.logged_run(log, read[s], hardware=hw, gpus=gpus, env=env) for log, s in _log_pairs(logs, scripts)
    ]
    for note in (note for lr in logged for note in lr.notes):
        click.echo(f"megaplan: note: {note}", err=True)
    for lr in (lr for lr in logged if lr.log.cut_line):
        click.echo(
            f"megaplan: note: {lr.log.name}, line {lr.log.cut_line}: an iteration line cut short (a log still being "
            "written?), left out",
            err=True,
        )
    result = from_log.calibrate_from_logs(logged, hw)
    rows = from_log.run_rows(logged, result, hw)
    unreached = from_log.unreached(rows, logged, result, hw)
    if unreached and not force:  # before the fit's table: a failed run prints no result that looks like one
        more = f" (and {counted(len(unreached) - 1, 'more run')} it cannot reach)" if len(unreached) > 1 else ""
        raise PlannerError(f"{unreached[0]}{more}; nothing written (--force writes {output} anyway)")
    base = from_log.base_text(hardware or "dgx-h100-superpod")
    Path(output).write_text(from_log.calibrated_yaml(base, hw, result, logged, Path(output).stem))
    out = {"hardware": hw.name, "output": output, "fit": result.to_json(), "runs": rows, "unreached": unreached}
    if as_json:
        echo_json(out)
    else:
        console().print(report_fidelity.log_calibration_view(out))
    for line in unreached:
        click.echo(f"megaplan: warning: {line}", err=True)
