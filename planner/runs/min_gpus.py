"""The smallest cluster a model trains on: the fewest GPUs, in whole nodes, with a legal plan that fits.

Sizes tried: 1, 2, 4, … GPUs below one node, then whole nodes. Nothing smaller than the
weights, gradients and optimizer states spread over every GPU can fit, so the scan starts at
N ≥ P·bytes_per_param / usable HBM (18 bytes per parameter under bf16, 20 under fp16, 16 under fp32,
Megatron-LM dist_optimizer.md, all of it sharded at best). Legality is not monotone in N (the
global batch must divide by b·d, the layers by p), so the search doubles a power-of-two node count
(the most divisible sizes) until a plan fits and then scans every node count below that bound
upward from the start: the first size
with a plan is the answer. The scan goes on for the next few sizes that have a plan, to show what
a few more nodes buy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from planner.costs.memory import BYTES_PER_PARAM
from planner.costs.process_memory import usable_bytes
from planner.errors import InfeasibleError
from planner.hardware.spec import GIB
from planner.models.params import total_params
from planner.plan import Context
from planner.search import search
from planner.space.candidates import NO_PINS, Pins, expert_pin_error

MAX_GPUS = 1 << 17  # 131,072 GPUs: beyond any cluster the presets describe
NEXT_SIZES = 3


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
    bound = lower_bound_gpus(ctx, memory_headroom)
    tried: dict[int, str] = {}
    plans: dict[int, dict | None] = {}

    def attempt(n: int) -> dict | None:
        if n not in plans:
            if step:
                step(f"trying {n:,} GPUs")
            try:
                plans[n] = search(ctx, n, pins, top=1, memory_headroom=memory_headroom, suggest_sizes=False).plans[0]
            except InfeasibleError as err:
                tried[n], plans[n] = str(err), None
        return plans[n]

    first = next((n for n in sub_node_sizes(g, bound) if attempt(n)), None)
    if first is None:
        k0 = max(1, math.ceil(bound / g))
        k = 1 << (k0 - 1).bit_length()  # powers of two from k0 up: the most divisible node counts
        while attempt(k * g) is None:  # doubling: an upper bound on the answer
            if 2 * k * g > MAX_GPUS:
                raise InfeasibleError(
                    f"no plan fits {ctx.model.name} on up to {k * g:,} GPUs of {ctx.hardware.name}; "
                    f"there: {tried[k * g]}"
                )
            k *= 2
        first = next(j * g for j in range(k0, k + 1) if attempt(j * g))  # every node count up to the bound
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
