"""Options shared by the commands, and turning them into a plan request."""

from __future__ import annotations

import click

from planner import api
from planner.errors import PlannerError


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
        click.option("--async-tp-comm/--no-async-tp-comm", default=True, show_default=True,
                     help="Backward TP collectives overlap the weight-gradient GEMMs (off in the 2021 code)."),
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
        from planner.megatron.importer import import_megatron
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
                 "async_tp_comm": kw["async_tp_comm"],
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


def _apply(decorators: list):
    def wrap(f):
        for dec in reversed(decorators):
            f = dec(f)
        return f
    return wrap


def _tristate(name: str, help_text: str):
    return click.option(f"--{name}/--no-{name}", default=None, help=help_text + " (default: search both)")
