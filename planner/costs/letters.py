"""The adapter: a plan grid and its context unpacked into the papers' letters.

Every array is shaped (N, 1) so it broadcasts against a (N, S) array of pipeline-stage indices.
What each stage holds (its decoder layers, how many of them are MoE or sliding-window, its MTP
layers, the embedding and the loss) comes from ``planner.models.pipeline_layout`` once per distinct split
of the grid, so a model whose layers differ (dense first layers, MTP at the end) is costed stage by
stage.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import operator

import numpy as np

from planner.costs import memory
from planner.costs.pipeline import microbatch_group
from planner.models.params import padded_vocab
from planner.models.pipeline_layout import COUNT_FIELDS, bf16_pattern, stage_contents, stage_counts
from planner.plan import AttentionKernel, Context, num_microbatches
from planner.space.grid import PlanGrid


def _col(x: np.ndarray) -> np.ndarray:
    """A grid column as an (N, 1) array; integers as float64 whatever the grid keeps them in: exact (the
    letters are small integers, their products far below 2**53), no product of letters overflows, and a
    per-stage float term reads them without numpy's buffered int -> float cast."""
    x = np.asarray(x)
    return (x.astype(np.float64) if x.dtype.kind in "iu" else x)[:, None]


class _NotInKey:
    """A per-plan letter of a ``Letters.distinct`` view that its key does not decide: any use raises, so a
    formula computed once per distinct key cannot read a letter that differs between the plans sharing it."""

    __array_ufunc__ = None  # numpy's operators defer to the reflected methods below, which raise

    def __init__(self, name: str):
        self.name = name

    def _refuse(self, *_args, **_kwargs):
        raise TypeError(f"letter {self.name!r} is not in this view's key (Letters.distinct)")


for _op in ("array", "bool", "index", "int", "float", "getitem", "len", "iter", "neg", "invert", "abs"):
    setattr(_NotInKey, f"__{_op}__", _NotInKey._refuse)
for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor"):
    setattr(_NotInKey, f"__{_op}__", _NotInKey._refuse)
    setattr(_NotInKey, f"__r{_op}__", _NotInKey._refuse)
for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    setattr(_NotInKey, f"__{_op}__", _NotInKey._refuse)
_NotInKey.__hash__ = None  # type: ignore[assignment]
_NOT_IN_KEY: dict[str, _NotInKey] = {}  # one per letter: it holds only the letter's name (``Letters._view_of``)


def _renumber(key: np.ndarray, span: int) -> tuple[np.ndarray, int]:
    """Keys in [0, span) as 0, 1, ... in their order: each key's rank among those present (by a flag
    per possible key while there are at most ``_dense(len(key))``, else by a sort)."""
    if span > _dense(len(key)):  # each key's rank among the distinct keys, as np.unique's inverse numbers them
        ordered = np.sort(key)
        distinct = ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]
        return np.searchsorted(distinct, key), len(distinct)
    present = np.zeros(span, dtype=bool)
    present[key] = True
    codes = np.cumsum(present) - 1
    return codes[key], int(codes[-1]) + 1


def select(flag: np.ndarray, yes, no) -> np.ndarray:
    """``np.where(flag, yes(), no())`` computing only the sides some plan takes (``yes`` and ``no``: functions of
    nothing, each the same shape wherever it is called); a side every plan takes is returned as it is. (Plans
    counted by ``np.count_nonzero``: a quarter of the instructions of ``flag.all()`` and ``flag.any()``.)"""
    some = np.count_nonzero(flag)
    if some == np.size(flag):
        return yes()
    if not some:
        return no()
    return np.where(flag, yes(), no())


def _dense(n: int) -> int:
    return max(8 * n, 4096)


def distinct_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(one row of each distinct combination of the integer ``columns``, each row's index among the
    combinations, numbered in lexicographic order): each row's combination as one mixed-radix key (the first
    column most significant, each column's digit its value less its least; a column of one value adds no digit,
    a boolean one the digits 0 and 1) numbered by ``_renumber``, so a sort is needed only where the combinations
    could be many times the rows; keys from 2**53 on by ``_radix_key``. Any digit widths at least the columns'
    value ranges number the combinations alike (the key's order is theirs), so none is measured more than needed."""
    n = len(columns[0])
    if not n:
        key = np.zeros(0, dtype=np.int64)
        return key, key
    digits = _digits(columns, n)
    span = functools.reduce(operator.mul, (width for _, _, width in digits), 1)
    if not digits:
        key = np.zeros(n, dtype=np.int64)
    elif span < 2**53:  # in doubles: every product and partial sum an integer below 2**53, so exact
        key, offset, weight = None, 0, span
        for col, low, width in digits:
            weight //= width
            term = col * float(weight) if weight > 1 else col
            key, offset = term if key is None else key + term, offset + low * weight
        key = (key - float(offset) if offset else key).astype(np.int64)
    else:
        table = np.stack([col for col, _, _ in digits]).astype(np.int64, copy=False)
        key, span = _radix_key(table, [low for _, low, _ in digits], [width for _, _, width in digits], n)
    if span > _dense(n):
        key, span = _renumber(key, span)
        first = np.empty(span, dtype=np.int64)
        first[key] = np.arange(n)  # any row of a combination stands for it: they share every column
        return first, key
    last = np.full(span, -1, dtype=np.int64)  # each possible key's last row (-1: none), as ``_renumber`` flags them
    last[key] = np.arange(n)
    present = last >= 0
    return last[present], (np.cumsum(present) - 1).take(key)


def _digits(columns: list[np.ndarray], n: int) -> list[tuple[np.ndarray, int, int]]:
    """``distinct_rows``' digits: (column, its least value, its width) of each column of more than one value."""
    digits = []
    for col in columns:
        col = np.asarray(col).reshape(-1)
        if col.dtype.kind not in "fiub":  # what the letters are: floats holding integers, integers, booleans
            raise TypeError(f"distinct_rows numbers integer columns, not {col.dtype}")
        if n > 1 and col.strides == (0,):  # one value (a ``shared_constant`` column)
            continue
        if col.dtype.kind == "b":
            digits.append((col, 0, 2))
            continue
        low, high = int(col.min()), int(col.max())  # exact, as ints
        if high > low:
            digits.append((col, low, high - low + 1))
    return digits


def _radix_key(table: np.ndarray, lows: list[int], widths: list[int], n: int) -> tuple[np.ndarray, int]:
    """``distinct_rows``' key where the columns' spans multiply past int64: the columns taken one at a time,
    the key renumbered whenever its span could outgrow a few times the rows (``_renumber``)."""
    key, span = np.zeros(n, dtype=np.int64), 1
    for col, low, width in zip(table, lows, widths, strict=True):
        if width == 1:  # one value: the key is the same without it (a dense model's experts, a grid's constants)
            continue
        if span * width > _dense(n):
            key, span = _renumber(key, span)
            col, width = _renumber(col - low, width)
            low = 0
        key, span = key * width + (col - low), span * width
    return key, span


def _per_plan(value, inverse: np.ndarray, rows: int, seen: dict):
    """``value`` computed on the ``rows`` plans of a ``Letters.distinct`` view, for every plan of its grid
    (``inverse``: each plan's row in the view); an array shared by several entries is read back once."""
    if type(value) is np.ndarray:  # the common case first: this runs for every leaf of every once-term
        return _per_plan_array(value, inverse, rows, seen)
    if isinstance(value, dict):
        return {k: _per_plan(v, inverse, rows, seen) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_per_plan(v, inverse, rows, seen) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(
            value, **{f.name: _per_plan(getattr(value, f.name), inverse, rows, seen) for f in dataclasses.fields(value)}
        )
    return _per_plan_array(value, inverse, rows, seen) if isinstance(value, np.ndarray) else value  # or a number


def _per_plan_array(value: np.ndarray, inverse: np.ndarray, rows: int, seen: dict):
    if value.ndim == 0 or value.shape[0] != rows:
        return value  # an array every plan shares (broadcast)
    if id(value) not in seen:  # kept: its id is not reused meanwhile
        column_major = value.ndim == 2 and value.shape[1] > 1 and value.flags.f_contiguous  # stays so (``stage``)
        seen[id(value)] = (value, value.T.take(inverse, axis=1).T if column_major else value.take(inverse, axis=0))
    return seen[id(value)][1]


@functools.lru_cache(maxsize=8192)
def _split_counts(
    key: tuple[int, ...],
    layout: str | None,
    moe: tuple[bool, ...],
    window: tuple[bool, ...],
    mtp: int,
    bf16: tuple[bool, ...] = (),
) -> np.ndarray | None:
    p, v, split, first, last = key
    contents = stage_contents(len(moe), mtp, p, v, split, first, last, layout)
    return None if contents is None else stage_counts(contents, moe, window, bf16)


def _even_counts(
    p: int, moe: tuple[bool, ...], window: tuple[bool, ...], mtp: int, L: int, bf16: tuple[bool, ...] = ()
) -> np.ndarray:
    n = L / p
    row = [n, n * sum(moe) / L, n * sum(window) / L, 0, 0, 0, 0, 0, 0]
    out = np.tile(np.array(row, dtype=float), (p, 1))
    out[0, 4], out[-1, 5], out[-1, 3] = 1, 1, mtp
    if bf16:  # the BF16 end layers on the end ranks (the first half's on the first), at the model's shares
        for rank, k in ((0, sum(bf16[: L // 2])), (-1, sum(bf16[L // 2 :]))):
            out[rank, 6:] = out[rank, 6:] + [k, k * sum(moe) / L, k * sum(window) / L]
    return out


@functools.lru_cache(maxsize=16)
def _model_splits(moe: tuple[bool, ...], window: tuple[bool, ...], mtp: int, L: int, bf16: tuple = ()) -> dict:
    """``_split_kinds`` of one model's splits, by (p, v, split, first, last, layout): the model's layer
    patterns hashed once per grid, not once per split."""
    return {}


def _split_kinds(
    key: tuple[int, ...],
    layout: str | None,
    moe: tuple[bool, ...],
    window: tuple[bool, ...],
    mtp: int,
    L: int,
    bf16: tuple[bool, ...] = (),
) -> tuple[np.ndarray, bool, tuple[tuple[int, int], ...]]:
    """(counts per rank, whether Megatron-LM accepts the split, the distinct kinds of stage as
    (first rank, ranks sharing it)) of one split; a split Megatron-LM rejects (the rule table says so) is
    costed as even."""
    counts = _split_counts(key, layout, moe, window, mtp, bf16)
    legal = counts is not None
    if counts is None:
        counts = _even_counts(key[0], moe, window, mtp, L, bf16)
    seen: dict[tuple, list[int]] = {}
    for i in range(key[0]):
        seen.setdefault(tuple(counts[i]), [i, 0])[1] += 1
    return counts, legal, tuple(tuple(x) for x in seen.values())


def _split_entries(splits: dict, keys: list, model: tuple) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """For each split of ``keys`` (p, v, split, first, last, layout): its counts per rank, and as arrays
    whether Megatron-LM accepts it and its kinds of stage (first rank, ranks sharing it), padded with
    (0, 0) to the most kinds (``_split_kinds``, kept in ``splits`` by key)."""
    entries = []
    for key in keys:
        entry = splits.get(key)
        if entry is None:
            counts, legal, kinds = _split_kinds(key[:5], key[5], *model)
            entry = splits[key] = (counts, legal, [i for i, _ in kinds], [float(n) for _, n in kinds])
        entries.append(entry)
    width = max((len(e[2]) for e in entries), default=1)
    pad = [0] * width
    index = np.array([e[2] + pad[len(e[2]) :] for e in entries], dtype=np.int64).reshape(len(entries), width)
    count = np.array([e[3] + pad[len(e[3]) :] for e in entries], dtype=float).reshape(len(entries), width)
    return [e[0] for e in entries], np.array([e[1] for e in entries], dtype=bool), index, count


@functools.lru_cache(maxsize=64)
def _split_tables(uniq: bytes, layouts: tuple[str, ...], model: tuple) -> tuple:
    """The tables ``Letters._stage_tables`` reads of the distinct splits ``uniq`` (rows of (p, v, split, first,
    last, layout index or -1) as int64 bytes) of a model (``model``: its MoE and window patterns, MTP and decoder
    layers): per field of ``COUNT_FIELDS`` a (split, rank) table padded with zeros to the most ranks, the most
    ranks, each split's p, whether Megatron-LM accepts it and its kinds of stage (``_split_entries``). Made once
    per search context and set of splits (a search's grids share them), read-only: every grid reads them."""
    rows = np.frombuffer(uniq, dtype=np.int64).reshape(-1, 6)
    pmax = int(rows[:, 0].max()) if len(rows) else 1
    keys = [(*row[:5], layouts[row[5]] if row[5] >= 0 else None) for row in rows.tolist()]
    counts, legal, index, count = _split_entries(_model_splits(*model), keys, model)
    table = np.zeros((len(rows), pmax, len(COUNT_FIELDS)))
    for u, ranks in enumerate(counts):
        table[u, : len(ranks)] = ranks
    out = (*(np.ascontiguousarray(table[..., k]) for k in range(len(COUNT_FIELDS))), rows[:, 0], legal, index, count)
    for array in out:
        array.setflags(write=False)
    return out[: len(COUNT_FIELDS)], pmax, *out[len(COUNT_FIELDS) :]


KEPT_SHAPES = "_kept_shapes"  # where a context keeps what ``Letters.once`` computed (``keep_shapes``)


def keep_shapes(ctx: Context) -> Context:
    """Make every grid evaluated with ``ctx`` keep what ``Letters.once`` computes per distinct shape, for the
    grids evaluated after it (a search evaluates its candidates, their variants and its best plans in a few
    grids that share most shapes). Only for a context no one changes afterwards (search's own)."""
    object.__setattr__(ctx, KEPT_SHAPES, _ShapeStore())
    return ctx


class _ShapeStore:
    """A context's kept shapes: each distinct shape's number (``ids``: by key, ``SHAPE_KEY`` or ``LAYER_KEY``,
    then by the shape's letters (their float64 bytes), in the order first seen) and each ``once`` function's values
    (``kept``, by name)."""

    def __init__(self):
        self.ids: dict[tuple, dict[tuple, int]] = {}
        self.kept: dict[str, _Kept] = {}

    def numbers(self, key: tuple[str, ...], names: list[bytes]) -> np.ndarray:
        ids = self.ids.setdefault(key, {})  # the shapes not seen yet numbered on, in order (C loops, no Python one)
        ids.update(zip(itertools.filterfalse(ids.__contains__, names), itertools.count(len(ids))))
        return np.fromiter(map(ids.__getitem__, names), dtype=np.int64, count=len(names))


class _Unmergeable(Exception):
    """Two values of a ``once`` function whose structure, dtypes or shared values differ."""


class _Kept:
    """A ``once`` function's values for every shape computed so far (``value``, its first axis ``n`` rows) and
    each shape's row in them (``row``, by the shape's number; -1 for a shape not computed)."""

    def __init__(self):
        self.row = np.zeros(0, dtype=np.int64)
        self.value, self.n, self.broken = None, 0, False

    def rows(self, lt: Letters, shapes: _Shapes, fn) -> np.ndarray | None:
        """The row of each distinct shape of ``lt`` (``shapes``), after computing ``fn`` on those not kept yet
        and keeping them; None if they cannot join the kept values (then nothing changes)."""
        if self.broken:
            return None
        ids = shapes.ids(lt)
        if not len(ids):  # no plans
            return ids
        if len(self.row) <= ids.max():
            self.row = np.concatenate([self.row, np.full(int(ids.max()) + 1 - len(self.row), -1)])
        rows = self.row.take(ids)
        missing = np.flatnonzero(rows < 0)
        if not len(missing):
            return rows
        value = fn(shapes.view(lt, missing))
        try:
            if self.value is None and any(np.ndim(x) and not _per_shape(x, len(missing)) for x in _leaves(value)):
                raise _Unmergeable  # an array every shape shares: a later row count could read it as per shape
            merged = value if self.value is None else _merge(self.value, self.n, value, len(missing), {})
        except _Unmergeable:
            self.broken = True  # computed per grid from now on
            return None
        self.value = merged
        rows[missing] = self.row[ids[missing]] = self.n + np.arange(len(missing))
        self.n += len(missing)
        return rows


def _merge(old, n_old: int, new, n_new: int, seen: dict):
    """The kept values ``old`` (``n_old`` rows) followed by ``new`` (``n_new`` rows), leaf by leaf as
    ``_per_plan`` reads them: an array whose first axis is the rows is per shape, anything else shared."""
    if isinstance(old, dict | tuple) or dataclasses.is_dataclass(old):
        if type(old) is not type(new):
            raise _Unmergeable
        if isinstance(old, dict):
            if old.keys() != new.keys():
                raise _Unmergeable
            return {k: _merge(old[k], n_old, new[k], n_new, seen) for k in old}
        if isinstance(old, tuple):
            if len(old) != len(new):
                raise _Unmergeable
            return tuple(_merge(a, n_old, b, n_new, seen) for a, b in zip(old, new, strict=True))
        fields = dataclasses.fields(old)
        return dataclasses.replace(
            old, **{f.name: _merge(getattr(old, f.name), n_old, getattr(new, f.name), n_new, seen) for f in fields}
        )
    if (id(old), id(new)) not in seen:  # an array shared by several entries is joined once
        seen[id(old), id(new)] = (old, new, _merge_leaf(old, n_old, new, n_new))
    return seen[id(old), id(new)][2]


def _merge_leaf(old, n_old: int, new, n_new: int):
    a, b = _per_shape(old, n_old), _per_shape(new, n_new)
    if not a and not b:  # kept shared only if equal and not an array a later row count could be read as
        if type(old) is type(new) and np.ndim(old) == 0 and np.ndim(new) == 0 and old == new:
            if not isinstance(old, np.ndarray) or old.dtype == new.dtype:
                return old
        raise _Unmergeable
    tail = old.shape[1:] if a else new.shape[1:]
    try:
        old, new = (
            x if ok else np.broadcast_to(np.asarray(x), (n, *tail)) for x, ok, n in ((old, a, n_old), (new, b, n_new))
        )
    except ValueError:
        raise _Unmergeable from None
    if old.dtype != new.dtype or old.shape[1:] != new.shape[1:]:
        raise _Unmergeable
    return np.concatenate([old, new])


def _per_shape(x, n: int) -> bool:
    return isinstance(x, np.ndarray) and x.ndim > 0 and x.shape[0] == n


def _leaves(value):
    """The arrays and numbers of a ``once`` value (dicts, tuples and dataclasses of them)."""
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, tuple):
        for v in value:
            yield from _leaves(v)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _leaves(getattr(value, f.name))
    else:
        yield value


# The letters that decide the shape of a plan's layers and the placement of its process groups: what the
# terms computed once per distinct shape (``Letters.once``: a layer's blocks, the groups' links, the TP
# collectives, pipeline sends, the embedding's sync) read; and the letters that are functions of them.
# ``LAYER_KEY``: the same without the distributed-optimizer instances R (Megatron FSDP's replicas), which only the
# data-parallel groups' links read: a layer's blocks, the TP collectives, the pipeline sends and the embedding's
# sync are then shared by a plan and its hybrid variants (search's ``hybrid_variants``: the same plans, R > 1).
LAYER_KEY = ("t", "c", "b", "sp", "ep", "etp", "dispatcher", "a2a_overlap", "tpo", "fsdp", "p", "d")
SHAPE_KEY = (*LAYER_KEY, "R")  # R last: a grid's shapes by SHAPE_KEY are its shapes by LAYER_KEY, split by R
SHAPE_CARRIED = ("V", "m", "world", "edp", "N", "edp_in")
LAYER_CARRIED = ("V", "m", "world", "edp")
# ``ACT_KEY``: the letters what one micro-batch keeps in a layer, the embedding and the output layer read
# (``stage_memory``): far fewer distinct values than plans
ACT_KEY = ("t", "c", "b", "sp")
_CARRIED = {SHAPE_KEY: SHAPE_CARRIED, LAYER_KEY: LAYER_CARRIED, ACT_KEY: ("V",)}


class _Shapes:
    """The distinct shapes of a grid by ``key`` (``SHAPE_KEY`` or ``LAYER_KEY``): a plan of each (``first``),
    each plan's shape (``inverse``); their ``view`` and numbers in the context's store (``ids``) once asked."""

    def __init__(self, key: tuple[str, ...], first: np.ndarray, inverse: np.ndarray):
        self.key, self.first, self.inverse = key, first, inverse
        self._view: Letters | None = None
        self._ids: np.ndarray | None = None

    def view(self, lt: Letters, rows: np.ndarray | None = None) -> Letters:
        """The view of the shapes ``rows`` (all when None: made once), one plan per shape (``Letters.distinct``)."""
        if rows is not None:
            return lt._view_of(self.first.take(rows), self.key, _CARRIED[self.key])
        if self._view is None:
            self._view = lt._view_of(self.first, self.key, _CARRIED[self.key])
        return self._view

    def ids(self, lt: Letters) -> np.ndarray:
        """Each shape by its number in the context's ``_ShapeStore``."""
        if self._ids is None:
            names = np.concatenate([getattr(lt, k).take(self.first, axis=0) for k in self.key], axis=1, dtype=float)
            # each shape's letters as one bytes key: hashed far faster than a tuple of floats
            self._ids = lt._kept.numbers(self.key, names.view(f"V{8 * len(self.key)}").ravel().tolist())
        return self._ids


# what ``Letters`` keeps by split or model (and the context's store)
_SPLIT_TABLES = ("_table", "_pmax", "_split_p", "_moe_layers", "_kept")
# what ``Letters.in_bf16`` keeps of the private attributes: the view flag, the stage tables, ``_Rows``' source
_KEPT_BY_COPY = frozenset(("_view", "_row_start", "_stage_cache", "_whole", "_rows", "_seen", *_SPLIT_TABLES))
STAGE_FIELDS = (*COUNT_FIELDS, "dense")  # what ``Letters.stage`` gives


class _Stage(dict):
    """``Letters.stage``'s arrays, each taken from the split tables (``tables``, by ``flat`` entry) when first
    read: a dense model's terms read neither its MoE nor its sliding-window nor its MTP layers. ``dense`` =
    layers − moe, ``layers`` itself for a model without MoE layers (``moe``: False; layers − 0)."""

    def __init__(self, tables: tuple, flat: np.ndarray, moe: bool):
        super().__init__()
        self._tables, self._flat, self._moe = tables, flat, moe

    def __missing__(self, name: str) -> np.ndarray:
        if name == "dense":
            value = self["layers"] - self["moe"] if self._moe else self["layers"]
        elif name in COUNT_FIELDS:
            value = self._tables[COUNT_FIELDS.index(name)].take(self._flat).T  # column-major
        else:
            raise KeyError(name)
        self[name] = value
        return value

    def items(self):
        return [(name, self[name]) for name in STAGE_FIELDS]


class Letters:
    """t, p, d, c, b, s, h, a, g, d_h, f, L, V, m ... of every plan of a grid."""

    _view = False  # a ``distinct`` view: one plan per distinct key
    _shapes: dict | None = None  # ``_Shapes`` by key, made by ``once``
    _kept: _ShapeStore | None = None  # the context's ``keep_shapes`` store

    def __init__(self, grid: PlanGrid, ctx: Context):
        mo, tr = ctx.model, ctx.training
        self.t, self.p, self.d, self.c = _col(grid.tp), _col(grid.pp), _col(grid.dp), _col(grid.cp)
        self.ep, self.etp, self.fsdp = _col(grid.ep), _col(grid.etp), _col(grid.fsdp)
        # what Megatron FSDP shards besides the optimizer: the weights (level 3) and the gradients (level >= 2)
        level = _col(grid.fsdp_level)
        self.fsdp_params, self.fsdp_grads = self.fsdp & (level >= 3), self.fsdp & (level >= 2)
        self.R = _col(grid.do_instances)  # distributed-optimizer instances: the optimizer shards over d·c/R
        self.outer_optim = _col(grid.outer_optim)  # Megatron FSDP's HFSDP: the optimizer over all d·c ranks
        self.vpp, self.b = _col(grid.vpp), _col(grid.micro_batch)
        self.sp, self.rc, self.dopt = (
            _col(grid.sequence_parallel),
            _col(grid.recompute),
            _col(grid.distributed_optimizer),
        )
        self.rblock, self.rlayers = _col(grid.recompute_block), _col(grid.recompute_layers)
        self.dispatcher, self.a2a_overlap = _col(grid.dispatcher), _col(grid.a2a_overlap)
        # --overlap-param-gather and --tp-comm-overlap, per plan where the grid carries them (the search)
        self.opg = _col(grid.option("overlap_param_gather", ctx.options))
        self.tpo = _col(grid.option("tp_comm_overlap", ctx.options))
        self.s, self.B = tr.seq_len, tr.global_batch
        self.h, self.a, self.g, self.dh, self.f = (
            mo.hidden_size,
            mo.num_attention_heads,
            mo.query_groups,
            mo.head_dim,
            mo.ffn,
        )
        self.L = mo.num_layers
        self.V = padded_vocab(mo.vocab_size, mo.make_vocab_size_divisible_by, self.t)
        self.m = num_microbatches(self.B, self.b, self.d)
        self.G = microbatch_group(self.p, _col(grid.mb_group))  # micro-batches a virtual stage runs at a time
        self.world = self.t * self.c * self.p * self.d
        self.edp = self.world / (self.etp * self.ep * self.p)  # expert data-parallel size
        # the groups one instance (Megatron FSDP: one replica) shards over, dense and expert (parallel_state.py
        # intra_partial_data_parallel_size = d·c/R, intra_partial_expert_data_parallel_size = edp/R)
        self.N, self.edp_in = self.d * self.c / self.R, self.edp / self.R
        # the optimizer states' shard group: one instance's, or all d·c ranks with HFSDP
        self.opt_group = select(self.outer_optim, lambda: self.d * self.c, lambda: self.N)
        self.opt_group_e = select(self.outer_optim, lambda: self.edp, lambda: self.edp_in)
        self.gated, self.dropout, self.attn_dropout = mo.gated, mo.hidden_dropout > 0, mo.attention_dropout > 0
        self.unfused = ctx.options.attention_kernel is AttentionKernel.UNFUSED
        self.fp8 = ctx.options.quantised  # the linears in FP8 or NVFP4 (linears.quant_recipe)
        # a saved quantised element's bytes beyond FP8's one (block scales: memory.FP8_BLOCK_SCALE_BYTES; NVFP4 < 0)
        recipe = ctx.options.fp4_recipe.value if ctx.options.fp4 is not None else ctx.options.fp8_recipe.value
        self.fp8_scale = memory.fp8_saved_bytes_per_element(recipe) - 1 if self.fp8 else 0.0
        self.act_bytes = memory.ACTIVATION_BYTES[ctx.precision]
        self.E, self.k, self.f_e = mo.num_experts or 0, mo.moe_router_topk, mo.expert_ffn
        self.f_s = mo.shared_ffn
        # channels of the keys and values one token holds: 2·g·d, or MLA's per-head n·(d_qk + d_r + d_v)
        self.kv_width = self.a * (self.dh + mo.value_dim) if mo.multi_latent_attention else 2 * self.g * self.dh
        self._stage_tables(grid, ctx)
        self._kept = ctx.__dict__.get(KEPT_SHAPES)

    def _stage_tables(self, grid: PlanGrid, ctx: Context) -> None:
        """Per distinct split and rank, [layers, MoE layers, sliding-window layers, MTP layers, embedding,
        loss] (read through ``stage``); the distinct kinds of stage with the first rank of
        each and how many ranks share it (``type_index``, ``type_count``, shaped (N, T)); and whether
        Megatron-LM accepts the split (``split_legal``)."""
        mo = ctx.model
        columns = (grid.pp, grid.vpp, grid.split, grid.first_layers, grid.last_layers, grid.layout)  # -1: no layout
        first_row, inverse = distinct_rows(list(columns))
        uniq = np.stack([np.asarray(c)[first_row] for c in columns], axis=1).astype(np.int64, copy=False)
        bf16 = bf16_pattern(mo.num_layers, *ctx.options.bf16_end_layers)  # (): no layer outside FP8
        model = (mo.moe_pattern, mo.window_pattern, mo.mtp_layers, mo.num_layers, bf16)  # properties: read once
        self.bf16_ends = bool(bf16)  # the stages hold BF16 end layers (``Letters.stage``'s bf16 counts)
        self._table, pmax, self._split_p, legal, index, count = _split_tables(uniq.tobytes(), grid.layouts, model)
        self._moe_layers = any(model[0])  # else every split's MoE counts are 0 (``stage``: dense = layers)
        self._row_start = inverse[:, None] * pmax  # each plan's split's first entry in the flattened tables
        self._pmax = pmax
        self._stage_cache: tuple | None = None
        # (N, S) arrays column-major (``stage``), as every per-stage term computed from them
        self.type_index, self.type_count = (x.T.take(inverse, axis=1).T for x in (index, count))
        self.split_legal = legal.take(inverse)[:, None]

    def take(self, rows: np.ndarray) -> Letters:
        """The letters of the plans ``rows`` (positions) alone, with their stage tables and what the cost modules
        cached for them (``once`` terms, read back per plan): every term is row by row, so a term of these
        letters is, number for number, the term of all the plans at ``rows`` (a term only some plans read is
        computed on those: ``estimate._on_rows``). Each letter is taken when first read (``_Rows``)."""
        return _Rows(self, rows)

    def distinct(self, key: tuple[str, ...], carried: tuple[str, ...] = ()) -> tuple[Letters, np.ndarray]:
        """The letters of one plan per distinct value of the ``key`` letters, with the ``carried`` letters
        (functions of the key's), and each plan's row among them (``distinct_rows``): a formula that reads
        only these gives every plan sharing a key the same value, so it runs once per key. Every other
        per-plan letter of the view raises when read (``_NotInKey``), and the view has no stage tables."""
        first, inverse = distinct_rows([np.asarray(getattr(self, k)).reshape(-1) for k in key])
        return self._view_of(first, key, carried), inverse

    def _view_of(self, first: np.ndarray, key: tuple[str, ...], carried: tuple[str, ...]) -> Letters:
        """``distinct``'s view of the plans ``first``."""
        n, wanted, letters = len(self.t), {*key, *carried}, {}
        for name, value in vars(self).items():
            if name in wanted:
                letters[name] = value.take(first, axis=0)
            elif name[0] == "_":  # stage tables and what the cost modules cached for these rows
                continue
            elif isinstance(value, np.ndarray) and value.ndim == 2 and value.shape[0] == n:
                letters[name] = (
                    _NOT_IN_KEY[name] if name in _NOT_IN_KEY else _NOT_IN_KEY.setdefault(name, _NotInKey(name))
                )
            else:
                letters[name] = value
        view = object.__new__(Letters)
        view.__dict__.update(letters)
        view._view = True
        return view

    def in_bf16(self) -> Letters:
        """These letters with the linear layers outside the FP8 context (``fp8`` False, no block scales): the BF16
        end layers of --first-last-layers-bf16. A view or one plan (what ``once`` hands its function); what the cost
        modules cached on it (``_layer_parts``, ``_ub_ops`` ...: read with FP8) is left behind."""
        out = copy.copy(self)
        for name in [k for k in vars(out) if k[0] == "_" and k not in _KEPT_BY_COPY]:
            delattr(out, name)
        out.fp8, out.fp8_scale = False, 0.0
        return out

    def once(self, fn, name: str | None = None, key: tuple[str, ...] = SHAPE_KEY):
        """``fn(letters)`` for every plan, computed once per distinct shape (``key``: ``SHAPE_KEY``, ``LAYER_KEY``
        for a term that does not read the distributed-optimizer instances, or ``ACT_KEY``; on the ``distinct``
        view of the grid, made once) and read back per plan: arrays (their first axis the view's plans), and
        dicts, tuples and dataclasses of them (``collectives.Link``). On a view, ``fn`` of the view itself.
        ``name``: what ``fn`` computes, when the context keeps shapes (``keep_shapes``): then only the shapes
        its earlier grids did not have are computed (on a view of those alone)."""
        if self._view or len(self.t) == 1:  # one plan: it is its own distinct shape
            return fn(self)
        shapes = self._shapes_by(key)
        kept = None if name is None or self._kept is None else self._kept.kept.setdefault(name, _Kept())
        rows = None if kept is None else kept.rows(self, shapes, fn)
        if rows is not None:
            return _per_plan(kept.value, rows.take(shapes.inverse), kept.n, {})
        return _per_plan(fn(shapes.view(self)), shapes.inverse, len(shapes.first), {})

    def _shapes_by(self, key: tuple[str, ...]) -> _Shapes:
        """The grid's distinct shapes by ``key`` (a key of ``_CARRIED``: ``distinct_rows``), made once;
        ``SHAPE_KEY``'s from ``LAYER_KEY``'s and R (numbered as ``distinct_rows`` numbers all of SHAPE_KEY's
        letters: R comes last)."""
        if self._shapes is None:
            self._shapes = {}
        shapes = self._shapes.get(key)
        if shapes is None:
            if key == SHAPE_KEY:
                coarse, R = self._shapes_by(LAYER_KEY), self.R.reshape(-1)
                if R.min() == R.max():  # one R: each shape is its layer shape (as ``distinct_rows`` numbers them)
                    shapes = _Shapes(key, coarse.first, coarse.inverse)
                else:
                    shapes = _Shapes(key, *distinct_rows([coarse.inverse, R]))
            else:
                shapes = _Shapes(key, *distinct_rows([getattr(self, k).reshape(-1) for k in key]))
            self._shapes[key] = shapes
        return shapes

    def stage(self, i: np.ndarray) -> dict[str, np.ndarray]:
        """What rank i holds, for (N, S) rank indices: ``layers``, ``moe`` and ``window`` (decoder
        layers, of them MoE and sliding-window), ``mtp`` layers, ``first`` (the embedding) and
        ``last`` (the loss), these two as 1.0 or 0.0 (a term times them is what it was times a boolean, without
        numpy's cast of each); ``dense`` = layers − moe. Column-major, as ``type_index``: a plan's (N, 1)
        letters then broadcast along the plans, in long inner loops; row-major, numpy looped over the few
        stages of each plan and buffered every cast row by row (27 % of a search's instructions, callgrind)."""
        if self._stage_cache is not None and self._stage_cache[0] is i:
            return self._stage_cache[1]
        flat = (self._row_start + np.clip(np.asarray(i), 0, self._pmax - 1)).T  # (split, rank) in the tables
        out = _Stage(self._table, flat, self._moe_layers)
        self._stage_cache = (i, out)  # the cost modules ask for the same stages several times
        return out

    def whole_model(self) -> dict[str, np.ndarray]:
        """What all ranks hold together, as ``stage`` gives one rank's ((N, 1) arrays): the model's decoder
        layers, MoE, sliding-window and MTP layers, the embedding and the loss, summed over every rank of
        each plan's split (a split Megatron-LM rejects as its even stand-in)."""
        start = self._row_start[:, 0] // self._pmax
        fields = COUNT_FIELDS if self.bf16_ends else COUNT_FIELDS[: COUNT_FIELDS.index("bf16")]  # else zeros
        out = {name: self._table[k].sum(axis=1).take(start)[:, None] for k, name in enumerate(fields)}
        out["first"], out["last"] = out["first"] > 0, out["last"] > 0
        out["dense"] = out["layers"] - out["moe"]
        return out

    def fewest_layers(self) -> np.ndarray:
        """The fewest decoder layers a rank of each plan's split holds ((N, 1))."""
        ranks = np.arange(self._pmax)[None, :]
        fewest = np.min(np.where(ranks < self._split_p[:, None], self._table[0], np.inf), axis=1)
        return fewest.take(self._row_start[:, 0] // self._pmax)[:, None]

    def stage_info(self, i: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(decoder layers on stage i, holds the embedding, holds the loss)."""
        st = self.stage(i)
        return st["layers"], st["first"], st["last"]

    def recomputed_layers(self, n: np.ndarray) -> np.ndarray:
        """Layers of a stage of n layers that full recomputation re-runs: all of them with
        --recompute-method uniform, the first --recompute-num-layers of each of its vpp model chunks
        with block (megatron/core/recompute.py; each chunk is its own TransformerBlock)."""
        if not np.count_nonzero(self.rblock):  # every plan uniform (a ``distinct`` view may hold no vpp)
            return np.where(self.rc == 2, n, 0.0)
        vpp = np.asarray(self.vpp, dtype=float)  # the letters in floats (kept so), as numpy would cast them

        def block() -> np.ndarray:
            return vpp * np.minimum(np.asarray(self.rlayers, dtype=float), n / vpp)

        return select(self.rc == 2, lambda: select(self.rblock, block, lambda: n), lambda: 0.0 * n)

    def tokens_per_gpu(self) -> np.ndarray:
        """T: tokens of one micro-batch on one GPU after the sequence is split over c (and t with SP)."""
        return self.b * self.s / (self.c * np.where(self.sp, self.t, 1))


class _Rows(Letters):
    """``Letters.take``: the letters of some plans of ``whole``, each read from it (its rows taken) when first asked
    for, so a term that reads a few letters takes those alone."""

    def __init__(self, whole: Letters, rows: np.ndarray):
        self._whole, self._rows, self._seen = whole, rows, {}
        self._shapes, self._stage_cache = None, None  # made again for these plans when asked
        for name in _SPLIT_TABLES:  # by split, not by plan
            if name in vars(whole):
                setattr(self, name, getattr(whole, name))

    def __getattr__(self, name: str):  # a letter not read yet (or not cached by the whole: AttributeError)
        if name.startswith("__") or name in ("_whole", "_rows", "_seen"):
            raise AttributeError(name)
        value = _per_plan(getattr(self._whole, name), self._rows, len(self._whole.t), self._seen)
        setattr(self, name, value)
        return value

    def _view_of(self, first: np.ndarray, key: tuple[str, ...], carried: tuple[str, ...]) -> Letters:
        for name in vars(self._whole):  # every letter read, so the view holds them all
            getattr(self, name)
        return super()._view_of(first, key, carried)
