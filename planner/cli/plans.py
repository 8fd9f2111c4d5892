"""Commands on one plan: explain, export, compare."""

from __future__ import annotations

import contextlib
import shlex
from pathlib import Path

import click

from planner import api
from planner.cli import (
    cli,
    console,
    csv_option,
    echo_json,
    naming_overrides,
    one_output,
    overwrite_option,
    refuse_existing,
    say_notes,
    say_warnings,
)
from planner.cli.given_once import OnceCommand
from planner.cli.ignored import SP_AT_TP1, context_ignored, flag, note_full_only, say_ignored, typed
from planner.cli.options import plan_options, refuse_method_without_full, with_run
from planner.cli.resolve import resolve
from planner.errors import PlannerError
from planner.models.spec import PositionEmbedding
from planner.plan_file import read_plan_file, request_from_plan
from planner.report import plan as report
from planner.timeline import plan_timeline


def _check_bridge_recipe(kw: dict, model: str) -> None:
    """--bridge-recipe names a recipe Bridge has (one error line otherwise); without --bridge-config or
    --bridge-override but with --model it is only a base for export, which explain says rather than ignoring it
    (without --model the recipe alone is the plan's source, as search reads it)."""
    if not kw.get("bridge_recipe"):
        return
    from planner.bridge.recipes import resolve as resolve_recipe
    from planner.bridge.table import NEWEST

    resolve_recipe(kw.get("bridge_version") or NEWEST, kw["bridge_recipe"], model)
    if kw.get("model") and not (kw.get("bridge_config") or kw.get("bridge_override")):  # else the recipe is the plan
        click.echo(
            "megaplan: note: --bridge-recipe is read with --bridge-config or --bridge-override (add "
            "--bridge-override KEY=VALUE to explain the recipe); the plan here comes from the other options",
            err=True,
        )


def _note_ignored(kw: dict, req: api.PlanRequest) -> None:
    """Options the plan cannot use, noted rather than dropped: those no plan of the context uses
    (``context_ignored``: MoE options on a dense model, ...), SP at tp 1, and an option that only matters beside
    another the plan does not have (fresh user trial 8: each of these ran without a word)."""
    say_ignored(context_ignored(kw, req.ctx))
    if kw.get("sequence_parallel") and req.plan.tp == 1:  # Megatron-LM turns it off too, with a warning
        click.echo(f"megaplan: note: {SP_AT_TP1}", err=True)
    say_ignored(_ignored_beside(req))
    _note_beyond_context(req)
    _note_default_layers(req)


def _note_default_layers(req: api.PlanRequest) -> None:
    """--recompute full typed without --recompute-num-layers: Megatron-LM stops without the number (its
    TransformerConfig requires it with full recomputation), megaplan takes 1 (or search's fewest that fit) and
    its exported flags give it;
    said rather than taken silently (fresh user trial 9)."""
    plan = req.plan
    if plan.recompute.value == "full" and typed("recompute") and not typed("recompute_num_layers"):
        n = plan.recompute_num_layers or 1
        what = f"layer{'s' * (n > 1)} per {'model chunk' if plan.recompute_method.value == 'block' else 'group'}"
        click.echo(
            f"megaplan: note: --recompute-num-layers not given: {n} {what} (Megatron-LM needs the number with "
            "full recomputation; megaplan export writes it)",
            err=True,
        )


def _ignored_beside(req: api.PlanRequest) -> list[tuple[list[str], str]]:
    """(the options given, why the plan does not use them) for options read only beside another one the
    plan does not have, as Megatron-LM reads them (arguments.py)."""
    plan, opts = req.plan, req.ctx.options
    checks = [
        (["recompute_modules"], plan.recompute.value != "selective", "they are the modules of --recompute selective"),
        (
            ["microbatch_group_size"],
            plan.vpp == 1,
            "it groups the micro-batches of interleaved stages; this plan has no interleaving (vpp 1)",
        ),
        (
            ["fsdp_sharding", "fsdp_outer_sharding"],
            not plan.fsdp,
            "they are Megatron FSDP's (--fsdp); this plan does not use it",
        ),
        # fresh user trial 10: these ran without a word
        (
            ["tp_comm_overlap_cfg"],
            not opts.tp_comm_overlap,
            "it configures --tp-comm-overlap, which the plan does not use",
        ),
        (["pp_scatter_gather"], plan.pp == 1, "pp 1 sends nothing between pipeline stages"),
        (
            ["pp_scatter_gather"],
            plan.pp > 1 and plan.sequence_parallel,
            "with --sequence-parallel each tensor-parallel rank sends its own 1/t already (Megatron-LM's "
            "p2p_communication skips the scatter/gather there)",
        ),
        (
            ["moe_flex_dispatcher_backend", "moe_flex_dispatcher_num_sms", "moe_hybridep_num_sms_preprocessing"],
            req.ctx.model.is_moe and plan.moe_token_dispatcher.value != "flex",
            "they configure --moe-token-dispatcher flex, which the plan does not use",
        ),
    ]
    out = []
    for names, unused, reason in checks:
        given = [flag(n) for n in names if typed(n)]
        if given and unused:
            out.append((given, reason))
    return out


def _note_beyond_context(req: api.PlanRequest) -> None:
    """A sequence longer than the max_position_embeddings of a model without a position table (RoPE,
    YaRN): Megatron-LM asserts max_position_embeddings >= seq_length (arguments.py) and the export raises
    the flag to the sequence, so the plan is priced; said, since the model was not built for that length
    (with learned positions it is a rule)."""
    model, s = req.ctx.model, req.ctx.training.seq_len
    if s > model.max_position_embeddings and model.position_embedding_type is not PositionEmbedding.LEARNED:
        click.echo(
            f"megaplan: note: seq {s:,} is beyond {model.name}'s max_position_embeddings "
            f"{model.max_position_embeddings:,}, the length it was built for; priced at {s:,} all the same "
            f"(the export writes --max-position-embeddings {s}, as Megatron-LM requires)",
            err=True,
        )


@cli.command()
@plan_options
@click.option("--json", "as_json", is_flag=True, help="Print the plan JSON.")
@click.option(
    "--schedule", is_flag=True, help="Draw the pipeline schedule in the terminal (with --json: add it as 'schedule')."
)
@click.option(
    "--schedule-file",
    type=click.Path(dir_okay=False),
    help="Write the pipeline schedule picture (.svg, or .png with matplotlib).",
)
@overwrite_option
@click.option("--brief", is_flag=True, help="Print only the verdict (fits or not, speed, largest terms).")
def explain(as_json: bool, schedule: bool, schedule_file: str | None, overwrite: bool, brief: bool, **kw) -> None:
    """Break one configuration down: every byte and every millisecond, with formula and source.

    The verdict comes first: whether it fits (or by how much not, and the one change that fixes it),
    speed and MFU, the largest memory and time terms. Without --tp and --pp, explain takes search's
    best plan for the options given and says so.

    \b
    Examples:
        megaplan explain --model gpt3-175b --gpus 1024 --brief
        megaplan explain --model gpt3-175b --gpus 1024 --tp 8 --pp 16 \\
            --micro-batch 1 --recompute full --attention-kernel unfused \\
            --precision fp16
        megaplan explain --megatron-args-file run.sh --env NUM_NODES=16
    """
    from planner.report import figures as plots

    one_output(**{"--json": as_json, "--brief": brief})  # the JSON is whole; --brief would be dropped
    if schedule_file:
        plots.check_picture_path(schedule_file, "--schedule-file", drawable=False)
        refuse_existing("--schedule-file", schedule_file, overwrite)  # the user's file first, then matplotlib
        plots.check_drawable(schedule_file, "--schedule-file", svg_without_matplotlib=True)
    refuse_method_without_full(kw)
    resolved = resolve(kw, search_best=True)
    say_notes(resolved)
    if resolved.searched:
        note_full_only(kw)
    req = resolved.request
    _check_bridge_recipe(kw, req.ctx.model.name)
    _note_ignored(kw, req)
    with naming_overrides(resolved):
        explained = api.explain_plan(req, kw["memory_headroom"], derived=resolved.derived)
    pj = explained.plan_json
    if "fit_suggestions" in pj and not pj["fit_suggestions"]:  # the fix line says what a search really finds
        pj["search_hint"] = _search_hint(req, pj, kw)
    say_warnings(req.ctx, req.gpus, pj)
    timeline = plan_timeline(explained.evaluation, req.plan, req.ctx.options) if schedule or schedule_file else None
    if as_json:
        if resolved.searched:
            click.echo(f"megaplan: note: the plan is {resolved.searched}", err=True)
        echo_json({**pj, "schedule": timeline.to_json()} if schedule else pj)
    else:
        view = report.verdict if brief else report.explain_view
        console().print(view(pj, resolved.searched, read=resolved.read))
        if schedule:  # asked for, with the verdict alone too
            from planner.report.schedule import ScheduleView

            console().print(ScheduleView(timeline, f"Pipeline schedule: {report.plan_line(pj)}"))
    if schedule_file:
        title = f"{pj['model']} on {pj['gpus']} GPUs: {report.plan_line(pj)}"
        plots.schedule_picture(timeline, title).save(schedule_file, "--schedule-file")
        click.echo(f"wrote {schedule_file}", err=True)


@click.command(name="plan", cls=OnceCommand, add_help_option=False)
@plan_options
def _plan_flags(**kw) -> None:
    """Parses the plan options given to compare's --a and --b."""


def _side_overrides(text: str | None, side: str) -> dict:
    """The plan options a --a/--b string sets explicitly (their values, by parameter name)."""
    import shlex

    from click.core import ParameterSource

    if not text:
        return {}
    try:
        ctx = _plan_flags.make_context(f"--{side}", shlex.split(text))
    except (click.ClickException, ValueError) as err:
        message = err.format_message() if isinstance(err, click.ClickException) else str(err)
        raise PlannerError(f"--{side} {text!r}: {message}") from err
    given = {k: v for k, v in ctx.params.items() if ctx.get_parameter_source(k) is ParameterSource.COMMANDLINE}
    for name in ("plan_file", "rank", "megatron_args", "megatron_args_file", "env_pairs"):
        if name in given:
            flag = next(p.opts[0] for p in _plan_flags.params if p.name == name)
            raise PlannerError(f"--{side} takes plan flags (--tp 4 --recompute full ...), not {flag}")
    try:
        refuse_method_without_full(given, set(given))
    except PlannerError as err:
        raise PlannerError(f"--{side} {text!r}: {err}") from err
    return given


def _side_request(base: api.PlanRequest, overrides: dict, side: str, derived: tuple[str, ...] = ()) -> api.PlanRequest:
    from planner.plan_sources import override_request

    try:
        return override_request(base, dict(overrides), derived=derived) if overrides else base
    except PlannerError as err:
        raise PlannerError(f"plan {side.upper()} (--{side}): {err}") from err


def _search_hint(req: api.PlanRequest, pj: dict, kw: dict) -> dict:
    """What a search on the plan's GPUs finds, with the search command that reproduces it when the model
    was named by --model (a search cannot take an imported script)."""
    from planner.cli.reproduce import search_command
    from planner.runs.hints import search_on_these_gpus

    hint = search_on_these_gpus(req, kw["memory_headroom"])
    shown = hint.pop("best") or pj
    command = search_command(shown, kw["model"], kw["hardware"]) if kw.get("model") else None
    hint["command"] = (
        command if hint["finds"] or command is None else command.replace(f" --gpus {req.gpus}", " --min-gpus")
    )
    return hint


def _side_plan(
    req: api.PlanRequest, overrides: dict, side: str, plan_files, kw: dict, derived: tuple[str, ...] = ()
) -> dict:
    """One side's plan JSON; a side without --a/--b is the shared plan alone, and says so when it fails.
    ``derived``: the overlaps the typed plan left out (its fix suggestions price each change with them)."""
    side_derived = tuple(k for k in derived if k not in overrides)
    try:
        return api.explain_plan(req, kw["memory_headroom"], derived=side_derived).plan_json
    except PlannerError as err:
        if overrides or plan_files:
            raise PlannerError(f"plan {side.upper()} (--{side}): {err}") from err
        other = "b" if side == "a" else "a"
        raise PlannerError(
            f"plan {side.upper()} is the shared options alone (no --{side} given), {plan_text_of(req)}: {err}; "
            f"give --{side} '...' as well, or the shared --tp/--pp that --{other} changes"
        ) from err


def plan_text_of(req: api.PlanRequest) -> str:
    p = req.plan
    return f"TP{p.tp} PP{p.pp} DP{p.dp}"


@cli.command()
@click.argument("plan_files", nargs=-1, metavar="[PLAN_A [PLAN_B]]")
@plan_options
@click.option(
    "--a",
    "a_args",
    metavar="'OPTIONS'",
    help="Plan A's options on top of the shared ones, quoted: --a '--tp 8 --pp 16'.",
)
@click.option(
    "--b",
    "b_args",
    metavar="'OPTIONS'",
    help="Plan B's options on top of the shared ones, quoted: --b '--recompute full'.",
)
@click.option("--json", "as_json", is_flag=True, help="Print {a, b, rows, summary}.")
@csv_option
@click.pass_context
def compare(
    click_ctx: click.Context,
    plan_files: tuple[str, ...],
    a_args: str | None,
    b_args: str | None,
    as_json: bool,
    as_csv: bool,
    **kw,
) -> None:
    """Two plans side by side: memory terms, time terms and throughput, differences highlighted.

    Plans come from two plan files (a search --json file takes FILE#RANK), or from one file or the
    shared plan options (flags, --plan, --megatron-args) changed per side by --a and --b.

    \b
    Examples:
        megaplan compare a.json b.json
        megaplan compare plans.json#1 plans.json#2
        megaplan compare --model gpt3-175b --gpus 1024 --tp 8 --pp 16 \\
            --a '--recompute full' --b '--recompute selective --sequence-parallel'
    """
    from planner.report import runs as report_run
    from planner.runs import compare as cmp

    reqs, pjs = _compare_sides(click_ctx, plan_files, a_args, b_args, kw)
    if reqs[0] == reqs[1]:  # fresh user trial 8: `compare plans.json plans.json` compared a plan with itself silently
        named = f" ({plan_files[0]} twice)" if len(plan_files) == 2 and plan_files[0] == plan_files[1] else ""
        click.echo(
            f"megaplan: note: plans A and B are the same plan{named}: nothing below differs (two ranks of a search "
            "file: FILE#1 FILE#2; one plan changed per side: --a/--b)",
            err=True,
        )
    result = cmp.compare_plans(*pjs)
    if as_json:
        echo_json(result)
    elif as_csv:
        from planner.report.csv_out import compare_csv

        click.echo(compare_csv(result), nl=False)
    else:
        console().print(report_run.compare_view(result))


def _compare_sides(click_ctx: click.Context, plan_files: tuple[str, ...], a_args, b_args, kw: dict) -> tuple:
    """`compare`'s two requests and plan JSONs: from two plan files, or one base changed per side by --a/--b."""
    from click.core import ParameterSource

    a_over, b_over = _side_overrides(a_args, "a"), _side_overrides(b_args, "b")
    shared = [
        k
        for k in kw
        if k not in ("tokens", "gpu_hour_price", "memory_headroom")
        and click_ctx.get_parameter_source(k) is ParameterSource.COMMANDLINE
    ]
    if len(plan_files) > 2 or (plan_files and shared):
        raise click.UsageError("give two plan files, or one plan (a file or plan options) with --a/--b, not both")
    if len(plan_files) < 2 and not (a_over or b_over):
        raise click.UsageError(
            "nothing to compare: give two plan files, or --a and/or --b options that change the plan"
        )
    resolved = None if plan_files else resolve(kw)
    if resolved is None:
        bases = [with_run(request_from_plan(read_plan_file(f)), kw) for f in plan_files]
    else:
        say_notes(resolved)
        bases = [resolved.request]
    with naming_overrides(resolved) if resolved else contextlib.nullcontext():
        derived = resolved.derived if resolved else ()  # a plan typed as flags: its overlaps follow each side
        reqs = [_side_request(bases[0], a_over, "a", derived), _side_request(bases[-1], b_over, "b", derived)]
        sides = zip(reqs, (a_over, b_over), "ab", strict=True)
        pjs = [_side_plan(r, over, side, plan_files, kw, derived) for r, over, side in sides]
    return reqs, pjs


@cli.command()
@plan_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["flags", "slurm", "json", "bridge", "bridge-yaml", "bridge-python", "nemo2", "mlm-yaml"]),
    default="flags",
    show_default=True,
    help="bridge*: Megatron-Bridge overrides (dotlist, YAML, recipe) over --bridge-recipe at --bridge-version.",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), help="Write to this file instead of stdout ('-': stdout)."
)
@overwrite_option
@click.option(
    "--force", is_flag=True, help="Write even a plan that does not fit in GPU memory (with a warning in the script)."
)
def export(fmt: str, output: str | None, overwrite: bool, force: bool, **kw) -> None:
    """Write the Megatron-LM flags, a Slurm launch script or the plan JSON for one plan.

    A plan that does not fit in GPU memory is refused (exit 2, nothing written) unless --force.
    Without --tp and --pp, export takes search's best plan for the options given.

    \b
    Examples:
        megaplan export --model gpt3-175b --gpus 1024 --tp 8 --pp 16 \\
            --recompute selective --sequence-parallel
        megaplan search --model gpt3-175b --gpus 1024 --json > plans.json
        megaplan export --plan plans.json --rank 1 --format slurm -o train.sbatch
    """
    from planner.megatron import export as exp

    output = None if output == "-" else output  # '-': standard output, as tools read it (it wrote a file '-')
    refuse_existing("-o/--output", output, overwrite)
    refuse_method_without_full(kw)
    resolved = resolve(kw, search_best=True)
    say_notes(resolved)
    if resolved.searched:
        click.echo(f"megaplan: note: exporting {resolved.searched}", err=True)
        note_full_only(kw)
    req = resolved.request
    with naming_overrides(resolved):
        # refuses plans Megatron-LM would reject, before writing
        pj = api.explain_plan(req, kw["memory_headroom"], derived=resolved.derived).plan_json
        over = _does_not_fit(pj)
        if over and not force:
            raise PlannerError(f"{over}; nothing written (--force writes it anyway)")
    say_warnings(req.ctx, req.gpus, pj)
    if over:
        click.echo(f"megaplan: warning: {over}; written anyway (--force)", err=True)
    elif not pj["estimate"]["fits"]:
        from planner.report.layout import plan_text
        from planner.report.memory import headroom_text

        click.echo(f"megaplan: warning: {plan_text(pj)} {headroom_text(pj['estimate'])}", err=True)
    if fmt not in ("flags", "slurm", "json"):
        from planner.bridge.export import export_text

        text, notes = export_text(
            req, fmt, kw.get("bridge_version"), kw.get("bridge_recipe"), output, hardware_ref=kw.get("hardware")
        )
        for line in notes:
            click.echo(f"megaplan: note: {line}", err=True)
    elif fmt == "json":
        from planner.report.json_out import json_text

        text = json_text(pj) + "\n"
    else:
        text = (
            exp.flags_text(req)
            if fmt == "flags"
            else exp.slurm_script(
                req,
                warning=over,
                iteration_s=pj["estimate"]["iteration_s"],
                model_ref=kw.get("model"),
                hardware_ref=kw.get("hardware"),
            )
        )
        if fmt == "flags":
            _environment_notes(req)
        _unwritten_notes(req, fmt, kw, output)
    if pj.get("published") and fmt not in ("slurm", "json"):  # the Slurm header and the JSON carry it themselves
        from planner.fidelity.published import published_text

        click.echo(f"megaplan: note: {published_text(pj['published'])}", err=True)
    if output is None:
        click.echo(text, nl=False)
        return
    _write_new(output, text, overwrite)
    click.echo(f"wrote {output}", err=True)


def _environment_notes(req: api.PlanRequest) -> None:
    """The environment variables a flags-only export cannot set, which the launch needs."""
    from planner.megatron import export as exp

    value, _ = exp.cuda_device_max_connections(req) or (0, "")
    if value == 1:
        click.echo(
            "megaplan: note: launch with CUDA_DEVICE_MAX_CONNECTIONS=1 in the environment "
            "(Megatron-LM requires it with TP or CP > 1 before Blackwell)",
            err=True,
        )
    elif value:
        click.echo(
            f"megaplan: note: launch with CUDA_DEVICE_MAX_CONNECTIONS={value} in the environment (the expert "
            "all-to-all overlap with TP or CP > 1 before Blackwell: Megatron-LM warns against 1, Megatron-Bridge "
            "launches it so, and the estimate assumes it)",
            err=True,
        )
    elif value is None:
        click.echo("megaplan: note: leave CUDA_DEVICE_MAX_CONNECTIONS unset (Megatron FSDP refuses 1)", err=True)
    if req.ctx.options.expandable_segments:
        click.echo("megaplan: note: launch with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", err=True)
    if exp.nccl_graph_register_off(req):
        click.echo(
            "megaplan: note: launch with NCCL_GRAPH_REGISTER=0 in the environment (Megatron-LM refuses Transformer "
            "Engine's CUDA graphs with expandable segments otherwise)",
            err=True,
        )


def _unwritten_notes(req: api.PlanRequest, fmt: str, kw: dict, output: str | None) -> None:
    """The plan's settings that no Megatron-LM flag carries (the flags run without them), and the options that
    restore them when the flags are read back (the flags alone: with the allocator setting too); the script
    written (-o) and the --model/--hardware files given by their absolute paths."""
    from planner.megatron import export as exp

    for note in exp.model_notes(req):
        click.echo(f"megaplan: note: not in any Megatron-LM flag: {note}", err=True)
    unwritten = exp.unwritten_settings(req)
    for restore, why in unwritten:
        click.echo(f"megaplan: note: not in the flags: {' '.join(restore) + ': ' if restore else ''}{why}", err=True)
    flags_only = fmt == "flags"
    if unwritten or (flags_only and req.ctx.options.expandable_segments):
        script = shlex.quote(str(Path(output).resolve())) if output else "FILE"
        read = "--megatron-args '...' --gpus " + str(req.gpus) if flags_only else f"--megatron-args-file {script}"
        back = shlex.join(exp.readback_args(req, flags_only, kw.get("model"), kw.get("hardware")))
        click.echo(f"megaplan: note: read them back with: megaplan explain {read} {back}", err=True)


def _does_not_fit(pj: dict) -> str | None:
    """Why a plan cannot run (memory), with the one change that fixes it; None when it fits, if only
    without the headroom (export then warns)."""
    est = pj["estimate"]
    if est["fits_without_headroom"]:
        return None
    from planner.report.layout import plan_text

    fix = (pj.get("fit_suggestions") or [None])[0]
    hint = f"; {fix['change']} makes it fit ({fix['peak_memory_gib']:.1f} GiB)" if fix else ""
    return (
        f"{plan_text(pj)} does not fit: it needs {est['peak_memory_gib']:.1f} GiB per GPU, "
        f"{est['peak_memory_gib'] - est['allocatable_gib']:.1f} GiB more than the {est['allocatable_gib']:.1f} GiB "
        f"PyTorch can allocate on {pj['hardware']}{hint}"
    )


def _write_new(path: str, text: str, overwrite: bool) -> None:
    """Write a file, refusing to replace one that exists unless asked to."""
    refuse_existing("-o/--output", path, overwrite)
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as err:
        raise PlannerError(f"cannot write {path!r}: {err.strerror}") from err
