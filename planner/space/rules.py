"""Megatron-LM's own rules for a parallel configuration: one table of Rule(name, holds, message).

Each rule's mask is True where the rule holds over a whole plan grid, and its message says, for
one plan, which values break it and what is allowed, so a rule can never lose its message.
Sources: Megatron-LM megatron/training/arguments.py (validate_args) and
megatron/core/transformer/transformer_config.py at commit d98e8a64 (docs/architecture.md lists
the lines).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator

import numpy as np

from planner.costs.pipeline import microbatch_group, microbatch_group_legal
from planner.models.spec import ModelSpec, PositionEmbedding
from planner.plan import (
    DISPATCHER_CODES,
    RECOMPUTE_CODES,
    SPLIT_BY_CODE,
    PlanOptions,
    Recompute,
    TokenDispatcher,
    TrainingSpec,
)
from planner.space import flex_backend
from planner.space.graph_rules import PER_LAYER, graph_breaches
from planner.space.grid import COLUMNS, OPTION_COLUMNS, PlanGrid
from planner.space.rule_inputs import Rule, RuleInputs

__all__ = ["RULES", "Rule", "RuleInputs", "broken_rules", "rule_masks", "rule_messages"]


def _world_step(x) -> int:
    """The smallest world both grids divide: lcm(tp·cp·pp, etp·ep·pp)."""
    import math

    return math.lcm(int(x.t * x.c * x.p), int(x.etp * x.ep * x.p))


def _given_stages_message(x) -> str:
    """The split's breach when --decoder-first/last-pipeline-num-layers are given: the layers they leave for
    the other stages (fresh user trial 8: first 100 of 32 layers said "with the even split")."""
    if not (x.first or x.last):
        return ""
    given = " and ".join(f"{n} on the {w} stage" for n, w in ((x.first, "first"), (x.last, "last")) if n)
    rest, others = x.L - x.first - x.last, x.p - (x.first > 0) - (x.last > 0)
    if x.p == 1:
        return f"pp 1 is one stage of all {x.L} layers: give no --decoder-first/last-pipeline-num-layers"
    if rest < 0 or others == 0:
        left = "more than the model has" if rest < 0 else f"{rest} left over"
        return f"{x.L} layers do not split over pp {x.p} with {given}: {left}"
    if rest == 0:  # Megatron-LM: "Mismatch: 0 middle layers remaining but N middle PP stages available"
        return f"{x.L} layers do not split over pp {x.p} with {given}: none left for the other {others} stage(s)"
    return (
        f"{x.L} layers do not split over pp {x.p} with {given}: the {rest} left do not split evenly over the "
        f"other {others} stage{'s' if others > 1 else ''} (transformer_config.py)"
    )


def _divisors(n: int) -> str:
    return ", ".join(str(k) for k in range(1, n + 1) if n % k == 0 and k <= 64)


def _interleaving_chunks_ok(r: RuleInputs) -> np.ndarray:
    # accounted splits: (L + e + l)/p per stage (arguments.py:953-979); explicit first/last stage sizes:
    # each of the first, middle and last counts (transformer_config.py:2296-2340)
    # a pinned layout's rows at a pp that does not divide its virtual stages have vpp 0 (the layout rule refuses
    # them, and this one passes every layout row): counted as 1 here, not divided by (numpy warned on stderr)
    v, lay, explicit = np.maximum(r.grid.vpp, 1), r.layers, r.explicit
    middle = lay.middle % v == 0
    if not np.any(explicit):  # a search without --decoder-first/last-pipeline-num-layers: the middle alone
        return (v == 1) | r.has_layout | middle
    each = (lay.first % v == 0) & middle & (lay.last % v == 0)
    return (v == 1) | r.has_layout | np.where(explicit, each, middle)


def _instances_ok(r: RuleInputs) -> np.ndarray:
    """--num-distributed-optimizer-instances R: one, or a sharded optimizer (the distributed optimizer, or
    Megatron FSDP's hybrid mode) with R dividing d·c and the expert data-parallel size (Megatron-LM
    parallel_state.py @ d98e8a64: "Data parallel size should be divisible by partial DistOpt shard factor",
    and expert_data_parallel_size % num_distributed_optimizer_instances == 0)."""
    g = r.grid
    one = g.do_instances == 1
    if one.all():  # the candidates (unless pinned): one instance each
        return one
    edp = (g.tp * g.pp * g.dp * g.cp) // (g.etp * g.ep * g.pp)
    sharded = g.distributed_optimizer | g.fsdp
    return one | (sharded & ((g.dp * g.cp) % g.do_instances == 0) & (edp % g.do_instances == 0))


def _a2a_overlap_ok(r: RuleInputs) -> np.ndarray:
    # transformer_config.py:3002-3047
    g, opts, mo = r.grid, r.options, r.model
    if not g.a2a_overlap.any():
        return ~g.a2a_overlap
    ok = (
        (g.ep > 1)
        & (g.dispatcher > 0)
        & (g.recompute != 2)
        & ((g.pp == 1) | (g.vpp > 1))
        & (r.training.precision.value != "fp32")
        & (mo.mtp_layers <= 1)
        & (not opts.moe_shared_expert_overlap)
    )
    return ~g.a2a_overlap | ok


def _flex_backend_ok(r: RuleInputs) -> np.ndarray:
    """The flex dispatcher only where its library can serve the flex group of etp·ep ranks (``flex_backend``:
    DeepEP not on a multi-node NVLink domain, GB200/GB300 NVL72; before Hopper DeepEP within one host, HybridEP
    and NCCL EP not at all)."""
    limit = None
    if r.model.is_moe:
        limit = flex_backend.flex_group_limit(r.hardware, r.options.moe_flex_dispatcher_backend.value)
    if limit is None:
        return r.everywhere(True)
    g = r.grid
    return (g.dispatcher != DISPATCHER_CODES[TokenDispatcher.FLEX]) | (g.etp * g.ep <= limit)


def _graph_modules_match(options: PlanOptions, model: ModelSpec) -> bool:
    modules = {m.value for m in options.cuda_graph_modules}
    moe_parts = {"moe", "moe_router", "moe_preprocess"} & modules
    if moe_parts and not model.is_moe:
        return False
    return not ("mlp" in modules and model.is_moe and model.num_moe_layers == model.num_layers)


def _graphs_ok(r: RuleInputs) -> np.ndarray:
    """Plans whose CUDA graphs Megatron-Core takes (``graph_breaches``, by the plans each binds)."""
    found = graph_breaches(r.options, r.model)
    ok = r.everywhere("all" not in found)
    if "selective" in found:
        ok = ok & (r.grid.recompute != RECOMPUTE_CODES[Recompute.SELECTIVE])
    if "a2a" in found:
        ok = ok & ~r.grid.a2a_overlap
    if "alltoall" in found:
        ok = ok & (r.grid.dispatcher != DISPATCHER_CODES[TokenDispatcher.ALLTOALL])
    return ok


def _accounting_hint(layers: int, p: int) -> str:
    """The Megatron flags that make L layers split over p stages by counting the embedding or loss."""
    flags = {
        1: "--account-for-embedding-in-pipeline-split or --account-for-loss-in-pipeline-split",
        2: "both --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split",
    }
    fits = [text for extra, text in flags.items() if (layers + extra) % p == 0 and layers % p]
    return f"; with pp {p}: {fits[0]}" if fits else ""


def _offload_breach(x) -> str:
    """The CPU-offloading conditions plan x breaks, and only those (transformer_config.py:1884-1899)."""
    parts = [f"pp 1 (pp is {x.p})"] if x.p != 1 else []
    parts += ["no recomputation"] if x.recompute else []
    parts += [f"fewer than {x.L} layers"] if x.offload >= x.L else []
    return f"--cpu-offloading-num-layers {x.offload} needs {' and '.join(parts)} (transformer_config.py:1884-1899)"


def _bf16_ends_breach(x) -> str:
    """--num-layers-at-start/end-in-bf16 beyond L // pp (transformer_config.py:1533-1556 @ d98e8a64)."""
    most, (start, end) = x.L // x.p, x.bf16_ends
    given = " and ".join(f"--num-layers-at-{w}-in-bf16 {n}" for w, n in (("start", start), ("end", end)) if n > most)
    return (
        f"{given}: allowed 0 to {most}, the layers of one pipeline stage ({x.L} layers // pp {x.p}; "
        "transformer_config.py:1536-1556)"
    )


def _with_option(option: str, mask: Callable[[RuleInputs], np.ndarray]) -> Callable[[RuleInputs], np.ndarray]:
    """A rule that binds only when the plan's options set ``option``."""
    return lambda r: mask(r) if getattr(r.options, option) else r.everywhere(True)


def _sharded_optimizer(r: RuleInputs) -> np.ndarray:
    return r.grid.distributed_optimizer | r.grid.fsdp


def _moe_only(mask: Callable[[RuleInputs], np.ndarray]) -> Callable[[RuleInputs], np.ndarray]:
    return lambda r: mask(r) if r.model.is_moe else r.everywhere(True)


def _learned_positions(r: RuleInputs) -> bool:
    return r.model.position_embedding_type is PositionEmbedding.LEARNED


def _modules(options: PlanOptions) -> set[str]:
    return {m.value for m in options.recompute_modules}


# --recompute-modules that Megatron-LM refuses for the model or the options, whatever the layout: (rule name,
# refuses(options, model), message). Each refuses the selective rows only (the modules are selective's).
MODULE_REFUSALS: tuple[tuple[str, Callable[[PlanOptions, ModelSpec], bool], str], ...] = (
    (
        "mla_up_proj recomputation needs multi-latent attention",
        lambda o, m: "mla_up_proj" in _modules(o) and not m.multi_latent_attention,
        "--recompute-modules mla_up_proj needs --multi-latent-attention (transformer_config.py:1969-1973)",
    ),
    (
        "shared_experts recomputation does not overlap the shared experts",
        lambda o, m: "shared_experts" in _modules(o) and o.moe_shared_expert_overlap and bool(m.shared_ffn),
        "--recompute-modules shared_experts cannot work with --moe-shared-expert-overlap "
        "(transformer_config.py:1991-1998)",
    ),
    (
        "FP8 delayed scaling does not recompute moe_act or layernorm",
        lambda o, m: (
            o.fp8 is not None and o.fp8_recipe.value == "delayed" and bool({"moe_act", "layernorm"} & _modules(o))
        ),
        "--recompute-modules moe_act/layernorm are refused under FP8 delayed scaling (transformer_config.py:2000-2006)",
    ),
)


def _module_rule(refusal: tuple[str, Callable[[PlanOptions, ModelSpec], bool], str]) -> Rule:
    """A rule of ``MODULE_REFUSALS``: every row but the selective ones where it refuses the options and model."""
    name, refuses, message = refusal
    return Rule(
        name, lambda r: r.grid.recompute != 1 if refuses(r.options, r.model) else r.everywhere(True), lambda x: message
    )


def refused_modules(options: PlanOptions, model: ModelSpec) -> list[str]:
    """Megatron-LM's reasons to refuse the options' --recompute-modules on this model (``MODULE_REFUSALS``)."""
    return [message for _, refuses, message in MODULE_REFUSALS if refuses(options, model)]


RULES: tuple[Rule, ...] = (
    Rule(
        "world size = tp·cp·pp·dp",
        lambda r: r.grid.tp * r.grid.cp * r.grid.pp * r.grid.dp == r.num_gpus,
        lambda x: f"tp·cp·pp·dp = {x.t * x.c * x.p * x.d} but there are {x.N} GPUs",
    ),
    Rule(
        "attention heads divisible by tp",
        lambda r: r.model.num_attention_heads % r.grid.tp == 0,
        lambda x: f"{x.a} attention heads are not divisible by tp {x.t}; allowed tp: {_divisors(x.a)}",
    ),
    Rule(
        "query groups divisible by tp",
        lambda r: np.where(
            r.model.query_groups >= r.grid.tp,
            r.model.query_groups % r.grid.tp == 0,
            r.grid.tp % r.model.query_groups == 0,
        ),
        lambda x: f"{x.g} query groups and tp {x.t} do not divide one another",
    ),
    Rule(
        "ffn hidden size divisible by tp",
        lambda r: r.model.ffn % r.grid.tp == 0,
        lambda x: f"ffn hidden size {x.f} is not divisible by tp {x.t}",
    ),
    Rule(
        "sequence length divisible by tp with sequence parallelism",
        lambda r: ~r.grid.sequence_parallel | (r.training.seq_len % r.grid.tp == 0),
        lambda x: f"seq_len {x.s} is not divisible by tp {x.t} (needed with sequence parallelism)",
    ),
    Rule(
        "sequence length divisible by 2·cp with context parallelism",
        lambda r: (r.grid.cp == 1) | (r.training.seq_len % (2 * r.grid.cp) == 0),
        lambda x: f"seq_len {x.s} is not divisible by 2·cp = {2 * x.c}",
    ),
    Rule(
        "experts divisible by ep",
        lambda r: (r.model.num_experts % r.grid.ep == 0) if r.model.is_moe else (r.grid.ep == 1),
        lambda x: (
            f"{x.E} experts are not divisible by ep {x.ep}; allowed ep: {_divisors(x.E)}"
            if x.E
            else f"ep {x.ep} needs a mixture-of-experts model (num_experts)"
        ),
    ),
    Rule(
        "expert grid etp·ep·pp divides the world",
        _moe_only(lambda r: r.num_gpus % (r.grid.etp * r.grid.ep * r.grid.pp) == 0),
        lambda x: (
            f"etp·ep·pp = {x.etp}·{x.ep}·{x.p} does not divide {x.N} GPUs; allowed: a GPU count that is a multiple "
            f"of {_world_step(x)} (e.g. --gpus {-(-x.N // _world_step(x)) * _world_step(x)}), or ep, etp, pp that "
            f"divide {x.N}"
        ),
    ),
    Rule(
        "expert tensor parallelism divides expert MLP width",
        _moe_only(lambda r: r.model.expert_ffn % r.grid.etp == 0),
        lambda x: f"expert ffn {x.f_e} is not divisible by etp {x.etp}",
    ),
    Rule(
        "mixture of experts with tp > 1 needs sequence parallelism",
        _moe_only(lambda r: (r.grid.tp == 1) | r.grid.sequence_parallel),
        lambda x: f"tp {x.t} with experts needs --sequence-parallel",
    ),
    Rule(
        "MoE biases need expert tensor parallelism 1",
        _moe_only(lambda r: ~np.asarray(r.model.add_bias_linear) | (r.grid.etp == 1)),
        lambda x: f"etp {x.etp}: Megatron-LM supports biases in MoE layers only with etp 1 (give --etp 1)",
    ),
    Rule(
        "flex dispatcher needs expert communication",
        _moe_only(lambda r: (r.grid.dispatcher != 2) | (r.grid.ep * r.grid.etp > 1)),
        lambda x: "the flex dispatcher (DeepEP/HybridEP) needs etp·ep > 1",
    ),
    Rule(
        flex_backend.RULE,
        _flex_backend_ok,
        lambda x: flex_backend.backend_message(x.hardware, x.flex_backend, x.etp, x.ep),
    ),
    Rule(
        "the TE op fuser's grouped MLP needs expert TP 1",
        lambda r: (
            (r.grid.etp == 1) if r.options.use_transformer_engine_op_fuser and r.model.is_moe else r.everywhere(True)
        ),
        lambda x: (
            f"etp {x.etp}: --use-transformer-engine-op-fuser runs MoE experts only without expert tensor "
            "parallelism (moe/experts.py TEGroupedMLP._is_fused_impl_supported); give --etp 1"
        ),
    ),
    Rule(
        "moe-shared-expert-overlap needs the alltoall or flex dispatcher",
        # checked only for a model with shared experts (transformer_config.py:1813-1826 @ d98e8a64, under
        # moe_shared_expert_intermediate_size): without them the flag runs nothing, whatever the dispatcher
        lambda r: (
            (r.grid.dispatcher > 0)
            if r.options.moe_shared_expert_overlap and r.model.is_moe and r.model.shared_ffn
            else r.everywhere(True)
        ),
        lambda x: "--moe-shared-expert-overlap works only with --moe-token-dispatcher alltoall or flex",
    ),
    Rule(
        "moe-router-padding-for-quantization needs FP8 and the alltoall or flex dispatcher",
        lambda r: (
            (r.grid.dispatcher > 0) & (r.options.fp8 is not None)
            if r.options.moe_router_padding_for_quantization and r.model.is_moe
            else r.everywhere(True)
        ),
        lambda x: (
            "--moe-router-padding-for-quantization needs --fp8 and --moe-token-dispatcher alltoall or flex "
            "(transformer_config.py:2649-2660 @ d98e8a64)"
        ),
    ),
    Rule(
        "delay-wgrad-compute needs overlap-moe-expert-parallel-comm",
        lambda r: r.grid.a2a_overlap if r.options.delay_wgrad_compute else r.everywhere(True),
        lambda x: (
            "--delay-wgrad-compute needs --overlap-moe-expert-parallel-comm "
            "(transformer_config.py:3074-3077 @ d98e8a64)"
        ),
    ),
    Rule(
        "overlap-moe-expert-parallel-comm needs ep > 1, alltoall/flex, no full recompute, interleaving with pp > 1",
        _a2a_overlap_ok,
        lambda x: (
            "--overlap-moe-expert-parallel-comm needs ep > 1, the alltoall or flex dispatcher, no full recomputation, "
            "interleaved chunks when pp > 1, bf16/fp16, at most one MTP layer and no --moe-shared-expert-overlap "
            f"(ep {x.ep}, pp {x.p}, vpp {x.v}, MTP {x.mtp})"
        ),
    ),
    Rule(
        "sequence length within max_position_embeddings",
        lambda r: r.everywhere(r.training.seq_len <= r.model.max_position_embeddings or not _learned_positions(r)),
        lambda x: f"seq_len {x.s} exceeds max_position_embeddings {x.max_pos}",
    ),
    Rule(
        "global batch divisible by micro-batch × dp",
        lambda r: r.training.global_batch % (r.grid.micro_batch * r.grid.dp) == 0,
        lambda x: (
            f"global batch {x.B} is not divisible by micro-batch {x.b} × dp {x.d} = {x.b * x.d}; allowed: a global "
            f"batch that is a multiple of {x.b * x.d}, or a micro-batch × dp that divides {x.B}"
        ),
    ),
    Rule(
        "pipeline layout places every layer as Megatron-LM requires",
        lambda r: ~r.has_layout | r.layout_ok(),
        lambda x: f"--pipeline-model-parallel-layout {x.layout}: {x.layout_problems}",
    ),
    Rule(
        "layers split over pipeline stages",
        lambda r: r.has_layout | r.layers.legal,
        lambda x: (
            _given_stages_message(x)
            or (
                f"{x.L} layers do not split over pp {x.p} with the {SPLIT_BY_CODE[x.split].value} split"
                f"{'' if x.L % x.p == 0 else f'; allowed pp for an even split: {_divisors(x.L)}'}"
                + _accounting_hint(x.L, x.p)
            )
        ),
    ),
    Rule(
        "interleaving needs pp > 1 (pp > 2 without p2p overlap)",
        lambda r: (r.grid.vpp == 1) | (r.grid.pp > (1 if r.options.overlap_p2p_comm else 2)),
        lambda x: f"vpp {x.v} needs pp > 1, or pp > 2 with --no-overlap-p2p-comm (pp is {x.p})",
    ),
    Rule(
        "layers per stage divisible by interleaved chunks",
        _interleaving_chunks_ok,
        lambda x: (
            f"first/middle/last stage layers must each divide into vpp {x.v} chunks"
            if x.explicit
            else f"{x.middle} layers per stage do not divide into vpp {x.v} chunks; allowed vpp: {_divisors(x.middle)}"
        ),
    ),
    Rule(
        "distributed-optimizer instances divide d·c",
        _instances_ok,
        lambda x: (
            f"--num-distributed-optimizer-instances {x.R} needs the distributed optimizer (or Megatron FSDP) and "
            f"to divide d·c = {x.d * x.c} and the expert data-parallel size {x.edp} (parallel_state.py)"
        ),
    ),
    Rule(
        "interleaving needs a legal micro-batch group",
        lambda r: (
            (r.grid.vpp == 1) | microbatch_group_legal(r.grid.pp, r.m, microbatch_group(r.grid.pp, r.grid.mb_group))
        ),
        lambda x: (
            f"interleaving needs pp {x.p} ≤ G ≤ m = B/(b·d) = {x.m:g} with m mod G = 0 or ≥ pp, G the micro-batch "
            f"group (--microbatch-group-size-per-virtual-pipeline-stage, default pp; schedules.py); G is {x.G}"
        ),
    ),
    Rule(
        "tp-comm-overlap needs sequence parallelism",
        lambda r: r.grid.sequence_parallel if r.options.tp_comm_overlap else r.everywhere(True),
        lambda x: "--tp-comm-overlap needs --sequence-parallel (and tp > 1)",
    ),
    Rule(
        "fp8-param-gather needs the distributed optimizer or Megatron FSDP",
        _with_option("fp8_param_gather", _sharded_optimizer),
        lambda x: "--fp8-param-gather needs --use-distributed-optimizer or --use-megatron-fsdp (arguments.py)",
    ),
    Rule(
        "overlap-param-gather needs distributed optimizer and overlap-grad-reduce",
        _with_option("overlap_param_gather", lambda r: _sharded_optimizer(r) & r.options.overlap_grad_reduce),
        lambda x: "--overlap-param-gather needs --use-distributed-optimizer and --overlap-grad-reduce",
    ),
    Rule(
        "CPU offloading needs pp 1, no recomputation and fewer layers than the model",
        _with_option(
            "cpu_offloading_num_layers",
            lambda r: (
                (r.grid.pp == 1) & (r.grid.recompute == 0) & (r.options.cpu_offloading_num_layers < r.model.num_layers)
            ),
        ),
        lambda x: _offload_breach(x),
    ),
    Rule(
        "per-layer CUDA graphs not with CPU offloading or full recomputation",
        lambda r: (
            r.everywhere(not r.options.cpu_offloading_num_layers) & (r.grid.recompute != 2)
            if r.options.cuda_graph_impl.value in PER_LAYER
            else r.everywhere(True)
        ),
        lambda x: (
            "--cuda-graph-impl local/transformer_engine works with neither --cpu-offloading-num-layers nor full "
            "recomputation; use --cuda-graph-impl full_iteration (transformer_config.py:2800-2801, 2855-2859)"
        ),
    ),
    Rule(
        "per-layer CUDA graphs not with Megatron FSDP and the expert all-to-all overlap",
        lambda r: (
            ~(r.grid.fsdp & r.grid.a2a_overlap) if r.options.cuda_graph_impl.value in PER_LAYER else r.everywhere(True)
        ),
        lambda x: (
            "--cuda-graph-impl local/transformer_engine does not run with --use-megatron-fsdp and "
            '--overlap-moe-expert-parallel-comm ("1F1B overlap with FSDP does not support per-layer CUDA graphs", '
            "distributed/fsdp/mcore_fsdp_adapter.py:182 @ d98e8a64); use --cuda-graph-impl full_iteration"
        ),
    ),
    Rule(
        "CUDA graphs as Megatron-Core takes them",
        _graphs_ok,
        lambda x: f"{x.graph_breach} (transformer_config.py:2798-2935, 3062-3070 @ d98e8a64)",
    ),
    Rule(
        "CUDA graph modules match the layers",
        lambda r: r.everywhere(_graph_modules_match(r.options, r.model)),
        lambda x: (
            "--cuda-graph-modules: moe and moe_router need MoE layers, mlp dense ones (transformer_config.py:2825-2837)"
        ),
    ),
    _module_rule(MODULE_REFUSALS[0]),
    _module_rule(MODULE_REFUSALS[1]),
    Rule(
        "distribute-saved-activations needs full recomputation, tp > 1 and no sequence parallelism",
        _with_option(
            "distribute_saved_activations",
            lambda r: (
                (r.grid.recompute == RECOMPUTE_CODES[Recompute.FULL]) & (r.grid.tp > 1) & ~r.grid.sequence_parallel
            ),
        ),
        lambda x: (
            "--distribute-saved-activations shards the full recomputation's saved inputs over tp: it needs "
            f"--recompute-granularity full and tp > 1 (arguments.py validate_args), and no --sequence-parallel, which "
            f"shards them already (transformer_config.py:1934-1938) (recompute {x.recompute_name}, tp {x.t})"
        ),
    ),
    Rule(
        "precision-aware optimizer needs the distributed optimizer",
        _with_option("use_precision_aware_optimizer", _sharded_optimizer),
        lambda x: "--use-precision-aware-optimizer needs --use-distributed-optimizer (optimizer/__init__.py:1057-1060)",
    ),
    _module_rule(MODULE_REFUSALS[2]),
    Rule(
        "BF16 end layers at most one pipeline stage's",
        lambda r: (
            max(r.options.bf16_end_layers) <= r.model.num_layers // r.grid.pp
            if any(r.options.bf16_end_layers)
            else r.everywhere(True)
        ),
        lambda x: _bf16_ends_breach(x),
    ),
    Rule(
        "the MXFP8 output layer does not share the word embedding's weight",
        lambda r: r.grid.pp > 1 if r.options.fp8_output_proj and r.model.tied_embeddings else r.everywhere(True),
        lambda x: (
            "--fp8-output-proj with tied embeddings and pp 1: Megatron-Core's TELMHeadColumnParallelLinear refuses "
            "the shared weight on the embedding's stage (extensions/transformer_engine.py:1825, 'does not support "
            "skip_weight_param_allocation'); allowed: --untie-embeddings-and-output-weights, or pp > 1"
        ),
    ),
    Rule(
        "fp8 needs bf16 or fp16 training",
        lambda r: r.everywhere(r.options.fp8 is None or r.training.precision.value != "fp32"),
        lambda x: "--fp8-format needs --bf16 or --fp16",
    ),
)


def rule_masks(
    grid: PlanGrid, model: ModelSpec, training: TrainingSpec, options: PlanOptions, num_gpus: int, *, hardware
) -> dict[str, np.ndarray]:
    """Named masks, True where the rule holds, for every plan of the grid (in table order); ``hardware``: the
    cluster, for the rules of its GPUs and NVLink domain - required, so no caller skips them by forgetting it
    (None says so: those hold)."""
    return dict(each_rule_mask(grid, model, training, options, num_gpus, hardware=hardware))


def each_rule_mask(
    grid: PlanGrid, model: ModelSpec, training: TrainingSpec, options: PlanOptions, num_gpus: int, *, hardware
) -> Iterator[tuple[str, np.ndarray]]:
    """``rule_masks`` one rule at a time, (name, mask) in table order: the search keeps one mask at a time."""
    r, shape = RuleInputs(grid, model, training, options, num_gpus, hardware), (len(grid),)
    for rule in RULES:
        mask = rule.holds(r)
        yield rule.name, mask if np.shape(mask) == shape else np.broadcast_to(mask, shape)


# the knobs a search crosses every row with (memory, recomputation, the MoE axes, the derived options): the few rules
# that read one see every row; the others see one row of each distinct combination of the other columns
# (``first_broken``). The MoE axes are crossed last (``candidates._moe_axes``): without them here every MoE run
# would be one row (DeepSeek-V3 / 1024 H100: 1,355,312 runs of as many candidates; with them 2,124)
CROSSED = ("sequence_parallel", "distributed_optimizer", "fsdp", "fsdp_level", "outer_optim", "recompute")
CROSSED += ("recompute_block", "recompute_layers", "ep", "etp", "dispatcher", "a2a_overlap", *OPTION_COLUMNS)


RUNS_FROM = 4096  # grids of fewer rows ask every rule of every row (a search's hybrid variants: 577 rows in 200 runs)


class _Crossed(Exception):
    """A rule read a ``CROSSED`` column of a ``_Distinct`` view."""


class _Distinct:
    """One row of each distinct combination of a grid's columns but ``CROSSED`` (a ``PlanGrid`` read by attribute);
    reading a ``CROSSED`` column raises ``_Crossed``."""

    def __init__(self, grid: PlanGrid):
        self._grid = grid

    def __len__(self) -> int:
        return len(self._grid)

    def __getattr__(self, name: str):
        if name in CROSSED:
            raise _Crossed(name)
        kind = vars(type(self._grid)).get(name)  # PlanGrid's own (a dataclass of no base)
        if isinstance(kind, property):  # a grid's property or method reads its columns through this view too
            return kind.fget(self)
        if isinstance(kind, types.FunctionType):
            return types.MethodType(kind, self)
        return getattr(self._grid, name)


def first_broken(
    grid: PlanGrid,
    model: ModelSpec,
    training: TrainingSpec,
    options: PlanOptions,
    num_gpus: int,
    rules=RULES,
    *,
    hardware,
) -> np.ndarray:
    """Per plan of the grid, 1 + the first of ``rules`` it breaks (0: none), as ``each_rule_mask`` finds it. A rule
    that reads no ``CROSSED`` column is asked once per run of consecutive plans alike in every other column (the
    candidate grid crosses each row with the ``CROSSED`` knobs in turn; GPT-3 175B on 64 GPUs: 1,162 runs of
    20,601 candidates), each plan taking its run's answer (a rule answers each plan from its own columns); the
    others ask every row."""
    big = len(grid) >= RUNS_FROM
    first, inverse = _runs([getattr(grid, n) for n in COLUMNS if n not in CROSSED], len(grid)) if big else (None, None)
    every = RuleInputs(grid, model, training, options, num_gpus, hardware)
    # else every row is asked: a small grid (each rule's fixed cost dominates) or few rows sharing a run
    runs = big and 2 * len(first) <= len(grid)
    once = RuleInputs(_Distinct(grid.take(first)), model, training, options, num_gpus, hardware) if runs else every
    broken = (np.zeros(len(first) if runs else len(grid), dtype=np.int16), np.zeros(len(grid), dtype=np.int16))
    for k, rule in enumerate(rules):
        try:
            mask, at = rule.holds(once), broken[0]
        except _Crossed:
            mask, at = rule.holds(every), broken[1]
        mask = mask if np.shape(mask) == at.shape else np.broadcast_to(mask, at.shape)
        # some row breaks it (rows counted by ``np.count_nonzero``: a fraction of the instructions of ``mask.all()``)
        if len(mask) and not (mask[0] if mask.strides == (0,) else np.count_nonzero(mask) == len(mask)):
            at[(at == 0) & ~mask] = k + 1
    shared, own = broken[0].take(inverse) if runs else broken[0], broken[1]
    return np.where((own > 0) & ((shared == 0) | (own < shared)), own, shared)


def _runs(columns: list[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each run of consecutive rows equal in every column, and each row's run."""
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = False
        for col in columns:
            if col.strides != (0,):  # a column of one value (``shared_constant``) starts no run
                new[1:] |= col[1:] != col[:-1]
    first = np.flatnonzero(new)  # each row's run: its run's number repeated over the run (a cumsum of new, cheaper)
    return first, np.repeat(np.arange(len(first)), np.diff(first, append=n))


def broken_rules(masks: dict[str, np.ndarray], i: int = 0) -> list[str]:
    """Names of the rules plan i breaks."""
    return [name for name, ok in masks.items() if not bool(np.asarray(ok)[i])]


def rule_messages(
    grid: PlanGrid,
    model: ModelSpec,
    training: TrainingSpec,
    options: PlanOptions,
    num_gpus: int,
    i: int = 0,
    *,
    hardware,
) -> list[str]:
    """Each rule plan i breaks, by name, with the values that break it and what would be allowed."""
    r = RuleInputs(grid, model, training, options, num_gpus, hardware)
    x = r.one(i)
    return [
        f"{rule.name}: {rule.message(x)}" for rule in RULES if not bool(np.broadcast_to(rule.holds(r), (len(grid),))[i])
    ]
