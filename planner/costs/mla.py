"""Multi-latent attention (DeepSeek-V2 §2.1, arXiv:2405.04434; Megatron-Core
megatron/core/transformer/multi_latent_attention.py): what its layer keeps for the backward and
what its tensor-parallel collectives move. Its GEMMs are ``planner.costs.flops.mla_gemms``, its
parameters ``planner.models.params.mla_attention_params``.

Letters: n heads, latent ranks r_q (query; None without) and r_kv (key/value), head dims d_qk
(non-rotary query/key), d_r (rotary) and d_v (value).
"""

from __future__ import annotations

from planner.costs import Formula
from planner.models.spec import ModelSpec


def mla_letters(model: ModelSpec) -> tuple[int | None, int, int, int, int]:
    """(r_q, r_kv, d_qk, d_r, d_v) of a model with multi-latent attention."""
    m = model
    return m.q_lora_rank, m.kv_lora_rank, m.qk_head_dim, m.qk_pos_emb_head_dim, m.v_head_dim


def mla_activation_parts(
    model: ModelSpec, *, dropout: bool, fp8: bool = False, flash_attention: bool = False
) -> tuple[float, float]:
    """(split over t, replicated) coefficients of sbh for what an MLA block keeps for the backward,
    16-bit tensors, in the tensor list of Korthikanti et al. 2022 §4.1 extended to the latents.

    Split (heads over t): the query and the key after RoPE, 2·n(d_qk + d_r) each; the value 2·n·d_v;
    the core's output, the projection's input, 2·n·d_v. Replicated without sequence parallelism
    (the down-projections run on the tokens a rank holds): the layer norm's input 2, the
    down-projections' input 2, the pre-MLP norm's input 2 and a dropout mask 1, as for any layer; the
    query latent at the latent norm's input and output (the up-projection's input), 2·r_q each; the
    key/value latent likewise, 2·r_kv each. FP8 keeps the linear inputs in 1 byte: the
    down-projections' input (1) and the up-projections' inputs (r_q + r_kv); the projection's input
    (n·d_v) halves with unfused attention, while flash attention keeps its own 16-bit output for its
    backward, so there the projection's FP8 copy comes on top (as ``memory.layer_activation_parts``).
    """
    h, n = model.hidden_size, model.num_attention_heads
    r_q, r_kv, d_qk, d_r, d_v = mla_letters(model)
    r_q = r_q or 0
    saving = 1.0 if fp8 else 0.0
    projection_fp8 = (-1.0 if flash_attention else 1.0) * saving * n * d_v
    split = (2 * 2 * n * (d_qk + d_r) + 2 * n * d_v + 2 * n * d_v - projection_fp8) / h
    latent = (4 * r_q + 4 * r_kv - saving * (r_q + r_kv)) / h
    replicated = 6.0 + (1.0 if dropout else 0.0) - saving + latent
    return split, replicated


def mla_up_proj_outputs(model: ModelSpec) -> float:
    """Coefficient of sbh (split over t) of what --recompute-modules mla_up_proj discards and recomputes
    before the core's backward: the up-projections' outputs Q and K after RoPE, 2·n(d_qk + d_r) each,
    and V, 2·n·d_v (multi_latent_attention.py:983-990, CheckpointWithoutOutput)."""
    n = model.num_attention_heads
    _, _, d_qk, d_r, d_v = mla_letters(model)
    return (2 * 2 * n * (d_qk + d_r) + 2 * n * d_v) / model.hidden_size


def mla_gather_width(model: ModelSpec) -> int:
    """Channels per token the attention block all-gathers over t with sequence parallelism: the
    query latent r_q (h without one), the key/value latent r_kv and the rotary key d_r, which the
    up-projections gather from the sequence shards (multi_latent_attention.py, ColumnParallelLinear
    inputs and gather_from_sequence_parallel_region of the rotary key); a GQA block gathers h."""
    r_q, r_kv, _, d_r, _ = mla_letters(model)
    return (r_q or model.hidden_size) + r_kv + d_r


SOURCE = (
    "DeepSeek-V2 §2.1 (arXiv:2405.04434); Megatron-LM multi_latent_attention.py, training.py:1079-1137 "
    "(FLOPs), theoretical_memory_usage.py:62-80 (parameters) at d98e8a64"
)


def mla_formula(model: ModelSpec, what: str = "compute") -> Formula:
    """One formula of the MLA block for explain: its ``compute``, its ``parameters`` or what it ``keeps``."""
    r_q, r_kv, d_qk, d_r, d_v = mla_letters(model)
    n = model.num_attention_heads
    letters = f"n {n}, r_q {r_q}, r_kv {r_kv}, d_qk {d_qk}, d_r {d_r}, d_v {d_v}"
    text = {
        "compute": "MLA: down-projections h→r_q and h→r_kv+d_r on the rank's tokens, up-projections "
        "r_q→n(d_qk+d_r) and r_kv→n(d_qk+d_v) and output n·d_v→h over t, core over d_qk+d_r (scores) and "
        f"d_v (context); with SP all-gathers r_q+r_kv+d_r channels, not h ({letters})",
        "parameters": "MLA: h·(r_q + r_kv + d_r) + ν(r_q + r_kv) replicated over t, "
        f"r_q·n(d_qk+d_r) + r_kv·n(d_qk+d_v) + n·d_v·h split over t ({letters})",
        "keeps": "MLA keeps Q and K (2·n(d_qk+d_r) bytes each), V and the core output (2·n·d_v each) split over t, "
        f"the latents 4(r_q + r_kv) and the norms' inputs replicated (÷t with SP) per token ({letters})",
    }[what]
    return Formula(text, SOURCE)
