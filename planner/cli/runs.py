"""Commands that search: search (and --min-gpus), sweep."""

from __future__ import annotations

import contextlib

import click

from planner import api, parallel
from planner.cli import cli, console, csv_option, echo_json, overwrite_option, progress, refuse_existing, say_warnings
from planner.cli.option_spec import IntRange
from planner.cli.options import (
    BRIDGE_SOURCE,
    bridge_source_options,
    note_beyond_chunks,
    refuse_method_without_full,
    search_options,
)
from planner.cli.reproduce import commands

MAX_TOP = 1000  # --top: each plan listed is a whole plan JSON (6,600 took over 10 s)
MAX_TABLE_TOP = 200  # a table is read, not processed: 200 rows draw in well under a second


@cli.command()
@click.option("--gpus", type=IntRange(min=1), help="N, the GPUs to split the model over.")
@click.option(
    "--min-gpus",
    is_flag=True,
    help="Instead of --gpus: find the smallest cluster with a plan that fits (1, 2, 4 … GPUs within a node, "
    "then whole nodes).",
)
@search_options
@bridge_source_options
@click.option("--max-tp", type=IntRange(min=1), help="Largest TP (default: GPUs per node; larger crosses nodes).")
@click.option(
    "--rank-by",
    type=click.Choice(["risk", "estimate", "memory"]),
    default="risk",
    show_default=True,
    help="risk: fewest features no published run on the GPU generation exercises first, then the pessimistic end "
    "of each plan's band; estimate: the point estimate (ties: fewer such features first); memory: peak memory.",
)
@click.option("--sort", type=click.Choice(["time", "memory"]), default="time", help="memory: as --rank-by memory.")
@click.option(
    "--top",
    type=IntRange(1, MAX_TOP),
    default=10,
    show_default=True,
    help=f"How many plans to show: at most {MAX_TABLE_TOP} in the table, {MAX_TOP:,} with --json or --csv.",
)
@click.option("--json", "as_json", is_flag=True, help="Print {plans, evaluated, feasible, rejected}.")
@csv_option
def search(**kw) -> None:
    """Rank every legal TP/PP/DP/CP/EP/micro-batch/VPP/recompute/SP plan: first by the published
    runs behind its features, then by the pessimistic end of its predicted time (--rank-by).

    \b
    Examples:
        megaplan search --model gpt3-175b --gpus 1024
        megaplan search --model gpt3-175b --min-gpus \\
            --hardware dgx-a100-40gb-superpod
        megaplan search --gpus 64 --hardware dgx-h100-superpod \\
            --bridge-recipe llama3_70b_pretrain_32gpu_h100_bf16_config
    """
    from planner.search import search as run_search
    from planner.space.warnings import refused_modules_note

    if kw["min_gpus"] and kw["gpus"] is not None:
        raise click.UsageError("give either --gpus N or --min-gpus (find the smallest cluster), not both")
    if not kw["min_gpus"] and kw["gpus"] is None and not any(kw.get(k) for k in BRIDGE_SOURCE):
        raise click.UsageError("Missing option '--gpus' (or --min-gpus to find the smallest cluster that fits).")
    if kw["top"] > MAX_TABLE_TOP and not (kw["as_json"] or kw["as_csv"]):
        raise click.UsageError(
            f"--top {kw['top']}: the table shows at most {MAX_TABLE_TOP} plans; --json and --csv list up to {MAX_TOP:,}"
        )
    _one_order(kw)
    req, pins, bridge, world = _inputs(kw)
    if note := refused_modules_note(req.ctx, pins):
        click.echo(f"megaplan: warning: {note}", err=True)
    kw["gpus"] = kw["gpus"] or world  # a Bridge recipe or workload that states its GPUs (with a note saying so)
    if kw["min_gpus"]:
        return _min_gpus(req, pins, kw)
    table = not (kw["as_json"] or kw["as_csv"])
    with parallel.meanwhile(_import_table) if table else contextlib.nullcontext():
        result = run_search(
            req.ctx,
            kw["gpus"],
            pins,
            top=kw["top"],
            sort=kw["sort"],
            rank_by=kw["rank_by"],
            memory_headroom=kw["memory_headroom"],
        )
    say_warnings(req.ctx, kw["gpus"], result.plans[0])
    note_beyond_chunks(kw, result.plans)
    for pj in result.plans:
        pj["commands"] = commands(pj, kw["model"], kw["hardware"], bridge)
    if kw["as_json"]:
        echo_json(result.to_json())
    elif kw["as_csv"]:
        from planner.report.csv_out import search_csv

        click.echo(search_csv(result.plans), nl=False)
    else:
        from planner.report.search import search_view  # rich: only a table needs it

        console().print(search_view(result, req.ctx, kw["gpus"]))


def _import_table() -> None:
    """The modules that draw search's table (rich), imported as the command's own are (``_imports_without_gc``):
    run while the search waits for its forked half (``parallel.meanwhile``), else when the table is drawn."""
    from planner.cli import _imports_without_gc

    with _imports_without_gc():
        import planner.report.search  # noqa: F401


def _one_order(kw: dict) -> None:
    """--sort and --rank-by both given must name the same order (--sort memory is --rank-by memory)."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    given = [k for k in ("sort", "rank_by") if ctx.get_parameter_source(k) is ParameterSource.COMMANDLINE]
    if len(given) == 2 and (kw["sort"] == "memory") != (kw["rank_by"] == "memory"):
        raise click.UsageError(
            f"--sort {kw['sort']} and --rank-by {kw['rank_by']} ask for two orders; give one "
            "(--rank-by risk, estimate or memory; --sort memory is --rank-by memory)"
        )


def _inputs(kw: dict):
    """(request, pins, the Bridge options to export with): from the options, or from a Bridge recipe/config."""
    from planner.cli.resolve import given_options
    from planner.plan_sources import search_source

    bridge = {k: kw[k] for k in BRIDGE_SOURCE if kw.get(k)}
    if not kw.get("model") and not bridge:
        raise click.UsageError(
            "Missing option '--model' (a preset name from `megaplan presets models`, or a YAML path)."
        )
    if bridge and kw.get("min_gpus"):
        raise click.UsageError("--min-gpus takes no Bridge recipe or config: give --gpus N (the recipe's world)")
    refuse_method_without_full(kw)
    req, pins, notes, world = search_source(kw, given_options())  # bad options: one error line, no note before
    for note in notes:
        click.echo(f"megaplan: {note}", err=True)
    _note_unused(kw, req.ctx)
    export = {k: kw[k] for k in ("bridge_recipe", "bridge_version") if kw.get(k)}
    return req, pins, export if bridge else None, world


def _note_unused(kw: dict, ctx: api.Context) -> None:
    """Options search, sweep or --min-gpus cannot use: those no plan of the context uses (``context_ignored``),
    --sequence-parallel at --tp 1, and those that pin only some of the plans ranked (``note_some_plans``)."""
    from planner.cli.ignored import SP_AT_TP1, context_ignored, note_some_plans, say_ignored

    ignored = context_ignored(kw, ctx)
    say_ignored(ignored)
    if kw.get("sequence_parallel") and kw.get("tp") == 1:
        click.echo(f"megaplan: note: {SP_AT_TP1}", err=True)
    note_some_plans(kw, ctx, said=frozenset(f for flags, _ in ignored for f in flags))


def _min_gpus(req: api.PlanRequest, pins, kw: dict) -> None:
    from planner.report import runs as report_run
    from planner.report.search import setup_words
    from planner.runs.min_gpus import min_gpus

    with progress("finding the smallest cluster") as step:
        fit = min_gpus(req.ctx, pins, memory_headroom=kw["memory_headroom"], step=step).to_json()
    for size in fit["sizes"]:
        size["plan"]["commands"] = commands(size["plan"], kw["model"], kw["hardware"])
    if kw["as_json"]:
        return echo_json(fit)
    if kw["as_csv"]:
        from planner.report.csv_out import search_csv

        plans = [dict(s["plan"], rank=k) for k, s in enumerate(fit["sizes"], 1)]
        return click.echo(search_csv(plans), nl=False)
    ctx = req.ctx
    console().print(
        report_run.fit_view(fit, f"Smallest cluster for {ctx.model.name} on {ctx.hardware.name}: {setup_words(ctx)}")
    )


@cli.command()
@click.option("--gpus", "gpu_sizes", required=True, help="Sizes: a list 64,128,256 or a doubling range 64:4096.")
@click.option(
    "--plot",
    "plot_file",
    type=click.Path(dir_okay=False),
    help="Draw throughput and scaling efficiency against GPUs (.svg or .png; needs matplotlib).",
)
@overwrite_option
@click.option("--skip-infeasible", is_flag=True, help="List a size with no plan as a row instead of stopping (exit 2).")
@click.option("--json", "as_json", is_flag=True, help="Print {rows: [{gpus, plan, scaling_efficiency, no_plan}], ...}.")
@csv_option
def sweep(
    gpu_sizes: str, plot_file: str | None, overwrite: bool, skip_infeasible: bool, as_json: bool, as_csv: bool, **kw
) -> None:
    """Best plan at each cluster size: throughput, TFLOP/s, MFU, scaling efficiency, days to train.

    Takes every search option (--hardware, --global-batch, --precision, --tp, --recompute, ...).
    A size with no legal plan that fits stops the sweep with exit code 2 unless --skip-infeasible.

    \b
    Examples:
        megaplan sweep --model gpt3-175b --gpus 128:4096 --plot scaling.png
        megaplan sweep --model llama3-70b --hardware dgx-h100-superpod \\
            --gpus 64,128,256 --csv
    """
    from planner.report import figures as plots
    from planner.report import runs as report_run
    from planner.report.search import setup_words
    from planner.runs.sweep import parse_gpu_sizes, repeated_sizes
    from planner.runs.sweep import sweep as run_sweep

    sizes = parse_gpu_sizes(gpu_sizes)
    twice = repeated_sizes(gpu_sizes)
    if twice:  # said, not dropped silently (fresh user trial 8)
        click.echo(
            f"megaplan: note: --gpus names {', '.join(map(str, twice))} more than once; each size is swept once",
            err=True,
        )
    if plot_file:
        plots.check_picture_path(plot_file, "--plot", drawable=False)
        refuse_existing("--plot", plot_file, overwrite)  # the user's file first, then matplotlib
        plots.check_drawable(plot_file, "--plot")
    req, pins, *_ = _inputs(kw)
    with progress("sweeping", total=len(sizes)) as step:
        result = run_sweep(
            req.ctx, sizes, pins, memory_headroom=kw["memory_headroom"], skip_infeasible=skip_infeasible, step=step
        )
    for row in result["rows"]:
        if row["plan"]:
            row["plan"]["commands"] = commands(row["plan"], kw["model"], kw["hardware"])
    ctx = req.ctx
    title = f"{ctx.model.name} on {ctx.hardware.name}: {setup_words(ctx)}"
    if as_json:
        echo_json(result)
    elif as_csv:
        from planner.report.csv_out import sweep_csv

        click.echo(sweep_csv(result), nl=False)
    else:
        console().print(report_run.sweep_view(result, title))
    if plot_file:
        plots.save(plots.sweep_figure(result["rows"], title), plot_file, "--plot")
        click.echo(f"wrote {plot_file}", err=True)


SWEEP_OWN = {"gpus", "min_gpus", "top", "sort", "rank_by", "as_json", "as_csv"}


sweep.params[:0] = [p for p in search.params if p.name not in SWEEP_OWN | set(BRIDGE_SOURCE)]
