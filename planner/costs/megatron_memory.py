"""What Megatron-LM's own estimator prints for a plan: ``report_theoretical_memory``
(megatron/training/theoretical_memory_usage.py at commit d98e8a64, called once from training.py:3683
with the number of micro-batches), transcribed term by term, and why megaplan's estimate differs.

Megatron prints "Theoretical memory footprints: weight and optimizer=… MB, activation=… MB,
total=… MB" (MB = 2^20 bytes) for its most loaded rank, the first pipeline stage. This is Megatron's
formula for one plan, not megaplan's model: megaplan's memory is ``planner.costs.stage_memory``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.models.params import attention_params, megatron_count_gaps
from planner.models.spec import ModelSpec, Normalization
from planner.plan import ParallelPlan, PlanOptions, Recompute, TrainingSpec

MIB = 2**20


@dataclass(frozen=True)
class MegatronMemory:
    weight_and_optimizer_mib: float
    activation_mib: float
    total_mib: float
    formula: str  # which activation formula Megatron picked: "with SP" or "without SP"

    def log_line(self) -> str:
        """The line Megatron prints (training.py:3683 -> theoretical_memory_usage.py:480-484)."""
        return (
            f"Theoretical memory footprints: weight and optimizer={self.weight_and_optimizer_mib:.2f} MB, "
            f"activation={self.activation_mib:.2f} MB, total={self.total_mib:.2f} MB"
        )


def weight_and_optimizer_bytes(mo: ModelSpec, p: ParallelPlan, world: int) -> float:
    """compute_weight_and_optimizer_memory (lines 12-305): the most loaded shard's parameters (1/p of the
    layers plus one embedding and the whole MTP block, plus the output layer when untied and p = 1) × 18
    bytes, or 6 + 12/D with the distributed optimizer, D = data-parallel size without CP (experts: the
    expert DP size). Multi-latent attention counts as Megatron's lines 62-80 do, all of it split over t."""
    h, a, L, t, pp = mo.hidden_size, mo.num_attention_heads, mo.num_layers, p.tp, p.pp
    g, d = mo.query_groups, mo.head_dim
    gate = 1.5 if mo.swiglu else 1.0
    norm = 1 if mo.normalization is Normalization.RMSNORM else 2
    attention = 2 * h * h * (1 + g / a) * (d * a / h)
    if mo.multi_latent_attention:
        attention = float(attention_params(mo, 1, megatron=True))
    dense_mlp = 2 * h * mo.ffn * gate
    shared = 2 * h * (mo.shared_ffn or 0) * gate
    layernorms = 2 * h * norm
    moe = mo.num_moe_layers if mo.is_moe else 0
    dense = L - moe
    experts = mo.num_experts or 1
    routed = 2 * h * mo.expert_ffn * experts * gate if mo.is_moe else 0.0
    router = h * experts + (experts if mo.add_bias_linear else 0) if mo.is_moe else 0.0
    vocab = math.ceil(mo.vocab_size / (mo.make_vocab_size_divisible_by * t)) * mo.make_vocab_size_divisible_by * t
    embedding = h * vocab
    tp_sharded = (attention + dense_mlp) * dense + (attention + shared) * moe
    replicated = layernorms * dense + (layernorms + router) * moe + norm * h
    expert_sharded = routed * moe
    mtp, mtp_moe = mo.mtp_layers, mo.is_moe and mo.mtp_is_moe  # each depth a layer of the last layer's kind
    tp_mtp = mtp * (attention + (shared if mtp_moe else dense_mlp))
    rep_mtp = mtp * (layernorms + (router if mtp_moe else 0.0))
    exp_mtp = mtp * (routed if mtp_moe else 0.0)
    shard_tp = (tp_sharded / pp + tp_mtp + embedding) / t
    shard_rep = replicated / pp + rep_mtp
    shard_exp = (expert_sharded / pp + exp_mtp) / (p.etp * p.ep)
    if mo.untie_embeddings_and_output_weights and pp == 1:
        shard_tp += embedding / t
    dp = world // (t * pp * p.cp)
    edp = world // (p.etp * p.ep * pp)

    def per_param(data_parallel: int) -> float:
        return 6 + 12 / data_parallel if p.distributed_optimizer else 18

    return (shard_tp + shard_rep) * per_param(dp) + shard_exp * per_param(edp)


def activation_bytes(mo: ModelSpec, tr: TrainingSpec, p: ParallelPlan) -> tuple[float, str]:
    """compute_activation_memory (SP and selective recompute, lines 308-379) or
    compute_activation_memory_without_sp (every other case, lines 382-453), first pipeline stage."""
    s, b, h, L, t, pp = tr.seq_len, p.micro_batch, mo.hidden_size, mo.num_layers, p.tp, p.pp
    m = tr.global_batch / (b * (p.world_size // (t * pp * p.cp)))
    vpp = p.vpp if p.vpp > 1 else None
    vocab = math.ceil(mo.vocab_size / (mo.make_vocab_size_divisible_by * t)) * mo.make_vocab_size_divisible_by * t
    with_sp = p.sequence_parallel and p.tp > 1 and p.recompute is Recompute.SELECTIVE
    if with_sp:
        act = s * b * h * (18 + 4 * mo.ffn / h) * L
    else:
        act = s * b * h * (10 + 24 / t) * L
    act += 8 * s * b * pp + s * b * h * pp
    if vpp is not None:
        act *= 1 + (pp - 1) / (pp * vpp)
    elif pp > 1:
        act *= min(1, m / pp)
    if with_sp:
        if pp == 1:
            act += s * b * h * 4 * (1 + vocab / h)
        return act / t, "with SP"
    if pp == 1:
        act += (s * b * vocab / t + s * b * h) * 2
    return act * 1.05, "without SP"


def report_theoretical_memory(mo: ModelSpec, tr: TrainingSpec, p: ParallelPlan, world: int) -> MegatronMemory:
    """What Megatron-LM prints for this plan (report_theoretical_memory, lines 456-486)."""
    wo = weight_and_optimizer_bytes(mo, p, world) / MIB
    act, path = activation_bytes(mo, tr, p)
    return MegatronMemory(wo, act / MIB, wo + act / MIB, path)


def differences(mo: ModelSpec, tr: TrainingSpec, p: ParallelPlan, opts: PlanOptions) -> list[str]:
    """Why Megatron's estimate differs from megaplan's for this plan: what its formula leaves out or gets wrong, each
    with its lines in megatron/training/theoretical_memory_usage.py at d98e8a64 (docs/cost-model.md §5.6). Its
    parameter count's own differences: ``planner.models.params.megatron_count_gaps``."""
    return [*_activation_differences(mo, p, opts), *_state_differences(mo, p, opts)]


def _activation_differences(mo: ModelSpec, p: ParallelPlan, opts: PlanOptions) -> list[str]:
    """The activation formula's differences (compute_activation_memory, lines 308-379, and
    compute_activation_memory_without_sp, lines 382-453)."""
    out = []
    with_sp = p.sequence_parallel and p.tp > 1 and p.recompute is Recompute.SELECTIVE
    if p.sequence_parallel and p.tp > 1 and not with_sp:
        out.append(
            "sequence parallelism is ignored unless recomputation is selective (line 466): the without-SP formula's "
            "sbh·(10 + 24/t) a layer (line 386) keeps the 10·sbh SP shards over t"
        )
    if p.recompute is Recompute.FULL:
        out.append(
            "full recomputation is ignored: the without-SP formula counts every layer's activations, sbh·(10 + 24/t) "
            "each (lines 386, 395), not only its input"
        )
    if p.cp > 1:
        out.append("context parallelism is ignored in the activations: s is not divided by c (lines 317, 386)")
    plain = mo.query_groups == mo.num_attention_heads and mo.head_dim * mo.num_attention_heads == mo.hidden_size
    if with_sp and (not plain or mo.gated):
        out.append(
            "its per-layer activations, sbh·(18 + 4f/h) (lines 317-319), are Korthikanti's GPT layer: no GQA, no gate, "
            "d_h = h/a (its own to-do note, lines 313-314, names the last)"
        )
    elif not with_sp and (not plain or mo.gated or mo.ffn != 4 * mo.hidden_size):
        out.append(
            "its per-layer activations, sbh·(10 + 24/t) (line 386), are GPT's with f = 4h: no GQA, d_h = h/a, no gate "
            f"(this model: g = {mo.query_groups}, d_h = {mo.head_dim}, f = {mo.ffn}{', gated' if mo.gated else ''})"
        )
    if mo.is_moe or mo.multi_latent_attention or mo.mtp_layers:
        out.append(
            "its activations are MoE-blind: every layer keeps a dense MLP of --ffn-hidden-size (lines 317-319, 386), "
            "not the routed tokens, the experts' internals, MLA's latents or the MTP layers"
        )
    if p.pp > 1 and (p.first_stage_layers or p.last_stage_layers or p.stage_split.value != "even"):
        out.append("uneven stage splits are ignored: the first stage is taken to hold L/p layers (lines 249, 325)")
    if p.vpp > 1:
        out.append(
            "the interleaving factor 1 + (p − 1)/(p·v) also multiplies the embedding terms (lines 341-355, 411-425)"
        )
    if not with_sp:
        out.append("the without-SP formula adds 5 % for the optimizer and temporaries (lines 449-451)")
    if opts.cpu_offloading_num_layers:
        out.append("CPU offloading is ignored: no term for it in lines 308-453")
    return out


def _state_differences(mo: ModelSpec, p: ParallelPlan, opts: PlanOptions) -> list[str]:
    """The weight-and-optimizer formula's differences (compute_weight_and_optimizer_memory, lines 12-305)."""
    out = []
    gap = sum(g.total for g in megatron_count_gaps(mo, p.tp))
    if abs(gap) >= 5e5:
        out.append(
            f"its weights and optimizer hold its own parameter count, {_count(gap)} {'fewer' if gap > 0 else 'more'} "
            "than megaplan's (lines 12-203; each reason under the parameters)"
        )
    if mo.multi_latent_attention and p.tp > 1:
        whole = float(attention_params(mo, p.tp, megatron=True) - attention_params(mo, 1, megatron=True) / p.tp)
        layers = mo.num_layers / p.pp + mo.mtp_layers
        out.append(
            "it splits all of multi-latent attention over t (lines 62-80 summed into the TP-sharded part, 215-218, "
            "248-252), where Transformer Engine keeps the down-projections and latent norms whole on every TP rank "
            f"(multi_latent_attention.py:526-527, 573-574, parallel_mode 'duplicated'): {_count(whole * layers)} "
            "fewer parameters on the first stage"
        )
    if p.cp > 1:
        out.append(
            "the optimizer is sharded over d (data_parallel_size, line 300) where the distributed optimizer shards "
            "over d·c (megatron/core/optimizer/__init__.py:1203, data_parallel_group=intra_dp_cp_group)"
        )
    if mo.mtp_layers and p.pp > 1:
        out.append(
            "the whole MTP block is counted on the first stage (lines 247-255); Megatron-Core puts it on the last"
        )
    if opts.grad_buffer_in_16_bits or opts.fp8_param_gather or opts.use_precision_aware_optimizer:
        out.append(
            "bytes per parameter are always 18 or 6 + 12/D (lines 293-296): bf16 gradients, FP8 weights and the "
            "precision-aware optimizer's dtypes are ignored"
        )
    if opts.fp8 is not None:
        out.append(
            "FP8 is ignored: it assumes bf16 training (lines 294-295), without Transformer Engine's FP8 weight copies "
            "and 1-byte saved inputs"
        )
    if p.pp > 1:
        out.append(
            "only the first stage is estimated (lines 247-252, 310-311: 1/p of the layers plus the embedding); "
            "megaplan reports the most loaded stage, which may be another"
        )
    out.append(
        "it counts model states and activations only (line 479): not the CUDA context, NCCL buffers, workspaces, "
        "CUDA-graph pools or allocator fragmentation megaplan adds"
    )
    return out


def _count(n: float) -> str:
    """A parameter difference in B (M below 0.1 B), its sign dropped: "38.2 B", "12.6 M"."""
    n = abs(n)
    return f"{n / 1e9:.3g} B" if n >= 1e8 else f"{n / 1e6:.3g} M"
