"""Scaling sweep: the best plan at each cluster size, with its throughput and scaling efficiency.

Scaling efficiency is throughput per GPU relative to the smallest size that has a plan:
(tokens/s ÷ N) / (tokens/s₀ ÷ N₀) — 100 % is linear scaling. Every size is an independent search
(``planner.search.search``) with the same pins and options, so a size can change the plan.
"""

from __future__ import annotations

from collections.abc import Callable

from planner.errors import InfeasibleError, PlannerError
from planner.plan import Context
from planner.search import search
from planner.space.candidates import NO_PINS, Pins
from planner.space.sizes import WorldAxes
from planner.whole import LARGEST, NotWhole, whole_number

MAX_SWEEP_SIZES = 32


def parse_gpu_sizes(text: str) -> list[int]:
    """``64,128,256`` (a list) or ``64:4096`` (doubling from the first to at most the second)."""
    text = text.strip()
    if text.count(":") == 1:
        lo, hi = (_size(text, part) for part in text.split(":"))
        if lo < 1 or hi < lo:
            raise PlannerError(f"--gpus {text!r}: a range LO:HI needs 1 ≤ LO ≤ HI (doubling from LO), e.g. 64:4096")
        sizes = [lo]
        while sizes[-1] * 2 <= hi:
            sizes.append(sizes[-1] * 2)
    else:
        sizes = sorted(set(_listed(text)))
        if any(n < 1 for n in sizes):
            raise PlannerError(f"--gpus {text!r}: every size must be a positive integer")
    if len(sizes) > MAX_SWEEP_SIZES:
        raise PlannerError(f"--gpus {text!r} gives {len(sizes)} sizes; at most {MAX_SWEEP_SIZES} per sweep")
    return sizes


def _listed(text: str) -> list[int]:
    """The sizes of a list ``64,128,256`` (a trailing comma allowed), each once as given."""
    parts = text.split(",")
    if parts[-1].strip() == "" and len(parts) > 1:
        parts.pop()
    return [_size(text, part) for part in parts]


def _size(text: str, part: str) -> int:
    """One size of ``--gpus text``, in the digits 0-9 (``planner.whole``) and at most 2³¹−1."""
    try:
        n = whole_number(part)
    except NotWhole as err:
        if err.read is None:
            raise PlannerError(
                f"--gpus {text!r}: expected a list like 64,128,256 or a doubling range like 64:4096"
            ) from None
        raise PlannerError(f"--gpus {text!r}: {err}") from None
    if n > LARGEST:
        raise PlannerError(f"--gpus {text!r}: {n} is not in the range 1<=x<={LARGEST}")
    return n


def repeated_sizes(text: str) -> list[int]:
    """The sizes a list names more than once (``64,128,64`` gives [64]); ``parse_gpu_sizes`` sweeps each once."""
    try:
        given = [] if ":" in text else _listed(text.strip())
    except PlannerError:
        return []
    return sorted({n for n in given if given.count(n) > 1})


def _best_at(
    ctx: Context, n: int, pins: Pins, memory_headroom, skip_infeasible: bool
) -> tuple[dict | None, str | None]:
    """(the fastest plan on ``n`` GPUs, None) or, with ``skip_infeasible``, (None, why there is none)."""
    try:
        return search(ctx, n, pins, top=1, memory_headroom=memory_headroom).plans[0], None
    except InfeasibleError as err:
        if not skip_infeasible:
            raise InfeasibleError(
                f"no plan on {n} GPUs: {err} (pass --skip-infeasible to list such sizes as rows)"
            ) from err
        return None, str(err)


def sweep(
    ctx: Context,
    sizes: list[int],
    pins: Pins = NO_PINS,
    *,
    memory_headroom: float | None = None,
    skip_infeasible: bool = False,
    step: Callable[[str], None] | None = None,
) -> dict:
    """The fastest plan at every size. A size with no legal plan that fits raises InfeasibleError
    naming it, unless ``skip_infeasible``: then its row has ``plan: None`` and the reason. ``step`` is
    called after each size (a progress bar)."""
    rows: list[dict] = []
    if not skip_infeasible:  # a size no tp·cp·pp·dp makes stops the sweep: say so before searching the others
        axes = WorldAxes.of(ctx, pins)
        for n in (n for n in sizes if not axes.allows(n)):
            _best_at(ctx, n, pins, memory_headroom, skip_infeasible)
    for n in sizes:
        plan, no_plan = _best_at(ctx, n, pins, memory_headroom, skip_infeasible)
        if step and plan:
            step(f"searched {n:,} GPUs")
        rows.append({"gpus": n, "plan": plan, "no_plan": no_plan, "scaling_efficiency": None})
    planned = [r for r in rows if r["plan"]]
    if not planned:
        raise InfeasibleError(
            f"no plan at any size of the sweep ({', '.join(str(n) for n in sizes)} GPUs); "
            f"the first: {rows[0]['no_plan']}"
        )
    base = planned[0]
    per_gpu0 = base["plan"]["estimate"]["tokens_per_s"] / base["gpus"]
    for r in planned:
        r["scaling_efficiency"] = r["plan"]["estimate"]["tokens_per_s"] / r["gpus"] / per_gpu0
    return {
        "model": ctx.model.name,
        "hardware": ctx.hardware.name,
        "train_tokens": ctx.training.train_tokens,
        "baseline_gpus": base["gpus"],
        "rows": rows,
    }
