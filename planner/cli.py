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


# ---------------------------------------------------------------- commands

@cli.command()
@plan_options
@click.option("--memory-headroom", type=click.FloatRange(0, 0.9), default=0.0, show_default=True,
              help="Fraction of HBM kept free.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan JSON.")
def explain(memory_headroom: float, as_json: bool, **kw) -> None:
    """Break one configuration down: every byte and every millisecond, with formula and source.

    \b
    Example (Narayanan et al. 2021's GPT-3 run):
        megaplan explain --model gpt3-175b --gpus 1024 --tp 8 --pp 16 --micro-batch 1 \\
            --recompute full --attention-kernel unfused --precision fp16
    """
    pj = api.explain(request_from_options(kw), memory_headroom)
    if as_json:
        echo_json(pj)
    else:
        console().print(report.explain_view(pj))


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
@click.option("--gpus", type=click.IntRange(min=1), required=True, help="N, the GPUs to split the model over.")
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
def search(**kw) -> None:
    """Rank every legal TP/PP/DP/micro-batch/VPP/recompute/SP configuration by predicted speed.

    \b
    Example:
        megaplan search --model gpt3-175b --gpus 1024
        megaplan search --model gpt3-175b --gpus 1024 --tp 8 --pp 16 --recompute full
    """
    from planner.search import Pins, search as run_search
    req = api.make_request(model=kw["model"], hardware=kw["hardware"], global_batch=kw["global_batch"],
                           seq_len=kw["seq_len"], precision=kw["precision"],
                           options={**{k: kw[k] for k in ("attention_kernel", "overlap_grad_reduce", "overlap_param_gather",
                                                          "grad_reduce_in_bf16")}, **behaviour_from(kw)})
    pins = Pins(tp=kw["tp"], pp=kw["pp"], dp=kw["dp"], vpp=kw["vpp"], micro_batch=kw["micro_batch"],
                cp=kw["cp"], ep=kw["ep"], etp=kw["etp"], fsdp=kw["fsdp"],
                recompute=kw["recompute"] and api.Recompute(kw["recompute"]), sequence_parallel=kw["sequence_parallel"],
                distributed_optimizer=kw["distributed_optimizer"], max_tp=kw["max_tp"])
    result = run_search(req.ctx, kw["gpus"], pins, top=kw["top"], sort=kw["sort"], memory_headroom=kw["memory_headroom"])
    if kw["as_json"]:
        echo_json(result.to_json())
    else:
        console().print(report.search_view(result, req.ctx, kw["gpus"]))


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
