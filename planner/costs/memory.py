"""Memory per GPU, in bytes: weights, gradients, optimizer states and activations.

Activations follow Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", §4 and Table 2 (16-bit activations, 1-byte dropout masks); weights,
gradients and optimizer states follow Megatron-LM's distributed-optimizer document.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

# (weights, gradients, optimizer) bytes per parameter; the optimizer part is sharded over d by the
# distributed optimizer (Megatron-LM docs/user-guide/features/dist_optimizer.md):
BYTES_PER_PARAM = {
    "bf16": (2, 4, 4 + 4 + 4),  # bf16 weight, fp32 main grad; fp32 master weight, Adam m, v  -> 18, 6 + 12/d
    "fp16": (2, 2, 4 + 4 + 4 + 4),  # fp16 weight, fp16 grad; fp32 master weight and grad, m, v  -> 20, 4 + 16/d
    "fp32": (4, 4, 4 + 4),  # fp32 weight and grad; Adam m, v                            -> 16, 8 + 8/d
}
ACTIVATION_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
MASTER_REMAINDER_BYTES = 2  # TE FusedAdam keeps only the low 16 bits of an fp32 master weight beside its bf16 copy
# Scale bytes per FP8 element of the block-scaled recipes: MXFP8 one E8M0 byte per 32 elements, blockwise one
# fp32 per 1×128 tile of an activation (4/128); blockwise weights have one fp32 per 128×128 block
# (Transformer Engine pytorch/csrc/quantizer.cpp: MXFP8Quantizer and Float8BlockQuantizer::create_tensor)
FP8_BLOCK_SCALE_BYTES = {"mxfp8": 1 / 32, "blockwise": 4 / 128}
FP8_WEIGHT_SCALE_BYTES = {"mxfp8": 1 / 32, "blockwise": 4 / (128 * 128)}
NVFP4_ELEMENT_BYTES = 0.5 + 1 / 16  # an E2M1 element (4 bits) and its share of an E4M3 scale per 16 (TE NVFP4Tensor)


def gradient_bytes_per_param(precision: str, *, grads_in_16_bits: bool) -> int:
    """Bytes of the gradient buffer per parameter: bf16 training accumulates and reduces in fp32 unless
    --grad-reduce-in-bf16 (or --main-grads-dtype bf16) keeps the buffer in bf16 (Megatron-LM
    arguments.py:1204-1217 -> DDP grad_reduce_in_fp32, param_and_grad_buffer.py:920-924)."""
    if precision == "bf16" and grads_in_16_bits:
        return 2
    return BYTES_PER_PARAM[precision][1]


def optimizer_bytes_per_param(
    precision: str, *, precision_aware: bool, master_bytes: int, exp_avg_bytes: int, exp_avg_sq_bytes: int
) -> int:
    """Adam's bytes per parameter before the distributed optimizer shards them: an fp32 master weight
    and m, v (dist_optimizer.md); with --use-precision-aware-optimizer Transformer Engine's FusedAdam
    holds m and v in --exp-avg-dtype/--exp-avg-sq-dtype and the master weight in --main-params-dtype,
    an fp32 one as the 16-bit remainder beside the bf16 weight (store_param_remainders, on by default:
    optimizer_config.py:192, distrib_optimizer.py:1005-1013)."""
    if not precision_aware:
        return BYTES_PER_PARAM[precision][2]
    master = MASTER_REMAINDER_BYTES if precision == "bf16" and master_bytes == 4 else master_bytes
    return master + exp_avg_bytes + exp_avg_sq_bytes


def fp8_weight_bytes_per_param(recipe: str, *, one_copy_serves_both: bool) -> float:
    """Bytes Transformer Engine holds per linear-layer weight element in FP8: the primary weight with
    --fp8-param-gather, else the FP8 workspace it caches across micro-batches (is_first_microbatch).
    TE quantises weights for both GEMM layouts (module/base.py reset_parameters: set_usage(rowwise=True,
    columnwise=True)); what a layout costs is the quantizer's (pytorch/csrc/quantizer.cpp create_tensor):

      delayed, tensorwise   1 byte, + 1 for the transposed copy where FP8 GEMMs take only the TN layout
                            (with_transpose = columnwise && !nvte_is_non_tn_fp8_gemm_supported(): Hopper;
                            Blackwell's GEMMs read the one copy both ways)
      mxfp8                 2·(1 + 1/32): row-wise and column-wise data, each with an E8M0 scale per 32
      blockwise             2·(1 + 4/128²): row-wise and transposed data, an fp32 scale per 128×128 block
      nvfp4                 2·(1/2 + 1/16): row-wise and column-wise E2M1 data, an E4M3 scale per 16 (TE lays out
                            the 16×16-block weight scales per 16 elements; NVFP4_ELEMENT_BYTES)
    """
    if recipe == "nvfp4":
        return 2 * NVFP4_ELEMENT_BYTES
    if recipe in FP8_WEIGHT_SCALE_BYTES:
        return 2 * (1 + FP8_WEIGHT_SCALE_BYTES[recipe])
    return 1.0 if one_copy_serves_both else 2.0


def fp8_saved_bytes_per_element(recipe: str) -> float:
    """Bytes of one element of a linear layer's input saved in FP8 for the backward: TE keeps only its
    column-wise copy for the weight gradient (module/linear.py: update_usage(rowwise_usage=False)), one
    byte, with the recipe's block scales (``FP8_BLOCK_SCALE_BYTES``); NVFP4's column-wise copy, half a byte and an
    E4M3 scale per 16 (``NVFP4_ELEMENT_BYTES``)."""
    if recipe == "nvfp4":
        return NVFP4_ELEMENT_BYTES
    return 1.0 + FP8_BLOCK_SCALE_BYTES.get(recipe, 0.0)


def param_state_bytes(
    num_params: ArrayLike,
    d: ArrayLike,
    *,
    precision: str,
    distributed_optimizer: np.ndarray,
    gradient_bytes: float | None = None,
    optimizer_bytes: float | None = None,
) -> dict[str, np.ndarray]:
    """Weights, gradients and optimizer states of ``num_params`` parameters on one GPU.

    bf16: 18 bytes per parameter, 6 + 12/d with the distributed optimizer; fp16: 20, 4 + 16/d;
    fp32: 16, 8 + 8/d (Megatron-LM, dist_optimizer.md). ``gradient_bytes`` and ``optimizer_bytes``
    replace the gradient buffer's and Adam's bytes per parameter (``gradient_bytes_per_param``,
    ``optimizer_bytes_per_param``).
    """
    w, g, o = BYTES_PER_PARAM[precision]
    g = g if gradient_bytes is None else gradient_bytes
    o = o if optimizer_bytes is None else optimizer_bytes
    n = np.asarray(num_params, dtype=float)
    shard = np.where(distributed_optimizer, np.asarray(d, dtype=float), 1.0)
    return {"weights": w * n, "gradients": g * n, "optimizer": o * n / shard}


def activation_bytes_per_layer(
    s: int,
    b: ArrayLike,
    h: int,
    a: int,
    t: ArrayLike,
    c: ArrayLike = 1,
    *,
    sequence_parallel: np.ndarray,
    recompute: np.ndarray,
    unfused_attention: bool,
    split_coeff: float = 24.0,
    replicated_coeff: float = 10.0,
    distribute_saved: bool = False,
) -> np.ndarray:
    """Activations one transformer layer keeps for the backward pass, per micro-batch, per GPU.

    Korthikanti et al. 2022, Table 2 (recompute codes 0 none, 1 selective, 2 full):
      none, TP:               sbh·(10 + 24/t + 5as/(ht))     Eq. (2)
      none, TP+SP:            sbh/t·(34 + 5as/h)             Eq. (4)
      selective, TP:          sbh·(10 + 24/t)
      selective, TP+SP:       34·sbh/t
      full:                   2·sbh (the layer input), 2·sbh/t with SP or --distribute-saved-activations
    The 5as/h term (scores, softmax, dropout of the unfused attention) vanishes with flash
    attention, which keeps no s×s tensor. ``split_coeff`` and ``replicated_coeff`` generalise the 24
    and the 10 to other layer shapes (see ``layer_activation_parts``); s is divided by c under
    context parallelism.
    """
    b, t, c = np.asarray(b), np.asarray(t), np.asarray(c)
    sbh = s * b * h / c
    scores = 5.0 * a * s / h if unfused_attention else 0.0
    kept_scores = np.where(np.asarray(recompute) == 1, 0.0, scores)
    replicated_div = np.where(sequence_parallel, t, 1)
    stored = sbh * (replicated_coeff / replicated_div + (split_coeff + kept_scores) / t)
    full_div = np.where(np.asarray(sequence_parallel) | distribute_saved, t, 1)
    return np.where(np.asarray(recompute) == 2, 2.0 * sbh / full_div, stored)


def mlp_activation_tensors(gated: bool) -> int:
    """Tensors of f channels the MLP activation reads and writes: GeLU its input and output (2),
    SwiGLU the two halves of fc1's output and its product (3). The same count gives the bytes the
    activation kernel moves and the tensors the layer keeps for the backward (Korthikanti et al.
    2022 §4.1: 4sbf for GeLU's input and output in 16 bits)."""
    return 3 if gated else 2


def layer_activation_parts(
    h: int,
    a: int,
    g: int,
    d: int,
    f: int,
    *,
    gated: bool,
    dropout: bool,
    fp8: bool = False,
    flash_attention: bool = False,
    fp8_scale_bytes: float = 0.0,
) -> dict[str, tuple[float, float]]:
    """(split over t, replicated) coefficients of sbh for the attention block and the MLP block,
    from Korthikanti et al. 2022 §4.1's list of the tensors a layer keeps (Table 2).

    Attention, split: Q 2ad/h, K and V 4gd/h, projection input 2ad/h; replicated without SP: the
    first layer norm's input 2, the QKV input 2, the second layer norm's input 2, a dropout mask 1.
    MLP, split: the activation's tensors 2·(2 or 3)·f/h; replicated: the fc1 input 2, a dropout mask 1.
    GPT shapes sum to 24 split and 10 replicated (Table 2). FP8 (Transformer Engine) keeps the
    linear layers' inputs in e = 1 byte (+ ``fp8_scale_bytes``, the block scales of MXFP8 and
    blockwise: ``fp8_saved_bytes_per_element``): the QKV and fc1 inputs and the fc2 input (f/h) save
    2 − e each. The projection's input does too with unfused attention; flash attention keeps its own
    16-bit output for its backward, so there the projection's FP8 copy (e·ad/h) comes on top of it.
    """
    mask = 1.0 if dropout else 0.0
    e = 1.0 + fp8_scale_bytes
    fp8_saving = 2.0 - e if fp8 else 0.0
    projection_fp8 = (e if flash_attention else -fp8_saving) * a * d / h if fp8 else 0.0
    attention_split = 2 * a * d / h + 4 * g * d / h + 2 * a * d / h + projection_fp8
    mlp_split = 2 * mlp_activation_tensors(gated) * f / h - fp8_saving * f / h
    return {"attention": (attention_split, 6.0 + mask - fp8_saving), "mlp": (mlp_split, 2.0 + mask - fp8_saving)}


def embedding_activation_bytes(
    s: int, b: ArrayLike, h: int, t: ArrayLike, c: ArrayLike = 1, *, sequence_parallel: np.ndarray, dropout: bool
) -> np.ndarray:
    """First stage, per micro-batch in flight: the embedding dropout mask sbh (sharded by SP;
    Korthikanti et al. 2022 §4.3, the sbhp/t term) and the int64 token ids 8sb (Megatron-LM
    theoretical_memory_usage.py, the 8sbp term)."""
    b, t, c = np.asarray(b), np.asarray(t), np.asarray(c)
    mask = (s * b * h / c) / np.where(sequence_parallel, t, 1) if dropout else 0.0
    return mask + 8.0 * s * b / c


def output_layer_activation_bytes(
    s: int, b: ArrayLike, h: int, V: ArrayLike, t: ArrayLike, c: ArrayLike = 1, *, sequence_parallel: np.ndarray
) -> np.ndarray:
    """Last stage, one micro-batch: final layer-norm input 2sbh and output-layer input 2sbh (both
    sharded by SP) and the fp32 logits 4sbV/t (Korthikanti et al. 2022 §4.3: 4sbh/t·(1 + V/h))."""
    b, t, c = np.asarray(b), np.asarray(t), np.asarray(c)
    sb = s * b / c
    return 4.0 * sb * h / np.where(sequence_parallel, t, 1) + 4.0 * sb * np.asarray(V) / t
