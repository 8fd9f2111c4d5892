"""Search: every candidate plan as one grid, Megatron's rules and memory as named masks, ranked.

The grid is a cartesian product of the knobs built with numpy (no Python loop over plans); the
candidates that pass every rule are evaluated in chunks by the same ``evaluate`` that explain
uses, so the process's memory stays bounded whatever the size of the space. Two knobs are not
crossed but derived: the overlap flags follow today's recipes unless pinned (one evaluation per
combination), and block recomputation's layer count is solved as the fewest layers that fit.

The ranking is honest about the model's error: every estimate carries a band, its GPU generation's
validation error (hardware preset ``accuracy``) widened for each feature no published setting
exercises (``planner.fidelity.evidence``), and by default plans rank by the pessimistic end of their
band (``RANK_RULES``), so a plan that is fast only where the model extrapolates moves down.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from planner import heap, parallel
from planner.costs.estimate import (
    TIME_TERMS,
    evaluate,
    iteration_floor_s,
    iteration_s,
    iteration_terms,
    peak_memory_bytes,
    peak_memory_bytes_and_twins,
    stage_memory_totals,
    time_total_s,
)
from planner.costs.letters import keep_shapes
from planner.costs.process_memory import usable_bytes
from planner.costs.stage_memory import stage_max
from planner.errors import InfeasibleError, PinsBreakRuleError
from planner.fidelity.evidence import (
    band_frac,
    band_parts,
    extrapolated_features,
    generation,
    generation_counts,
    generation_name,
    plan_evidence,
)
from planner.plan import Context, PlanOptions, plan_label
from planner.result import Shared, brief_plan_json, plan_json
from planner.space import flex_backend
from planner.space.candidates import (
    NO_PINS,
    Pins,
    candidate_grid,
    expert_pin_error,
    nvlink_domain_gpus,
    searched_modules,
    tp_in_domain,
)
from planner.space.dominance import DROPPED_RULE, WORK_FIELDS, RecomputeTwins
from planner.space.grid import COLUMNS, PlanGrid, distinct, take_column
from planner.space.rules import RULES, Rule
from planner.space.rules import first_broken as rules_first_broken
from planner.space.sizes import (
    WorldAxes,
    empty_grid_reason,
    nearest_legal_sizes,
    pinned_plan_reasons,
    pins_leave_no_world,
    rules_broken_everywhere,
    tp_domain_reason,
)

heap.keep_freed_memory()  # freed arrays reused: a search no longer faults in fresh pages (planner.heap)

CHUNK = 16_384  # rows per evaluation: (rows × stage kinds) float arrays stay a few MiB each (about 40 MiB in all)
FLOOR_CHUNK = 4 * CHUNK  # rows per evaluation of iteration_floor_s: its cost grows with the rows' distinct shapes
# (``Letters.distinct``), which a larger evaluation shares among more rows (DeepSeek-V3 / 1024 H100, one process's
# 131,072 floors: 85.7 ms of CPU in evaluations of CHUNK rows, 49.3 ms in 4 * CHUNK, 43.7 ms in one evaluation, which
# lifted the peak RSS by 13 MiB); its terms are (rows, 1) arrays: the whole model, not each kind of stage
BLOCK = 4 * CHUNK  # rows the search scores at once (with their TP-overlap twins): its memory stays bounded
FIELDS = tuple(PlanGrid.__dataclass_fields__)
FITS_RULE = "fits in GPU memory (with the headroom)"
TP_NODE_RULE = "tp within one NVLink domain (--max-tp to cross nodes)"
OVERLAPS = ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")
TIGHT_FRAC = 0.9  # among tied plans, those filling more than this share of the usable memory come later
RISK_Z = 2.0  # the pessimistic end search ranks by: the estimate × exp(2ε), two standard errors
RANK_RULES = {
    "risk": "fewest features no published setting of the GPU generation exercises first, then by the pessimistic "
    "end of each plan's band, the estimate × exp(2ε) (ε its GPU generation's error, widened for every such "
    "feature); plans with as few such features whose band overlaps rank 1's are tied with it, and among them "
    "those leaving at least 10 % of the usable memory free come first",
    "estimate": "by the point estimate; plans whose band overlaps the fastest plan's are tied with it, and among "
    "them fewer extrapolated features first, then those leaving at least 10 % of the usable memory free, then "
    "the faster",
    "memory": "by peak memory, then the point estimate",
}
RANK_BY = tuple(RANK_RULES)


@dataclass
class SearchResult:
    """What a search found: the counts, and ``plans``, the plan JSON of the plans shown, built on first read
    (``build``; an in-process caller reading only the counts builds none)."""

    build: Callable[[], list[dict]]
    evaluated: int
    feasible: int
    rejected: dict[str, int] = field(default_factory=dict)
    tied: int = 0  # plans tied with the fastest (their bands overlap)
    band_frac: float = 0.0
    fastest_rank: int = 1  # where the fastest estimate ranks (ties reordered by safety)
    block_variants: int = 0  # block-recomputation variants added to the candidates (layers solved)
    tp_overlap_twins: int = 0  # candidates also evaluated without --tp-comm-overlap (each keeps one: ``_twin_rule``)
    hybrid_variants: int = 0  # Megatron FSDP hybrid (HSDP/HFSDP) variants of FSDP rows that fit (hybrid_variants)
    rank_by: str = "risk"
    moved_down: int = 0  # plans faster by estimate than rank 1, below it for a feature no setting exercises
    dropped_twins: int = 0  # plans sharing a plan listed's other knobs, recomputing more for no time or memory
    tp_overlap_rule: str = ""  # how each plan with SP and its twin without --tp-comm-overlap were chosen between
    _plans: list[dict] | None = field(default=None, repr=False, compare=False)

    @property
    def plans(self) -> list[dict]:
        if self._plans is None:
            self._plans = self.build()
        return self._plans

    def to_json(self) -> dict:
        return {
            "plans": self.plans,
            "evaluated": self.evaluated,
            "feasible": self.feasible,
            "rejected": self.rejected,
            "tied_with_fastest": self.tied,
            "fastest_rank": self.fastest_rank,
            "block_variants": self.block_variants,
            "tp_overlap_twins": self.tp_overlap_twins,
            "hybrid_variants": self.hybrid_variants,
            "band_frac": self.band_frac,
            "rank_by": self.rank_by,
            "rank_rule": RANK_RULES[self.rank_by],
            "moved_down_for_evidence": self.moved_down,
            "dropped_recompute_twins": self.dropped_twins,
            "dropped_rule": DROPPED_RULE,
            "tp_overlap_rule": self.tp_overlap_rule,
        }


@dataclass(frozen=True)
class _Options:
    """The options the search derives rather than crosses: ``evaluating``, the context that evaluates every
    row (the grid carries each row's overlaps, ``OPTION_COLUMNS``; selective recomputation's modules are
    read only by the rows that recompute selectively), and ``contexts``, the context each row's plan
    reports, by its option set (``codes``)."""

    contexts: list[Context]
    grad_reduce: bool  # --overlap-grad-reduce, the same for every row
    searched: bool  # selective recomputation's modules are the search's (``searched_modules``)

    @property
    def evaluating(self) -> Context:
        return self.contexts[8 * self.searched + 4 * self.grad_reduce]

    def codes(self, grid: PlanGrid) -> np.ndarray:
        """Each row's option set: 8 the searched modules, 4 --overlap-grad-reduce, 2 --overlap-param-gather,
        1 --tp-comm-overlap."""
        code = 8 * (self.searched & (grid.recompute == 1)) + 4 * self.grad_reduce
        return (code + 2 * (grid.overlap_param_gather > 0) + (grid.tp_comm_overlap > 0)).astype(np.int8)


@dataclass
class _Scored:
    """Evaluated candidates: a grid (with each row's overlaps) and, per row, its time and peak memory; with
    ``kept``, each row's ``ticket`` to the time terms its time is the sum of (``_Kept``; -1: none kept)."""

    grid: PlanGrid
    iteration: np.ndarray
    peak: np.ndarray
    options: _Options
    ticket: np.ndarray | None = None
    kept: _Kept | None = None

    def take(self, rows: np.ndarray) -> _Scored:
        ticket = None if self.ticket is None else self.ticket[rows]
        return _Scored(self.grid.take(rows), self.iteration[rows], self.peak[rows], self.options, ticket, self.kept)

    def take_lazy(self, rows: np.ndarray) -> _Scored:
        """``take``, the grid's rows gathered only when taken (``_RowsOf``)."""
        ticket = None if self.ticket is None else self.ticket[rows]
        return _Scored(_RowsOf(self.grid, rows), self.iteration[rows], self.peak[rows], self.options, ticket, self.kept)

    @staticmethod
    def stack(parts: list[_Scored]) -> _Scored:
        """The rows of every part, one after the other."""
        if len(parts) == 1:
            return parts[0]
        iteration, peak = (np.concatenate([getattr(p, k) for p in parts]) for k in ("iteration", "peak"))
        kept = parts[0].kept if all(p.ticket is not None for p in parts) else None
        ticket = np.concatenate([p.ticket for p in parts]) if kept is not None else None
        return _Scored(PlanGrid.stack(*(p.grid for p in parts)), iteration, peak, parts[0].options, ticket, kept)

    def terms(self, rows: np.ndarray) -> dict[str, np.ndarray] | None:
        """The time terms of ``rows`` as the search computed them (``_Kept.terms``), None where one has none."""
        return None if self.kept is None or self.ticket is None else self.kept.terms(self.ticket[rows])


@dataclass
class _Kept:
    """The time terms of a search's timing calls (``iteration_terms``: each call's dict, kept whole, no copy), so
    the plans it shows are not timed again (``_plans_json``): a row's terms are found by its ticket, its place
    among the rows of every call one after the other. One process's calls: kept only where the search runs in
    one process on one screening block (``_with_tp_overlap_twins``: at most ``BLOCK`` rows and their twins)."""

    calls: list[dict] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)  # the tickets' end of each call

    def timed(self, grid: PlanGrid, ctx: Context) -> tuple[np.ndarray, np.ndarray]:
        """``iteration_s`` of the rows of ``grid`` (one evaluation) and their tickets."""
        time, start = iteration_terms(grid, ctx), self.ends[-1] if self.ends else 0
        self.calls.append(time)
        self.ends.append(start + len(grid))
        return time_total_s(time), np.arange(start, start + len(grid))

    def terms(self, tickets: np.ndarray) -> dict[str, np.ndarray] | None:
        """The time terms of the rows of ``tickets`` (in ``TIME_TERMS`` order), None where one has none (-1)."""
        if not len(tickets) or np.any(tickets < 0):
            return None
        calls, rows = np.searchsorted(self.ends, tickets, side="right").tolist(), []
        for c, t in zip(calls, tickets.tolist(), strict=True):
            time, at = self.calls[c], t - (self.ends[c - 1] if c else 0)
            rows.append([time[k][at] for k in TIME_TERMS])
        return dict(zip(TIME_TERMS, np.array(rows, dtype=float).T, strict=True))


def _time(grid: PlanGrid, ctx: Context, kept: _Kept | None) -> tuple[np.ndarray, np.ndarray | None]:
    """``iteration_s`` of the rows of ``grid`` (one evaluation), and with ``kept`` their tickets (``_Kept.timed``)."""
    return (iteration_s(grid, ctx), None) if kept is None else kept.timed(grid, ctx)


def recipe_options(ctx: Context, pins: Pins, grid: PlanGrid) -> tuple[PlanGrid, _Options]:
    """The options of every row that the search derives rather than crosses. The overlap flags:
    pinned, or as today's recipes set them (Megatron-Bridge and NeMo performance recipes):
    --overlap-grad-reduce always, --overlap-param-gather with the distributed optimizer (or Megatron
    FSDP), --tp-comm-overlap with sequence parallelism. Selective recomputation's modules: pinned, or
    ``searched_modules``. Returns the grid with each row's overlaps and the contexts (``_Options``)."""
    n = len(grid)
    sharded = grid.distributed_optimizer | grid.fsdp

    def flag(pinned: bool | None, auto: np.ndarray) -> np.ndarray:
        return auto if pinned is None else np.full(n, pinned)

    ogr = flag(pins.overlap_grad_reduce, np.full(n, True))
    opg = flag(pins.overlap_param_gather, sharded & ogr)
    tpo = flag(pins.tp_comm_overlap, grid.sequence_parallel.copy())
    searched = pins.recompute_modules is None
    modules = searched_modules(ctx) if searched else pins.recompute_modules
    contexts = []
    for k in range(16):
        values = dict(zip(OVERLAPS, (bool(k & 4), bool(k & 2), bool(k & 1)), strict=True))
        values["recompute_modules"] = modules if k & 8 else ctx.options.recompute_modules
        contexts.append(keep_shapes(replace(ctx, options=ctx.options.model_copy(update=values))))
    grid = replace(grid, overlap_param_gather=opg.astype(np.int8), tp_comm_overlap=tpo.astype(np.int8))
    return grid, _Options(contexts, pins.overlap_grad_reduce is not False, searched)


def _pinned_reasons(ctx: Context, num_gpus: int, pins: Pins) -> list[str]:
    """``pinned_plan_reasons`` with the options the rules see (``_pinned_options``)."""
    return pinned_plan_reasons(ctx, num_gpus, pins, _pinned_options(ctx, pins))


def _pinned_options(ctx: Context, pins: Pins) -> PlanOptions:
    """The options the rules see: the overlaps a user pinned, others off (auto ones are legal by choice),
    except --overlap-grad-reduce, which every searched row has unless pinned off (``recipe_options``):
    a pinned --overlap-param-gather needs it (arguments.py) and gets it."""
    update = {k: bool(getattr(pins, k)) for k in OVERLAPS}
    update["overlap_grad_reduce"] = pins.overlap_grad_reduce is not False
    return ctx.options.model_copy(update=update)


HYBRID_REACH = 2.0  # hybrid variants of FSDP rows at most this many times the fastest estimate (hybrid_variants)


def hybrid_variants(scored: _Scored, ctx: Context, pins: Pins, num_gpus: int, capacity: float) -> PlanGrid:
    """Megatron FSDP's hybrid mode tried on every scored FSDP row (optim_grads or optim_grads_params) that fits
    and whose FSDP group spans more than one NVLink domain: R replicas, each of t·d·c/R GPUs filling one
    domain, as NVIDIA's Megatron-Bridge recipes set it (perf_recipes/nemotronh/common.py: "shard within an
    NVLink domain, replicate across domains"). Only rows that fit: a replica holds R times the sharded
    weights and gradients, so a variant never fits where its row does not. At optim_grads_params it is
    HFSDP (--outer-dp-sharding-strategy optim) unless pinned: never worse than HSDP under this model (the
    same bytes across the replicas, a reduce-scatter of the gradient shard and an all-gather of the weight
    shard, (R−1)/R·(G + W)/N, against HSDP's all-reduce 2(R−1)/R·G/N with G = W in 16 bits, split between a
    forward and a backward; the optimizer states R times smaller); at optim_grads HSDP (HFSDP needs
    optim_grads_params). Each variant is checked by the rules (R divides the expert data-parallel size); rows
    slower than ``HYBRID_REACH`` times the fastest have none. Returns the variants, to be evaluated
    (``_evaluated``)."""
    domain, fastest = nvlink_domain_gpus(ctx.hardware), np.min(scored.iteration, initial=np.inf)
    # a variant saves at most its row's exposed FSDP collectives: rows over twice the fastest need over half
    # their time exposed to reach it, so they are left out (the search's time stays near what it was)
    near = np.flatnonzero((scored.peak <= capacity) & (scored.iteration <= HYBRID_REACH * fastest))
    optim = pins.fsdp_outer_sharding != "no_shard"
    grid = scored.grid.take(near[_hybrid_sources(scored.grid, near, domain, pins)])
    R = (grid.dp * grid.cp) // np.maximum(domain // grid.tp, 1)
    grid = replace(grid, do_instances=R, outer_optim=(grid.fsdp_level == 3) & optim)
    legal, _ = _legal_rows(ctx, grid, pins, num_gpus)
    return grid if len(legal) == len(grid) else grid.take(legal)  # the variants: a grid of their own


def _hybrid_sources(grid: PlanGrid, rows: np.ndarray, domain: int, pins: Pins) -> np.ndarray:
    """Which ``rows`` of the grid a hybrid variant can come from (``hybrid_variants``), whatever their time: FSDP
    rows (optim_grads or optim_grads_params; optim_grads_params alone where the outer sharding is pinned to
    optim) with one instance whose FSDP group d·c spans whole NVLink domains of t-GPU slices, more than one."""
    tp, dc = grid.tp.take(rows), grid.dp.take(rows) * grid.cp.take(rows)
    level, per = grid.fsdp_level.take(rows), np.maximum(domain // tp, 1)
    ok = grid.fsdp.take(rows) & (level >= 2) & (grid.do_instances.take(rows) == 1)
    ok &= (tp <= domain) & (domain % tp == 0) & (dc > per) & (dc % per == 0)
    return ok & (level == 3) if pins.fsdp_outer_sharding == "optim" else ok


def _sources(ctx: Context, pins: Pins, hsdp: bool):
    """Which rows of a grid a hybrid variant may come from (``_hybrid_sources``; none without ``hsdp``), as a
    function of the grid and rows (``_with_tp_overlap_twins``' ``sources``)."""
    domain = nvlink_domain_gpus(ctx.hardware)

    def sources(g: PlanGrid, rows: np.ndarray) -> np.ndarray:
        return _hybrid_sources(g, rows, domain, pins) if hsdp else np.zeros(len(rows), dtype=bool)

    return sources


def _with_variants(scored: _Scored, block_part, ctx: Context, pins: Pins, gpus: int, capacity: float, hsdp: bool):
    """The rows scored, their block variants (``block_part``: None, scored, or their grid left to evaluate by
    ``_with_tp_overlap_twins(defer=True)``) and with ``hsdp`` their hybrid variants (``hybrid_variants``), each
    part scored: the variants left to evaluate in one call (``_evaluated``)."""
    later = [block_part] if isinstance(block_part, PlanGrid) else []
    parts = [scored] if block_part is None or later else [scored, block_part]
    if hsdp:
        later.append(hybrid_variants(scored, ctx, pins, gpus, capacity))
    return parts + (_evaluated(later, scored.options, capacity, scored.kept) if later else [])


def _evaluated(grids: list[PlanGrid], options: _Options, capacity: float, kept: _Kept | None = None) -> list[_Scored]:
    """Each grid's rows scored (``_evaluate``; the caller reads no states, ``whole``; with ``kept``, their time
    terms kept). A few rows in all (``ONE_CALL``, so every micro-batch of each grid is measured either way) are
    evaluated in one call: a call of the cost functions costs milliseconds whatever its rows (the search's
    block and hybrid variants)."""
    if len(grids) > 1 and sum(len(g) for g in grids) > ONE_CALL:
        return [part for g in grids for part in _evaluated([g], options, capacity, kept)]
    both = PlanGrid.stack(*grids) if len(grids) > 1 else grids[0]
    it, pk, _, ticket = _evaluate(both, np.arange(len(both)), options.evaluating, capacity, whole=True, kept=kept)
    cuts = np.cumsum([len(g) for g in grids[:-1]])
    tickets = np.split(ticket, cuts) if kept is not None else [None] * len(grids)
    scored = zip(grids, np.split(it, cuts), np.split(pk, cuts), tickets, strict=True)
    return [_Scored(g, i, p, options, t, kept) for g, i, p, t in scored]


def _evaluate(grid: PlanGrid, idx: np.ndarray, ctx: Context, capacity: float, keys=None, whole=False, kept=None):
    """Peak memory of the rows ``idx`` (``_peak_memory``: a lower bound where a plan cannot fit) and the
    iteration time of those that fit (infinite for the others), each with the overlaps its row carries;
    how each peak was found (``_by_family_states``; ``keys``: the rows' families, if known; ``whole``:
    the caller reads no states, so a few rows are measured in one call); and with ``kept`` (``_Kept``) each
    row's ticket to its time terms (-1: not timed), else None."""
    iteration = np.full(len(idx), np.inf)
    ticket = None if kept is None else np.full(len(idx), -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        peak, state = _peak_memory(grid, idx, ctx, capacity, keys, whole)
        fitting = np.flatnonzero(peak <= capacity)
        for start in range(0, len(fitting), CHUNK):
            part = fitting[start : start + CHUNK]
            iteration[part], t = _time(_taken(grid, idx[part]), ctx, kept)  # evaluate's, without its memory
            if kept is not None:
                ticket[part] = t
    return iteration, peak, state, ticket


def block_recompute_layers(grid: PlanGrid, ctx: Context, capacity: float) -> np.ndarray:
    """For full recomputation with --recompute-method block, the fewest layers per model chunk that make
    each plan fit: memory falls linearly with every layer recomputed (each keeps its input instead of
    its activations), so two evaluations (1 and 2 layers) give each stage's slope. 0 where block
    recomputation cannot fit; where it needs every layer of the largest chunk it is uniform recomputation."""
    with np.errstate(divide="ignore", invalid="ignore"):  # 1 and 2 layers in one evaluation
        (one, two), chunk = stage_memory_totals(grid, ctx, (1, 2))
        saving = np.where(chunk >= 2, one - two, 0.0)  # one more recomputed layer per chunk
        need = np.where(one <= capacity, 1.0, 1.0 + np.ceil((one - capacity) / saving))
    need = np.where(np.isfinite(need) & (need <= chunk), need, np.where(one <= capacity, 1.0, np.inf))
    k = stage_max(need)
    return np.where(np.isfinite(k) & (k < stage_max(chunk)), k, 0).astype(np.int64)


def _block_candidates(scored: _Scored, capacity: float) -> tuple[PlanGrid, np.ndarray]:
    """Block-recomputation variants of the rows without recomputation that do not fit, with the fewest
    recomputed layers that fit; and the row each comes from. Rows overlapping the expert all-to-all
    have none: Megatron refuses the overlap with full recomputation (their twin without it has one)."""
    base = np.flatnonzero((scored.grid.recompute == 0) & (scored.peak > capacity) & ~scored.grid.a2a_overlap)
    block, keep = _block_layers(scored.grid, base, None, scored.options.evaluating, capacity)
    return block, base[keep]


def _taken(grid: PlanGrid, rows: np.ndarray) -> PlanGrid:
    """``grid.take(rows)`` for a caller that only reads it: the grid itself where ``rows`` are all its rows in order
    (a search's variants are measured whole: every column gathered for nothing); ``_Twins`` are always taken."""
    if isinstance(grid, PlanGrid) and len(rows) == len(grid) and np.array_equal(rows, np.arange(len(grid))):
        return grid
    return grid.take(rows)


def _block_layers(grid: PlanGrid, rows, off, ctx: Context, capacity: float, keys=None) -> tuple[PlanGrid, np.ndarray]:
    """``_block_candidates`` of the ``rows`` of ``grid`` (without recomputation, each with its own overlaps; those at
    ``off``, a mask over them or None, without --tp-comm-overlap): the variants that can fit, and which of the rows
    they come from (``keys``: the variants' families, if known)."""
    grid = _Recomputed(grid, rows, off)  # gathered a few rows at a time
    if keys is None:
        keys = _family_keys(grid.take(slice(None)), None)

    # the layers needed never fall as the micro-batch grows and do not depend on the dispatcher
    # (``_by_family``): solve each family's smallest micro-batch first, the others where that one can
    def solve(pos: np.ndarray) -> np.ndarray:  # each row with its own overlaps (userbuffers take memory)
        k, size = np.zeros(len(pos), dtype=np.int64), CHUNK // 2  # each row is evaluated twice (1 and 2 layers)
        for start in range(0, len(pos), size):
            part = _taken(grid, pos[start : start + size])
            k[start : start + size] = block_recompute_layers(part, ctx, capacity)
        return k

    k = _by_family(grid, np.arange(len(grid)), solve, lambda k: k == 0, keys)
    keep = np.flatnonzero(k > 0)
    return replace(grid.take(keep), recompute_layers=k[keep]), keep


@dataclass(frozen=True, eq=False)
class _LazyRows:
    """Rows of a grid gathered only when taken (``take``): their count and micro-batches read without that copy."""

    grid: PlanGrid
    rows: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def micro_batch(self) -> np.ndarray:
        return take_column(self.grid.micro_batch, self.rows)


@dataclass(frozen=True, eq=False)
class _Recomputed(_LazyRows):
    """Rows of a grid as their variants with full recomputation by --recompute-method block, those at ``off`` (a mask
    over ``rows``; None: none) without --tp-comm-overlap, gathered only when taken: ``take`` gives what
    ``replace(grid.take(rows), recompute=2, recompute_block=True)`` with the overlap cleared at ``off`` would, without
    that copy of every row (``_block_layers`` measures a few of them at a time, in rounds)."""

    off: np.ndarray | None = None

    def take(self, index) -> PlanGrid:
        """The variants at ``index`` (positions or a slice)."""
        grid = self.grid.take(self.rows[index])
        n = len(grid)
        full = {"recompute": np.full(n, 2, dtype=np.int8), "recompute_block": np.ones(n, bool)}
        off = None if self.off is None else self.off[index]
        if off is not None and off.any():
            overlap = np.array(grid.tp_comm_overlap)  # a copy: a column of one value is a read-only view
            overlap[off] = 0
            full["tp_comm_overlap"] = overlap
        return replace(grid, **full)


def search(
    ctx: Context,
    num_gpus: int,
    pins: Pins = NO_PINS,
    *,
    top: int = 10,
    sort: str = "time",
    rank_by: str = "risk",
    memory_headroom: float | None = None,
    suggest_sizes: bool = True,
    brief: bool = False,
) -> SearchResult:
    """Rank every legal plan that fits (``rank_by``: ``RANK_RULES``; ``sort="memory"`` is rank_by memory). With no
    legal plan, the error names every rule that rejected plans and (``suggest_sizes``) the nearest GPU
    counts that have one. A GPU count that cannot be tp·cp·pp·dp (``WorldAxes``) is answered before any grid.
    ``brief``: each plan as ``result.brief_plan_json`` (what validate compares its many fitting plans by)."""
    if bad_ep := expert_pin_error(ctx.model, pins):
        raise InfeasibleError(bad_ep)
    axes = WorldAxes.of(ctx, pins)
    if not axes.allows(num_gpus):
        why = empty_grid_reason(num_gpus, pins) if pins_leave_no_world(num_gpus, pins) else None
        why = why or tp_domain_reason(ctx, pins) or axes.reason(num_gpus, ctx.training.global_batch)
        raise InfeasibleError(_no_legal_plan(ctx, num_gpus, pins, f"world size = tp·cp·pp·dp: {why}", suggest_sizes))
    grid, candidates, rejected = _legal_grid(ctx, num_gpus, pins)
    capacity = usable_bytes(ctx.hardware.memory.allocatable_bytes, memory_headroom)
    grid, options = recipe_options(ctx, pins, grid)
    unsolved = np.flatnonzero(grid.recompute_block & (grid.recompute_layers == 0))  # block pinned, layers not
    if len(unsolved):
        solved = block_recompute_layers(grid.take(unsolved), options.evaluating, capacity)
        layers = np.array(grid.recompute_layers)  # a copy: a column of one value is a read-only view
        layers[unsolved] = np.maximum(solved, 1)
        grid = replace(grid, recompute_layers=layers)
    # block variants of unfit rows (made after the rules) only where some legal row recomputes fully: options that
    # refuse it everywhere (CPU offloading, per-layer CUDA graphs) got variants explain refused, ranked first
    block = pins.recompute_method is None and _full_allowed(pins) and bool(np.any(grid.recompute == 2))
    hsdp = pins.distributed_optimizer_instances is None  # Megatron FSDP's hybrid variants of the FSDP rows that fit
    rank_by = "memory" if sort == "memory" else rank_by
    twinned = pins.tp_comm_overlap is None
    prune = rank_by != "memory" and len(grid) > PRUNE_FROM
    rule = _twin_rule(ctx, rank_by) if twinned else BY_TIME
    scored, twins, block_part, pending = _with_tp_overlap_twins(
        grid, options, capacity, twinned, block, prune, hsdp, _sources(ctx, pins, hsdp), rule
    )
    parts = _with_variants(scored, block_part, ctx, pins, num_gpus, capacity, hsdp)
    unfit = sum(int(np.sum(~(part.peak <= capacity))) for part in parts)
    if unfit:
        rejected[FITS_RULE] = unfit
    if unfit == sum(len(part.peak) for part in parts):
        scored = _Scored.stack(parts)
        raise _nothing_fits(ctx, num_gpus, pins, candidates, scored, capacity, rejected, suggest_sizes=suggest_sizes)
    variants = sum(len(part.peak) for part in parts[1:])
    # in row order, the rows dropped left out (a pinned --recompute lists every plan of the kinds asked for)
    fitting, ranking, dropped = pending.settle(parts, capacity, rank_by, top, num_gpus, not pins.recompute)
    fits, evaluated = np.ones(len(fitting.peak), dtype=bool), candidates + variants
    result = _ranked(
        ctx, num_gpus, fitting, fits, top, rank_by, memory_headroom, evaluated, rejected, ranking, dropped, brief=brief
    )
    hybrid = len(parts[-1].peak) if hsdp else 0
    result.block_variants, result.tp_overlap_twins, result.hybrid_variants = variants - hybrid, twins, hybrid
    result.tp_overlap_rule = _twin_rule_text(ctx, rule)
    return result


def _legal_grid(ctx: Context, num_gpus: int, pins: Pins) -> tuple[PlanGrid, int, dict[str, int]]:
    """The candidates that keep every rule (``_legal_rows``), how many candidates there were, and how many rows
    each rule rejected first; the candidates are let go column by column as the legal rows are taken."""
    grid = candidate_grid(ctx, num_gpus, pins)
    candidates, columns = len(grid), {name: getattr(grid, name) for name in FIELDS}
    legal, rejected = _legal_rows(ctx, grid, pins, num_gpus)
    if len(legal) < candidates:  # only the legal rows from here on
        del grid
        grid = _rows_of(columns, legal)
    return grid, candidates, rejected


def _rows_of(columns: dict, rows: np.ndarray) -> PlanGrid:
    """The grid of ``rows`` of a grid's ``columns``, each column replaced in ``columns`` by its rows in turn,
    so the whole grid is never held twice (the candidates are the search's largest arrays)."""
    for name in columns:
        if name != "layouts":
            columns[name] = take_column(columns[name], rows)
    return PlanGrid.of_columns({name: columns[name] for name in COLUMNS}, columns["layouts"])


def _legal_rows(ctx: Context, grid: PlanGrid, pins: Pins, num_gpus: int) -> tuple[np.ndarray, dict[str, int]]:
    """The rows that keep every rule, and how many rows each rule rejected first (in the table's order);
    the rules read the grid in blocks of rows (their letters are arrays per row)."""
    starts = range(0, len(grid), BLOCK)
    fork = len(starts) > 1 and parallel.can_fork()  # the blocks are independent: split between two processes
    legal, first_broken = parallel.shared_empty(len(grid), bool, fork), parallel.shared_empty(len(grid), np.int16, fork)
    legal[:], first_broken[:], names = True, 0, []

    def job(start: int):
        def run():
            part = slice(start, start + BLOCK)
            names[:] = _first_broken(ctx, grid.take(part), pins, num_gpus, legal[part], first_broken[part])

        return run

    parallel.run_jobs([job(start) for start in starts], fork)  # the parent runs the first block: the names
    broken = np.bincount(first_broken, minlength=len(names) + 1)[1:]
    return np.flatnonzero(legal), {names[k]: int(broken[k]) for k in range(len(names)) if broken[k]}


def _first_broken(ctx: Context, grid: PlanGrid, pins: Pins, num_gpus: int, legal, first_broken) -> list[str]:
    """Marks in ``legal`` the rows of ``grid`` that keep every rule and in ``first_broken`` 1 + the first
    rule each breaks (0 for none: ``rules.first_broken``); returns the rules' names in order."""
    domain, max_tp = nvlink_domain_gpus(ctx.hardware), pins.max_tp
    rules = (*RULES, Rule(TP_NODE_RULE, lambda r: tp_in_domain(r.grid.tp, domain, max_tp), lambda x: TP_NODE_RULE))
    first_broken[:] = rules_first_broken(
        grid, ctx.model, ctx.training, _pinned_options(ctx, pins), num_gpus, rules, hardware=ctx.hardware
    )
    legal[:] = first_broken == 0
    return [rule.name for rule in rules]


BY_TIME, KEEP_OVERLAP, KEEP_TWIN = 0, 1, 2  # how a row and its twin without --tp-comm-overlap are chosen between
TWIN_RULES = {  # what search says of each (``SearchResult.tp_overlap_rule``)
    BY_TIME: "",
    KEEP_OVERLAP: "with SP, every plan keeps --tp-comm-overlap, as every published {generation} run with TP does, "
    "unless only the plan without it fits (--rank-by estimate also weighs it off)",
    KEEP_TWIN: "with SP, every plan runs without --tp-comm-overlap, as every published {generation} run with TP "
    "does (--rank-by estimate also weighs it on)",
}
MOE_KEEP_TWIN = (  # a MoE plan's KEEP_TWIN: its overlap has no MoE run of the generation, TP without it has runs
    "with SP, every plan runs without --tp-comm-overlap: no published {generation} run of a MoE model uses it, and "
    "{generation} runs with TP without it are published (--rank-by estimate also weighs it on)"
)


def _with_tp_overlap_twins(
    grid: PlanGrid,
    options: _Options,
    capacity: float,
    twins: bool,
    block: bool,
    prune=True,
    defer=False,
    sources=None,
    rule: int = BY_TIME,
):
    """Every row evaluated, and (``twins``: --tp-comm-overlap not pinned) --tp-comm-overlap searched both
    ways: every row the recipes give it (sequence parallelism) is also evaluated without it, and keeps
    whichever is faster (userbuffers take memory and SMs, so neither wins
    everywhere), or by ``rule`` (``_twin_rule``) the one the published runs support; where neither fits, the
    smaller peak. Rows go in blocks of whole families (``_by_family``)
    so the memory stays bounded; the blocks are independent, so a large grid's are split between two
    processes (``parallel.run_jobs``: the same numbers). With ``block``, each block also finds its rows'
    block-recomputation variants (``_BlockVariants``). Then each process times its rows that fit
    (``_time_fitting``): with ``prune``, only those whose floor (``iteration_floor_s``) is within
    ``HYBRID_REACH`` of the fastest it probed (``NEAR_REACH`` where ``sources``, a function of the grid and rows,
    says no hybrid variant can come from the row; None: any may); the others keep an infinite time until the
    ranking needs them (``_Pending.settle``). Returns the rows scored, the twins evaluated, the block variants
    scored (None without ``block``; with ``defer``, one process and no ``prune``, their grid: the caller evaluates
    them with others, ``_evaluated``) and the rows not timed yet. On one screening block, the time terms of
    every timing are kept (``_Kept``: the rows shown are not timed again)."""
    keys = _family_keys(grid, None) if len(grid) else np.zeros(0, dtype=np.int64)
    blocks = _family_blocks(grid, np.arange(len(grid)), _screen_size(len(grid)), keys)  # a twin's family is its row's
    fork = len(blocks) > 1 and parallel.can_fork()
    n = len(grid)
    out = tuple(parallel.shared_empty(n, kind, fork) for kind in (float, float, np.int8, np.int8))
    iteration, peak, off_wins, need = out  # need: what is left to time (``_screen_block``)
    # the twins' peaks as screened, kept in one process only: forked (DeepSeek-V3's 1.4 M rows) the 8 bytes a row
    # would lift the peak RSS past the speed issue's 250 MiB, so a flipped twin's peak is measured again there
    kept = _Kept() if len(blocks) == 1 else None  # the time terms: a few MiB at most (BLOCK rows and their twins)
    out = (*out, None if fork else np.empty(n), None if kept is None else np.full(n, -1), kept, rule)
    groups = _halves(blocks) if fork else [blocks]  # each process's blocks (one job each: ``run_jobs``' split)
    variants = _BlockVariants.shared(grid, groups, fork, capacity, options, kept) if block else None
    later = defer and not fork and not prune  # the block variants' layers only: the caller evaluates them

    def job(g: int, group: list[np.ndarray]):
        def run():
            base = []  # the rows whose block variants are sought
            for rows in group:
                _screen_block(grid, rows, keys, options, capacity, twins, out)
                base.append(variants.base(grid, rows, peak) if variants else rows[:0])
            found = None
            if variants is not None:  # once per process: each call of the cost functions costs milliseconds
                found = variants.solve(g, grid, _in_row_order(base, n), off_wins, later, prune, keys)
            rows, ctx = _in_row_order(group, n), options.evaluating
            _time_fitting(grid, rows, out, ctx, prune and (sources or _every_row), (variants, g, found))

        return run

    evaluated = int(np.count_nonzero(grid.tp_comm_overlap > 0)) if twins else 0
    parallel.run_jobs([job(g, group) for g, group in enumerate(groups)], fork)
    rows = np.flatnonzero(need)  # left untimed: their floors in ``iteration``
    pending = _Pending(grid, out, options.evaluating, rows, iteration[rows])
    iteration[rows] = np.inf
    grid.tp_comm_overlap[off_wins > 0] = 0
    part = variants.collect(grid, later, pending) if variants else None
    return _Scored(grid, iteration, peak, options, out[5], kept), evaluated, part, pending


SCREEN = 3  # BLOCKs a screening block holds at most: each call of the cost functions costs a millisecond or more
# whatever its rows, and a block's families are screened in rounds of calls (``_by_family_states``), so the fewer
# blocks the fewer calls (DeepSeek-V3 / 1024 H100: 21 blocks of BLOCK rows made 145 calls of peak_memory_bytes)


def _screen_size(n: int) -> int:
    """Rows per screening block of a grid of n rows: up to ``BLOCK`` rows one block (screened in one process), more
    in an even number of blocks of about as many rows each, at most ``SCREEN`` BLOCKs (``_halves``: each process
    as many)."""
    if n <= BLOCK:
        return BLOCK
    pairs = -(-n // (2 * SCREEN * BLOCK))
    return -(-n // (2 * pairs))


def _in_row_order(parts: list[np.ndarray], n: int) -> np.ndarray:
    """The rows of ``parts`` (rows of a grid of n rows, each in one part at most) in row order:
    ``np.sort(np.concatenate(parts))``, marked and read back (sorting a process's 680 k rows of DeepSeek-V3 /
    1024 H100 took 65 ms of CPU, this 2 ms)."""
    mark = np.zeros(n, dtype=bool)
    for part in parts:
        mark[part] = True
    return np.flatnonzero(mark)


def _halves(blocks: list) -> list[list]:
    """The blocks of each of two processes, as 0 1 1 0 0 1 1 0 …: the rows that fit, and so the time taken, grow
    along the family order on the large MoE grids (DeepSeek-V3 / 1024 H100: 6 k in the first block, 30 k in the
    last), so each process takes one of each pair from either end of every four blocks."""
    side = [(i + 1) // 2 % 2 for i in range(len(blocks))]
    return [[b for b, s in zip(blocks, side, strict=True) if s == g] for g in (0, 1)]


def _floors(grid: PlanGrid, rows: np.ndarray, out, ctx: Context) -> None:
    """Writes into ``iteration`` each row of ``rows`` left to time its floor: the lower of its own and its
    twin's (``iteration_floor_s``), as ``need`` says which are timed."""
    iteration, need = out[0], out[3]
    rows = rows[need.take(rows) > 0]
    code = need[rows]
    mine, tw = rows[(code & ROW) > 0], rows[(code & TWIN) > 0]
    floor = _chunked(
        iteration_floor_s, _Twins(grid, np.concatenate([mine, tw]), len(mine)).take(slice(None)), ctx, FLOOR_CHUNK
    )
    iteration[rows] = np.inf
    iteration[mine] = floor[: len(mine)]
    iteration[tw] = np.minimum(iteration[tw], floor[len(mine) :])


def _chunked(fn, grid: PlanGrid, ctx: Context, size: int = CHUNK) -> np.ndarray:
    """``fn(grid, ctx)`` (a value per row) in evaluations of ``size`` rows."""
    out = np.empty(len(grid))
    with np.errstate(divide="ignore", invalid="ignore"):
        for start in range(0, len(grid), size):
            out[start : start + size] = fn(grid if len(grid) <= size else grid.take(slice(start, start + size)), ctx)
    return out


NEAR_REACH = 1.25  # rows no hybrid variant can come from, and block variants, are timed within this of the fastest
# (at least 1: the fastest row is always timed, and hybrid_variants reach from it); the others wait for the ranking
PROBE = 1024  # rows that fit with the lowest floors, timed first: the fastest of them bounds the search's fastest
PRUNE_FROM = BLOCK  # grids of more rows leave far rows untimed; a smaller grid times every row that fits, which costs
# less than the floors, the probe and the settling (GPT-3 175B on 64 A100: 50-57 ms CPU against 72-94 ms, speed8)


def _time_fitting(grid: PlanGrid, rows: np.ndarray, out, ctx: Context, sources, variants: tuple) -> None:
    """Times one process's ``rows`` that fit (``need``), and ``variants`` (``_BlockVariants``, this process's
    group and the variants it found, or None): every one, or with ``sources`` (pruning: which rows a hybrid
    variant may come from, ``_hybrid_sources``) their floors first, then the ``PROBE`` rows of the lowest floors,
    then every row whose floor is within ``HYBRID_REACH`` of the fastest of them (``NEAR_REACH`` for rows no
    hybrid variant can come from, and for the variants). The search's fastest row is among them (its floor is
    below its time, below the probe's fastest), and so is every row a hybrid variant may come from (its time
    within ``HYBRID_REACH`` of the fastest); the others keep their floor in ``iteration`` (``need`` not 0) until
    the ranking needs them (``_Pending.settle``)."""
    block, g, found = variants
    iteration, need = out[0], out[3]
    fastest = np.inf
    if sources:  # until timed, a row that fits holds its floor as its time
        _floors(grid, rows, out, ctx)
        rows = rows[need.take(rows) > 0]
        if len(rows) > PROBE:
            floor = iteration[rows]
            probe = rows[_lex_first((floor,), PROBE)]  # the stable argsort's first PROBE, the rest left unsorted
            _time_rows(grid, probe, ctx, out)
            fastest = np.min(iteration[probe])
            reach = np.where(sources(grid, rows), HYBRID_REACH, NEAR_REACH)
            rows = rows[~(floor > reach * fastest) & (need[rows] > 0)]
    else:
        rows = rows[need.take(rows) > 0]
    _time_rows(grid, rows, ctx, out)
    if found is not None:
        block.time(g, found, NEAR_REACH * fastest)


def _every_row(grid: PlanGrid, rows: np.ndarray) -> np.ndarray:
    return np.ones(len(rows), dtype=bool)


@dataclass
class _Pending:
    """The rows that fit whose time is not known yet (``rows``; ``iteration`` holds inf for them), each with
    its ``floor``; ``out``: the shared arrays of ``_with_tp_overlap_twins`` (iteration, peak, off_wins, need);
    and the block variants not timed yet (``variants``: their grid, positions in it and floors, set by
    ``_BlockVariants.collect``)."""

    grid: PlanGrid
    out: tuple
    ctx: Context
    rows: np.ndarray
    floor: np.ndarray
    variants: tuple | None = None
    other: np.ndarray | None = None  # each pending row's twin's extrapolated features, once found (``_features``)

    def time(self, which: np.ndarray) -> None:
        """Times the rows ``which`` (a mask over ``rows``): each keeps its faster version (``_time_rows``)."""
        rows = self.rows[which]
        _time_rows(self.grid, rows, self.ctx, self.out)
        self.grid.tp_comm_overlap[rows[self.out[2][rows] > 0]] = 0
        self.rows, self.floor = self.rows[~which], self.floor[~which]
        self.other = None if self.other is None else self.other[~which]

    def time_variants(self, part: _Scored, which: np.ndarray) -> None:
        """Times the block variants ``which`` (a mask over the pending ones) of their scored ``part``."""
        block, pos, floor = self.variants
        at = pos[which]
        part.iteration[at], ticket = _timed(block.take(at), self.ctx, part.kept)
        if part.ticket is not None:
            part.ticket[at] = ticket
        self.variants = block, pos[~which], floor[~which]

    def settle(self, parts: list[_Scored], capacity: float, rank_by: str, top: int, gpus: int, drop: bool) -> tuple:
        """The rows that fit and are not dropped, of every part in row order (the first part: the rows scored, these
        among them; the second: the block variants, when any is pending), their ranking (``_order``) and what was
        dropped (``_Dropping`` and the positions kept among the rows that fit; None without ``drop``), once no row
        not timed could change what the search reports (``_unsettled``, ``_Dropping.late``): those that could are
        timed and the ranking made again. ``drop``: rows that recompute more than a twin without saving time or
        memory are dropped. Timing a pending row changes its time, and where it keeps its twin its peak (smaller:
        it still fits) and its overlap, nothing else: the rows that fit, their grid and their extrapolated features
        are found once (``_Fitting``), and each round gathers their times and peaks and the features of the rows whose
        overlap changed; the grid of the rows kept is gathered only for the plans shown (``_RowsOf``)."""
        dropping, every_row = None, _Fitting.of(parts, capacity, rank_by, gpus)
        while True:
            every_row.refresh(parts)
            dropping = (dropping or _Dropping.of(every_row.scored.grid)) if drop else None
            fitting, keep = _Dropping.fitting(dropping, every_row.scored, lazy=True)
            ext = None if every_row.extrapolated is None else every_row.extrapolated[keep]
            ranking = _order(fitting, np.arange(len(fitting.peak)), rank_by, capacity, gpus, ext)
            _, vpos, vfloor = self.variants or (None, np.zeros(0, dtype=np.int64), np.zeros(0))
            n = len(self.rows)
            if not n and not len(vpos):
                return fitting, ranking, (dropping, keep)
            every = self.positions(parts, capacity)
            pos = np.searchsorted(keep, every)  # a row not timed is never dropped (its time unknown)
            bounds = (np.concatenate([self.floor, vfloor]), *self._features(ranking.extrapolated[pos], parts, gpus))
            late = _unsettled(fitting, ranking, pos, bounds, rank_by, top, self.ctx)
            if dropping is not None:  # the twins that decide what is dropped, and the late rows' twins with them
                late |= dropping.late(fitting, ranking, keep, top, rank_by)[every]
                late |= dropping.twins_of(every[late])[every]
            if not late.any():
                return fitting, ranking, (dropping, keep)
            self.time(late[:n])
            if len(vpos):
                self.time_variants(parts[1], late[n:])

    def positions(self, parts: list[_Scored], capacity: float) -> np.ndarray:
        """Where the pending rows, then the pending block variants, are among the rows that fit of ``parts`` (in
        ``settle``'s order: the rows scored that fit, then the block variants that fit)."""
        first = np.flatnonzero(parts[0].peak <= capacity)
        pos = np.searchsorted(first, self.rows)
        if self.variants is None or not len(self.variants[1]):
            return pos
        return np.concatenate(
            [pos, len(first) + np.searchsorted(np.flatnonzero(parts[1].peak <= capacity), self.variants[1])]
        )

    def _features(self, ext: np.ndarray, parts: list[_Scored], gpus: int) -> tuple[np.ndarray, np.ndarray]:
        """The fewest and most extrapolated features of the pending rows and variants (``ext``: of the versions
        they carry): a twinned row may keep either version once timed. The other version's features are found
        once per pending row (``other``: kept along ``rows`` until the row is timed; a version's features are its
        own, whatever the round)."""
        twinned = np.zeros(len(ext), dtype=bool)
        twinned[: len(self.rows)] = (self.out[3][self.rows] & (ROW | TWIN)) == ROW | TWIN
        if self.other is None:
            off = self.grid.take(self.rows[twinned[: len(self.rows)]])
            off = replace(off, tp_comm_overlap=np.zeros(len(off), np.int8))
            self.other = np.zeros(len(self.rows), dtype=np.int64)
            self.other[twinned[: len(self.rows)]] = _bands(
                _Scored(off, None, None, parts[0].options), np.arange(len(off)), gpus
            )[1]
        other = ext.copy()
        other[: len(self.rows)] = np.where(twinned[: len(self.rows)], self.other, ext[: len(self.rows)])
        return np.minimum(ext, other), np.maximum(ext, other)


@dataclass(frozen=True, eq=False)
class _RowsOf:
    """Rows of a grid, gathered only when taken: the grid of the rows that fit and are kept, of which ``_ranked``
    takes the plans shown (every column of every such row gathered for ten plans otherwise)."""

    grid: PlanGrid
    rows: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, index) -> PlanGrid:
        return self.grid.take(self.rows[index])


@dataclass
class _Fitting:
    """The rows that fit of ``settle``'s parts, one after the other (``scored``: their grid, times, peaks and
    tickets), with each one's extrapolated features (``_bands``; None ranked by memory). Timing a pending row
    changes its time, and where it keeps its twin its peak and its --tp-comm-overlap (a twin never takes more
    memory: it still fits); ``refresh`` gathers those again and counts the features of the rows whose overlap
    changed, the other columns and features as found (where the rows that fit changed, all of it again)."""

    scored: _Scored
    fit: list[np.ndarray]  # each part's rows that fit
    extrapolated: np.ndarray | None
    capacity: float
    gpus: int
    fresh: bool = True

    @classmethod
    def of(cls, parts: list[_Scored], capacity: float, rank_by: str, gpus: int) -> _Fitting:
        fit = [np.flatnonzero(part.peak <= capacity) for part in parts]
        scored = _Scored.stack([part.take(rows) for part, rows in zip(parts, fit, strict=True)])
        ext = None if rank_by == "memory" else _bands(scored, np.arange(len(scored.peak)), gpus)[1]
        return cls(scored, fit, ext, capacity, gpus)

    def refresh(self, parts: list[_Scored]) -> None:
        """The rows' times, peaks, tickets and overlaps as ``parts`` now hold them (``_Scored.stack``'s)."""
        if self.fresh:
            self.fresh = False
            return
        fit = [np.flatnonzero(part.peak <= self.capacity) for part in parts]
        if any(not np.array_equal(a, b) for a, b in zip(fit, self.fit, strict=True)):
            rebuilt = _Fitting.of(parts, self.capacity, "memory" if self.extrapolated is None else "", self.gpus)
            self.scored, self.fit, self.extrapolated = rebuilt.scored, rebuilt.fit, rebuilt.extrapolated
            return

        def joined(values: list[np.ndarray]) -> np.ndarray:
            return values[0] if len(values) == 1 else np.concatenate(values)

        pairs = list(zip(parts, fit, strict=True))
        iteration, peak = joined([p.iteration[f] for p, f in pairs]), joined([p.peak[f] for p, f in pairs])
        kept = parts[0].kept if len(parts) == 1 or all(p.ticket is not None for p in parts) else None
        ticket = None
        if kept is not None and all(p.ticket is not None for p in parts):
            ticket = joined([p.ticket[f] for p, f in pairs])
        overlap = joined([take_column(p.grid.tp_comm_overlap, f) for p, f in pairs])
        grid = self.scored.grid
        changed = np.flatnonzero(overlap != grid.tp_comm_overlap)
        if len(changed):
            grid = PlanGrid.of_columns(
                {**{k: getattr(grid, k) for k in COLUMNS}, "tp_comm_overlap": overlap}, grid.layouts
            )
        self.scored = _Scored(grid, iteration, peak, parts[0].options, ticket, kept)
        if self.extrapolated is not None and len(changed):
            self.extrapolated = self.extrapolated.copy()
            self.extrapolated[changed] = _bands(self.scored, changed, self.gpus)[1]


@dataclass
class _Dropping:
    """The rows that fit of a search's parts (in ``settle``'s order) and their twins that differ only in the
    recomputation (``dominance.RecomputeTwins``): a row that recomputes more than a twin, is no faster and holds
    no less memory is dropped before the ranking. Whether a row is dropped needs both times; a row not timed yet
    keeps its place (its time infinite), so ``late`` asks for the twins of every row the search reports on."""

    twins: RecomputeTwins
    iteration: np.ndarray  # the rows' times and peaks as last seen (``fitting``)
    peak: np.ndarray
    dropped: np.ndarray

    @classmethod
    def of(cls, grid: PlanGrid) -> _Dropping:
        """The twins among the rows of ``grid`` (the rows that fit)."""
        keys = _family_keys(grid, None, TWIN_FIELDS)
        twins = RecomputeTwins.of(keys, tuple(np.asarray(getattr(grid, name)) for name in WORK_FIELDS))
        return cls(twins, np.zeros(0), np.zeros(0), np.zeros(len(grid), dtype=bool))

    @staticmethod
    def fitting(dropping: _Dropping | None, every: _Scored, lazy: bool = False) -> tuple[_Scored, np.ndarray]:
        """The rows of ``every`` (the rows that fit) not dropped, and their positions in it (``keep``); ``lazy``:
        their grid gathered only when taken (``_RowsOf``: the ranking reads their times, the plans shown their rows)."""
        if dropping is None:
            return every, np.arange(len(every.peak))
        dropping.iteration, dropping.peak = every.iteration, every.peak
        dropping.dropped = dropping.twins.dominated(every.iteration, every.peak)
        keep = np.flatnonzero(~dropping.dropped)
        if len(keep) == len(every.peak):
            return every, keep
        return (every.take_lazy(keep) if lazy else every.take(keep)), keep

    def late(self, fitting: _Scored, ranking: _Ranking, keep: np.ndarray, top: int, rank_by: str) -> np.ndarray:
        """The rows not timed (a mask over the rows that fit) whose times decide what is dropped among the rows the
        search reports on: the plans listed (``_standing``), the tied ones (counted), those faster than rank 1
        (``moved_down``) and those ranked before the fastest (its rank)."""
        it, none = fitting.iteration, np.zeros(0, dtype=np.int64)
        listed, _, fastest, fastest_rank, _ = _standing(it, ranking, top, rank_by) if len(it) else (none, 0, None, 0, 0)
        faster = np.flatnonzero(it < it[listed[0]]) if len(listed) else listed
        ahead = ranking.ahead(fastest) if fastest is not None and fastest_rank > top else none  # its rank counts them
        rows = keep[np.concatenate([listed, np.flatnonzero(ranking.tie), faster, ahead])]
        return self.twins.to_decide(rows, keep[listed], self.iteration, self.peak) & ~np.isfinite(self.iteration)

    def twins_of(self, rows: np.ndarray) -> np.ndarray:
        """The rows not timed whose times decide whether ``rows`` (positions among the rows that fit) are dropped
        (``RecomputeTwins.to_decide``), as a mask over the rows that fit."""
        late = self.twins.to_decide(rows, rows[:0], self.iteration, self.peak)
        return late & ~np.isfinite(self.iteration)

    @staticmethod
    def of_listed(dropped: tuple, listed: np.ndarray) -> tuple[int, int]:
        """How many rows were dropped that share their other fields with a plan listed (``listed``: positions among
        the rows kept), and how many in all (of the rows not listed, as far as the times known decide); ``dropped``:
        ``settle``'s (the ``_Dropping`` or None, the positions kept)."""
        dropping, keep = dropped
        if dropping is None:
            return 0, 0
        of_listed = np.count_nonzero(dropping.dropped & dropping.twins.sharing(keep[listed]))
        return int(of_listed), int(np.count_nonzero(dropping.dropped))


def _unsettled(fitting: _Scored, ranking: _Ranking, pos: np.ndarray, bounds: tuple, rank_by: str, top: int, ctx):
    """Which rows at ``pos`` of ``fitting``, not timed (their time infinite), could change the ranking's result
    once timed; ``bounds``: their floors and their fewest and most extrapolated features (either version kept).
    A row cannot if its floor proves it after every row shown (``_Ranking.top``), the first by risk, the
    fastest (and its rank), never tied with the first, and not faster than rank 1 (``moved_down``): each
    comparison strict, so no tie is broken by position; a NaN proves nothing."""
    floor, ext_lo, ext_hi = bounds
    it, ext = fitting.iteration, ranking.extrapolated
    eps = band_frac(ext, ctx)
    shown = ranking.top(min(top, len(it)))
    fastest = _lex_first((it,), 1)[0]
    late = np.isin(pos, shown) | (pos == fastest) | ~(floor > it[fastest])
    if not len(shown):
        return np.ones(len(pos), dtype=bool)
    rest = shown[~ranking.tie[shown]]  # shown after the tied ones
    if rank_by == "estimate":  # tied: low <= the fastest's high; the others by the estimate
        late |= ~(floor * np.exp(-band_frac(ext_hi, ctx)) > it[fastest] * np.exp(eps[fastest]))
        return late | (~(floor > it[rest[-1]]) if len(rest) else False)
    pessimistic = it * np.exp(RISK_Z * eps)

    def after(j: int) -> np.ndarray:  # surely after row j by (extrapolated, pessimistic)
        bound = floor * np.exp(RISK_Z * band_frac(ext_lo, ctx))
        return (ext_lo > ext[j]) | ((ext_lo == ext[j]) & (bound > pessimistic[j]))

    first = _lex_first((ext, pessimistic, it), 1)[0]
    late |= (pos == first) | ~after(first)
    maybe_tied = (ext_lo == ext[first]) | (ext_hi == ext[first])
    late |= maybe_tied & ~(floor * np.exp(-eps[first]) > it[first] * np.exp(eps[first]))
    if len(rest):
        late |= ~after(rest[-1])
    if not ranking.tie[fastest]:  # its rank counts the rows before it
        late |= ~((ext_hi < ext[fastest]) | after(fastest))
    return late | ~((ext_hi == 0) | (floor >= it[shown[0]]))


@dataclass
class _BlockVariants:
    """``_block_candidates`` found inside ``_with_tp_overlap_twins``' jobs, each process for the rows of its
    blocks (a block holds whole families, and the variants of a family's rows are one family of the
    variants), so they are split between the two processes with the blocks. Each group of blocks writes its
    variants (the row each comes from, its layers, time and peak) from its own offset of shared arrays, at
    most one per row without recomputation (none overlaps the expert all-to-all); ``collect`` puts them in
    the order of their rows, the order of ``_block_candidates`` (the ranking breaks ties by position)."""

    offsets: np.ndarray  # each group's first slot
    count: np.ndarray  # the variants each group found
    row: np.ndarray
    layers: np.ndarray
    iteration: np.ndarray  # a variant not timed yet (``late``) holds its floor
    peak: np.ndarray
    late: np.ndarray  # 1: fits, not timed yet (``solve`` with prune)
    capacity: float
    options: _Options
    kept: _Kept | None = None  # the search's time terms (one process): each variant's ``ticket`` to its own
    ticket: np.ndarray | None = None

    @classmethod
    def shared(cls, grid: PlanGrid, groups: list, fork: bool, capacity: float, options: _Options, kept=None):
        can = (grid.recompute == 0) & ~grid.a2a_overlap
        offsets = np.cumsum([0] + [sum(int(np.count_nonzero(can.take(rows))) for rows in group) for group in groups])
        slots, kinds = int(offsets[-1]), (np.int64, float, float, float, np.int8)  # layers come back as floats
        arrays = (parallel.shared_empty(slots, kind, fork) for kind in kinds)
        count, ticket = parallel.shared_empty(len(groups), np.int64, fork), None if kept is None else np.full(slots, -1)
        return cls(offsets, count, *arrays, capacity, options, kept, ticket)

    def base(self, grid: PlanGrid, rows: np.ndarray, peak: np.ndarray) -> np.ndarray:
        """The ``rows`` scored (``peak``) that ``_block_candidates`` takes: without recomputation, not fitting."""
        return rows[(grid.recompute.take(rows) == 0) & (peak.take(rows) > self.capacity) & ~grid.a2a_overlap.take(rows)]

    def solve(
        self, b: int, grid: PlanGrid, base: np.ndarray, off_wins: np.ndarray, later=False, prune=False, keys=None
    ):
        """The variants of group ``b``'s rows ``base`` (in row order), scored (``later``: their layers only; with
        ``prune``, those that fit hold their floor until ``time``, and their grid is returned for it);
        ``off_wins``: the rows that keep their twin without --tp-comm-overlap; ``keys``: the grid's families."""
        off = off_wins.take(base) > 0  # each row with the overlap it keeps
        # a variant's family: its row's (rows without recomputation: those knobs alike), split by the overlap kept
        families = None if keys is None else keys.take(base) * 2 + off
        ctx = self.options.evaluating
        block, src = _block_layers(grid, base, off, ctx, self.capacity, families)
        at = slice(self.offsets[b], self.offsets[b] + len(src))
        self.row[at], self.layers[at], self.late[at] = base[src], block.recompute_layers, 0
        self.count[b] = len(src)
        if prune:
            with np.errstate(divide="ignore", invalid="ignore"):
                peak = _peak_memory(block, np.arange(len(block)), ctx, self.capacity, whole=True)[0]
            fits = peak <= self.capacity
            self.peak[at], self.late[at], self.iteration[at] = peak, fits, np.inf
            self.iteration[at][fits] = _chunked(iteration_floor_s, block.take(np.flatnonzero(fits)), ctx, FLOOR_CHUNK)
            return block
        if not later:
            it, pk, _, ticket = _evaluate(block, np.arange(len(block)), ctx, self.capacity, whole=True, kept=self.kept)
            self.iteration[at], self.peak[at] = it, pk
            if self.kept is not None:
                self.ticket[at] = ticket
        return None

    def time(self, b: int, block: PlanGrid, reach: float) -> None:
        """Times group ``b``'s variants (``block``, from ``solve``) that fit and whose floor is within ``reach``."""
        at = slice(self.offsets[b], self.offsets[b] + self.count[b])
        which = np.flatnonzero((self.late[at] > 0) & ~(self.iteration[at] > reach))
        self.iteration[at][which], ticket = _timed(block.take(which), self.options.evaluating, self.kept)
        if self.kept is not None:
            self.ticket[at][which] = ticket
        self.late[at][which] = 0

    def collect(self, grid: PlanGrid, later=False, pending: _Pending | None = None) -> _Scored | PlanGrid:
        """Every block's variants, in the order of their rows (``grid``: each row with the overlap it keeps),
        scored (``later``: their grid alone, not yet evaluated); those not timed yet go to ``pending`` with their
        floors (their time infinite until then)."""
        pos = np.concatenate([np.arange(o, o + c) for o, c in zip(self.offsets, self.count, strict=False)])
        pos = pos[np.argsort(self.row[pos], kind="stable")]
        rows, n = self.row[pos], len(pos)
        block = replace(grid.take(rows), recompute=np.full(n, 2, dtype=np.int8), recompute_block=np.ones(n, bool))
        block = replace(block, recompute_layers=self.layers[pos])
        if later:
            return block
        iteration, late = self.iteration[pos], np.flatnonzero(self.late[pos] > 0)
        if pending is not None and len(late):
            pending.variants = (block, late, iteration[late])
        iteration[late] = np.inf
        ticket = None if self.kept is None else self.ticket[pos]
        return _Scored(block, iteration, self.peak[pos], self.options, ticket, self.kept)


ROW, TWIN, SMALLER = 1, 2, 4  # ``need`` flags: time the row as it is, time its twin; the twin needs less memory


def _screen_block(grid: PlanGrid, rows: np.ndarray, keys: np.ndarray, options: _Options, capacity, twins, out) -> None:
    """``_with_tp_overlap_twins``' memory on one block of whole families ``rows``: writes into ``out`` at ``rows``
    (and nowhere else) each row's peak and whether it keeps its twin without --tp-comm-overlap where memory
    decides it (neither fits: the smaller; only the twin fits: the twin), and ``need``: what is left to time
    (``ROW``, ``TWIN``, with ``SMALLER``; ``_time_rows``), and each twin's peak where it was measured (NaN elsewhere:
    ``_time_rows`` reads it). A row that fits keeps its own overlap until timed."""
    iteration, peak, off_wins, need, twin_peak = out[:5]
    order = _family_order(keys[rows], grid.micro_batch.take(rows))  # by family and micro-batch, as they come:
    rows = rows if order is None else rows[order]  # sorted once here, the twins among them need no sort of their own
    at = np.flatnonzero(grid.tp_comm_overlap[rows] > 0) if twins else rows[:0]  # the twinned rows among rows
    pos = rows[at]
    off = _Twins(grid, pos)
    (pk, state), (tw_pk, tw_state) = _block_peaks(grid, rows, off, at, options, capacity, keys[rows])
    fits, tw_fits = pk <= capacity, tw_pk <= capacity
    smaller = _Twin(state[at], tw_state, pk[at], tw_pk).smaller(off, options)
    code = np.where(fits, ROW, 0).astype(np.int8)
    code[at] |= np.where(fits[at] | tw_fits, TWIN, 0) | np.where(smaller, SMALLER, 0)
    # decided by memory: neither fits (the smaller; its time infinite), or only the twin does and its peak is
    # below the row's (kept whatever its time; a twin is timed even so). Left for later: rows that fit
    better = ~fits[at] & smaller
    code[at[~fits[at] & ~tw_fits]] = 0
    unknown = np.flatnonzero(better & np.isnan(tw_pk))  # kept twins whose peak was not measured
    with np.errstate(divide="ignore", invalid="ignore"):
        for start in range(0, len(unknown), CHUNK):
            part = unknown[start : start + CHUNK]
            tw_pk[part] = peak_memory_bytes(off.take(part), options.evaluating)
    pk[at[better]] = tw_pk[better]
    iteration[rows], peak[rows], need[rows] = np.inf, pk, code
    if twin_peak is not None:
        twin_peak[rows] = np.nan
        twin_peak[pos] = np.where(tw_state == MEASURED, tw_pk, np.nan)
    off_wins[rows] = 0
    off_wins[pos[better]] = 1
    odd = pos[~fits[at] & tw_fits & ~smaller]  # a row whose peak is NaN: its twin is kept if its time is finite
    if len(odd):
        _time_rows(grid, odd, options.evaluating, out)


def _block_peaks(grid: PlanGrid, rows, off: _Twins, at, options: _Options, capacity: float, keys) -> tuple:
    """The peaks and states (``_by_family_states``) of the ``rows`` of the grid (``keys``: their families, sorted) and
    of their twins ``off`` (the rows ``at`` among them, without the overlap). A large block: the rows' peaks in
    place, then their twins' (``_twins``: one copy of the twins only, NaN where the row fits); a small one in one
    screening. Each call of the cost functions costs milliseconds whatever its rows (the terms computed once
    per distinct shape: ``Letters.once``), so the fewer the better."""
    ctx = options.evaluating
    with np.errstate(divide="ignore", invalid="ignore"):
        if len(rows) > CHUNK:
            peak, state = _peak_memory(grid, rows, ctx, capacity, keys)
            tw_peak, tw_state, _ = _twins(off, peak[at] <= capacity, keys[at], ctx, capacity)
            return (peak, state), (tw_peak, tw_state)
        family = np.zeros(len(keys), dtype=np.intp)  # renumbered below len(rows): the twins' come after. The keys
        np.cumsum(keys[1:] != keys[:-1], out=family[1:])  # come sorted: each one's rank, as np.unique's inverse
        both = _Twins(grid, np.concatenate([rows, off.rows]), len(rows), at)  # a twin measured with its row
        pk, state = _peak_memory(
            both, np.arange(len(both)), ctx, capacity, np.concatenate([family, family[at] + len(rows)])
        )
    n = len(rows)
    return (pk[:n], state[:n]), (pk[n:], state[n:])


def _time_rows(grid: PlanGrid, rows: np.ndarray, ctx: Context, out) -> None:
    """Times what ``need`` asks of ``rows`` (the row as it is, its twin without --tp-comm-overlap) and keeps
    each twinned row's faster version, or the one ``out``'s rule names (``_twin_rule``: the version the runs support
    unless only the other fits), or where the row's time is not finite, the smaller (``SMALLER``); a row
    that takes its twin takes the twin's peak (measured here where ``_screen_block`` did not: in a large block a
    twin that fits is not screened where its row fits). Under a rule, a version the rule cannot keep is not timed
    (``_timed_versions``)."""
    iteration, peak, off_wins, need, twin_peak, ticket, kept, rule = out
    mine, tw, it, tw_it, tickets = _timed_versions(grid, rows, need[rows], ctx, kept, rule)
    iteration[mine] = it
    own = np.where((need[tw] & ROW) > 0, iteration[tw], np.inf)
    unfit = ~np.isfinite(own) & ((need[tw] & SMALLER) > 0)  # the row does not fit: the smaller is kept
    if rule == KEEP_OVERLAP:  # the twin only where the row does not fit
        better = ~np.isfinite(own) & ((tw_it < own) | unfit)
    elif rule == KEEP_TWIN:  # the twin wherever it has a time
        better = np.isfinite(tw_it) | unfit
    else:
        better = (tw_it < own) | unfit
    iteration[tw[better]] = tw_it[better]
    if kept is not None:  # each row's ticket: the version whose time it keeps
        ticket[mine] = tickets[0]
        ticket[tw[better]] = tickets[1][better]
    flip = np.flatnonzero(better & (off_wins[tw] == 0))  # rows that kept their own overlap until now
    unknown = flip
    if twin_peak is not None:
        peak[tw[flip]] = twin_peak[tw[flip]]
        unknown = flip[np.isnan(twin_peak[tw[flip]])]
    with np.errstate(divide="ignore", invalid="ignore"):
        for start in range(0, len(unknown), CHUNK):
            part = unknown[start : start + CHUNK]
            peak[tw[part]] = peak_memory_bytes(_Twins(grid, tw).take(part), ctx)
    off_wins[tw[flip]] = 1
    need[rows] = 0


# rows timed both ways from which a version no rule keeps is left untimed (``_timed_versions``). Below, it costs more
# than it saves: the versions left out are the shapes the block and hybrid variants are evaluated with (they keep
# their row's overlap), whose terms (``Letters.once``) are then computed in a second call, a millisecond or so of
# Python (GPT-3 175B / 64 A100, 795 such rows: +3.6 M instructions a search; 1024 A100, 3,200: -4.8 M; DeepSeek-V3 /
# 1024 H100, 65,668: -569 M, callgrind)
SPLIT_FROM = 1024


def _timed_versions(grid: PlanGrid, rows: np.ndarray, code: np.ndarray, ctx: Context, kept, rule: int) -> tuple:
    """``_time_rows``' timings of ``rows`` (``code``: their ``need``): (the rows timed as they are, those timed as
    their twins without --tp-comm-overlap, ``iteration_s`` of each, and with ``kept`` their tickets, else None). Of a
    row timed both ways, ``_time_rows`` reads the version its ``rule`` does not keep (``KEEP_TWIN`` keeps the twin,
    ``KEEP_OVERLAP`` the row) only where the kept version's time is not finite: that version is timed only there,
    after the others, and is NaN (ticket -1) elsewhere, never read (on DeepSeek-V3 / 1024 H100, 47 % of the timings
    were of versions no rule could keep). ``BY_TIME``, or fewer than ``SPLIT_FROM`` rows timed both ways: every
    version, in one timing. A row's time does not depend on the rows timed with it, so every time read is the same
    either way."""
    is_row, is_twin = (code & ROW) > 0, (code & TWIN) > 0
    mine, tw = rows[is_row], rows[is_twin]
    both = is_row & is_twin
    k = 0 if rule == KEEP_TWIN else 1  # the version timed only where needed: the row's own (KEEP_TWIN) or its twin
    split = rule != BY_TIME and np.count_nonzero(both) >= SPLIT_FROM
    later = [np.zeros(len(mine), bool), np.zeros(len(tw), bool)]
    if split:
        later[k] = both[(is_row, is_twin)[k]]
    times = [np.full(len(mine), np.nan), np.full(len(tw), np.nan)]
    tickets = None if kept is None else [np.full(len(mine), -1), np.full(len(tw), -1)]
    now = [np.flatnonzero(~later[0]), np.flatnonzero(~later[1])]
    _timed_into(grid, (mine[now[0]], tw[now[1]]), now, times, tickets, ctx, kept)
    if split:  # the version not kept, where the kept one has no finite time (in ``rows``' order in both lists)
        kept_time = times[1 - k][both[(is_row, is_twin)[1 - k]]]
        redo = [np.zeros(0, dtype=np.intp)] * 2
        redo[k] = np.flatnonzero(later[k])[~np.isfinite(kept_time)]
        if len(redo[k]):
            _timed_into(grid, (mine[redo[0]], tw[redo[1]]), redo, times, tickets, ctx, kept)
    return mine, tw, times[0], times[1], tickets


def _timed_into(grid: PlanGrid, versions: tuple, at: list, times: list, tickets, ctx: Context, kept) -> None:
    """Times the rows ``versions[0]`` as they are and ``versions[1]`` as their twins (one ``_timed``), into
    ``times[v][at[v]]`` (and ``tickets[v][at[v]]`` with ``kept``)."""
    own, twin = versions
    t, k = _timed(_Twins(grid, np.concatenate([own, twin]), len(own)), ctx, kept)
    times[0][at[0]], times[1][at[1]] = t[: len(own)], t[len(own) :]
    if tickets is not None:
        tickets[0][at[0]], tickets[1][at[1]] = k[: len(own)], k[len(own) :]


def _twin_rule(ctx: Context, rank_by: str) -> int:
    """How ``_time_rows`` chooses between a row with --tp-comm-overlap and its twin without (both TP with sequence
    parallelism): ranked by the evidence (``rank_by`` risk), the version whose setting some published run of the
    GPU generation exercises (``evidence`` kind ``tp_overlap``: 1 with the overlap, 3 in a MoE model, 2 without), as
    the ranking
    would put it first, and the faster where both or neither are exercised; ranked by the estimate or memory, the
    faster. No Ampere run overlaps (``KEEP_TWIN``); Hopper has both (``BY_TIME``); so has Blackwell since the NeMo
    performance summary's Mixtral 8x22B rows (TP2 with SP, no TP overlap; held out), where every other Blackwell run
    with TP > 1 in the bar overlaps - before them it kept the overlap (``KEEP_OVERLAP``: the estimate's gain from
    turning it off rests on the GEMM law's price of the userbuffer chunks alone, docs/cost-model.md §6.3.1). A MoE
    plan's overlap
    counts the generation's MoE runs (``_overlap_code``): Megatron-Bridge's Hopper MoE recipes turn it off, DGX Cloud's
    Grok-1 recipe (NeMo 2, TP4, held out) runs it on H100 and GB200, so with the Mixtral rows both generations have MoE
    runs with it and without it (``BY_TIME``)."""
    if rank_by != "risk":
        return BY_TIME
    counts = generation_counts(generation(ctx.hardware))["tp_overlap"]
    on, off = counts.get(_overlap_code(ctx), 0) > 0, counts.get(2, 0) > 0
    return BY_TIME if on == off else (KEEP_OVERLAP if on else KEEP_TWIN)


def _overlap_code(ctx: Context) -> int:
    """The ``tp_overlap`` evidence code of the TP comm overlap in ``ctx``'s model: 1 dense, 3 MoE (a MoE plan's
    overlap is what the generation's MoE runs exercise: Hopper's turn it off, ``evidence.feature_codes``)."""
    return 3 if ctx.model.is_moe else 1


def _twin_rule_text(ctx: Context, rule: int) -> str:
    """What search says of ``rule`` (``SearchResult.tp_overlap_rule``), naming the runs it follows: the generation's,
    or its MoE runs' where the overlap is a MoE model's (no MoE run of the generation uses it)."""
    text = MOE_KEEP_TWIN if ctx.model.is_moe and rule == KEEP_TWIN else TWIN_RULES[rule]
    return text.format(generation=generation_name(generation(ctx.hardware)))


def _timed(rows: PlanGrid | _Twins, ctx: Context, kept: _Kept | None) -> tuple[np.ndarray, np.ndarray | None]:
    """``iteration_s`` of the ``rows`` (a grid, or rows and twins in the same evaluations), one evaluation per
    CHUNK rows (a plan's time does not depend on the others evaluated with it); with ``kept``, their tickets to
    their time terms (``_Kept``), else None."""
    out = np.empty(len(rows))
    tickets = None if kept is None else np.empty(len(rows), dtype=np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        for start in range(0, len(rows), CHUNK):
            whole = isinstance(rows, PlanGrid) and len(rows) <= CHUNK  # a grid read whole: no copy of its rows
            part = slice(start, start + CHUNK)
            out[part], t = _time(rows if whole else rows.take(part), ctx, kept)
            if kept is not None:
                tickets[part] = t
    return out, tickets


@dataclass(frozen=True, eq=False)
class _Twins(_LazyRows):
    """Rows of a grid, those from position ``start`` on as their twins without --tp-comm-overlap, gathered only
    when taken: ``take`` gives what ``PlanGrid.stack(grid.take(rows[:start]), replace(grid.take(rows[start:]),
    tp_comm_overlap=0))`` would, without that copy of every row (a screening measures a few of them at a time)."""

    start: int = 0
    row_of: np.ndarray | None = None  # each twin's row's position among the first ``start`` (if they hold it)

    def take(self, index) -> PlanGrid:
        """The rows at ``index`` (positions or a slice), the twins among them without the overlap."""
        grid = self.grid.take(self.rows[index])
        twin = np.arange(len(self.rows))[index] >= self.start
        if not twin.any():
            return grid
        overlap = np.array(grid.tp_comm_overlap)  # a copy: a column of one value is a read-only view
        overlap[twin] = 0
        return replace(grid, tp_comm_overlap=overlap)


def _twins(off: _Twins, row_fits: np.ndarray, keys: np.ndarray, ctx: Context, capacity: float) -> tuple:
    """The peaks of the twins ``off`` (``keys``: their families), knowing which of their rows fit, how each
    was found (``_by_family_states``), and which twins fit (to be timed). A twin whose row fits fits too (its
    userbuffers and workspaces gone: ``_Twin.smaller``), so its memory is not measured and its peak is NaN
    (``_score_block`` measures the peak of those it keeps). The others are measured as ``_evaluate`` measures;
    where their family has a row that fits, its smallest micro-batches fit without the overlap too, so a value
    bounded after a twin that fails is a ``MID_BOUND``."""
    n, sure = len(off), np.flatnonzero(row_fits)
    rest = np.flatnonzero(~row_fits)
    peak, state = np.full(n, np.nan), np.full(n, MEASURED, dtype=np.int8)
    with np.errstate(divide="ignore", invalid="ignore"):
        peak[rest], state[rest] = _peak_memory(off, rest, ctx, capacity, keys[rest])
    head = rest[state[rest] == HEAD_BOUND]
    state[head[_found(keys[head], keys[sure])]] = MID_BOUND
    return peak, state, row_fits | (peak <= capacity)


def _found(values: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """``np.isin(values, pool)``, sorting the pool alone (the fewer: the twins whose row fits) and searching it."""
    if not len(pool):
        return np.zeros(len(values), dtype=bool)
    pool = np.sort(pool)
    at = np.minimum(np.searchsorted(pool, values), len(pool) - 1)
    return pool[at] == values


@dataclass
class _Twin:
    """The peaks of rows that do not fit (``row``) and of their twins without --tp-comm-overlap (``twin``),
    as ``_by_family_states`` found them (``row_state``, ``twin_state``)."""

    row_state: np.ndarray
    twin_state: np.ndarray
    row: np.ndarray
    twin: np.ndarray

    def smaller(self, twins: _Twins, options: _Options) -> np.ndarray:
        """Whether each twin's peak is below its row's, as measuring each plan whose smaller micro-batch
        fits would find it. Where a family's larger micro-batch was left unmeasured (``MID_BOUND``), the
        twin's peak is below its row's: the two differ only in --tp-comm-overlap, whose userbuffers and
        workspaces only add to each stage (``stage_memory._process_bytes``), and both families' smallest
        micro-batch fits. Where the row's family failed at its smallest micro-batch (``HEAD_BOUND``, that
        value) and the twin's later, the twin is measured unless its bound already settles it."""
        smaller = self.twin < self.row
        same = self.row == self.row  # a NaN peak (a split the model cannot take) is never above another
        proven = same & (
            (self.row_state == MID_BOUND) | ((self.row_state == MEASURED) & (self.twin_state == MID_BOUND))
        )
        open_ = np.flatnonzero(same & (self.row_state == HEAD_BOUND) & (self.twin_state == MID_BOUND) & smaller)
        if len(open_):
            with np.errstate(divide="ignore", invalid="ignore"):
                exact = peak_memory_bytes(twins.take(open_), options.evaluating)
            smaller[open_] = exact < self.row[open_]
        return smaller | proven


def _family_blocks(grid: PlanGrid, idx: np.ndarray, size: int, key: np.ndarray) -> list[np.ndarray]:
    """The rows ``idx`` in blocks of about ``size`` rows, each holding whole families (``key``, their
    ``_family_keys``): a block is a range of keys, cut near every size-th key in sorted order (read on every
    ``SAMPLE``-th row, sorted: the rows are never sorted whole), its rows in their order, so ``_by_family``
    measures the same row of each family."""
    if len(idx) <= size:
        return [idx]
    step = max(size // SAMPLE, 1)
    sample = np.sort(key[::step])
    cuts = distinct(sample[size // step :: size // step])  # keys starting a block (the first at key ≥ each)
    if len(cuts) > FEW_CUTS:
        block = np.searchsorted(cuts, key, side="right").astype(np.int16)
        order = np.argsort(block, kind="stable")  # a radix sort of small integers
        return [part for part in np.split(idx[order], np.cumsum(np.bincount(block))[:-1]) if len(part)]
    block, reached = np.zeros(len(key), dtype=np.int8), np.empty(len(key), dtype=bool)
    for cut in cuts:  # each row's block: the cuts its key reaches (``np.searchsorted(cuts, key, side="right")``)
        np.greater_equal(key, cut, out=reached)
        block += reached
    return [part for part in (idx[block == b] for b in range(len(cuts) + 1)) if len(part)]


FEW_CUTS = 16  # up to this many cuts (DeepSeek-V3 / 1024 H100: 8), each block's rows are found by a pass over the
# rows' blocks (in row order) rather than by sorting the rows by block: a few passes over bytes, no sort


SAMPLE = 1024  # rows of a block the cuts between blocks are read on (their keys, every size/SAMPLE-th row)


def _full_allowed(pins: Pins) -> bool:
    allowed = pins.recompute if isinstance(pins.recompute, tuple) else (pins.recompute,)
    return pins.recompute is None or any(r is not None and r.value == "full" for r in allowed)


def _bands(scored: _Scored, rows: np.ndarray, gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's band ε (``evidence.band_frac``) and its count of extrapolated features (with its own overlaps)."""
    ctx, extrapolated = scored.options.evaluating, np.zeros(len(rows), dtype=np.int64)
    every = len(rows) == len(scored.grid) and np.array_equal(rows, np.arange(len(rows)))  # settle's: every row
    for start in range(0, len(rows), CHUNK):  # in chunks: every feature's code is an array per row
        part = slice(start, start + CHUNK) if every else rows[start : start + CHUNK]  # a slice: views, no copies
        extrapolated[start : start + CHUNK] = extrapolated_features(scored.grid.take(part), ctx, gpus)
    return band_frac(extrapolated, ctx), extrapolated


@dataclass
class _Ranking:
    """The feasible rows ``ok`` in rank order (``RANK_RULES``), without sorting them all: the rows tied
    with the first (``tie``) come first, by ``keys``, then the others by ``rest_keys`` (each most
    significant first; equal keys by row); ``extrapolated``: each row's features no setting exercises."""

    tie: np.ndarray
    keys: tuple
    rest_keys: tuple
    extrapolated: np.ndarray

    def top(self, k: int) -> np.ndarray:
        """The positions in ``ok`` of the first k rows."""
        tied, rest = np.flatnonzero(self.tie), np.flatnonzero(~self.tie)
        first = tied[_lex_first(tuple(key[tied] for key in self.keys), min(k, len(tied)))]
        more = rest[_lex_first(tuple(key[rest] for key in self.rest_keys), k - len(first))]
        return np.concatenate([first, more])

    def rank(self, j: int) -> int:
        """The rank (from 1) of the row at position j of ``ok``."""
        group, keys = (self.tie, self.keys) if self.tie[j] else (~self.tie, self.rest_keys)
        rows = np.flatnonzero(group)
        before = _lex_rank(tuple(key[rows] for key in keys), int(np.searchsorted(rows, j)))
        return before + 1 + (0 if self.tie[j] else int(np.sum(self.tie)))

    def ahead(self, j: int) -> np.ndarray:
        """The positions in ``ok`` of the rows ranked before the row at position j (``rank`` counts them)."""
        group, keys = (self.tie, self.keys) if self.tie[j] else (~self.tie, self.rest_keys)
        rows = np.flatnonzero(group)
        before = rows[_lex_before(tuple(key[rows] for key in keys), int(np.searchsorted(rows, j)))]
        return before if self.tie[j] else np.concatenate([np.flatnonzero(self.tie), before])


def _lex_first(keys: tuple, k: int) -> np.ndarray:
    """Positions of the k rows first by ``keys`` (most significant first, equal keys by position), in that
    order: ``np.lexsort(keys[::-1])[:k]``, sorting only the rows that can be among them (each key's
    k-th value bounds the others; NaN sorts last, as in lexsort)."""
    n = len(keys[0]) if keys else 0
    k = max(min(k, n), 0)
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    sure, cand = np.zeros(0, dtype=np.int64), np.arange(n)
    for key in keys:
        need = k - len(sure)
        if len(cand) <= need or need <= 0:
            break
        v = key[cand]
        bound = np.partition(v, need - 1)[need - 1]
        if bound != bound:  # NaN: every candidate stays
            break
        sure, cand = np.concatenate([sure, cand[v < bound]]), cand[v == bound]
    rows = np.sort(np.concatenate([sure, cand]))
    return rows[np.lexsort(tuple(key[rows] for key in reversed(keys)))[:k]]


def _lex_rank(keys: tuple, i: int) -> int:
    """How many rows come before row i by ``keys`` (most significant first, equal keys by position)."""
    return int(np.count_nonzero(_lex_before(keys, i)))


def _lex_before(keys: tuple, i: int) -> np.ndarray:
    """Which rows come before row i by ``keys`` (a mask; most significant first, equal keys by position)."""
    n = len(keys[0])
    before, same = np.zeros(n, dtype=bool), np.ones(n, dtype=bool)
    for key in keys:
        before |= same & (key < key[i])
        same &= key == key[i]
    before[:i] |= same[:i]
    return before


def _order(scored: _Scored, ok: np.ndarray, rank_by: str, capacity: float, gpus: int, extrapolated=None) -> _Ranking:
    """The feasible rows ``ok`` ranked (``RANK_RULES``): which are tied with the first, and each group's keys;
    ``extrapolated``: the rows' extrapolated features where known (``_bands``' count), else found here."""
    it, pk = scored.iteration[ok], scored.peak[ok]
    if rank_by == "memory":
        return _Ranking(np.zeros(len(ok), dtype=bool), (), (pk, it), np.zeros(len(ok), dtype=np.int64))
    if extrapolated is None:
        eps, extrapolated = _bands(scored, ok, gpus)
    else:
        eps = band_frac(extrapolated, scored.options.evaluating)
    low, high, pessimistic = it * np.exp(-eps), it * np.exp(eps), it * np.exp(RISK_Z * eps)
    tight = pk > TIGHT_FRAC * capacity  # leaves less than 10 % of what a plan may fill
    if rank_by == "risk":
        first = _lex_first((extrapolated, pessimistic, it), 1)[0]
        tie = (extrapolated == extrapolated[first]) & (low <= high[first])
        return _Ranking(tie, (tight, pessimistic, it), (extrapolated, pessimistic, it), extrapolated)
    fastest = np.argmin(it)
    tie = low <= high[fastest]
    return _Ranking(tie, (extrapolated, tight, it), (it,), extrapolated)


def _ranked(
    ctx,
    num_gpus,
    scored,
    fits,
    top,
    rank_by,
    memory_headroom,
    evaluated,
    rejected,
    ranking=None,
    dropped=None,
    *,
    brief=False,
) -> SearchResult:
    """What a search reports of the rows ``fits`` of ``scored`` (``dropped``: ``_Pending.settle``'s, the rows
    dropped before the ranking: counted in ``feasible``, and those sharing their fields with a plan shown)."""
    capacity = usable_bytes(ctx.hardware.memory.allocatable_bytes, memory_headroom)
    ok = np.flatnonzero(fits)
    ranking = _order(scored, ok, rank_by, capacity, num_gpus) if ranking is None else ranking
    shown, ranks, fastest, fastest_rank, moved = _standing(scored.iteration[ok], ranking, top, rank_by)
    of_shown, dropped = _Dropping.of_listed(dropped or (None, ok), ok[shown])
    chosen, fastest_row = ok[shown], (ok[fastest] if fastest is not None else -1)
    best = scored.grid.take(chosen)  # one evaluation: each row carries its own overlaps
    time = scored.terms(chosen)  # as the search computed them (None: evaluated again)
    marks = [(bool(ranking.tie[s]), bool(i == fastest_row), r) for s, i, r in zip(shown, chosen, ranks, strict=True)]
    return SearchResult(
        lambda: _plans_json(best, scored.options, num_gpus, marks, memory_headroom, brief, time),
        evaluated,
        int(np.sum(fits)) + dropped,  # legal and fit: the dropped too
        rejected,
        tied=int(np.sum(ranking.tie)),
        band_frac=float(band_parts(ctx)[0]),  # a plan whose every feature has runs behind it (MoE, NVFP4: theirs)
        fastest_rank=fastest_rank,
        rank_by=rank_by,
        moved_down=moved,
        dropped_twins=of_shown,
    )


def _plans_json(best: PlanGrid, options: _Options, num_gpus: int, marks: list, headroom, brief: bool, time=None):
    """The plan JSON of the rows of ``best`` (``SearchResult.plans``), each with its options and its ``marks``
    (tied with the fastest, the fastest, its rank); ``brief``: ``result.brief_plan_json``; ``time``: their time
    terms as the search computed them (``evaluate``'s ``time``; None: computed here)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ev = evaluate(best, options.evaluating, time=time)
    shared = None if brief else Shared(plan_evidence(best, options.evaluating, num_gpus))  # once for the rows
    plans = []
    for j, (k, (tied, fastest, rank)) in enumerate(zip(options.codes(best), marks, strict=True)):
        if brief:  # validate's 239 fitting plans: 7 % of its time went to JSON it never read
            plans.append({**brief_plan_json(options.contexts[k], best, ev, j), "rank": rank})
            continue
        pj = plan_json(options.contexts[k], num_gpus, best, ev, j, [], headroom, shared)
        pj.update(tied_with_fastest=tied, fastest=fastest)
        plans.append({**pj, "rank": rank})
    return plans


def _standing(it: np.ndarray, ranking: _Ranking, top: int, rank_by: str) -> tuple:
    """What a search reports of the ``ranking`` of rows whose times are ``it``: the positions shown in order (the
    fastest after them, with its own rank, where the ranking puts it below the top), their ranks, the fastest's
    position and rank, and how many plans faster by estimate than rank 1 are below it for evidence."""
    shown = ranking.top(min(top, len(it)))
    if rank_by == "memory":  # no mark: "*" (the fastest estimate) stood on the least-memory plan, unexplained (ux15)
        return shown, list(range(1, len(shown) + 1)), None, 1, 0
    fastest = _lex_first((it,), 1)[0]
    fastest_rank = ranking.rank(fastest)
    ranks = list(range(1, len(shown) + 1))
    if fastest_rank > top:  # the ranking puts it below the top N: it is shown after them with its own rank
        ranks.append(fastest_rank)
        shown = np.append(shown, fastest)
    moved = 0
    if rank_by == "risk":  # plans faster by estimate than rank 1, below it for a feature no setting exercises
        moved = int(np.sum(ranking.extrapolated[it < it[shown[0]]] > 0))
    return shown, ranks, fastest, fastest_rank, moved


def _peak_memory(grid: PlanGrid, idx: np.ndarray, ctx: Context, capacity: float, keys=None, whole=False) -> tuple:
    """Peak memory of the plans ``idx`` of the grid, the plans that cannot fit bounded from below, and how
    each was found (``_by_family_states``).

    A plan's memory never falls as its micro-batch grows: weights and states do not depend on b, and
    every activation term holds b·s tokens per micro-batch times min(micro-batches in flight, m),
    which is min((p − i)·b, B/d) micro-batch-sequences for 1F1B (and alike for the interleaved
    schedule); and it does not depend on the MoE dispatcher (the all-to-all overlap keeps one more
    warm-up chunk, so it does). So the plans that differ only in the dispatcher are measured once per
    micro-batch, smallest first; once one does not fit, the larger ones get its peak, a lower bound,
    and are not measured (``_by_family_states``)."""

    def measure(pos: np.ndarray) -> np.ndarray:
        out = np.empty(len(pos))
        with np.errstate(divide="ignore", invalid="ignore"):
            for start in range(0, len(pos), CHUNK):
                part = pos[start : start + CHUNK]
                out[start : start + CHUNK] = _peaks(grid, idx[part], ctx)
        return out

    return _by_family_states(grid, idx, measure, lambda peak: peak > capacity, keys, whole)


def _peaks(grid: PlanGrid | _Twins, at: np.ndarray, ctx: Context) -> np.ndarray:
    """``peak_memory_bytes`` of the plans ``at`` of the grid; of a ``_Twins`` with ``row_of``, each twin whose row
    is among them in its row's evaluation (``peak_memory_bytes_and_twins``: the same numbers, without evaluating
    the twin apart: a screening measures most twins with their rows)."""
    if not isinstance(grid, _Twins) or grid.row_of is None:
        return peak_memory_bytes(_taken(grid, at), ctx)
    twin = at >= grid.start
    where = np.full(grid.start, -1)  # each row's place in ``at`` (-1: not there)
    where[at[~twin]] = np.flatnonzero(~twin)
    tw = np.flatnonzero(twin)
    row = where.take(grid.row_of.take(at[tw] - grid.start))
    paired, row = tw[row >= 0], row[row >= 0]
    if not len(paired):
        return peak_memory_bytes(grid.take(at), ctx)
    own = np.ones(len(at), dtype=bool)
    own[paired] = False
    place = np.cumsum(own) - 1  # each plan's place among those evaluated
    out = np.empty(len(at))
    out[own], out[paired] = peak_memory_bytes_and_twins(grid.take(at[own]), ctx, place.take(row))
    return out


SAME_MEMORY = ("dispatcher",)  # knobs a plan's memory does not depend on
FAMILY_FIELDS = tuple(f for f in FIELDS if f not in ("micro_batch", "layouts", *SAME_MEMORY))
# the fields recompute twins share (``_Dropping``): all but the recomputation, and the TP overlap each row picks
TWIN_FIELDS = tuple(f for f in FIELDS if f not in ("layouts", "tp_comm_overlap", *WORK_FIELDS))


def _by_family(grid: PlanGrid, idx: np.ndarray, measure, fails, keys=None) -> np.ndarray:
    """``_by_family_states``' values alone."""
    return _by_family_states(grid, idx, measure, fails, keys, whole=True)[0]


MEASURED, HEAD_BOUND, MID_BOUND = 0, 1, 2  # how ``_by_family_states`` gave a plan its value (HEAD = MID - 1)
# plans ``_by_family_states`` measures in one call, every micro-batch: a call of the cost functions costs about a
# millisecond, more than measuring the few plans a second round could leave out (a search's block and hybrid
# variants: 398 of 398 and 422 of 577 measured in two calls on GPT-3 175B / 64 A100)
ONE_CALL = 1024


def _by_family_states(grid: PlanGrid, idx: np.ndarray, measure, fails, keys=None, whole=False) -> tuple:
    """A value per plan of ``idx`` that never improves as the micro-batch grows and does not depend on
    ``SAME_MEMORY`` (peak memory; block recomputation's layers): ``measure`` (positions in idx → values)
    runs once per family and micro-batch, smallest micro-batch first, in rounds: a family's next
    micro-batch is measured only while none of its smaller ones ``fails``; the micro-batches above the
    first that fails take its value (a lower bound) and are not measured (with ``whole``, the caller reading
    the values alone, at most ``ONE_CALL`` (family, micro-batch) pairs are all measured, in one call). Also
    each plan's state: ``MEASURED``, ``HEAD_BOUND`` (its family's smallest micro-batch failed: that value)
    or ``MID_BOUND`` (a larger one failed first: a lower bound of what measuring it would give, never below
    the capacity). ``keys``: the plans' ``_family_keys``, or any numbering equal exactly where theirs is."""
    if not len(idx):
        return np.empty(0), np.zeros(0, dtype=np.int8)
    b = grid.micro_batch.take(idx)
    subs = _Subs.of(_family_keys(grid, idx) if keys is None else keys, b)
    n, value = subs.n, np.empty(subs.n)
    measured, failed_at = np.zeros(n, dtype=bool), np.full(subs.families, n)  # each family's first failing sub
    one_call, failed = whole and n <= ONE_CALL, False  # failed: some family has failed (else none to leave out)
    for todo in subs.rounds(one_call):  # families none of whose smaller ones failed, a few calls of measure
        if failed:
            todo = todo[failed_at.take(subs.family.take(todo)) == n]
        if not len(todo):
            break
        value[todo], measured[todo] = _measured(measure, subs.reps.take(todo), len(idx)), True
        bad = todo[fails(value[todo])]
        if len(bad):
            np.minimum.at(failed_at, subs.family.take(bad), bad)
            failed = True
    sub_state = np.zeros(n, dtype=np.int8)  # MEASURED
    bounded = np.flatnonzero(~measured)  # each above its family's first failing sub (a smaller rank: measured first)
    if len(bounded):
        first_fail = failed_at.take(subs.family.take(bounded))
        value[bounded] = value.take(first_fail)
        # HEAD_BOUND where the first failing sub is its family's head, else MID_BOUND (one op, in int8)
        sub_state[bounded] = np.subtract(MID_BOUND, subs.head.take(first_fail), dtype=np.int8)
    return subs.per_plan(value), subs.per_plan(sub_state)


@dataclass
class _Subs:
    """The plans of ``_by_family_states`` by (family, micro-batch) pair, "subs", numbered by family, then
    micro-batch: each sub's plan standing for it (``reps``), its family's number (``family``), whether it is its
    family's smallest micro-batch (``head``); each plan's sub (``sub``; None: the plans are the subs, in order)."""

    reps: np.ndarray
    family: np.ndarray
    head: np.ndarray
    sub: np.ndarray | None
    order: np.ndarray | None  # the plans in sub order (``_family_order``; None: as they come)

    @property
    def n(self) -> int:
        return len(self.reps)

    @property
    def families(self) -> int:
        return int(self.family[-1]) + 1

    @classmethod
    def of(cls, family: np.ndarray, b: np.ndarray) -> _Subs:
        order = _family_order(family, b)  # None: in that order already
        ranked, ranked_b = (family, b) if order is None else (family.take(order), b.take(order))
        new_family = np.empty(len(family), dtype=bool)
        new_family[0] = True
        np.not_equal(ranked[1:], ranked[:-1], out=new_family[1:])
        new_sub = new_family.copy()
        new_sub[1:] |= ranked_b[1:] != ranked_b[:-1]
        number = np.cumsum(new_family)
        number -= 1
        if np.count_nonzero(new_sub) == len(new_sub):  # every plan its own sub (one dispatcher: the dense grids)
            reps = np.arange(len(family)) if order is None else order
            return cls(reps, number, new_family, None, order)
        sub = np.cumsum(new_sub)
        sub -= 1
        reps = np.flatnonzero(new_sub) if order is None else order[new_sub]
        return cls(reps, number[new_sub], new_family[new_sub], sub, order)

    def rounds(self, one_call: bool):
        """The subs of each round, by rank in their family (0: its smallest micro-batch): ``one_call``: all at once;
        else the ranks [0, 0], [1, top], [top + 1, top·(top + 1)], ... (few subs: every other one in the second)."""
        if one_call:
            yield np.arange(self.n)
            return
        yield np.flatnonzero(self.head)
        if self.n <= CHUNK:  # top = n: every rank above 0 in the second round
            yield np.flatnonzero(~self.head)
            return
        at = np.flatnonzero(self.head)
        rank = np.arange(self.n) - at.take(self.family)
        low, high, top, most = 1, 2, 2, int(rank.max())
        while low <= most:
            yield np.flatnonzero((rank >= low) & (rank <= high))
            low, high = high + 1, top * (high + 1)

    def per_plan(self, x: np.ndarray) -> np.ndarray:
        """A value per sub as a value per plan."""
        x = x if self.sub is None else x.take(self.sub)
        if self.order is None:
            return x
        out = np.empty_like(x)
        out[self.order] = x
        return out


def _measured(measure, pos: np.ndarray, n: int) -> np.ndarray:
    """``measure(pos)``; where ``pos`` holds each of the n plans once, measured in their order and read back at
    ``pos`` (the same values: a plan's is its own; ``_taken`` then gathers no row)."""
    if len(pos) == n:
        return measure(np.arange(n)).take(pos)
    return measure(pos)


def _family_order(family: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """The order that sorts plans by family, then micro-batch, equal ones as they come (``np.lexsort``); None
    where they come in that order already (the rows of ``_family_blocks``: whole families in row order, and
    the candidate grid crosses the micro-batch before every other knob a family holds), so nothing is sorted."""
    if np.all(family[1:] >= family[:-1]) and np.all((b[1:] >= b[:-1]) | (family[1:] != family[:-1])):
        return None
    # where each family's micro-batches come in order (the grid crosses the micro-batch outside the other knobs
    # a family holds), that order is the families' stable sort: one sort of the family shifted above the position
    # (numpy's sort of int64 is vectorised, its argsort is not: a quarter of lexsort's instructions at 7,104 plans)
    n, low = len(family), int(family.min())
    shift = max(n - 1, 1).bit_length()
    if int(family.max()) - low < 2 ** (62 - shift):
        order = np.sort((family - low) << shift | np.arange(n)) & (2**shift - 1)
        ranked, fam = b.take(order), family.take(order)
        if np.all((ranked[1:] >= ranked[:-1]) | (fam[1:] != fam[:-1])):
            return order
    return np.lexsort([b, family])


def _no_legal_plan(ctx: Context, num_gpus: int, pins: Pins, why: str, suggest_sizes: bool) -> str:
    """No plan keeps every rule: why, and (``suggest_sizes``) the rules every GPU count breaks or the nearest sizes."""
    always = rules_broken_everywhere(ctx, pins, ctx.hardware.gpus_per_node) if suggest_sizes else []
    near = nearest_legal_sizes(ctx, num_gpus, pins) if suggest_sizes and not always else []
    allowed = f"; nearest GPU counts with a legal plan: {' and '.join(f'{n:,}' for n in near)}" if near else ""
    if always:
        allowed = f"; on any GPU count: {'; '.join(always)}"
    elif suggest_sizes and not near:
        allowed = "; no GPU count nearby has one"
    return f"no legal plan for {ctx.model.name} on {num_gpus:,} GPUs; {why}{allowed}"


def _family_keys(grid: PlanGrid, idx: np.ndarray | None, fields: tuple = FAMILY_FIELDS) -> np.ndarray:
    """One integer per plan of ``idx`` that is equal exactly when every field of ``fields`` is (by default
    ``FAMILY_FIELDS``: all but the micro-batch and ``SAME_MEMORY``): mixed-radix digits of each field's offset from
    its minimum, the first field the most significant; renumbered by ``np.unique`` before it could overflow. Up to
    ``TABLE_ROWS`` rows the fields in one table: a few numpy calls in all, not five per field (a call costs thousands
    of instructions whatever its rows); more rows field by field (``_column_keys``: DeepSeek-V3 / 1024 H100's 1.36 M
    rows would make a 196 MB table)."""
    n = len(grid) if idx is None else len(idx)  # idx None: every row, in order
    whole = idx is None or n == len(grid) and np.array_equal(idx, np.arange(n))  # every row, in order: no copies
    columns = (getattr(grid, name) if whole else take_column(getattr(grid, name), idx) for name in fields)
    columns = [col for col in columns if col.strides != (0,)]  # one value (``shared_constant``): no digit
    if not columns or not n:
        return np.zeros(n, dtype=np.int64)
    if n > TABLE_ROWS:
        return _column_keys(columns, n)
    table = np.stack(columns, dtype=np.int64, casting="unsafe")  # block layers come back as floats
    low = table.min(axis=1)
    table -= low[:, None]
    widths = (table.max(axis=1) + 1).tolist()
    if math.prod(widths) < 2**62:  # no renumbering
        key = table[0]
        for digits, width in zip(table[1:], widths[1:], strict=True):
            if width > 1:
                key *= width
                key += digits
        return key
    return _renumbered(zip(table, widths, strict=True), n)


TABLE_ROWS = 4 * CHUNK  # ``_family_keys`` of more rows goes field by field: its table would be 8 bytes a field a row


def _column_keys(columns: list[np.ndarray], n: int) -> np.ndarray:
    """``_family_keys`` of many rows, field by field (no table): in int32 groups (``_mixed_radix``) where the
    fields' widths' product is below 2**62, else renumbered as it goes (``_renumbered``)."""
    digits = []  # (column, its minimum, its width) of the fields that vary
    for col in columns:
        low = int(col.min())
        width = int(col.max()) - low + 1
        if width > 1:
            digits.append((col, low, width))
    if math.prod(width for _, _, width in digits) < 2**62:
        return _mixed_radix(digits, n)
    offsets = ((col.astype(np.int64) - low, width) for col, low, width in digits)  # block layers come back as floats
    return _renumbered(offsets, n)


def _renumbered(digits, n: int) -> np.ndarray:
    """The mixed radix of ``digits`` ((offset from the field's minimum, width) pairs, the first the most
    significant), renumbered by ``np.unique`` (order kept) before a digit would overflow int64."""
    key, span = np.zeros(n, dtype=np.int64), 1
    for offset, width in digits:
        if width == 1:
            continue
        if span * width >= 2**62:
            _, key = np.unique(key, return_inverse=True)
            key, span = key.reshape(-1).astype(np.int64), int(key.max()) + 1
        key *= width
        key += offset
        span *= width
    return key


def _mixed_radix(digits: list[tuple], n: int) -> np.ndarray:
    """sum_i (col_i - low_i) * prod_{j > i} width_j over the ``digits`` (column, low, width) as int64 (their widths'
    product below 2**62): ``_family_keys``' key. Consecutive digits whose widths' product stays below 2**31 are
    summed in int32 (half the bytes of each pass over DeepSeek-V3's 1.36 M rows: 18 digits in two such groups), each
    group's lows subtracted once (modulo 2**32, as int32 sums wrap: the result is exact), then the groups joined in
    int64: the same integers."""
    key, groups, span = np.zeros(n, dtype=np.int64), [], 2**31
    for digit in digits:
        if span * digit[2] >= 2**31:
            groups.append([])
            span = 1
        groups[-1].append(digit)
        span *= digit[2]
    for group in groups:
        part, span, offset = np.zeros(n, dtype=np.int32), 1, 0
        for col, low, width in group:
            part *= width
            part += col if col.dtype.kind in "bi" else col.astype(np.int32)  # block layers come back as floats
            offset, span = offset * width + low, span * width
        part -= (offset + 2**31) % 2**32 - 2**31  # int32 arithmetic wraps alike: the group's value is below 2**31
        key *= span
        key += part
    return key


def _nothing_fits(
    ctx: Context,
    num_gpus: int,
    pins: Pins,
    candidates: int,
    scored: _Scored,
    capacity: float,
    rejected: dict[str, int],
    *,
    suggest_sizes: bool,
) -> InfeasibleError:
    if len(scored.peak) == 0:
        pinned = [] if candidates or pins_leave_no_world(num_gpus, pins) else _pinned_reasons(ctx, num_gpus, pins)
        if pinned:
            why = f"the knobs given break: {'; '.join(pinned)}"
            return PinsBreakRuleError(_no_legal_plan(ctx, num_gpus, pins, why, suggest_sizes))
        if candidates == 0:
            world = "world size = tp·cp·pp·dp: " if pins_leave_no_world(num_gpus, pins) else ""
            why = f"{world}{empty_grid_reason(num_gpus, pins)}"
        else:
            by_count = sorted(rejected.items(), key=lambda kv: -kv[1])
            why = "rejected by: " + ", ".join(f"{name} ({count:,})" for name, count in by_count)
            if flex_backend.RULE in rejected:  # its reason is the cluster's, not a plan's: said once
                why += f"; {flex_backend.backend_message(ctx.hardware, ctx.options.moe_flex_dispatcher_backend.value)}"
        return InfeasibleError(_no_legal_plan(ctx, num_gpus, pins, why, suggest_sizes))
    gib = 2**30
    peaks = np.where(np.isnan(scored.peak), np.inf, scored.peak)  # NaN: a split the model cannot take (0/0)
    smallest = int(np.argmin(peaks))
    label = plan_label(scored.grid.plan(smallest).model_dump(mode="json"), moe=ctx.model.is_moe)
    allocatable = ctx.hardware.memory.allocatable_gib
    return InfeasibleError(
        f"every legal plan needs more than {capacity / gib:.1f} GiB per GPU ({allocatable:g} GiB less the "
        f"{100 * (1 - capacity / gib / allocatable):.0f} % headroom); the smallest, {label}, needs "
        f"{peaks[smallest] / gib:.1f} GiB; try more GPUs, a larger-memory --hardware or a smaller --global-batch"
    )
