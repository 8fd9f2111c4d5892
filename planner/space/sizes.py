"""Which GPU counts have a legal plan at all, for errors that say what is allowed.

Legality does not need the costs: the rules of ``planner.space.rules`` and the NVLink-domain rule
over a reduced grid (no interleaving, micro-batch 1, one recomputation: the most permissive
values of the knobs the user left free) say whether any plan of a size is legal, in about a
millisecond per size. Before any grid, ``WorldAxes`` bounds it from arithmetic alone: N must be
tp·cp·pp·dp with each factor among the few values the rules leave it on any GPU count, so a
huge or oddly factored N is answered in microseconds.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

import numpy as np

from planner.plan import Context, ParallelPlan, Recompute
from planner.space.candidates import Pins, candidate_grid, cp_searched, divisors, nvlink_domain_gpus, tp_in_domain
from planner.space.rules import rule_masks

MAX_SCAN = 4096  # sizes tried on each side of the one asked for


def small_divisors(n: int) -> list[int]:
    return [int(k) for k in divisors(n)]


@dataclass(frozen=True)
class WorldAxes:
    """The values tp, cp, pp and dp can take on any GPU count (pp None: not bounded). Each is a superset of
    what the rules accept: tp divides the attention heads and stays in the NVLink domain (``tp_in_domain``);
    cp is one search tries (``cp_searched``) or the pinned one with s divisible by 2·cp; pp divides L, L + 1
    or L + 2 (an even or embedding/loss-accounted split; MoE: pp ≤ L; explicit first/last stages: pp ≤ L + 2;
    a pinned layout: pp divides its virtual stages); dp divides the global batch over the micro-batch (rule
    "global batch divisible by micro-batch × dp")."""

    tp: tuple[int, ...]
    cp: tuple[int, ...]
    pp: tuple[int, ...] | None
    dp: tuple[int, ...]

    @classmethod
    def of(cls, ctx: Context, pins: Pins) -> WorldAxes:
        model, s, B = ctx.model, ctx.training.seq_len, ctx.training.global_batch
        heads = np.array(small_divisors(model.num_attention_heads))
        tp = heads[tp_in_domain(heads, nvlink_domain_gpus(ctx.hardware), pins.max_tp)].tolist()
        cp = [c for c in small_divisors(s) if cp_searched(s, c)]
        if pins.cp is not None:
            cp = [pins.cp] if pins.cp == 1 or s % (2 * pins.cp) == 0 else []
        L = model.num_layers
        if pins.pipeline_layout is not None:  # pp divides the layout's virtual stages (unbounded, --gpus
            pp = _layout_pp(pins.pipeline_layout)  # 2147483647 scanned 8,192 sizes near it: a hang)
        elif pins.first_stage_layers or pins.last_stage_layers:  # the middle stages hold a layer each, or there
            pp = list(range(1, L + 3))  # are none (transformer_config.py "Mismatch: ... middle PP stages"): pp ≤ L + 2
        elif model.is_moe:
            pp = list(range(1, L + 1))
        else:
            pp = sorted(set(small_divisors(L) + small_divisors(L + 1) + small_divisors(L + 2)))
        b = pins.micro_batch or 1
        dp = small_divisors(B // b) if B % b == 0 else []
        pick = {"tp": tp, "cp": cp, "pp": pp, "dp": dp}
        for name in pick:
            pinned = getattr(pins, name)
            if pinned is not None and pick[name] is not None:
                pick[name] = [pinned] if pinned in pick[name] else []
            elif pinned is not None:
                pick[name] = [pinned]
        return cls(*(None if v is None else tuple(v) for v in pick.values()))

    @functools.cached_property
    def _products(self) -> tuple[frozenset[int], frozenset[int] | None]:
        """(every t·c·d, every t·c·p·d or None when pp is not bounded): a few thousand integers."""
        tcd = frozenset(t * c * d for t in self.tp for c in self.cp for d in self.dp)
        worlds = None if self.pp is None else frozenset(q * p for q in tcd for p in self.pp)
        return tcd, worlds

    def allows(self, num_gpus: int) -> bool:
        """Whether some tp·cp·pp·dp from the axes makes ``num_gpus`` (a necessary condition for a legal plan)."""
        tcd, worlds = self._products
        if worlds is not None:
            return num_gpus in worlds
        return any(num_gpus % q == 0 for q in tcd)

    def largest(self) -> int | None:
        """The most GPUs any plan can use (None when pp is not bounded)."""
        if self.pp is None or not (self.tp and self.cp and self.pp and self.dp):
            return None if self.pp is None else 0
        return max(self.tp) * max(self.cp) * max(self.pp) * max(self.dp)

    def reason(self, num_gpus: int, global_batch: int) -> str:
        """Why ``num_gpus`` cannot be tp·cp·pp·dp, in one clause."""
        largest = self.largest()
        if not self.dp:  # the pinned micro-batch does not divide the global batch: no dp at all
            return f"the micro-batch does not divide the global batch {global_batch}, so no dp can"
        if empty := [name for name in ("tp", "cp", "pp") if getattr(self, name) == ()]:  # a pin the model forbids
            return f"the pinned {' and '.join(empty)} {'is' if len(empty) == 1 else 'are'} not legal for this model"
        if largest is not None and num_gpus > largest:
            return (
                f"at most {largest:,} GPUs can hold a legal plan (tp ≤ {max(self.tp)} × cp ≤ {max(self.cp)} × "
                f"pp ≤ {max(self.pp)} × dp ≤ {max(self.dp)}, dp dividing the global batch {global_batch})"
            )
        pp = "any pp" if self.pp is None else f"pp ≤ {max(self.pp, default=0)} splitting the layers"

        def listed(values):
            return ", ".join(map(str, values)) or "none"

        return (
            f"{num_gpus:,} is not tp·cp·pp·dp with tp in {{{listed(self.tp)}}}, cp in {{{listed(self.cp)}}}, "
            f"{pp} and dp dividing the global batch {global_batch}"
        )


def _layout_pp(layout: str) -> list[int] | None:
    """The pp a pipeline layout allows: the divisors of its count of virtual stages (None: not a layout)."""
    from planner.models.pipeline_layout import LayoutError, PipelineLayout

    try:
        return small_divisors(len(PipelineLayout.parse(layout).stages))
    except LayoutError:
        return None


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
    masks = rule_masks(grid, ctx.model, ctx.training, ctx.options, num_gpus, hardware=ctx.hardware)
    in_domain = tp_in_domain(grid.tp, nvlink_domain_gpus(ctx.hardware), pins.max_tp)
    ok = np.all(np.array(list(masks.values())), axis=0) & in_domain
    return bool(np.any(ok))


def nearest_legal_sizes(ctx: Context, num_gpus: int, pins: Pins) -> list[int]:
    """The nearest GPU count below and the nearest above ``num_gpus`` with a legal plan (either may be missing)."""
    axes = WorldAxes.of(ctx, pins)

    def legal(n: int) -> bool:
        return axes.allows(n) and has_legal_plan(ctx, n, pins)

    below = next((n for n in range(num_gpus - 1, max(num_gpus - MAX_SCAN, 0), -1) if legal(n)), None)
    above = next((n for n in range(num_gpus + 1, num_gpus + MAX_SCAN) if legal(n)), None)
    return [n for n in (below, above) if n is not None]


def tp_domain_reason(ctx: Context, pins: Pins) -> str | None:
    """Why a pinned tp that the attention heads allow is outside the TP groups search builds (``tp_in_domain``:
    inside one NVLink domain, or whole domains up to --max-tp), or None. It said "the pinned tp is not legal for
    this model" of `search --model llama3-70b --gpus 64 --tp 16`, which explain prices (qa21)."""
    tp, max_tp = pins.tp, pins.max_tp
    if tp is None or ctx.model.num_attention_heads % tp or (max_tp and tp > max_tp):
        return None  # no pin, the heads' rule (said as such), or above --max-tp (refused before the search)
    g = nvlink_domain_gpus(ctx.hardware)
    if tp_in_domain(np.array([tp]), g, max_tp)[0]:
        return None
    if tp > g and tp % g == 0:
        return (
            f"--tp {tp} spans {tp // g} NVLink domains of {g} GPUs ({ctx.hardware.name}): search keeps TP inside one "
            f"unless --max-tp {tp} lets its groups cross them (priced on the network)"
        )
    return (
        f"--tp {tp} does not divide the {g} GPUs of an NVLink domain ({ctx.hardware.name}), so its groups would "
        f"straddle two; allowed: a divisor of {g}, or with --max-tp a multiple of {g}"
    )


def pins_leave_no_world(num_gpus: int, pins: Pins) -> bool:
    """Whether the pinned tp, pp, cp and dp cannot multiply into ``num_gpus`` (``empty_grid_reason`` says why)."""
    pinned = [v for v in (pins.tp, pins.pp, pins.cp, pins.dp) if v is not None]
    return any(num_gpus % v for v in pinned) or num_gpus % int(np.prod(pinned, dtype=object) if pinned else 1) > 0


def empty_grid_reason(num_gpus: int, pins: Pins) -> str:
    """Why no candidate at all exists: the pinned sizes cannot multiply to the world size."""
    pinned = {k: getattr(pins, k) for k in ("tp", "pp", "cp", "dp") if getattr(pins, k) is not None}
    bad = [f"--{k} {v}" for k, v in pinned.items() if num_gpus % v]
    product = int(np.prod(list(pinned.values()))) if pinned else 1
    if bad:
        return f"{' and '.join(bad)} {'does' if len(bad) == 1 else 'do'} not divide {num_gpus:,} GPUs"
    if num_gpus % product:
        return f"{' × '.join(f'--{k} {v}' for k, v in pinned.items())} = {product} does not divide {num_gpus:,} GPUs"
    # the pinned sizes divide the world: the knobs given together leave the candidate grid empty for another reason
    # (ux12-16: it said "no tp·cp·pp·dp with --tp 1 multiplies to 8 GPUs" of --tp 1 --sequence-parallel)
    given = [f"{k} {v.value if hasattr(v, 'value') else v}" for k in PLAN_PINS if (v := getattr(pins, k)) is not None]
    return f"the knobs given leave no candidate plan on {num_gpus:,} GPUs ({', '.join(given)})"


PLAN_PINS = tuple(f.name for f in fields(Pins) if f.name in ParallelPlan.model_fields)  # the knobs a plan has


def pinned_plan_reasons(ctx: Context, num_gpus: int, pins: Pins, options) -> list[str]:
    """Why pins that divide the world leave no candidate at all: the candidate grid leaves out by construction the
    rows that break a rule on the pinned knobs alone (--vpp 2 at --pp 1; --outer-dp-sharding-strategy optim beside
    --data-parallel-sharding-strategy optim_grads), so no rule counted them and the error blamed the world size.
    The plan of the pinned knobs says which: its own checks (``ParallelPlan``), else the rules it breaks
    (``options``: those the rules see). The free knobs take the values the fewest rules refuse: dp (else pp) fills
    the world, the distributed optimizer on, sequence parallelism with tp > 1. Empty: the pinned plan is legal."""
    from pydantic import ValidationError

    from planner.presets import format_validation_error
    from planner.space.grid import PlanGrid
    from planner.space.rules import rule_messages

    fields = {k: getattr(pins, k) for k in PLAN_PINS if getattr(pins, k) is not None}
    if isinstance(fields.get("recompute"), tuple):  # several allowed: any of them
        del fields["recompute"]
    rest = num_gpus // int(np.prod([fields.get(k, 1) for k in ("tp", "pp", "cp", "dp")]))
    fields.setdefault("dp" if "dp" not in fields else "pp", rest)
    fields.setdefault("distributed_optimizer", True)
    fields.setdefault("sequence_parallel", fields.get("tp", 1) > 1)
    try:
        plan = ParallelPlan(**fields)
    except ValidationError as err:
        return [format_validation_error(err)]
    return rule_messages(PlanGrid.from_plans([plan]), ctx.model, ctx.training, options, num_gpus, hardware=ctx.hardware)


def rules_broken_everywhere(ctx: Context, pins: Pins, gpus_per_node: int) -> list[str]:
    """The rules (with their messages) that every plan with these pins breaks whatever the GPU count,
    judged on a world the pins divide: why no size has a legal plan."""
    from math import lcm

    from planner.space.rules import RULES, RuleInputs

    sizes = [v for v in (pins.tp, pins.pp, pins.cp, pins.dp) if v is not None]
    n = lcm(*sizes, gpus_per_node) if sizes else gpus_per_node
    if n >= 2**31:  # past the grid's 32-bit sizes (--cp 2147483647 on 8-GPU nodes): an OverflowError traceback
        return []
    grid = candidate_grid(ctx, n, _permissive(pins))
    if len(grid) == 0:
        return []
    r = RuleInputs(grid, ctx.model, ctx.training, ctx.options, n, ctx.hardware)
    out = []
    for rule in RULES:
        holds = np.broadcast_to(rule.holds(r), (len(grid),))
        if not holds.any():
            out.append(f"{rule.name}: {rule.message(r.one(0))}")
    return out
