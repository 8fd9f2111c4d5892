"""Options a plan or a search cannot use, said on stderr rather than dropped (fresh user trials 8 and 10, and the
search audit ux12-16: each ran without a word). Those no plan of the context uses (MoE options on a dense model,
an FP8 recipe without FP8, ...) are said by every command (``context_ignored``); explain says those its one plan
does not use (``planner.cli.plans``); search, sweep and --min-gpus say which pin only some of the plans they rank
(``note_some_plans``: --data-parallel-sharding-strategy pins the Megatron FSDP plans, and plans without FSDP are
ranked beside them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import click

# MoE-only options with no effect on a dense model (beside --moe-token-dispatcher and the overlap, in moe_only)
MOE_ONLY = (
    "moe_capacity_factor",
    "moe_load_imbalance",
    "moe_flex_dispatcher_backend",
    "moe_flex_dispatcher_num_sms",
    "moe_hybridep_num_sms_preprocessing",
    "moe_shared_expert_overlap",
    "use_transformer_engine_op_fuser",
    "moe_router_padding_for_quantization",
    "moe_permute_fusion",
    "etp",  # expert tensor parallelism: --etp 3 on a dense model ran without a word (fresh user trial 10)
)
FLAG_OF = {
    "fsdp_sharding": "--data-parallel-sharding-strategy",
    "fsdp_outer_sharding": "--outer-dp-sharding-strategy",
    "microbatch_group_size": "--microbatch-group-size-per-virtual-pipeline-stage",
    "distributed_optimizer_instances": "--num-distributed-optimizer-instances",
    "distributed_optimizer": "--no-distributed-optimizer",  # read only as given off (context_ignored)
}
SP_AT_TP1 = "--sequence-parallel is off with tp 1 (Megatron-LM turns it off there)"


def typed(name: str) -> bool:
    """Whether the user gave option ``name`` on the command line (not its default)."""
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    return ctx is not None and ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE


def flag(name: str) -> str:
    return FLAG_OF.get(name, f"--{name.replace('_', '-')}")


def moe_only(kw: dict) -> list[str]:
    """The MoE-only options given (as typed)."""
    dispatcher = kw.get("moe_token_dispatcher")
    out = [f"--moe-token-dispatcher {dispatcher}"] if dispatcher not in (None, "allgather") else []
    out += ["--overlap-moe-expert-parallel-comm"] if kw.get("overlap_moe_expert_parallel_comm") else []
    return out + [flag(name) for name in MOE_ONLY if typed(name)]


def context_ignored(kw: dict, ctx) -> list[tuple[list[str], str]]:
    """(the options given, why) for options no plan of ``ctx`` uses, whatever its layout, as Megatron-LM reads
    them (arguments.py)."""
    opts = ctx.options
    out = [(moe_only(kw), f"{ctx.model.name} has no experts")] if not ctx.model.is_moe else []
    checks = [
        (["cuda_graph_modules"], opts.cuda_graph_impl.value == "none", "no --cuda-graph-impl (CUDA graphs are off)"),
        (["fp8_recipe", "fp8_param_gather"], opts.fp8 is None, "no --fp8 (training is not in FP8)"),
        (["fp4_param_gather"], opts.fp4 is None, "no --fp4 (training is not in NVFP4)"),
        (["fp8_dot_product_attention"], not opts.quantised, "no --fp8 or --fp4 (the attention runs in BF16)"),
        (
            ["first_last_layers_bf16", "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"],
            not opts.quantised,
            "no --fp8 or --fp4 (every layer's GEMMs run in BF16 already)",
        ),
        (
            ["num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"],
            opts.quantised and not opts.first_last_layers_bf16,
            "no --first-last-layers-bf16 (Megatron-Core reads the counts only with it, fp8_utils.py:714-717 and "
            "fp4_utils.py:250-253 @ d98e8a64)",
        ),
        (
            ["grad_reduce_in_bf16"],
            ctx.precision == "fp16",
            "fp16 training keeps and reduces its gradients in fp16 already",
        ),
        (
            ["main_grads_dtype"],
            opts.grad_reduce_in_bf16 and opts.main_grads_dtype == "fp32",
            "--grad-reduce-in-bf16 keeps and reduces the gradients in bf16 (Megatron-LM's arguments.py turns "
            "accumulate_allreduce_grads_in_fp32 off)",
        ),
        (["use_sharp"], not ctx.hardware.network.sharp, f"{ctx.hardware.name}'s switches do not reduce (no SHARP)"),
        (
            ["tp_comm_overlap_cfg"],
            _no_bridge_preset(ctx),
            f"Megatron-Bridge has no userbuffer preset for {ctx.hardware.gpu.name} at hidden size "
            f"{ctx.model.hidden_size}: every plan runs Transformer Engine's defaults (as without the option)",
        ),
        (
            ["moe_shared_expert_overlap"],
            ctx.model.is_moe and not ctx.model.shared_ffn,
            f"{ctx.model.name} has no shared experts to run beside the dispatch (Megatron-LM still refuses it "
            "beside --overlap-moe-expert-parallel-comm, transformer_config.py)",
        ),
        (
            ["distributed_optimizer"],
            bool(kw.get("fsdp")) and kw.get("distributed_optimizer") is False,
            "Megatron FSDP runs on the distributed optimizer (Megatron-LM turns it on with --use-megatron-fsdp, "
            "arguments.py)",
        ),
        _flex_unusable(kw, ctx),
    ]
    out += [([flag(n) for n in names if typed(n)], reason) for names, unused, reason in checks if unused]
    return [(flags, reason) for flags, reason in out if flags]


def _flex_unusable(kw: dict, ctx) -> tuple[list[str], bool, str]:
    """The flex dispatcher's options where its library runs no plan on the cluster (``space.flex_backend``: DeepEP
    on GB200/GB300 NVL72; HybridEP and NCCL EP before Hopper) and the flex dispatcher is not pinned (pinned, the
    plan or search is refused with the same reason)."""
    from planner.space import flex_backend

    names = ["moe_flex_dispatcher_backend", "moe_flex_dispatcher_num_sms", "moe_hybridep_num_sms_preprocessing"]
    backend = ctx.options.moe_flex_dispatcher_backend.value
    none = ctx.model.is_moe and flex_backend.flex_group_limit(ctx.hardware, backend) == 0
    unused = none and kw.get("moe_token_dispatcher") != "flex"
    why = f"no plan can run the flex dispatcher with it: {flex_backend.backend_message(ctx.hardware, backend)}"
    return names, unused, why if unused else ""


def _no_bridge_preset(ctx) -> bool:
    """--tp-comm-overlap-cfg bridge where no Megatron-Bridge preset fits the GPU generation and hidden size
    (``userbuffers.plan_configs`` then gives every plan Transformer Engine's defaults)."""
    from planner.hardware.userbuffers import BRIDGE, bridge_presets

    cfg = ctx.options.tp_comm_overlap_cfg
    if cfg is None or cfg.name != BRIDGE:
        return False
    gpu = ctx.hardware.gpu
    return not any(p.applies(gpu.compute_capability, ctx.model.hidden_size) for p in bridge_presets())


def say_ignored(pairs: list[tuple[list[str], str]]) -> None:
    for flags, reason in pairs:
        click.echo(f"megaplan: note: {' and '.join(flags)} ignored: {reason}", err=True)


@dataclass(frozen=True)
class SomePlans:
    """Options that pin only the plans with ``plans``: search ranks the ``others`` beside them unless the pins
    keep only those (``kept``, as ``keep`` says)."""

    given: Callable[[dict], list[str]]  # the options given, as typed
    plans: str
    others: str
    keep: str
    kept: Callable[[dict], bool]
    moe: bool = False  # MoE-only (on a dense model context_ignored says so instead)
    # the pin, as typed, that leaves none of ``plans`` ("" where the pins leave some): the option is then dropped,
    # said as explain says it of its one plan, not "searched as well (add ...)" (qa21)
    excluded: Callable[[dict], str] = lambda kw: ""


def _typed_flags(*names: str) -> Callable[[dict], list[str]]:
    def given(kw: dict) -> list[str]:
        out = []
        for name in names:
            if typed(name):
                value = kw.get(name)
                out.append({True: flag(name), False: f"--no-{flag(name)[2:]}"}.get(value, f"{flag(name)} {value}"))
        return out

    return given


def _pinned(kw: dict, **values) -> str:
    """The first of ``values`` (option name: value) the user typed with that value, as a flag ("--vpp 1",
    "--no-fsdp"), or ""."""
    for name, value in values.items():
        if typed(name) and kw.get(name) == value:
            if isinstance(value, bool):
                return flag(name) if value else f"--no-{flag(name)[2:]}"
            return f"{flag(name)} {value}"
    return ""


FULL_ONLY = SomePlans(
    lambda kw: (
        [f"--recompute-method {kw['recompute_method']}"] * (kw.get("recompute_method") == "block")
        + [f"--recompute-num-layers {kw['recompute_num_layers']}"] * bool(kw.get("recompute_num_layers"))
    ),
    "plans with full recomputation",
    "plans with selective or no recomputation",
    "--recompute full",
    lambda kw: kw.get("recompute") == "full",
)
# --recompute-modules is not among them: every plan carries it in its options, and where Megatron-LM refuses the
# modules on the model search says so once (space.warnings.refused_modules_note)
SOME_PLANS = (
    FULL_ONLY,
    SomePlans(
        _typed_flags("microbatch_group_size"),
        "interleaved plans (vpp > 1)",
        "plans without interleaving",
        "--vpp N, N > 1",
        lambda kw: (kw.get("vpp") or 1) > 1,
        excluded=lambda kw: _pinned(kw, vpp=1, pp=1),
    ),
    SomePlans(
        _typed_flags("overlap_p2p_comm"),  # Megatron-LM turns it off without interleaving (arguments.py)
        "interleaved plans (vpp > 1)",
        "plans without interleaving",
        "--vpp N, N > 1",
        lambda kw: (kw.get("vpp") or 1) > 1,
        excluded=lambda kw: _pinned(kw, vpp=1, pp=1),
    ),
    SomePlans(
        _typed_flags("fsdp_sharding"),
        "plans with Megatron FSDP",
        "plans without it",
        "--fsdp",
        lambda kw: kw.get("fsdp") is True,
        excluded=lambda kw: _pinned(kw, fsdp=False),
    ),
    SomePlans(
        _typed_flags("fsdp_outer_sharding"),
        "Megatron FSDP plans with more than one distributed-optimizer instance (hybrid)",
        "the others",
        "--fsdp and --num-distributed-optimizer-instances R, R > 1",
        lambda kw: kw.get("fsdp") is True and (kw.get("distributed_optimizer_instances") or 1) > 1,
        excluded=lambda kw: _pinned(kw, fsdp=False, distributed_optimizer_instances=1),
    ),
    SomePlans(
        _typed_flags("tp_comm_overlap_cfg"),
        "plans with --tp-comm-overlap (sequence parallelism, tp > 1)",
        "plans without it",
        "--tp-comm-overlap",
        lambda kw: kw.get("tp_comm_overlap") is True,
        excluded=lambda kw: _pinned(kw, tp_comm_overlap=False, sequence_parallel=False, tp=1),
    ),
    SomePlans(
        _typed_flags("pp_scatter_gather"),
        "plans with pp > 1 and no sequence parallelism",
        "the others",
        "--pp N, N > 1, and --no-sequence-parallel",
        lambda kw: (kw.get("pp") or 1) > 1 and kw.get("sequence_parallel") is False,
        excluded=lambda kw: _pinned(kw, pp=1, sequence_parallel=True),
    ),
    SomePlans(
        _typed_flags(
            "moe_flex_dispatcher_backend", "moe_flex_dispatcher_num_sms", "moe_hybridep_num_sms_preprocessing"
        ),
        "plans with --moe-token-dispatcher flex",
        "plans with the other dispatchers",
        "--moe-token-dispatcher flex",
        lambda kw: kw.get("moe_token_dispatcher") == "flex",
        moe=True,
        excluded=lambda kw: (
            (d := kw.get("moe_token_dispatcher")) not in (None, "flex") and f"--moe-token-dispatcher {d}"
        ),
    ),
)


def note_some_plans(
    kw: dict, ctx=None, rows: tuple[SomePlans, ...] = SOME_PLANS, said: frozenset[str] = frozenset()
) -> None:
    """Options given that pin only some of the plans search ranks, said rather than dropped where the plans
    shown do not use them (``ctx``: the context; None: rows for MoE models are said too); none of ``said``, the
    flags ``context_ignored`` gave already (no plan uses them)."""
    for row in rows:
        given = [g for g in row.given(kw) if g.split()[0] not in said]
        if not given or row.kept(kw) or (row.moe and ctx is not None and not ctx.model.is_moe):
            continue
        verb = "apply" if len(given) > 1 else "applies"
        if pin := row.excluded(kw):
            they = "they apply" if len(given) > 1 else "it applies"
            click.echo(
                f"megaplan: note: {' and '.join(given)} ignored: {they} only to {row.plans}, and {pin} leaves none",
                err=True,
            )
            continue
        click.echo(
            f"megaplan: note: {' and '.join(given)} {verb} only to {row.plans}; {row.others} are searched as "
            f"well (add {row.keep} to keep only those)",
            err=True,
        )


def note_full_only(kw: dict) -> None:
    """--recompute-method block/--recompute-num-layers without --recompute full, where search fills in the plan
    (explain, export: the other rows' options are said by the plan's own notes)."""
    note_some_plans(kw, rows=(FULL_ONLY,))
