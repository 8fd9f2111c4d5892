"""Which GPU counts have a legal plan at all, for errors that say what is allowed.

Legality does not need the costs: the rules of ``planner.space.rules`` and the NVLink-domain rule
over a reduced grid (no interleaving, micro-batch 1, one recomputation: the most permissive
values of the knobs the user left free) say whether any plan of a size is legal, in about a
millisecond per size.
"""

from __future__ import annotations

import numpy as np

from planner.plan import Context, Recompute
from planner.space.candidates import Pins, candidate_grid, nvlink_domain_gpus, tp_in_domain
from planner.space.rules import rule_masks

MAX_SCAN = 4096  # sizes tried on each side of the one asked for


def _permissive(pins: Pins) -> Pins:
    """The pins with the free knobs that only ever add rules set to their most permissive value."""
    from dataclasses import replace

    return replace(
        pins,
        vpp=pins.vpp or 1,
        micro_batch=pins.micro_batch or 1,
        recompute=pins.recompute if pins.recompute is not None else Recompute.NONE,
    )


def has_legal_plan(ctx: Context, num_gpus: int, pins: Pins) -> bool:
    """Whether any plan on ``num_gpus`` GPUs keeps every Megatron-LM rule and the NVLink-domain rule."""
    grid = candidate_grid(ctx, num_gpus, _permissive(pins))
    if len(grid) == 0:
        return False
    masks = rule_masks(grid, ctx.model, ctx.training, ctx.options, num_gpus)
    in_domain = tp_in_domain(grid.tp, nvlink_domain_gpus(ctx.hardware), pins.max_tp)
    ok = np.all(np.array(list(masks.values())), axis=0) & in_domain
    return bool(np.any(ok))


def nearest_legal_sizes(ctx: Context, num_gpus: int, pins: Pins) -> list[int]:
    """The nearest GPU count below and the nearest above ``num_gpus`` with a legal plan (either may be missing)."""
    below = next(
        (n for n in range(num_gpus - 1, max(num_gpus - MAX_SCAN, 0), -1) if has_legal_plan(ctx, n, pins)), None
    )
    above = next((n for n in range(num_gpus + 1, num_gpus + MAX_SCAN) if has_legal_plan(ctx, n, pins)), None)
    return [n for n in (below, above) if n is not None]


def empty_grid_reason(num_gpus: int, pins: Pins) -> str:
    """Why no candidate at all exists: the pinned sizes cannot multiply to the world size."""
    pinned = {k: getattr(pins, k) for k in ("tp", "pp", "cp", "dp") if getattr(pins, k) is not None}
    bad = [f"--{k} {v}" for k, v in pinned.items() if num_gpus % v]
    product = int(np.prod(list(pinned.values()))) if pinned else 1
    if bad:
        return f"{' and '.join(bad)} {'does' if len(bad) == 1 else 'do'} not divide {num_gpus:,} GPUs"
    if num_gpus % product:
        return f"{' × '.join(f'--{k} {v}' for k, v in pinned.items())} = {product} does not divide {num_gpus:,} GPUs"
    return f"no tp·cp·pp·dp with {', '.join(f'--{k} {v}' for k, v in pinned.items())} multiplies to {num_gpus:,} GPUs"


def rules_broken_everywhere(ctx: Context, pins: Pins, gpus_per_node: int) -> list[str]:
    """The rules (with their messages) that every plan with these pins breaks whatever the GPU count,
    judged on a world the pins divide: why no size has a legal plan."""
    from math import lcm

    from planner.space.rules import RULES, RuleInputs

    sizes = [v for v in (pins.tp, pins.pp, pins.cp, pins.dp) if v is not None]
    n = lcm(*sizes, gpus_per_node) if sizes else gpus_per_node
    grid = candidate_grid(ctx, n, _permissive(pins))
    if len(grid) == 0:
        return []
    r = RuleInputs(grid, ctx.model, ctx.training, ctx.options, n)
    out = []
    for rule in RULES:
        holds = np.broadcast_to(rule.holds(r), (len(grid),))
        if not holds.any():
            out.append(f"{rule.name}: {rule.message(r.one(0))}")
    return out
