"""megaplan's command line: parse, call the library, render (DESIGN.md, principle 5)."""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console

from planner import api, report
from planner.errors import PlannerError
from planner.presets import KINDS, load_spec, preset_names, preset_text

BAD_INPUT = 2


class PlannerGroup(click.Group):
    """Turns every bad-input error into one line on stderr and exit code 2, never a traceback."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args, prog_name or "megaplan", complete_var, standalone_mode=False, **extra)
        except click.exceptions.Abort:
            click.echo("megaplan: aborted", err=True)
            sys.exit(1)
        except click.ClickException as err:
            click.echo(f"megaplan: error: {' '.join(err.format_message().split())}", err=True)
            sys.exit(BAD_INPUT if err.exit_code == 2 or isinstance(err, click.UsageError) else err.exit_code or BAD_INPUT)
        except PlannerError as err:
            click.echo(f"megaplan: error: {' '.join(str(err).split())}", err=True)
            sys.exit(BAD_INPUT)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=PlannerGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="megaplan", prog_name="megaplan")
def cli() -> None:
    """megaplan: analytical parallelism planner for Megatron-LM training.

    \b
    Examples:
        megaplan search --model gpt3-175b --gpus 1024
        megaplan explain --model gpt3-175b --gpus 1024 --tp 8 --pp 16 --micro-batch 1
        megaplan presets
    """


def main() -> None:
    cli()


def console() -> Console:
    """A rich console; output piped to a file or another program gets 160 columns, not 80."""
    return Console(width=None if sys.stdout.isatty() else 160)


# ---------------------------------------------------------------- shared options

def model_behaviour_options() -> list:
    """Options of today's Megatron-LM features shared by explain, export and search."""
    return [
        click.option("--tp-comm-overlap", is_flag=True, help="--tp-comm-overlap: TP collectives overlapped with GEMMs (needs SP)."),
        click.option("--fp8", type=click.Choice(["e4m3", "hybrid"]), help="--fp8-format: linear GEMMs in FP8 (MFU still against the BF16 peak)."),
        click.option("--fp8-param-gather", is_flag=True, help="Keep and all-gather FP8 weights (no 16-bit weight copy)."),
        click.option("--moe-token-dispatcher", type=click.Choice(["allgather", "alltoall"]), default="allgather", show_default=True),
        click.option("--moe-capacity-factor", type=click.FloatRange(min=0, min_open=True), help="Expert capacity factor (default: dropless)."),
        click.option("--moe-load-imbalance", type=click.FloatRange(min=1.0), default=1.1, show_default=True,
                     help="Busiest expert's load over the mean, for dropless routing."),
    ]


def behaviour_from(kw: dict) -> dict:
    return {"tp_comm_overlap": kw["tp_comm_overlap"], "fp8": kw["fp8"], "fp8_param_gather": kw["fp8_param_gather"],
            "moe_token_dispatcher": kw["moe_token_dispatcher"], "moe_capacity_factor": kw["moe_capacity_factor"],
            "moe_load_imbalance": kw["moe_load_imbalance"]}


def plan_options(f):
    """Options that describe one configuration (explain, export)."""
    opts = [
        click.option("--model", "model", help="Model preset name or YAML path (megaplan presets models)."),
        click.option("--hardware", help="Hardware preset name or YAML path [default: dgx-a100-superpod, or the plan's]."),
        click.option("--plan", "plan_file", type=click.Path(dir_okay=False), help="A plan saved by explain/search --json."),
        click.option("--rank", type=click.IntRange(min=1), help="Which plan of a search --json file (default 1)."),
        click.option("--megatron-args", help="An existing Megatron-LM command line (quote it)."),
        click.option("--megatron-args-file", type=click.Path(dir_okay=False), help="A Megatron-LM launch script to read (never run)."),
        click.option("--env", "env_pairs", multiple=True, metavar="VAR=VALUE",
                     help="Set a variable of the launch script (e.g. --env MODEL_SIZE=76B); repeatable."),
        click.option("--gpus", type=click.IntRange(min=1), help="N = tp·cp·pp·dp (default: tp·pp·dp)."),
        click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True, help="Tensor-parallel size t."),
        click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True, help="Pipeline-parallel size p."),
        click.option("--dp", type=click.IntRange(min=1), help="Data-parallel size d (derived from --gpus if omitted)."),
        click.option("--vpp", type=click.IntRange(min=1), default=1, show_default=True, help="Interleaved chunks per stage (1: plain 1F1B)."),
        click.option("--cp", type=click.IntRange(min=1), default=1, show_default=True, help="Context-parallel size c."),
        click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True, help="Expert-parallel size (MoE)."),
        click.option("--etp", type=click.IntRange(min=1), help="Expert tensor-parallel size (MoE; default: --tp)."),
        click.option("--fsdp", is_flag=True, help="Megatron FSDP: shard weights, gradients and optimizer states."),
        click.option("--micro-batch", type=click.IntRange(min=1), default=1, show_default=True, help="Micro-batch size b."),
        click.option("--global-batch", type=click.IntRange(min=1), help="Global batch B (default: the model preset's)."),
        click.option("--seq-len", type=click.IntRange(min=1), help="Sequence length s (default: the model preset's)."),
        click.option("--sequence-parallel/--no-sequence-parallel", default=False, show_default=True),
        click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default="none", show_default=True),
        click.option("--distributed-optimizer/--no-distributed-optimizer", default=False, show_default=True),
        click.option("--precision", type=click.Choice(["bf16", "fp16", "fp32"]), default="bf16", show_default=True),
        click.option("--attention-kernel", type=click.Choice(["flash", "unfused"]), default="flash", show_default=True),
        click.option("--account-for-embedding-in-pipeline-split", is_flag=True, help="Count the embedding as a layer (Megatron)."),
        click.option("--account-for-loss-in-pipeline-split", is_flag=True, help="Count the loss as a layer (Megatron)."),
        click.option("--decoder-first-pipeline-num-layers", type=click.IntRange(min=1), help="Layers on the first stage."),
        click.option("--decoder-last-pipeline-num-layers", type=click.IntRange(min=1), help="Layers on the last stage."),
        click.option("--overlap-grad-reduce/--no-overlap-grad-reduce", default=False, show_default=True),
        click.option("--overlap-param-gather/--no-overlap-param-gather", default=False, show_default=True),
        click.option("--grad-reduce-in-bf16", is_flag=True, help="Reduce gradients in bf16 instead of fp32."),
        click.option("--pp-scatter-gather", is_flag=True, help="Model the 2021 pipeline scatter/gather optimisation."),
        click.option("--overlap-p2p-comm/--no-overlap-p2p-comm", default=True, show_default=True,
                     help="Interleaved schedule overlaps p2p (Megatron default)."),
        *model_behaviour_options(),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def request_from_options(kw: dict) -> api.PlanRequest:
    """The plan the options describe: a saved plan, an imported Megatron-LM command line, or flags."""
    if kw.get("plan_file"):
        return api.request_from_plan(api.read_plan_file(kw["plan_file"], kw.get("rank")), hardware=kw["hardware"])
    if kw.get("megatron_args") is not None or kw.get("megatron_args_file"):
        from planner.importer import import_megatron
        text = kw["megatron_args"] if kw.get("megatron_args") is not None else _read_text(kw["megatron_args_file"])
        env = dict(_env_pair(p) for p in kw.get("env_pairs") or ())
        imported = import_megatron(text, gpus=kw["gpus"], model=kw["model"], hardware=kw["hardware"], env=env)
        for warning in imported.warnings:
            click.echo(f"megaplan: warning: {warning}", err=True)
        return imported.request
    if not kw.get("model"):
        raise click.UsageError("Missing option '--model' (a preset name from `megaplan presets models`, or a YAML path).")
    split = {(False, False): "even", (True, False): "embedding", (False, True): "loss", (True, True): "embedding+loss"}[
        (kw["account_for_embedding_in_pipeline_split"], kw["account_for_loss_in_pipeline_split"])]
    return api.make_request(
        model=kw["model"], hardware=kw["hardware"] or "dgx-a100-superpod", gpus=kw["gpus"], global_batch=kw["global_batch"],
        seq_len=kw["seq_len"], precision=kw["precision"],
        tp=kw["tp"], pp=kw["pp"], dp=kw["dp"], vpp=kw["vpp"], micro_batch=kw["micro_batch"],
        cp=kw["cp"], ep=kw["ep"], etp=kw["etp"], fsdp=kw["fsdp"],
        sequence_parallel=kw["sequence_parallel"], recompute=kw["recompute"],
        distributed_optimizer=kw["distributed_optimizer"] or kw["fsdp"], stage_split=split,
        first_stage_layers=kw["decoder_first_pipeline_num_layers"], last_stage_layers=kw["decoder_last_pipeline_num_layers"],
        options={"attention_kernel": kw["attention_kernel"], "overlap_grad_reduce": kw["overlap_grad_reduce"],
                 "overlap_param_gather": kw["overlap_param_gather"], "grad_reduce_in_bf16": kw["grad_reduce_in_bf16"],
                 "pp_scatter_gather": kw["pp_scatter_gather"], "overlap_p2p_comm": kw["overlap_p2p_comm"],
                 **behaviour_from(kw)},
    )


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as err:
        raise PlannerError(f"cannot read {path!r}: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise PlannerError(f"{path!r} is not a text file") from err


def _env_pair(pair: str) -> tuple[str, str]:
    name, sep, value = pair.partition("=")
    if not sep or not name:
        raise PlannerError(f"--env {pair!r}: expected VAR=VALUE")
    return name, value


def echo_json(data) -> None:
    click.echo(json.dumps(data, indent=2))


class TokenCount(click.ParamType):
    """A positive number of tokens: 300e9, 3e11, 300000000000, or with a suffix 300B, 1.4T, 500M."""

    name = "TOKENS"
    SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            number = float(value)
        else:
            text = str(value).strip().replace("_", "")
            scale = self.SUFFIX.get(text[-1:].lower(), 1.0)
            try:
                number = float(text[:-1] if scale != 1.0 else text) * scale
            except ValueError:
                number = float("nan")
        if not number > 0 or number == float("inf"):
            self.fail(f"{value!r} is not a positive token count; write e.g. 300e9, 3e11 or 300B", param, ctx)
        return number


def cost_options(f):
    """--tokens and --gpu-hour-price: the time, GPU-hours, cost and energy to train (estimate.train_days, …)."""
    from planner.costs.train_cost import DEFAULT_TRAIN_TOKENS
    f = click.option("--gpu-hour-price", type=click.FloatRange(min=0, min_open=True),
                     help="Price of one GPU-hour (any currency) for estimate.cost.")(f)
    return click.option("--tokens", type=TokenCount(), default=DEFAULT_TRAIN_TOKENS, show_default="300e9",
                        help="Tokens to train on, for days, GPU-hours, cost and energy (e.g. 300e9, 1.4T).")(f)


def _with_cost(pj: dict, kw: dict, hardware) -> dict:
    from planner.costs.train_cost import with_train_cost
    return with_train_cost(pj, tokens=kw["tokens"], gpu_hour_price=kw["gpu_hour_price"], tdp_watts=hardware.gpu.tdp_watts)


# ---------------------------------------------------------------- commands

@cli.command()
@plan_options
@click.option("--memory-headroom", type=click.FloatRange(0, 0.9), default=0.0, show_default=True,
              help="Fraction of HBM kept free.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan JSON.")
@click.option("--schedule", is_flag=True, help="Draw the pipeline schedule in the terminal (with --json: add it as 'schedule').")
@click.option("--schedule-file", type=click.Path(dir_okay=False), help="Write the pipeline schedule picture (.svg or .png; needs matplotlib).")
@cost_options
def explain(memory_headroom: float, as_json: bool, schedule: bool, schedule_file: str | None, **kw) -> None:
    """Break one configuration down: every byte and every millisecond, with formula and source.

    \b
    Example (Narayanan et al. 2021's GPT-3 run):
        megaplan explain --model gpt3-175b --gpus 1024 --tp 8 --pp 16 --micro-batch 1 \\
            --recompute full --attention-kernel unfused --precision fp16
    """
    from planner import plots
    if schedule_file:
        plots.check_picture_path(schedule_file, "--schedule-file")
    req = request_from_options(kw)
    pj = _with_cost(api.explain(req, memory_headroom), kw, req.ctx.hardware)
    timeline = _timeline(req, pj) if schedule or schedule_file else None
    if as_json:
        echo_json({**pj, "schedule": timeline.to_json()} if schedule else pj)
    else:
        console().print(report.explain_view(pj))
        if schedule:
            from planner.schedule_view import ScheduleView
            console().print(ScheduleView(timeline, f"Pipeline schedule: {report.plan_line(pj)}"))
    if schedule_file:
        plots.save(plots.schedule_figure(timeline, f"{pj['model']} on {pj['gpus']} GPUs: {report.plan_line(pj)}"),
                   schedule_file, "--schedule-file")
        click.echo(f"wrote {schedule_file}", err=True)


def _timeline(req: api.PlanRequest, pj: dict):
    from planner.timeline import plan_timeline
    return plan_timeline(req, pj["estimate"]["time"])


@cli.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def presets(ctx: click.Context, as_json: bool) -> None:
    """List the shipped model and hardware presets."""
    ctx.ensure_object(dict)["json"] = as_json
    if ctx.invoked_subcommand is None:
        _list_presets(list(KINDS), as_json)


def _list_presets(kinds: list[str], as_json: bool) -> None:
    listing = {kind: {name: _summary(kind, name) for name in preset_names(kind)} for kind in kinds}
    if as_json:
        echo_json(listing)
        return
    out = console()
    for kind, items in listing.items():
        out.print(f"[bold]{kind}[/bold]")
        for name, summary in items.items():
            out.print(f"  {name:<26} {summary}", markup=False, highlight=False)


def _summary(kind: str, name: str) -> str:
    spec = load_spec(KINDS[kind], name)
    if kind == "models":
        from planner.models.params import total_params
        tr = spec.training
        batch = f", B {tr.global_batch} × s {tr.seq_len}" if tr else ""
        return f"{total_params(spec) / 1e9:,.1f}B params, L {spec.num_layers}, h {spec.hidden_size}, a {spec.num_attention_heads}{batch}"
    return spec.description or spec.gpu.name


@presets.command("models")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def presets_models(ctx: click.Context, as_json: bool) -> None:
    """List model presets."""
    _list_presets(["models"], as_json or ctx.obj["json"])


@presets.command("hardware")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def presets_hardware(ctx: click.Context, as_json: bool) -> None:
    """List hardware presets."""
    _list_presets(["hardware"], as_json or ctx.obj["json"])


@presets.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def presets_show(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show one preset (model or hardware) in full."""
    kind = next((k for k in KINDS if name in preset_names(k)), None)
    if kind is None:
        known = ", ".join(n for k in KINDS for n in preset_names(k))
        raise PlannerError(f"unknown preset {name!r}; known: {known}")
    if as_json or ctx.obj["json"]:
        echo_json(load_spec(KINDS[kind], name).model_dump(mode="json"))
    else:
        click.echo(preset_text(kind, name).rstrip())


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print {runs: [...], summary: {...}}.")
@click.option("--regret/--no-regret", default=False, show_default=True,
              help="Also search each run's best plan and report how much faster it is predicted to be.")
def validate(as_json: bool, regret: bool) -> None:
    """Predicted versus published for every Megatron-LM reference run, with errors."""
    from planner import validate as val
    result = val.validate()
    if regret:
        val.add_regret(result)
    if as_json:
        echo_json(result)
    else:
        console().print(report.validation_view(result))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the fit as JSON.")
@click.option("--write", "write_dir", type=click.Path(file_okay=False, exists=True),
              help="presets/hardware folder whose YAML files get the fitted values (a checkout's).")
@click.option("--loso/--no-loso", default=True, show_default=True, help="Also report leave-one-source-out errors (A100).")
def calibrate(as_json: bool, write_dir: str | None, loso: bool) -> None:
    """Fit the hardware presets' efficiency factors to the published runs (takes a minute or two)."""
    from planner import calibrate as cal
    out = cal.run_calibration(loso=loso, write_dir=write_dir)
    if as_json:
        echo_json(out)
    else:
        console().print(report.calibration_view(out))


def _apply(decorators: list):
    def wrap(f):
        for dec in reversed(decorators):
            f = dec(f)
        return f
    return wrap


def _tristate(name: str, help_text: str):
    return click.option(f"--{name}/--no-{name}", default=None, help=help_text + " (default: search both)")


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
    from planner import report_run
    from planner.fit import min_gpus
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
    from planner import plots, report_run
    from planner.sweep import parse_gpu_sizes, sweep as run_sweep
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


@click.command(name="plan", add_help_option=False)
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
    return given


def _side_request(base: api.PlanRequest, overrides: dict, side: str) -> api.PlanRequest:
    from planner.compare import override_request
    try:
        return override_request(base, dict(overrides)) if overrides else base
    except PlannerError as err:
        raise PlannerError(f"plan {side.upper()} (--{side}): {err}") from err


@cli.command()
@click.argument("plan_files", nargs=-1, metavar="[PLAN_A [PLAN_B]]")
@plan_options
@click.option("--a", "a_args", metavar="'OPTIONS'", help="Plan A's options on top of the shared ones, quoted: --a '--tp 8 --pp 16'.")
@click.option("--b", "b_args", metavar="'OPTIONS'", help="Plan B's options on top of the shared ones, quoted: --b '--recompute full'.")
@click.option("--memory-headroom", type=click.FloatRange(0, 0.9), default=0.0, show_default=True, help="Fraction of HBM kept free.")
@click.option("--json", "as_json", is_flag=True, help="Print {a, b, rows, summary}.")
@cost_options
@click.pass_context
def compare(click_ctx: click.Context, plan_files: tuple[str, ...], a_args: str | None, b_args: str | None,
            memory_headroom: float, as_json: bool, **kw) -> None:
    """Two plans side by side: memory terms, time terms and throughput, differences highlighted.

    Plans come from two plan files (a search --json file takes FILE#RANK), or from one file or the
    shared plan options (flags, --plan, --megatron-args) changed per side by --a and --b.

    \b
    Examples:
        megaplan compare a.json b.json
        megaplan compare plans.json#1 plans.json#2
        megaplan compare --model gpt3-175b --gpus 1024 --tp 8 --pp 16 --a '--recompute full' --b '--recompute selective --sequence-parallel'
    """
    from click.core import ParameterSource

    from planner import compare as cmp, report_run
    a_over, b_over = _side_overrides(a_args, "a"), _side_overrides(b_args, "b")
    shared = [k for k in kw if k not in ("tokens", "gpu_hour_price")
              and click_ctx.get_parameter_source(k) is ParameterSource.COMMANDLINE]
    if len(plan_files) > 2 or (plan_files and shared):
        raise click.UsageError("give two plan files, or one plan (a file or plan options) with --a/--b, not both")
    if len(plan_files) < 2 and not (a_over or b_over):
        raise click.UsageError("nothing to compare: give two plan files, or --a and/or --b options that change the plan")
    bases = [_plan_file_request(f) for f in plan_files] or [request_from_options(kw)]
    reqs = [_side_request(bases[0], a_over, "a"), _side_request(bases[-1], b_over, "b")]
    pjs = [_with_cost(api.explain(r, memory_headroom), kw, r.ctx.hardware) for r in reqs]
    result = cmp.compare_plans(*pjs)
    if as_json:
        echo_json(result)
    else:
        console().print(report_run.compare_view(result))


def _plan_file_request(ref: str) -> api.PlanRequest:
    """A plan file, or FILE#RANK for the rank-th plan of a search --json file."""
    import os
    import re
    path, rank = ref, None
    m = re.fullmatch(r"(.+)#(\d+)", ref)
    if m and not os.path.exists(ref):
        path, rank = m.group(1), int(m.group(2))
    return api.request_from_plan(api.read_plan_file(path, rank))


@cli.command()
@plan_options
@click.option("--format", "fmt", type=click.Choice(["flags", "slurm", "json"]), default="flags", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to this file instead of stdout.")
@click.option("--force", is_flag=True, help="Overwrite --output if it exists.")
def export(fmt: str, output: str | None, force: bool, **kw) -> None:
    """Write the Megatron-LM flags, a Slurm launch script or the plan JSON for one plan.

    \b
    Examples:
        megaplan export --model gpt3-175b --gpus 1024 --tp 8 --pp 16 --recompute selective --sequence-parallel
        megaplan search --model gpt3-175b --gpus 1024 --json > plans.json
        megaplan export --plan plans.json --rank 1 --format slurm -o train.sbatch
    """
    from planner import export as exp
    req = request_from_options(kw)
    if fmt == "json":
        import json
        text = json.dumps(api.explain(req), indent=2) + "\n"
    else:
        api.explain(req)  # refuses plans Megatron-LM would reject, before writing anything
        text = exp.flags_text(req) if fmt == "flags" else exp.slurm_script(req)
    if output is None:
        click.echo(text, nl=False)
        return
    _write_new(output, text, force)
    click.echo(f"wrote {output}", err=True)


def _write_new(path: str, text: str, force: bool) -> None:
    """Write a file, refusing to replace one that exists unless asked to."""
    import os
    if os.path.exists(path) and not force:
        raise PlannerError(f"{path!r} exists; pass --force to overwrite it")
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as err:
        raise PlannerError(f"cannot write {path!r}: {err.strerror}") from err
