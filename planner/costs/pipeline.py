"""The pipeline schedules' closed forms: micro-batches in flight, exposed point-to-point transfers,
the bubble, and how per-micro-batch stage times compose into an iteration.

Megatron-LM's two schedules (megatron/core/pipeline_parallel/schedules.py): 1F1B
(``forward_backward_pipelining_without_interleaving``) and the interleaved schedule
(``forward_backward_pipelining_with_interleaving``), Narayanan et al. 2021 §2.2: the 1F1B bubble is
(p − 1)·(t_f + t_b), the interleaved one that divided by the chunks per stage v; the steady state
runs m micro-batches at the pace of the slowest stage. ``planner.timeline`` simulates the same
schedules op by op.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def stage_time_sum(
    first: ArrayLike, middle: ArrayLike, last: ArrayLike, p: ArrayLike, num_middle: ArrayLike
) -> np.ndarray:
    """Σ over all p stages of a per-micro-batch time, from the first, a middle and the last stage."""
    p = np.asarray(p)
    return np.where(p > 1, np.asarray(first) + np.asarray(num_middle) * middle + last, first)


def bubble_time_s(stage_sum: ArrayLike, slowest: ArrayLike, vpp: ArrayLike) -> np.ndarray:
    """Pipeline fill and drain: the other stages' per-micro-batch time, divided by the chunks per stage.

    Equal stages give (p − 1)·(t_f + t_b)/v, Narayanan et al. 2021 §2.2.1-2.2.2; unequal ones
    (the last stage also runs the logits and loss) fill and drain at their own pace.
    """
    return (np.asarray(stage_sum) - np.asarray(slowest)) / np.asarray(vpp)


def in_flight_microbatches(
    p: ArrayLike, m: ArrayLike, vpp: ArrayLike, i: ArrayLike, *, a2a_overlap: ArrayLike = False, layers: ArrayLike = 1
) -> np.ndarray:
    """Micro-batches whose activations stage i holds at its peak, in units of the whole stage.

    1F1B (vpp = 1): min(p − i, m) (Megatron schedules.py: warm-up p − i − 1, plus one).
    Interleaved: min(m·vpp, 2(p − i − 1) + (vpp − 1)·p + 1) chunks of 1/vpp of the stage; for
    stage 0 that is p·(1 + (p − 1)/(p·vpp)) (Korthikanti et al. 2022, §4.2.3).
    With --overlap-moe-expert-parallel-comm (``a2a_overlap``) the interleaved warm-up runs one more
    forward chunk (schedules.py get_pp_rank_microbatches @ d98e8a64: "one extra micro-batch forward step
    before the 1f1b stages"); without pipelining each combined step runs the next micro-batch's forward
    layer by layer beside this one's backward (combined_1f1b.py), so one more layer of the ``layers``
    the stage holds is alive at the peak: 1 + 1/layers.
    """
    p, m, vpp, i = (np.asarray(x) for x in (p, m, vpp, i))
    overlap = np.asarray(a2a_overlap, dtype=bool)
    one_f_one_b = np.minimum(p - i, m) + np.where(overlap & (p == 1) & (m > 1), 1.0 / np.maximum(layers, 1), 0.0)
    chunks = np.minimum(m * vpp, 2 * (p - i - 1) + (vpp - 1) * p + 1 + overlap)
    return np.where(vpp > 1, chunks / vpp, one_f_one_b).astype(float)


def exposed_p2p_transfers(p: ArrayLike, m: ArrayLike, vpp: ArrayLike, *, overlap_p2p: bool) -> np.ndarray:
    """Transfers on the critical path of one iteration.

    1F1B runs p2p on the critical path (Megatron arguments.py:1009-1013): each of the m
    micro-batches waits for one forward and one backward transfer, and filling and draining the
    pipeline adds p − 1 of each: 2(m + p − 1). The interleaved schedule sends vpp times as much
    (Narayanan et al. 2021 §2.2.2): 2(m·vpp + p − 1); with its default p2p overlap only the fill
    and drain stay exposed: 2(p − 1). None with p = 1.
    """
    p, m, vpp = (np.asarray(x, dtype=float) for x in (p, m, vpp))
    interleaved = 2 * (p - 1) if overlap_p2p else 2 * (m * vpp + p - 1)
    transfers = np.where(vpp > 1, interleaved, 2 * (m + p - 1))
    return np.where(p > 1, transfers, 0.0)
