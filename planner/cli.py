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


# ---------------------------------------------------------------- shared options

def plan_options(f):
    """Options that describe one configuration (explain, export)."""
    opts = [
        click.option("--model", "model", help="Model preset name or YAML path (megaplan presets models)."),
        click.option("--hardware", default="dgx-a100-superpod", show_default=True, help="Hardware preset name or YAML path."),
        click.option("--gpus", type=click.IntRange(min=1), help="N = tp·cp·pp·dp (default: tp·pp·dp)."),
        click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True, help="Tensor-parallel size t."),
        click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True, help="Pipeline-parallel size p."),
        click.option("--dp", type=click.IntRange(min=1), help="Data-parallel size d (derived from --gpus if omitted)."),
        click.option("--vpp", type=click.IntRange(min=1), default=1, show_default=True, help="Interleaved chunks per stage (1: plain 1F1B)."),
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
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def request_from_options(kw: dict) -> api.PlanRequest:
    if not kw.get("model"):
        raise click.UsageError("Missing option '--model' (a preset name from `megaplan presets models`, or a YAML path).")
    split = {(False, False): "even", (True, False): "embedding", (False, True): "loss", (True, True): "embedding+loss"}[
        (kw["account_for_embedding_in_pipeline_split"], kw["account_for_loss_in_pipeline_split"])]
    return api.make_request(
        model=kw["model"], hardware=kw["hardware"], gpus=kw["gpus"], global_batch=kw["global_batch"],
        seq_len=kw["seq_len"], precision=kw["precision"],
        tp=kw["tp"], pp=kw["pp"], dp=kw["dp"], vpp=kw["vpp"], micro_batch=kw["micro_batch"],
        sequence_parallel=kw["sequence_parallel"], recompute=kw["recompute"],
        distributed_optimizer=kw["distributed_optimizer"], stage_split=split,
        first_stage_layers=kw["decoder_first_pipeline_num_layers"], last_stage_layers=kw["decoder_last_pipeline_num_layers"],
        options={"attention_kernel": kw["attention_kernel"], "overlap_grad_reduce": kw["overlap_grad_reduce"],
                 "overlap_param_gather": kw["overlap_param_gather"], "grad_reduce_in_bf16": kw["grad_reduce_in_bf16"],
                 "pp_scatter_gather": kw["pp_scatter_gather"], "overlap_p2p_comm": kw["overlap_p2p_comm"]},
    )


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
        Console().print(report.explain_view(pj))


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
    console = Console()
    for kind, items in listing.items():
        console.print(f"[bold]{kind}[/bold]")
        for name, summary in items.items():
            console.print(f"  {name:<26} {summary}")


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
        Console().print(report.validation_view(result))


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
        Console().print(report.calibration_view(out))
