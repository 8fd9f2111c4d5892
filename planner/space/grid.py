"""A grid of candidate plans: one named 1-D array per knob, one candidate per index.

``explain`` evaluates a grid of length one and ``search`` one of millions; the cost functions
never know the difference (docs/architecture.md: one formula, one place).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from planner.models.pipeline_layout import explicit_split
from planner.plan import (
    DISPATCHER_BY_CODE,
    FSDP_SHARDING_BY_CODE,
    RECOMPUTE_BY_CODE,
    SPLIT_BY_CODE,
    FsdpOuterSharding,
    ParallelPlan,
    Recompute,
    RecomputeMethod,
)

IntArray = np.ndarray
# PlanOptions fields a grid may carry per plan: the search derives them per row (today's recipes, and
# --tp-comm-overlap both ways), so one evaluation serves every combination; explain leaves them to the options
OPTION_COLUMNS = ("overlap_param_gather", "tp_comm_overlap")


def distinct(values) -> np.ndarray:
    """The sorted distinct values of an array: ``np.unique`` by its path that never imports numpy.ma
    (the plain call checks ``np.ma.is_masked``, which costs a process tens of milliseconds)."""
    return np.unique(np.asarray(values).reshape(-1), return_counts=True)[0]


def shared_constant(col: np.ndarray) -> np.ndarray:
    """A grid column whose rows all hold one value as that value once, broadcast to every row (a read-only
    view, no memory per row; ``take_column`` keeps it one); any other column as it is. A search's grid holds
    a few such columns (DeepSeek-V3 / 1024 H100: 6 of 26, 20 of 85 MiB), which every gather of rows copied."""
    if len(col) < 2 or col.strides == (0,) or col[0] != col[-1] or col.min() != col.max():
        return col
    return np.broadcast_to(col[:1].copy(), col.shape)


def take_column(col: np.ndarray, index) -> np.ndarray:
    """The rows ``index`` (positions, a slice or a mask) of a grid column: gathered (``ndarray.take`` for
    positions, the same values as ``col[index]`` in about 80 % of its time), or for a column of one value
    (``shared_constant``) that value broadcast to as many rows."""
    if col.strides == (0,) and len(col):
        if isinstance(index, slice):
            n = len(range(*index.indices(len(col))))
        else:
            n = int(np.count_nonzero(index)) if index.dtype == bool else len(index)
        return col[:n] if n <= len(col) else np.broadcast_to(col[:1], (n,))  # a slice of it: a view, at once
    if isinstance(index, np.ndarray) and index.dtype.kind in "iu":
        return col.take(index)
    return col[index]


# arrays: no ==, hash or repr (generating them costs every process's import; numpy arrays have none to give)
@dataclass(frozen=True, eq=False, repr=False)
class PlanGrid:
    tp: IntArray
    pp: IntArray
    dp: IntArray
    cp: IntArray
    ep: IntArray
    etp: IntArray
    vpp: IntArray
    micro_batch: IntArray
    sequence_parallel: np.ndarray  # bool
    recompute: IntArray  # Recompute codes: 0 none, 1 selective, 2 full
    recompute_block: np.ndarray  # bool: full recomputation by --recompute-method block
    recompute_layers: IntArray  # --recompute-num-layers (full: uniform group size or block layers per chunk)
    distributed_optimizer: np.ndarray  # bool
    fsdp: np.ndarray  # bool: Megatron FSDP
    split: IntArray  # StageSplit codes
    first_layers: IntArray  # explicit first-stage layers, 0 = not given
    last_layers: IntArray  # explicit last-stage layers, 0 = not given
    layout: IntArray | None = None  # index into ``layouts``, -1 = none (--pipeline-model-parallel-layout)
    dispatcher: IntArray | None = None  # TokenDispatcher codes: 0 allgather, 1 alltoall, 2 flex
    a2a_overlap: np.ndarray | None = None  # bool: --overlap-moe-expert-parallel-comm
    do_instances: IntArray | None = None  # --num-distributed-optimizer-instances (1: one instance over d·c)
    fsdp_level: IntArray | None = None  # FsdpSharding codes (Megatron FSDP): 1 optim, 2 +grads, 3 +params (default)
    outer_optim: np.ndarray | None = None  # bool: --outer-dp-sharding-strategy optim (HFSDP; R > 1 replicas)
    mb_group: IntArray | None = None  # --microbatch-group-size-per-virtual-pipeline-stage, 0 = pp (Megatron's default)
    # options the search derives per plan (``OPTION_COLUMNS``): 1 on, 0 off, -1 as the context's options say
    overlap_param_gather: IntArray | None = None
    tp_comm_overlap: IntArray | None = None
    layouts: tuple[str, ...] = field(default=(), compare=False)  # the layouts ``layout`` points into

    def __post_init__(self) -> None:
        n = len(self.tp)
        for name, value in (
            ("layout", -1),
            ("dispatcher", 0),
            ("a2a_overlap", False),
            ("outer_optim", False),
            ("mb_group", 0),
            ("fsdp_level", 3),
            ("do_instances", 1),
            *((name, -1) for name in OPTION_COLUMNS),
        ):
            if getattr(self, name) is None:
                dtype = bool if value is False else np.int8 if value == -1 else np.int64
                object.__setattr__(self, name, np.full(n, value, dtype=dtype))

    def __len__(self) -> int:
        return len(self.tp)

    def option(self, name: str, options) -> np.ndarray:
        """A per-plan option of ``OPTION_COLUMNS`` as booleans: the grid's value, else ``options``' (a PlanOptions)."""
        col = getattr(self, name)
        given = col > 0
        unset = col < 0  # the search's rows carry every option (none unset): their own values, no np.where
        return np.where(unset, bool(getattr(options, name)), given) if np.count_nonzero(unset) else given

    def layout_text(self, i: int) -> str | None:
        k = int(self.layout[i])
        return self.layouts[k] if k >= 0 else None

    @classmethod
    def from_plans(cls, plans: list[ParallelPlan]) -> PlanGrid:
        def col(get, dtype=np.int64):
            return np.array([get(p) for p in plans], dtype=dtype)

        layouts = tuple(dict.fromkeys(p.pipeline_layout for p in plans if p.pipeline_layout))
        return cls(
            tp=col(lambda p: p.tp),
            pp=col(lambda p: p.pp),
            dp=col(lambda p: p.dp),
            cp=col(lambda p: p.cp),
            ep=col(lambda p: p.ep),
            etp=col(lambda p: p.etp),
            fsdp=col(lambda p: p.fsdp, bool),
            vpp=col(lambda p: p.vpp),
            micro_batch=col(lambda p: p.micro_batch),
            sequence_parallel=col(lambda p: p.sequence_parallel and p.tp > 1, bool),
            recompute=col(lambda p: p.recompute.code, np.int8),
            recompute_block=col(lambda p: p.recompute_method is RecomputeMethod.BLOCK, bool),
            recompute_layers=col(lambda p: p.recomputed_layers if p.recompute is Recompute.FULL else 0),
            distributed_optimizer=col(lambda p: p.distributed_optimizer, bool),
            split=col(lambda p: p.stage_split.code, np.int8),
            first_layers=col(lambda p: p.first_stage_layers or 0),
            last_layers=col(lambda p: p.last_stage_layers or 0),
            layout=col(lambda p: layouts.index(p.pipeline_layout) if p.pipeline_layout else -1),
            dispatcher=col(lambda p: p.moe_token_dispatcher.code, np.int8),
            a2a_overlap=col(lambda p: p.overlap_moe_expert_parallel_comm, bool),
            mb_group=col(lambda p: p.microbatch_group_size or 0),
            fsdp_level=col(lambda p: p.fsdp_sharding.code, np.int8),
            do_instances=col(lambda p: p.distributed_optimizer_instances),
            outer_optim=col(lambda p: p.fsdp_outer_sharding is FsdpOuterSharding.OPTIM, bool),
            layouts=layouts,
        )

    @classmethod
    def of_columns(cls, columns: dict[str, np.ndarray], layouts: tuple[str, ...]) -> PlanGrid:
        """``PlanGrid(**columns, layouts=layouts)`` where ``columns`` holds every column (``COLUMNS``, none None, so
        ``__post_init__`` has nothing to fill): the same grid without the dataclass's per-field work (a tenth of
        the instructions; a search makes a few dozen grids of its rows)."""
        grid = object.__new__(cls)
        grid.__dict__.update(columns)
        grid.__dict__["layouts"] = layouts
        return grid

    @classmethod
    def stack(cls, *grids: PlanGrid) -> PlanGrid:
        """The rows of every grid, one after the other (their ``layouts`` must be the same)."""
        return cls.of_columns({n: np.concatenate([getattr(g, n) for g in grids]) for n in COLUMNS}, grids[0].layouts)

    def take(self, index: np.ndarray) -> PlanGrid:
        """The rows ``index`` (positions, a slice or a mask) of every column (``take_column``)."""
        return PlanGrid.of_columns({name: take_column(getattr(self, name), index) for name in COLUMNS}, self.layouts)

    def plan(self, i: int) -> ParallelPlan:
        """The ParallelPlan at index i."""
        return ParallelPlan(
            tp=int(self.tp[i]),
            pp=int(self.pp[i]),
            dp=int(self.dp[i]),
            cp=int(self.cp[i]),
            vpp=int(self.vpp[i]),
            ep=int(self.ep[i]),
            etp=int(self.etp[i]),
            fsdp=bool(self.fsdp[i]),
            micro_batch=int(self.micro_batch[i]),
            sequence_parallel=bool(self.sequence_parallel[i]),
            recompute=RECOMPUTE_BY_CODE[int(self.recompute[i])],
            **_recompute_flags(bool(self.recompute_block[i]), int(self.recompute_layers[i])),
            distributed_optimizer=bool(self.distributed_optimizer[i]),
            stage_split=SPLIT_BY_CODE[int(self.split[i])],
            first_stage_layers=int(self.first_layers[i]) or None,
            last_stage_layers=int(self.last_layers[i]) or None,
            pipeline_layout=self.layout_text(i),
            moe_token_dispatcher=DISPATCHER_BY_CODE[int(self.dispatcher[i])],
            overlap_moe_expert_parallel_comm=bool(self.a2a_overlap[i]),
            microbatch_group_size=int(self.mb_group[i]) or None,
            fsdp_sharding=FSDP_SHARDING_BY_CODE[int(self.fsdp_level[i])],
            distributed_optimizer_instances=int(self.do_instances[i]),
            fsdp_outer_sharding=FsdpOuterSharding.OPTIM if self.outer_optim[i] else FsdpOuterSharding.NO_SHARD,
        )


COLUMNS = tuple(f.name for f in fields(PlanGrid) if f.name != "layouts")  # the per-plan arrays, in field order


def _recompute_flags(block: bool, layers: int) -> dict:
    """--recompute-method and --recompute-num-layers of a full-recompute row (Megatron's own defaults otherwise)."""
    if layers <= 0:
        return {}
    return {
        "recompute_method": RecomputeMethod.BLOCK if block else RecomputeMethod.UNIFORM,
        "recompute_num_layers": layers if block or layers > 1 else None,
    }


# arrays: no ==, hash or repr (generating them costs every process's import; numpy arrays have none to give)
@dataclass(frozen=True, eq=False, repr=False)
class StageLayers:
    """Transformer layers on the first, each middle, and the last pipeline stage, and whether
    that split is one Megatron-LM accepts (arguments.py:953-998)."""

    first: IntArray
    middle: IntArray
    last: IntArray
    legal: np.ndarray


TABLE_ROWS = 4096  # from this many plans, ``stage_layers`` computes each distinct (p, split) once


def stage_layers(
    num_layers: int, p: IntArray, split: IntArray, first_given: IntArray, last_given: IntArray
) -> StageLayers:
    """``_stage_layers`` of every plan; a search's grid (many plans, few distinct p and splits, the
    first/last stage sizes the same for all) computes each distinct (p, split) once and gathers the
    numbers: the same formula on the same values."""
    p, split, first_given, last_given = (np.asarray(x) for x in (p, split, first_given, last_given))
    whole = p.ndim == split.ndim == 1 and len(p) == len(split) >= TABLE_ROWS
    if not (whole and all(x.size == 1 or x.min() == x.max() for x in (first_given, last_given))):
        return _stage_layers(num_layers, p, split, first_given, last_given)
    if p.min() < 1 or split.min() < 0 or split.max() > 3:
        return _stage_layers(num_layers, p, split, first_given, last_given)
    present = np.zeros(int(p.max()) + 1, dtype=bool)
    present[p] = True
    values = np.flatnonzero(present)
    slot = np.zeros(len(present), dtype=np.int64)
    slot[values] = np.arange(len(values))
    row = slot.take(p) * 4 + split  # the table row of each plan: (its p, its split)
    k = 4 * len(values)
    one = _stage_layers(
        num_layers,
        np.repeat(values, 4).astype(p.dtype),
        np.tile(np.arange(4), len(values)).astype(split.dtype),
        np.full(k, first_given.reshape(-1)[0], dtype=first_given.dtype),
        np.full(k, last_given.reshape(-1)[0], dtype=last_given.dtype),
    )
    return StageLayers(
        first=one.first.take(row), middle=one.middle.take(row), last=one.last.take(row), legal=one.legal.take(row)
    )


def _stage_layers(
    num_layers: int, p: IntArray, split: IntArray, first_given: IntArray, last_given: IntArray
) -> StageLayers:
    """Layers per stage for an even, embedding/loss-accounted or explicit first/last split.

    Accounted splits count the embedding and/or the loss as one layer each: (L + e + l) must
    divide by p, the first stage gets one layer fewer for the embedding, the last one fewer for
    the loss. Explicit first/last sizes leave the rest to divide evenly over the other stages.
    With p = 1 the one stage holds all L layers.
    """
    L = num_layers
    e = ((split == 1) | (split == 3)).astype(np.int64)  # np.isin(split, (1, 3)), without its set machinery
    lo = ((split == 2) | (split == 3)).astype(np.int64)
    total = L + e + lo
    per = total // p
    accounted_ok = total % p == 0
    explicit = (first_given > 0) | (last_given > 0)
    if np.count_nonzero(explicit):
        first, middle, last, ok = _explicit_stages(L, p, first_given, last_given, explicit, per, e, lo, accounted_ok)
    else:  # no plan gives a first or last stage size (a search's grid): the accounted split alone
        first, middle, last, ok = per - e, per, per - lo, accounted_ok
    one_stage = p == 1
    first = np.where(one_stage, L, first)
    last = np.where(one_stage, L, last)
    middle = np.where(one_stage, L, middle)
    legal = ok & (first >= 0) & (last >= 0)
    legal = np.where(one_stage, ~explicit, legal)
    return StageLayers(first=first, middle=middle, last=last, legal=legal)


def _explicit_stages(L: int, p, first_given, last_given, explicit, per, e, lo, accounted_ok) -> tuple:
    """``_stage_layers``' (first, middle, last, split accepted) where some plan gives its first or last stage
    size (``explicit``): those sizes, the rest divided evenly over the other stages; the others accounted."""
    rest_per, explicit_ok = explicit_split(L, p, first_given, last_given)  # Megatron-LM's rule, one copy
    first = np.where(explicit, np.where(first_given > 0, first_given, rest_per), per - e)
    last = np.where(explicit, np.where(last_given > 0, last_given, rest_per), per - lo)
    middle = np.where(explicit, rest_per, per)
    return first, middle, last, np.where(explicit, explicit_ok, accounted_ok)
