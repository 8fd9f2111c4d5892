"""Search: every candidate plan as one grid, Megatron's rules and memory as named masks, ranked.

The grid is a cartesian product of the knobs built with numpy (no Python loop over plans); the
candidates that pass every rule are evaluated in chunks by the same ``evaluate`` that explain
uses, so the process's memory stays bounded whatever the size of the space.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.costs.estimate import Context, evaluate
from planner.errors import InfeasibleError
from planner.space.grid import PlanGrid
from planner.space.rules import rule_masks
from planner.plan import RECOMPUTE_CODES, SPLIT_CODES, Recompute, StageSplit
from planner.result import plan_json

CHUNK = 65_536
MIN_CP_TOKENS = 4096  # context parallelism is searched while each rank keeps at least this many tokens
FITS_RULE = "fits in GPU memory"
TP_NODE_RULE = "tp within one NVLink domain (--max-tp to cross nodes)"


def divisors(n: int) -> np.ndarray:
    k = np.arange(1, n + 1)
    return k[n % k == 0]


@dataclass(frozen=True)
class Pins:
    """Knobs fixed by the user; None searches every legal value."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    cp: int | None = None
    ep: int | None = None
    etp: int | None = None
    fsdp: bool | None = None
    vpp: int | None = None
    micro_batch: int | None = None
    recompute: Recompute | tuple[Recompute, ...] | None = None
    sequence_parallel: bool | None = None
    distributed_optimizer: bool | None = None
    stage_split: StageSplit | None = None
    max_tp: int | None = None


@dataclass
class SearchResult:
    plans: list[dict]
    evaluated: int
    feasible: int
    rejected: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"plans": self.plans, "evaluated": self.evaluated, "feasible": self.feasible, "rejected": self.rejected}


def _cross(cols: dict[str, np.ndarray], name: str, values: np.ndarray) -> dict[str, np.ndarray]:
    """Every existing row combined with every value of a new axis."""
    n, k = len(next(iter(cols.values()))) if cols else 1, len(values)
    out = {key: np.repeat(col, k) for key, col in cols.items()}
    out[name] = np.tile(values, n)
    return out


def _keep(cols: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[mask] for k, v in cols.items()}


def candidate_grid(ctx: Context, num_gpus: int, pins: Pins) -> PlanGrid:
    """Every combination of the searched knobs for N GPUs (pins narrow an axis to one value)."""
    L, B = ctx.model.num_layers, ctx.training.global_batch

    def axis(pinned, values):
        return np.array([pinned]) if pinned is not None else np.asarray(values)

    s, model = ctx.training.seq_len, ctx.model
    cols = {"tp": axis(pins.tp, divisors(num_gpus))}
    cp_values = [c for c in divisors(num_gpus) if c == 1 or (s % (2 * c) == 0 and s // c >= MIN_CP_TOKENS)]
    cols = _cross(cols, "cp", axis(pins.cp, cp_values))
    cols = _cross(cols, "pp", axis(pins.pp, divisors(num_gpus)))
    cols = _keep(cols, num_gpus % (cols["tp"] * cols["cp"] * cols["pp"]) == 0)
    cols["dp"] = num_gpus // (cols["tp"] * cols["cp"] * cols["pp"])
    if pins.dp is not None:
        cols = _keep(cols, cols["dp"] == pins.dp)
    split_values = [pins.stage_split.code] if pins.stage_split else list(SPLIT_CODES.values())
    cols = _cross(cols, "split", np.array(split_values, dtype=np.int8))
    even = L % cols["pp"] == 0  # accounted splits only where the layers do not divide evenly
    if pins.stage_split is None:
        cols = _keep(cols, (cols["split"] == 0) | ~even)
    cols = _cross(cols, "micro_batch", axis(pins.micro_batch, divisors(B)))
    cols = _cross(cols, "vpp", axis(pins.vpp, divisors(L)))
    cols = _keep(cols, (cols["vpp"] == 1) | (cols["pp"] > 1))
    allowed = (pins.recompute,) if isinstance(pins.recompute, Recompute) else pins.recompute
    rc = [r.code for r in allowed] if allowed else list(RECOMPUTE_CODES.values())
    cols = _cross(cols, "recompute", np.array(rc, dtype=np.int8))
    sp = [pins.sequence_parallel] if pins.sequence_parallel is not None else [False, True]
    cols = _cross(cols, "sequence_parallel", np.array(sp))
    cols = _keep(cols, ~cols["sequence_parallel"] | (cols["tp"] > 1))  # SP with t = 1 is the same plan
    dopt = [pins.distributed_optimizer] if pins.distributed_optimizer is not None else [False, True]
    cols = _cross(cols, "distributed_optimizer", np.array(dopt))
    cols = _keep(cols, ~cols["distributed_optimizer"] | (cols["dp"] > 1) | (pins.distributed_optimizer is True))
    fsdp = [pins.fsdp] if pins.fsdp is not None else [False, True]
    cols = _cross(cols, "fsdp", np.array(fsdp))
    # Megatron FSDP runs on the distributed optimizer (arguments.py: v1 turns it on) and needs d·c > 1
    cols = _keep(cols, ~cols["fsdp"] | (cols["distributed_optimizer"] & (cols["dp"] * cols["cp"] > 1) & (cols["pp"] == 1)))
    if model.is_moe:
        cols = _cross(cols, "ep", axis(pins.ep, [e for e in divisors(model.num_experts) if num_gpus % e == 0]))
        if pins.etp is None:  # expert TP: Megatron's default (= tp) or none
            cols = _cross(cols, "etp_is_tp", np.array([False, True]))
            cols = _keep(cols, ~(cols["etp_is_tp"] & (cols["tp"] == 1)))  # the same plan twice
            cols["etp"] = np.where(cols.pop("etp_is_tp"), cols["tp"], 1)
        else:
            cols["etp"] = np.full(len(cols["tp"]), pins.etp)
    else:
        cols["ep"] = np.full(len(cols["tp"]), pins.ep or 1)
        cols["etp"] = cols["tp"] if pins.etp is None else np.full(len(cols["tp"]), pins.etp)
    n = len(cols["tp"])
    zeros = np.zeros(n, dtype=np.int64)
    return PlanGrid(tp=cols["tp"], pp=cols["pp"], dp=cols["dp"], cp=cols["cp"], ep=cols["ep"], etp=cols["etp"],
                    vpp=cols["vpp"], micro_batch=cols["micro_batch"], sequence_parallel=cols["sequence_parallel"],
                    recompute=cols["recompute"], distributed_optimizer=cols["distributed_optimizer"], fsdp=cols["fsdp"],
                    split=cols["split"], first_layers=zeros, last_layers=zeros)


def search(ctx: Context, num_gpus: int, pins: Pins = Pins(), *, top: int = 10, sort: str = "time",
           memory_headroom: float = 0.0) -> SearchResult:
    """Rank every legal plan that fits by iteration time (or by peak memory)."""
    grid = candidate_grid(ctx, num_gpus, pins)
    masks = rule_masks(grid, ctx.model, ctx.training, ctx.options, num_gpus)
    masks[TP_NODE_RULE] = grid.tp <= (pins.max_tp or ctx.hardware.gpus_per_node)
    legal = np.ones(len(grid), dtype=bool)
    first_broken = np.full(len(grid), -1)
    names = list(masks)
    for k, name in enumerate(names):
        newly = legal & ~masks[name]
        first_broken[newly] = k
        legal &= masks[name]
    capacity = ctx.hardware.gpu.hbm_bytes * (1 - memory_headroom)

    idx = np.flatnonzero(legal)
    iteration = np.empty(len(idx))
    peak = np.empty(len(idx))
    with np.errstate(divide="ignore", invalid="ignore"):
        for start in range(0, len(idx), CHUNK):
            part = idx[start:start + CHUNK]
            ev = evaluate(grid.take(part), ctx)
            iteration[start:start + CHUNK] = ev.iteration_s
            peak[start:start + CHUNK] = ev.peak_memory_bytes
    fits = peak <= capacity
    rejected = {names[k]: int(np.sum(first_broken == k)) for k in range(len(names)) if np.any(first_broken == k)}
    if np.any(~fits):
        rejected[FITS_RULE] = int(np.sum(~fits))
    if not np.any(fits):
        raise InfeasibleError(_nothing_fits(ctx, grid, idx, peak, capacity, rejected))

    ok = idx[fits]
    key = iteration[fits] if sort == "time" else peak[fits]
    second = peak[fits] if sort == "time" else iteration[fits]
    order = np.lexsort((ok, second, key))[:top]
    best = grid.take(ok[order])
    with np.errstate(divide="ignore", invalid="ignore"):
        ev = evaluate(best, ctx)
    plans = [plan_json(ctx, num_gpus, best, ev, i, [], memory_headroom) for i in range(len(best))]
    for rank, pj in enumerate(plans, 1):
        pj["rank"] = rank
    return SearchResult(plans=plans, evaluated=len(grid), feasible=int(np.sum(fits)), rejected=rejected)


def _nothing_fits(ctx: Context, grid: PlanGrid, idx: np.ndarray, peak: np.ndarray, capacity: float,
                  rejected: dict[str, int]) -> str:
    if len(idx) == 0:
        reasons = ", ".join(f"{name} ({count})" for name, count in sorted(rejected.items(), key=lambda kv: -kv[1]))
        return f"no legal plan for {ctx.model.name} on these GPUs; rejected by: {reasons}"
    i = idx[np.argmin(peak)]
    p = grid.plan(int(i))
    gib = 2**30
    return (f"every legal plan needs more than {capacity / gib:.1f} GiB per GPU; the smallest, TP {p.tp} PP {p.pp} "
            f"DP {p.dp} VPP {p.vpp} micro-batch {p.micro_batch} recompute {p.recompute.value} "
            f"SP {'on' if p.sequence_parallel else 'off'} distributed optimizer {'on' if p.distributed_optimizer else 'off'}, "
            f"needs {np.min(peak) / gib:.1f} GiB; try more GPUs, a larger-memory --hardware or a smaller --global-batch")
