"""Pipeline schedule: how per-micro-batch stage times compose into an iteration.

Narayanan et al. 2021 §2.2: the 1F1B bubble is (p − 1)·(t_f + t_b), the interleaved one that
divided by the chunks per stage v; the steady state runs m micro-batches at the pace of the
slowest stage.
"""

from __future__ import annotations

import numpy as np

ArrayLike = np.ndarray | int | float


def stage_time_sum(first: ArrayLike, middle: ArrayLike, last: ArrayLike, p: ArrayLike, num_middle: ArrayLike) -> np.ndarray:
    """Σ over all p stages of a per-micro-batch time, from the first, a middle and the last stage."""
    p = np.asarray(p)
    return np.where(p > 1, np.asarray(first) + np.asarray(num_middle) * middle + last, first)


def bubble_time_s(stage_sum: ArrayLike, slowest: ArrayLike, vpp: ArrayLike) -> np.ndarray:
    """Pipeline fill and drain: the other stages' per-micro-batch time, divided by the chunks per stage.

    Equal stages give (p − 1)·(t_f + t_b)/v, Narayanan et al. 2021 §2.2.1-2.2.2; unequal ones
    (the last stage also runs the logits and loss) fill and drain at their own pace.
    """
    return (np.asarray(stage_sum) - np.asarray(slowest)) / np.asarray(vpp)


def bubble_fraction(p: ArrayLike, m: ArrayLike, vpp: ArrayLike = 1) -> np.ndarray:
    """Ideal bubble over ideal compute time: (p − 1)/(v·m) (Narayanan et al. 2021 §2.2)."""
    return (np.asarray(p) - 1) / (np.asarray(vpp) * np.asarray(m))
