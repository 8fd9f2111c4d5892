"""What a series of runs of one plan at different micro-batch counts says about a step (docs/cost-model.md §10.1).

A synchronous step of m micro-batches takes T = a·m + b: a the time a micro-batch adds (its forward and backward
on the slowest stage, the steady state of the pipeline), b what the step costs beyond them (the pipeline's fill and
drain, the data-parallel synchronisation left exposed, the optimizer). Runs of one plan - the same model, GPU,
TP, PP, CP, interleaving and micro-batch size under one release - at two or more micro-batch counts measure a and
b (a least-squares line through their (m, T) points); the same line through the model's predicted steps says where
the model puts them. MLPerf's H100 series (Llama 3.1 405B on 512-8,192 GPUs, GPT-3 175B on 1,536 and 3,072) measure
a smaller a and a larger b than the model; the same 405B plan on GB200 does not (``scripts/series_split.py``)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np


def step_split_s(microbatches, steps_s) -> tuple[float, float]:
    """(a, b) of the least-squares line T = a·m + b through the points (m_i, T_i): the seconds a micro-batch
    adds and the seconds of the step beyond them. Two points: a = (T₂ − T₁)/(m₂ − m₁), b = T₁ − a·m₁."""
    m, t = np.asarray(microbatches, dtype=float), np.asarray(steps_s, dtype=float)
    if m.size < 2 or np.ptp(m) == 0:
        raise ValueError("a split needs two or more micro-batch counts")
    a, b = np.polyfit(m, t, 1)
    return float(a), float(b)


@dataclass(frozen=True)
class SeriesSplit:
    key: str  # model, hardware and plan of the series
    run_ids: tuple[str, ...]
    microbatches: tuple[int, ...]
    measured_s: tuple[float, float]  # (a, b) through the published steps
    predicted_s: tuple[float, float]  # (a, b) through the predicted steps
    errors_pct: tuple[float, ...]  # predicted over published, per run, in the order of microbatches


def series_splits(rows: list[tuple[str, str, int, float, float]]) -> list[SeriesSplit]:
    """The split of every series among ``rows`` = (run id, series key, micro-batches a step, published step s,
    predicted step s) with two or more micro-batch counts, measured and predicted."""
    groups: dict[str, list] = defaultdict(list)
    for rid, key, m, pub, pred in rows:
        groups[key].append((m, rid, pub, pred))
    out = []
    for key, points in sorted(groups.items()):
        points.sort()
        ms = [p[0] for p in points]
        if len(set(ms)) < 2:
            continue
        out.append(
            SeriesSplit(
                key,
                tuple(p[1] for p in points),
                tuple(ms),
                step_split_s(ms, [p[2] for p in points]),
                step_split_s(ms, [p[3] for p in points]),
                tuple(100 * (p[3] / p[2] - 1) for p in points),
            )
        )
    return out
