"""The smallest cluster a model trains on: the fewest GPUs (a power of two within a node, then whole nodes)
with a legal plan that fits.

Sizes tried: 1, 2, 4, … GPUs below one node, then whole nodes. Nothing smaller than the
weights, gradients and optimizer states spread over every GPU can fit, so the scan starts at
N ≥ P·bytes_per_param / usable HBM (18 bytes per parameter under bf16, 20 under fp16, 16 under fp32,
Megatron-LM dist_optimizer.md, all of it sharded at best). Legality is not monotone in N (the
global batch must divide by b·d, the layers by p), so the search scans a few node counts upward from
the start, then doubles a power-of-two node count (the most divisible sizes) until a plan fits and scans
every node count below it: the first size with a plan is the answer. The scan goes on for the next few
sizes that have a plan, to show what a few more nodes buy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from planner.costs.memory import BYTES_PER_PARAM
from planner.costs.process_memory import usable_bytes
from planner.errors import InfeasibleError, PinsBreakRuleError
from planner.hardware.spec import GIB
from planner.models.params import total_params
from planner.plan import Context
from planner.search import search
from planner.space.candidates import NO_PINS, Pins, expert_pin_error

MAX_GPUS = 1 << 17  # 131,072 GPUs: beyond any cluster the presets describe
NEXT_SIZES = 3
SCAN_FIRST = 8  # node counts from the bound's tried before a power of two (a search of a size with no plan is cheap)


@dataclass
class FitResult:
    lower_bound_gpus: int
    gpus_per_node: int
    sizes: list[dict]  # [{"gpus": N, "plan": plan JSON}] first = smallest
    tried: dict[int, str] = field(default_factory=dict)  # size -> why nothing fits there (below the answer)

    def to_json(self) -> dict:
        return {
            "min_gpus": self.sizes[0]["gpus"],
            "lower_bound_gpus": self.lower_bound_gpus,
            "gpus_per_node": self.gpus_per_node,
            "sizes": self.sizes,
            "tried": {str(k): v for k, v in self.tried.items()},
        }


def lower_bound_gpus(ctx: Context, memory_headroom: float | None = None) -> int:
    """GPUs needed just to hold the model's states with everything sharded (a bound, never an answer)."""
    per_param = sum(BYTES_PER_PARAM[ctx.precision])
    mem = ctx.hardware.memory
    usable = usable_bytes(mem.allocatable_bytes, memory_headroom) - mem.cuda_context_gib * GIB
    return max(1, math.ceil(total_params(ctx.model) * per_param / max(usable, 1.0)))


def sub_node_sizes(gpus_per_node: int, start_gpus: int) -> list[int]:
    """1, 2, 4, … GPUs, from the first power of two ≥ start_gpus, below one node."""
    return [n for n in (1 << k for k in range(gpus_per_node.bit_length())) if start_gpus <= n < gpus_per_node]


def min_gpus(
    ctx: Context,
    pins: Pins = NO_PINS,
    *,
    memory_headroom: float | None = None,
    next_sizes: int = NEXT_SIZES,
    step: Callable[[str], None] | None = None,
) -> FitResult:
    """The smallest size with a plan, and the next ``next_sizes`` node counts with one, each with its fastest plan."""
    if bad_ep := expert_pin_error(ctx.model, pins):
        raise InfeasibleError(bad_ep)
    g = ctx.hardware.gpus_per_node
    if why := _pins_legal_nowhere(ctx, pins):
        raise InfeasibleError(f"no GPU count has a legal plan for {ctx.model.name} on {ctx.hardware.name}: {why}")
    bound = lower_bound_gpus(ctx, memory_headroom)
    tried: dict[int, str] = {}
    plans: dict[int, dict | None] = {}
    pinned: list[int] = []  # the sizes whose pins broke a rule on their own (PinsBreakRuleError)

    def attempt(n: int) -> dict | None:
        if n not in plans:
            if step:
                step(f"trying {n:,} GPUs")
            try:
                plans[n] = search(ctx, n, pins, top=1, memory_headroom=memory_headroom, suggest_sizes=False).plans[0]
            except InfeasibleError as err:
                tried[n], plans[n] = str(err), None
                if isinstance(err, PinsBreakRuleError):
                    pinned.append(n)
        return plans[n]

    first = next((n for n in sub_node_sizes(g, bound) if attempt(n)), None)
    if first is None:
        first = _first_node_count(ctx, g, max(1, math.ceil(bound / g)), attempt, tried, pinned)
    found = [first]
    j, misses = max(first // g, 0), 0
    while len(found) <= next_sizes and misses < 64:
        j += 1
        if attempt(j * g):
            found.append(j * g)
            misses = 0
        else:
            misses += 1
    below = {n: why for n, why in sorted(tried.items()) if n < first}
    return FitResult(
        lower_bound_gpus=bound, gpus_per_node=g, sizes=[{"gpus": n, "plan": plans[n]} for n in found], tried=below
    )


def _pins_legal_nowhere(ctx: Context, pins: Pins) -> str:
    """Why a pinned tp, cp or pp is legal on no GPU count (``WorldAxes``: the heads, the NVLink domain, the layers,
    the sequence), or "". The scan reported the last size it tried, "--tp 3 does not divide 131,072 GPUs", though
    it had tried 24 GPUs, where the heads or the NVLink domain were why (qa21)."""
    from planner.space.sizes import WorldAxes, rules_broken_everywhere, tp_domain_reason

    axes = WorldAxes.of(ctx, pins)
    empty = [k for k in ("tp", "cp", "pp") if getattr(pins, k) is not None and getattr(axes, k) == ()]
    if not empty:
        return ""
    why = tp_domain_reason(ctx, pins) if "tp" in empty else None
    return (
        why
        or "; ".join(rules_broken_everywhere(ctx, pins, ctx.hardware.gpus_per_node))
        or (
            f"the pinned {' and '.join(f'--{k} {getattr(pins, k)}' for k in empty)} "
            f"{'is' if len(empty) == 1 else 'are'} not legal for this model"
        )
    )


def _first_node_count(
    ctx: Context, g: int, k0: int, attempt: Callable[[int], dict | None], tried: dict, pinned: list[int]
) -> int:
    """The fewest GPUs in whole nodes, from ``k0`` nodes, with a plan (``attempt``): the first ``SCAN_FIRST`` node
    counts up to the first power of two from k0, then powers of two doubling (the most divisible node counts: an
    upper bound on the answer) and every node count not tried below the first of them with a plan. The answer is
    the smallest node count from k0 with a plan whatever the order, and most answers are among the first node
    counts: no size above the answer is searched there (DeepSeek-V3 on B200 searched 1.5 M plans on 128 GPUs,
    above its answer, 72, before)."""
    k = 1 << (k0 - 1).bit_length()
    low = min(k, k0 + SCAN_FIRST - 1)  # every node count up to low tried
    first = next((j * g for j in range(k0, low + 1) if attempt(j * g)), None)
    while first is None:
        if attempt(k * g):
            first = next(j * g for j in range(low + 1, k + 1) if attempt(j * g))
        elif 2 * k * g > MAX_GPUS:  # the largest size's reason, or the smallest where the pins broke a rule alone
            at = min(pinned, default=k * g)
            raise InfeasibleError(
                f"no plan fits {ctx.model.name} on up to {k * g:,} GPUs of {ctx.hardware.name}; "
                f"{f'on {at:,} GPUs' if pinned else 'there'}: {tried[at]}"
            )
        else:
            low, k = k, 2 * k
    return first
