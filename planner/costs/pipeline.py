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

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
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


def microbatch_group(p: ArrayLike, mb_group: ArrayLike) -> np.ndarray:
    """G, the micro-batches each virtual stage runs at a time: --microbatch-group-size-per-virtual-
    pipeline-stage, or Megatron's default pp (model_parallel_config.py __post_init__ @ d98e8a64) where 0."""
    mb_group = np.asarray(mb_group)
    return np.where(mb_group > 0, mb_group, np.asarray(p))


def microbatch_group_legal(p: ArrayLike, m: ArrayLike, G: ArrayLike) -> np.ndarray:
    """Megatron-LM's interleaved schedule takes a group size G with p ≤ G ≤ m whose last group is whole or
    at least p micro-batches: m mod G = 0 or m mod G ≥ p (schedules.py
    forward_backward_pipelining_with_interleaving @ d98e8a64: "should range in [PP, M]" and "the remainder
    of M ... divided by N ... should be 0, or larger than or equal to the pipeline-parallel size").
    With G = p (the default) that is m a multiple of p."""
    p, m, G = (np.asarray(x) for x in (p, m, G))
    whole = np.floor(m) == m
    rem = np.mod(m, np.maximum(G, 1))
    return whole & (G >= p) & (G <= m) & ((rem == 0) | (rem >= p))


def smallest_microbatch_group(p: ArrayLike, m: ArrayLike) -> np.ndarray:
    """The smallest legal G (``microbatch_group_legal``) for each plan, 0 where m < p or m is not whole
    (none is). G = m is
    always legal when m ≥ p, so one exists; a larger G only keeps more micro-batches in warm-up
    (``in_flight_microbatches``) at the same bubble, so search takes the smallest."""
    p, m = np.broadcast_arrays(np.asarray(p, dtype=np.int64), np.asarray(m, dtype=float))
    G = np.where((m >= p) & (np.floor(m) == m), p, 0).astype(np.int64)  # a fractional m has none
    todo, step = np.flatnonzero((G > 0) & ~microbatch_group_legal(p, m, G)), 1
    while len(todo):  # the next ``step`` sizes of each open plan at once, the step doubling each round
        legal = microbatch_group_legal(p[todo, None], m[todo, None], G[todo, None] + 1 + np.arange(step))
        found = legal.any(axis=1)
        G[todo] += np.where(found, 1 + legal.argmax(axis=1), step)
        todo, step = todo[~found], 2 * step
    return G


def in_flight_microbatches(
    p: ArrayLike,
    m: ArrayLike,
    vpp: ArrayLike,
    i: ArrayLike,
    *,
    a2a_overlap: ArrayLike = False,
    layers: ArrayLike = 1,
    G: ArrayLike | None = None,
) -> np.ndarray:
    """Micro-batches whose activations stage i holds at its peak, in units of the whole stage.

    1F1B (vpp = 1): min(p − i, m) (Megatron schedules.py: warm-up p − i − 1, plus one).
    Interleaved: min(m·vpp, 2(p − i − 1) + (vpp − 1)·G + 1) chunks of 1/vpp of the stage, G the
    micro-batch group (``microbatch_group``; default p: schedules.py get_pp_rank_microbatches warm-up
    2(p − i − 1) + (vpp − 1)·G); for stage 0 and G = p that is p·(1 + (p − 1)/(p·vpp)) (Korthikanti et
    al. 2022, §4.2.3).
    With --overlap-moe-expert-parallel-comm (``a2a_overlap``) the interleaved warm-up runs one more
    forward chunk (schedules.py get_pp_rank_microbatches @ d98e8a64: "one extra micro-batch forward step
    before the 1f1b stages"); without pipelining each combined step runs the next micro-batch's forward
    layer by layer beside this one's backward (combined_1f1b.py), so one more layer of the ``layers``
    the stage holds is alive at the peak: 1 + 1/layers.
    """
    # every count in floats (exact integers): a stage's (N, S) arrays are then never cast element by element
    p, m, vpp, i = (np.asarray(x, dtype=float) for x in (p, m, vpp, i))
    G = p if G is None else np.asarray(G, dtype=float)
    overlap = np.asarray(a2a_overlap, dtype=bool)
    ahead = p - i  # stages from i to the last
    one_f_one_b = np.minimum(ahead, m)
    if overlap.any():  # no plan overlaps the all-to-all: nothing to add
        one_f_one_b = one_f_one_b + np.where(overlap & (p == 1) & (m > 1), 1.0 / np.maximum(layers, 1), 0.0)
    interleaved = vpp > 1
    if not interleaved.any():
        return one_f_one_b
    chunks = np.minimum(m * vpp, 2 * ahead + ((vpp - 1) * G - 1 + overlap))  # 2(p − i − 1) + (v − 1)G + 1
    return np.where(interleaved, chunks / vpp, one_f_one_b)


def interleaved_wrap_wait_s(
    p2p_s: ArrayLike, p: ArrayLike, vpp: ArrayLike, slack_fwd_s: ArrayLike, slack_bwd_s: ArrayLike
) -> np.ndarray:
    """What the interleaved schedule's fill and drain wait for transfers beyond the 2(p − 1) of
    ``exposed_p2p_transfers``: W = (v − 1)·[max(0, p·d − σ_f) + max(0, p·d − σ_b)].

    With the default micro-batch group G = p the first stage runs chunk k of micro-batches 0..p − 1,
    then needs micro-batch 0's chunk k from the last stage: it went round all p stages, p transfers of
    d, while stage 0 ran p chunks of its own. So each of the v − 1 wraps of the warm-up waits p·d, less
    what the other stages' chunks take less than the slowest one's (their slack,
    σ_f = Σ_{i≠s}(F_s − F_i)/v over the per-micro-batch forwards F, the slowest stage s), and the
    cool-down's wraps likewise with the backwards (σ_b). A micro-batch group G > p
    (--microbatch-group-size-per-virtual-pipeline-stage) gives stage 0 G − p more chunks before each
    wrap: σ_f grows by (G − p)·F_s/v, σ_b by (G − p)·B_s/v. Megatron-LM schedules.py
    forward_backward_pipelining_with_interleaving (get_schedule_table: groups of G micro-batches per
    chunk). Exact against the op-by-op schedule (``planner.timeline.simulate``) on the validation
    plans (tests/test_pipeline_wraps.py); with even stages the fill and drain expose 2(p·v − 1)
    transfers in all. 0 with vpp 1 or p 1.
    """
    d, p, v = (np.asarray(x, dtype=float) for x in (p2p_s, p, vpp))
    wait = (v - 1) * (
        np.maximum(p * d - np.asarray(slack_fwd_s), 0.0) + np.maximum(p * d - np.asarray(slack_bwd_s), 0.0)
    )
    return np.where((p > 1) & (v > 1), wait, 0.0)


def exposed_p2p_transfers(p: ArrayLike, m: ArrayLike, vpp: ArrayLike, *, overlap_p2p: bool) -> np.ndarray:
    """Transfers on the critical path of one iteration.

    1F1B runs p2p on the critical path (Megatron arguments.py:1009-1013): each of the m
    micro-batches waits for one forward and one backward transfer, and filling and draining the
    pipeline adds p − 1 of each: 2(m + p − 1). The interleaved schedule sends vpp times as much
    (Narayanan et al. 2021 §2.2.2): 2(m·vpp + p − 1); with its default p2p overlap only the fill
    and drain stay exposed: 2(p − 1), and the waits at the fill's and drain's wraps from the last stage
    to the first (``interleaved_wrap_wait_s``). None with p = 1.
    """
    p, m, vpp = (np.asarray(x, dtype=float) for x in (p, m, vpp))
    interleaved = 2 * (p - 1) if overlap_p2p else 2 * (m * vpp + p - 1)
    transfers = np.where(vpp > 1, interleaved, 2 * (m + p - 1))
    return np.where(p > 1, transfers, 0.0)
