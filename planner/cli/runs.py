"""Commands that search: search (and --min-gpus), sweep."""

from __future__ import annotations

import click

from planner import api
from planner.report import plan as report
from planner.cli import cli, console, echo_json
from planner.cli.options import (
    _apply,
    _tristate,
    _with_cost,
    behaviour_from,
    cost_options,
    model_behaviour_options,
)


@cli.command()
@click.option("--model", "model", required=True, help="Model preset name or YAML path.")
@click.option("--gpus", type=click.IntRange(min=1), help="N, the GPUs to split the model over.")
@click.option("--min-gpus", is_flag=True, help="Instead of --gpus: find the smallest cluster (whole nodes) with a plan that fits.")
@click.option("--hardware", default="dgx-a100-superpod", show_default=True, help="Hardware preset name or YAML path.")
@click.option("--global-batch", type=click.IntRange(min=1), help="Global batch B (default: the model preset's).")
@click.option("--seq-len", type=click.IntRange(min=1), help="Sequence length s (default: the model preset's).")
@click.option("--precision", type=click.Choice(["bf16", "fp16", "fp32"]), default="bf16", show_default=True)
@click.option("--attention-kernel", type=click.Choice(["flash", "unfused"]), default="flash", show_default=True)
@click.option("--tp", type=click.IntRange(min=1), help="Pin tensor-parallel size.")
@click.option("--pp", type=click.IntRange(min=1), help="Pin pipeline-parallel size.")
@click.option("--dp", type=click.IntRange(min=1), help="Pin data-parallel size.")
@click.option("--cp", type=click.IntRange(min=1), help="Pin context-parallel size (default: searched while s/c ≥ 4096).")
@click.option("--ep", type=click.IntRange(min=1), help="Pin expert-parallel size (MoE).")
@click.option("--etp", type=click.IntRange(min=1), help="Pin expert tensor-parallel size (MoE; default: searched, 1 or tp).")
@_tristate("fsdp", "Pin Megatron FSDP")
@click.option("--vpp", type=click.IntRange(min=1), help="Pin interleaved chunks per stage (1: plain 1F1B).")
@click.option("--micro-batch", type=click.IntRange(min=1), help="Pin micro-batch size.")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), help="Pin activation recomputation.")
@_tristate("sequence-parallel", "Pin sequence parallelism")
@_tristate("distributed-optimizer", "Pin the distributed optimizer")
@click.option("--max-tp", type=click.IntRange(min=1), help="Largest TP (default: GPUs per node; larger crosses nodes).")
@click.option("--overlap-grad-reduce/--no-overlap-grad-reduce", default=False, show_default=True)
@click.option("--overlap-param-gather/--no-overlap-param-gather", default=False, show_default=True)
@click.option("--grad-reduce-in-bf16", is_flag=True, help="Reduce gradients in bf16 instead of fp32.")
@click.option("--memory-headroom", type=click.FloatRange(0, 0.9), default=0.0, show_default=True,
              help="Fraction of HBM kept free.")
@_apply(model_behaviour_options())
@click.option("--sort", type=click.Choice(["time", "memory"]), default="time", show_default=True)
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="How many plans to show.")
@click.option("--json", "as_json", is_flag=True, help="Print {plans, evaluated, feasible, rejected}.")
@cost_options
def search(**kw) -> None:
    """Rank every legal TP/PP/DP/micro-batch/VPP/recompute/SP configuration by predicted speed.

    \b
    Example:
        megaplan search --model gpt3-175b --gpus 1024
        megaplan search --model gpt3-175b --gpus 1024 --tp 8 --pp 16 --recompute full
        megaplan search --model gpt3-175b --hardware dgx-a100-40gb-superpod --min-gpus
    """
    from planner.search import search as run_search
    if kw["min_gpus"] == (kw["gpus"] is not None):
        raise click.UsageError("give either --gpus N or --min-gpus (find the smallest cluster), not both" if kw["min_gpus"]
                               else "Missing option '--gpus' (or --min-gpus to find the smallest cluster that fits).")
    req, pins = _search_inputs(kw)
    if kw["min_gpus"]:
        return _min_gpus(req, pins, kw)
    result = run_search(req.ctx, kw["gpus"], pins, top=kw["top"], sort=kw["sort"], memory_headroom=kw["memory_headroom"])
    for pj in result.plans:
        _with_cost(pj, kw, req.ctx.hardware)
    if kw["as_json"]:
        echo_json(result.to_json())
    else:
        console().print(report.search_view(result, req.ctx, kw["gpus"]))


def _search_inputs(kw: dict):
    """The context and pins that search's options describe (search, sweep, --min-gpus)."""
    from planner.search import Pins
    req = api.make_request(model=kw["model"], hardware=kw["hardware"], global_batch=kw["global_batch"],
                           seq_len=kw["seq_len"], precision=kw["precision"],
                           options={**{k: kw[k] for k in ("attention_kernel", "overlap_grad_reduce", "overlap_param_gather",
                                                          "grad_reduce_in_bf16")}, **behaviour_from(kw)})
    pins = Pins(tp=kw["tp"], pp=kw["pp"], dp=kw["dp"], vpp=kw["vpp"], micro_batch=kw["micro_batch"],
                cp=kw["cp"], ep=kw["ep"], etp=kw["etp"], fsdp=kw["fsdp"],
                recompute=kw["recompute"] and api.Recompute(kw["recompute"]), sequence_parallel=kw["sequence_parallel"],
                distributed_optimizer=kw["distributed_optimizer"], max_tp=kw["max_tp"])
    return req, pins


def _min_gpus(req: api.PlanRequest, pins, kw: dict) -> None:
    from planner.report import runs as report_run
    from planner.runs.min_gpus import min_gpus
    fit = min_gpus(req.ctx, pins, memory_headroom=kw["memory_headroom"]).to_json()
    for size in fit["sizes"]:
        _with_cost(size["plan"], kw, req.ctx.hardware)
    if kw["as_json"]:
        return echo_json(fit)
    ctx = req.ctx
    console().print(report_run.fit_view(fit, f"Smallest cluster for {ctx.model.name} on {ctx.hardware.name}: global batch "
                                             f"{ctx.training.global_batch} × seq {ctx.training.seq_len}, {ctx.precision}, "
                                             f"{ctx.options.attention_kernel.value} attention"))


@cli.command()
@click.option("--gpus", "gpu_sizes", required=True, help="Sizes: a list 64,128,256 or a doubling range 64:4096.")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False),
              help="Draw throughput and scaling efficiency against GPUs (.svg or .png; needs matplotlib).")
@click.option("--skip-infeasible", is_flag=True, help="List a size with no plan as a row instead of stopping (exit 2).")
@click.option("--json", "as_json", is_flag=True, help="Print {rows: [{gpus, plan, scaling_efficiency, no_plan}], ...}.")
@cost_options
def sweep(gpu_sizes: str, plot_file: str | None, skip_infeasible: bool, as_json: bool, **kw) -> None:
    """Best plan at each cluster size: throughput, TFLOP/s, MFU, scaling efficiency, days to train.

    Takes every search option (--hardware, --global-batch, --precision, --tp, --recompute, ...).
    A size with no legal plan that fits stops the sweep with exit code 2 unless --skip-infeasible.

    \b
    Example:
        megaplan sweep --model gpt3-175b --gpus 128:4096 --tokens 300e9 --plot scaling.png
    """
    from planner.report import figures as plots
    from planner.report import runs as report_run
    from planner.runs.sweep import parse_gpu_sizes
    from planner.runs.sweep import sweep as run_sweep
    sizes = parse_gpu_sizes(gpu_sizes)
    if plot_file:
        plots.check_picture_path(plot_file, "--plot")
    req, pins = _search_inputs({**kw, "gpus": None})
    result = run_sweep(req.ctx, sizes, pins, tokens=kw["tokens"], gpu_hour_price=kw["gpu_hour_price"],
                       memory_headroom=kw["memory_headroom"], skip_infeasible=skip_infeasible)
    ctx = req.ctx
    title = (f"{ctx.model.name} on {ctx.hardware.name}: global batch {ctx.training.global_batch} × seq "
             f"{ctx.training.seq_len}, {ctx.precision}, {ctx.options.attention_kernel.value} attention")
    if as_json:
        echo_json(result)
    else:
        console().print(report_run.sweep_view(result, title))
    if plot_file:
        plots.save(plots.sweep_figure(result["rows"], title), plot_file, "--plot")
        click.echo(f"wrote {plot_file}", err=True)


SWEEP_OWN = {"gpus", "min_gpus", "top", "sort", "as_json", "tokens", "gpu_hour_price"}


sweep.params[:0] = [p for p in search.params if p.name not in SWEEP_OWN]
