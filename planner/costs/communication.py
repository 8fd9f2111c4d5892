"""Communication time per GPU: tensor-parallel collectives, pipeline point-to-point, data-parallel
gradient reduction, each on the network tier its group spans (planner.hardware.collectives).

Volumes: Narayanan et al. 2021 §3.2 and §4.1; Korthikanti et al. 2022 §4.2.2 (sequence parallel).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from planner.hardware.collectives import Link, all_gather_time_s, all_reduce_time_s, p2p_time_s


def activation_message_bytes(b: ArrayLike, s: int, h: int, c: ArrayLike, *, activation_bytes: int) -> np.ndarray:
    """The b·s·h activation tensor of one micro-batch on one context-parallel rank, in bytes: ε·b·s·h/c
    (Narayanan et al. 2021 §4.1), the message of the TP collectives and of the pipeline's sends."""
    return activation_bytes * np.asarray(b) * s * h / np.asarray(c)


def tp_layer_comm_time_s(
    message_bytes: ArrayLike, t: ArrayLike, link: Link, *, sequence_parallel: np.ndarray
) -> np.ndarray:
    """Forward TP communication of one layer for one micro-batch (the backward has as much).

    Without SP: 2 all-reduces of b·s·h elements (after attention and after the MLP); with SP: 2
    all-gathers + 2 reduce-scatters of the same size, the same bandwidth as 2 all-reduces since a
    ring all-reduce is a reduce-scatter plus an all-gather (Narayanan et al. 2021 §4.1: 8bsh(t−1)/t
    per layer forward+backward; Korthikanti et al. 2022 §4.2.2).
    """
    message = np.asarray(message_bytes)
    t = np.asarray(t)
    with_sp = 2 * (all_gather_time_s(t, message, link) * 2)
    without = 2 * all_reduce_time_s(t, message, link)
    return np.where(sequence_parallel, with_sp, without)


def pp_p2p_time_s(
    message_bytes: ArrayLike,
    t: ArrayLike,
    link: Link,
    tp_link: Link,
    *,
    sequence_parallel: np.ndarray,
    scatter_gather: bool,
) -> np.ndarray:
    """One point-to-point transfer between neighbouring stages, per micro-batch and direction.

    b·s·h elements (Narayanan et al. 2021 §4.1); each TP rank sends its own 1/t with SP (the tensor
    is [s/(c·t), b, h], Megatron schedules.py). The 2021 scatter/gather optimisation sent 1/t per
    rank over the t NICs and all-gathered it on NVLink (Narayanan et al. 2021 §4.1).
    """
    t = np.asarray(t)
    full = np.asarray(message_bytes)
    sharded = p2p_time_s(full / t, link)
    gathered = sharded + all_gather_time_s(t, full, tp_link) if scatter_gather else p2p_time_s(full, link)
    return np.where(sequence_parallel, sharded, gathered)


def dp_grad_sync_time_s(
    num_params: ArrayLike,
    d: ArrayLike,
    link: Link,
    *,
    grad_bytes: int,
    param_bytes: int,
    distributed_optimizer: np.ndarray,
    overlap_param_gather: bool,
) -> np.ndarray:
    """Data-parallel gradient synchronisation of one stage's parameters.

    Plain DDP: all-reduce of the gradients in the dtype Megatron reduces them in (fp32 main grads
    under bf16 unless --grad-reduce-in-bf16; 16-bit under fp16). Distributed optimizer: a
    reduce-scatter of the gradients, then an all-gather of the updated 16-bit parameters, which
    --overlap-param-gather hides behind the next forward (Megatron-LM
    megatron/core/distributed/param_and_grad_buffer.py).
    """
    n = np.asarray(num_params, dtype=float)
    all_reduce = all_reduce_time_s(d, grad_bytes * n, link)
    gather = 0.0 if overlap_param_gather else all_gather_time_s(d, param_bytes * n, link)
    sharded = all_gather_time_s(d, grad_bytes * n, link) + gather
    return np.where(distributed_optimizer, sharded, all_reduce)
