"""Terms computed once per distinct key (``Letters.distinct``) are exactly the terms computed plan by plan:
the numbering of distinct rows, the view's refusal of letters its key does not decide, and a layer's
blocks (``blocks.layer_parts``) on search grids of a dense and an MoE model; and the iteration time
search takes without the memory terms (``estimate.iteration_s``) is evaluate's, number for number."""

import dataclasses
import functools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from planner.api import make_request
from planner.costs import stage_memory
from planner.costs.blocks import _layer_blocks, layer_parts
from planner.costs.estimate import (
    _row_sum,
    _time_terms,
    evaluate,
    iteration_s,
    peak_memory_bytes,
    peak_memory_bytes_and_twins,
    stage_memory_totals,
)
from planner.costs.letters import (
    KEPT_SHAPES,
    LAYER_CARRIED,
    LAYER_KEY,
    SHAPE_CARRIED,
    SHAPE_KEY,
    Letters,
    _merge,
    _Unmergeable,
    distinct_rows,
    keep_shapes,
)
from planner.costs.stage_memory import stage_memory_bytes, stage_params
from planner.hardware.collectives import group_link, links_of
from planner.space.candidates import Pins, candidate_grid
from planner.space.grid import PlanGrid


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 400),
    widths=st.lists(st.sampled_from([1, 2, 3, 17, 1000, 5000]), min_size=1, max_size=6),
)
def test_distinct_rows_number_the_combinations_as_a_sort_does(seed, n, widths):
    rng = np.random.default_rng(seed)  # columns from -3 to w - 4: a width w of values, some negative
    columns = [rng.integers(-3, w - 3, size=n, dtype=np.int64) for w in widths]
    first, inverse = distinct_rows(columns)
    stacked = np.stack(columns, axis=1)
    unique, expected = np.unique(stacked, axis=0, return_inverse=True)
    np.testing.assert_array_equal(inverse, expected.reshape(-1))  # lexicographic numbering, as np.unique's
    np.testing.assert_array_equal(stacked[first], unique)  # each combination's row holds it
    # the letters' floats holding the same integers (and a boolean column) number them the same
    flags = columns[0] > 0
    first_f, inverse_f = distinct_rows([c.astype(float)[:, None] for c in columns] + [flags])
    _, expected_f = np.unique(np.column_stack([stacked, flags]), axis=0, return_inverse=True)
    np.testing.assert_array_equal(inverse_f, expected_f.reshape(-1))
    # a column of one value (a grid's broadcast ``shared_constant``, a boolean every row shares) adds no digit
    one = [np.broadcast_to(np.array([7], dtype=np.int16), (n,)), np.ones(n, dtype=bool), np.full(n, -2.0)]
    first_c, inverse_c = distinct_rows([one[0], *columns[:1], one[1], *columns[1:], one[2]])
    np.testing.assert_array_equal(inverse_c, expected.reshape(-1))
    np.testing.assert_array_equal(stacked[first_c], unique)


def test_the_shapes_of_plans_of_one_optimizer_instance_count_are_their_layer_shapes():
    ctx, grid = _grid("gpt3-175b", 64, "dgx-a100-superpod", False)
    lt = Letters(grid, ctx)
    shapes, layer = lt._shapes_by(SHAPE_KEY), lt._shapes_by(LAYER_KEY)
    first, inverse = distinct_rows([getattr(lt, k).reshape(-1) for k in SHAPE_KEY])
    assert len(np.unique(lt.R)) == 1 and shapes is not layer  # R = 1 for every plan
    np.testing.assert_array_equal(shapes.inverse, inverse)
    np.testing.assert_array_equal(shapes.first, first)
    assert len(first) == 3_960 < len(grid) == 134_400  # the candidates of 64 and 128 GPUs


@functools.cache
def _grid(model: str, gpus: int, hardware: str, fp8: bool):
    options = {"fp8": "hybrid"} if fp8 else None
    ctx = make_request(model=model, gpus=gpus, hardware=hardware, options=options).ctx
    # two world sizes, so no letter is a function of the others (p of t, c and d on one world)
    return ctx, PlanGrid.stack(candidate_grid(ctx, gpus, Pins()), candidate_grid(ctx, 2 * gpus, Pins()))


CASES = [
    ("gpt3-175b", 64, "dgx-a100-superpod", False),
    ("mixtral-8x7b", 128, "dgx-h100-superpod", True),
    ("deepseek-v3", 64, "dgx-h100-superpod", False),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 600))
def test_layer_blocks_once_per_distinct_layer_equal_them_plan_by_plan(case, seed, rows):
    ctx, grid = _grid(*case)
    rng = np.random.default_rng(seed)
    grid = grid.take(rng.choice(len(grid), size=min(rows, len(grid)), replace=False))
    tpo = rng.integers(0, 2, len(grid)).astype(np.int8)  # each row with its own --tp-comm-overlap, as search's
    grid = replace(grid, tp_comm_overlap=tpo)
    with np.errstate(divide="ignore", invalid="ignore"):
        once = layer_parts(Letters(grid, ctx), ctx)
        every = _layer_blocks(Letters(grid, ctx), ctx)
    assert once.keys() == every.keys()
    for name, block in every.items():
        assert once[name].keys() == block.keys()
        for k, v in block.items():
            np.testing.assert_array_equal(np.broadcast_to(once[name][k], np.shape(v)), v, err_msg=f"{name}.{k}")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 400))
def test_iteration_time_without_memory_is_evaluates(case, seed, rows):
    ctx, grid = _grid(*case)
    rng = np.random.default_rng(seed)
    grid = grid.take(rng.choice(len(grid), size=min(rows, len(grid)), replace=False))
    grid = replace(grid, tp_comm_overlap=rng.integers(0, 2, len(grid)).astype(np.int8))
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal(iteration_s(grid, ctx), evaluate(grid, ctx).iteration_s)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_peak_memory_is_evaluates_the_padded_stage_kinds_repeating_rank_0(case):
    """``peak_memory_bytes`` takes the largest column of the stage totals as they are: a column no kind of stage
    fills (``type_count`` 0, a split of fewer kinds than the grid's most) points at rank 0, which the first
    column holds, so it repeats that column's total; the peak is evaluate's, number for number (NaN too)."""
    ctx, grid = _grid(*case)
    grid = grid.take(np.random.default_rng(3).choice(len(grid), size=min(2000, len(grid)), replace=False))
    lt = Letters(grid, ctx)
    assert (lt.type_index[:, 0] == 0).all() and (lt.type_count[:, 0] > 0).all()
    assert (lt.type_index[lt.type_count == 0] == 0).all()
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal(peak_memory_bytes(grid, ctx), evaluate(grid, ctx).peak_memory_bytes)
    if case[0] == "deepseek-v3":  # dense first layers and an MTP stage: splits of one to three kinds of stage
        assert (lt.type_count == 0).any() and (lt.type_count[:, -1] > 0).any()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 400))
def test_a_twins_peak_from_its_rows_evaluation_is_its_own(case, seed, rows):
    """``peak_memory_bytes_and_twins``: the peaks of the plans, and of some of them without --tp-comm-overlap
    (their workspaces alone recomputed, summed again with the plans' other terms), number for number what
    ``peak_memory_bytes`` gives each plan and each twin evaluated on its own (FP8: userbuffers partly in uint8)."""
    ctx, grid = _grid(*case)
    rng = np.random.default_rng(seed)
    grid = grid.take(rng.choice(len(grid), size=min(rows, len(grid)), replace=False))
    grid = replace(grid, tp_comm_overlap=rng.integers(0, 2, len(grid)).astype(np.int8))
    twins = np.flatnonzero(rng.random(len(grid)) < 0.6)
    off = replace(grid.take(twins), tp_comm_overlap=np.zeros(len(twins), dtype=np.int8))
    with np.errstate(divide="ignore", invalid="ignore"):
        peak, twin_peak = peak_memory_bytes_and_twins(grid, ctx, twins)
        np.testing.assert_array_equal(peak, peak_memory_bytes(grid, ctx))
        np.testing.assert_array_equal(twin_peak, peak_memory_bytes(off, ctx))
    sp = grid.sequence_parallel[twins] & (grid.tp_comm_overlap[twins] > 0) & np.isfinite(peak[twins])
    assert (twin_peak[sp] < peak[twins][sp]).all()  # the userbuffers and TE's streams gone


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 400), counts=st.lists(st.integers(1, 9), min_size=1, max_size=3)
)
@example(seed=1609, rows=1, counts=[1])  # gpt3-175b: one row, not full recomputation (the count reaches no term)
def test_stage_totals_for_several_recomputed_layer_counts_are_each_counts_own(case, seed, rows, counts):
    """``stage_memory_totals(grid, ctx, counts)``: block recomputation's K layer counts along a leading axis in one
    evaluation; each count's totals number for number those of the grid with that --recompute-num-layers, and the
    layers per chunk the grid's own (block recomputation solves its layers with counts 1 and 2)."""
    ctx, grid = _grid(*case)
    rng = np.random.default_rng(seed)
    grid = grid.take(rng.choice(len(grid), size=min(rows, len(grid)), replace=False))
    n = len(grid)
    full = rng.random(n) < 0.8  # most rows full recomputation, block or uniform; the rest as they are
    grid = replace(
        grid,
        recompute=np.where(full, 2, grid.recompute).astype(grid.recompute.dtype),
        recompute_block=rng.random(n) < 0.7,
        tp_comm_overlap=rng.integers(0, 2, n).astype(np.int8),
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        totals, chunks = stage_memory_totals(grid, ctx, tuple(counts))
        assert totals.shape == (len(counts), *chunks.shape)
        for k, total in zip(counts, totals, strict=True):
            own, own_chunks = stage_memory_totals(replace(grid, recompute_layers=np.full(n, k, np.int64)), ctx)
            np.testing.assert_array_equal(total, own, err_msg=f"{k} layers")
            np.testing.assert_array_equal(chunks, own_chunks)


def _evaluation_values(ev) -> dict:
    values = {"iteration_s": ev.iteration_s, "peak": ev.peak_memory_bytes, "stage": ev.peak_stage}
    return {**values, **{f"time.{k}": v for k, v in ev.time.items()}, **{f"mem.{k}": v for k, v in ev.memory.items()}}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_evaluation_is_the_same_with_the_stage_arrays_row_major(case, monkeypatch):
    """The (plan, stage) arrays are column-major (``Letters.stage``: a plan's letters broadcast along long
    inner loops); a term summed over the stages must not depend on it (a row-major sum adds in another order)."""
    ctx, grid = _grid(*case)
    grid = grid.take(np.random.default_rng(7).choice(len(grid), size=min(500, len(grid)), replace=False))
    lt = Letters(grid, ctx)
    assert lt.type_index.flags.f_contiguous and lt.stage(lt.type_index)["layers"].flags.f_contiguous
    with np.errstate(divide="ignore", invalid="ignore"):
        columns = _evaluation_values(evaluate(grid, ctx))
        tables, stage = Letters._stage_tables, Letters.stage

        def row_major_tables(self, grid, ctx):
            tables(self, grid, ctx)
            self.type_index, self.type_count = (
                np.ascontiguousarray(self.type_index),
                np.ascontiguousarray(self.type_count),
            )

        monkeypatch.setattr(Letters, "_stage_tables", row_major_tables)
        monkeypatch.setattr(
            Letters, "stage", lambda self, i: {k: np.ascontiguousarray(v) for k, v in stage(self, i).items()}
        )
        rows = _evaluation_values(evaluate(grid, ctx))
    assert Letters(grid, ctx).type_index.flags.c_contiguous  # the patch took
    for name, value in rows.items():
        np.testing.assert_array_equal(columns[name], value, err_msg=name)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), stages=st.integers(1, 12), fortran=st.booleans())
def test_a_row_sum_is_numpys_row_major_sum(seed, stages, fortran):
    """``_row_sum`` adds a plan's stages as numpy's sum of a row-major row does (one after the other below 8 stages,
    pairwise from 8), whatever the array's order: 1e16 + 1 + 1 row by row is 1e16 (each 1 lost), pairwise
    1e16 + 2."""
    rng = np.random.default_rng(seed)
    x = rng.random((300, stages)) * rng.choice([1e-9, 1e-3, 1.0, 1e3, 1e16], size=(300, stages))
    x = np.asfortranarray(x) if fortran else x
    assert _row_sum(x).tobytes() == np.sum(np.ascontiguousarray(x), axis=1, keepdims=True).tobytes()
    assert _row_sum(np.asfortranarray([[1e16, 1.0, 1.0]]))[0, 0] == 1e16


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_stage_memory_term_is_column_major_or_one_value_per_plan(case):
    """Each (plan, stage) memory term, and so every sum of them, is column-major as the stage arrays
    (``Letters.stage``), or a value per plan (or one value) broadcast along the stages: one row-major term (the
    CUDA context's, made by ``np.full``) made each sum after it row-major, numpy's slow path (the peak's max
    over the stages 5x slower). The embedding and loss flags are floats (1.0 or 0.0): no cast where they
    multiply a term."""
    ctx, grid = _grid(*case)
    lt = Letters(grid.take(np.arange(0, len(grid), 7)), ctx)
    st = lt.stage(lt.type_index)
    assert st["first"].dtype == st["last"].dtype == np.float64
    assert set(np.unique(st["first"])) == set(np.unique(st["last"])) == {0.0, 1.0}
    with np.errstate(divide="ignore", invalid="ignore"):
        mem = stage_memory_bytes(lt, ctx, lt.type_index)
    for name, term in mem.items():
        assert term.shape == lt.type_index.shape, name
        assert term.flags.f_contiguous or term.strides[1] == 0, name


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_memory_terms_do_not_depend_on_numpys_ufunc_buffer(case, monkeypatch):
    """``stage_memory.UFUNC_BUFFER`` only spares numpy's copies: every memory term of every plan is the same
    with numpy's default buffer (8192) and with a tiny one, and the caller's buffer size is left as it was."""
    ctx, grid = _grid(*case)
    grid = grid.take(np.arange(0, len(grid), 25))
    with np.errstate(divide="ignore", invalid="ignore"):
        before = np.getbufsize()
        ours = _evaluation_values(evaluate(grid, ctx))
        assert np.getbufsize() == before
        for size in (8192, 16):
            monkeypatch.setattr(stage_memory, "UFUNC_BUFFER", size)
            theirs = _evaluation_values(evaluate(grid, ctx))
            for name in ours:
                np.testing.assert_array_equal(ours[name], theirs[name], err_msg=f"{name}, buffer {size}")


def test_a_dense_models_memory_reads_only_the_stage_counts_it_needs():
    """``Letters.stage`` takes each count from the split tables when first read: GPT-3's memory terms read its
    stages' layers, embedding and loss only (no MoE, sliding-window or MTP layer to take), and its dense layers
    are its layers (layers − 0, the same array); every count is still there when asked for."""
    ctx, grid = _grid(*CASES[0])
    lt = Letters(grid.take(np.arange(0, len(grid), 7)), ctx)
    with np.errstate(divide="ignore", invalid="ignore"):
        stage_memory_bytes(lt, ctx, lt.type_index)
    st = lt.stage(lt.type_index)
    assert set(st) == {"layers", "first", "last", "dense"} and st["dense"] is st["layers"]
    bf16 = {"bf16", "bf16_moe", "bf16_window"}  # --first-last-layers-bf16's layers: none without it
    assert dict(st.items()).keys() == {"layers", "moe", "window", "mtp", "first", "last", "dense", *bf16}
    assert not any(np.any(st[k]) for k in ("moe", "window", "mtp", *bf16))


def test_a_view_refuses_the_letters_its_key_does_not_decide():
    ctx, grid = _grid(*CASES[1])
    lt = Letters(grid.take(np.arange(50)), ctx)
    view, inverse = lt.distinct(SHAPE_KEY, SHAPE_CARRIED)
    np.testing.assert_array_equal(view.t[inverse], lt.t)
    np.testing.assert_array_equal(view.m[inverse], lt.m)  # carried: m = B/(b·d) of the key's b and d
    for use in (lambda: view.vpp + 1, lambda: 1 * view.vpp, lambda: np.where(view.dopt, 1, 0), lambda: view.rc == 2):
        with pytest.raises(TypeError, match="not in this view's key"):
            use()
    with pytest.raises(AttributeError):
        view.stage(np.zeros((len(view.t), 1), dtype=np.int64))  # no stage tables either


@settings(max_examples=30, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 30),
    hardware=st.sampled_from(["dgx-a100-superpod", "dgx-h100-superpod", "gb200-nvl72"]),
    groups=st.integers(1, 5),
)
def test_links_of_stacked_groups_are_each_groups_own(data, n, hardware, groups):
    hw = make_request(model="gpt3-175b", gpus=8, hardware=hardware).ctx.hardware
    ints = st.lists(st.sampled_from([1, 2, 3, 4, 8, 16, 24, 64, 128, 1024]), min_size=n, max_size=n)
    pairs = {f"g{k}": (np.array(data.draw(ints))[:, None], np.array(data.draw(ints))[:, None]) for k in range(groups)}
    pairs["scalar"] = (2, np.array(data.draw(ints))[:, None])  # a size every plan shares, as the pipeline's pair
    stacked = links_of(hw, pairs)
    for name, (size, stride) in pairs.items():
        alone = group_link(hw, size, stride)
        for f in dataclasses.fields(alone):
            np.testing.assert_array_equal(
                getattr(stacked[name], f.name), np.broadcast_to(getattr(alone, f.name), (n, 1)), err_msg=f.name
            )


def _fresh(ctx):
    """A copy of ``ctx`` that keeps nothing between grids (``dataclasses.replace`` makes a new context)."""
    return replace(ctx)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), sizes=st.lists(st.integers(2, 200), min_size=2, max_size=3))
def test_a_context_keeping_shapes_gives_each_grid_its_own_numbers(case, seed, sizes):
    """``keep_shapes``: grids evaluated one after another with one context (as a search does: its candidates,
    their variants, its best plans) read the shapes an earlier grid computed; every number is the one a
    context keeping nothing gives, and the shapes are computed once."""
    ctx, grid = _grid(*case)
    kept = keep_shapes(_fresh(ctx))
    rng = np.random.default_rng(seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        for n in sizes:
            part = grid.take(rng.choice(len(grid), size=min(n, len(grid)), replace=False))
            part = replace(part, tp_comm_overlap=rng.integers(0, 2, len(part)).astype(np.int8))
            np.testing.assert_array_equal(iteration_s(part, kept), iteration_s(part, _fresh(ctx)))
            for name, value in _evaluation_values(evaluate(part, _fresh(ctx))).items():
                np.testing.assert_array_equal(_evaluation_values(evaluate(part, kept))[name], value, err_msg=name)
    store = kept.__dict__[KEPT_SHAPES]
    assert {"layer_sums", "pipeline_comm"} <= store.kept.keys()
    assert "group_links" not in store.kept  # the data-parallel links are computed per plan (estimate.group_links)
    for k in store.kept.values():  # each shape computed once
        assert not k.broken and np.array_equal(np.sort(k.row[k.row >= 0]), np.arange(k.n))


def test_kept_values_join_leaf_by_leaf_and_refuse_what_cannot():
    """How ``_Kept`` joins a ``once`` function's values for new shapes to those it keeps: arrays per shape
    are stacked (a value every shape shares is spread over its rows when the other side differs per
    shape); shared values that differ, and arrays a later count of rows could read as per shape, are not
    kept (the function is then computed per grid, ``broken``)."""
    one = np.array([[1.0], [2.0]])
    joined = _merge({"a": one, "b": (0.5, None)}, 2, {"a": np.array([[3.0]]), "b": (0.5, None)}, 1, {})
    np.testing.assert_array_equal(joined["a"], [[1.0], [2.0], [3.0]])
    assert joined["b"] == (0.5, None)
    spread = _merge(np.float64(4.0), 2, np.array([[5.0]]), 1, {})  # shared on one side, per shape on the other
    np.testing.assert_array_equal(spread, [[4.0], [4.0], [5.0]])
    for old, new in ((1.0, 2.0), (np.array([[1], [2]]), np.array([[1.0]])), ({"a": 1.0}, {"b": 1.0})):
        with pytest.raises(_Unmergeable):
            _merge(old, 2, new, 1, {})
    ctx, grid = _grid(*CASES[0])
    lt = Letters(grid.take(np.arange(40)), keep_shapes(_fresh(ctx)))
    calls = []

    def shared_vector(v):  # an array of length 2 that every shape shares: refused, computed per grid
        calls.append(len(v.t))
        return np.array([1.0, 2.0])

    np.testing.assert_array_equal(lt.once(shared_vector, "vector"), [1.0, 2.0])
    assert lt._kept.kept["vector"].broken and len(calls) == 2  # tried to keep it, then computed for the grid


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_terms_without_the_optimizer_instances_are_shared_by_a_plans_hybrid_variants(case):
    """``LAYER_KEY``: the terms that do not read the distributed-optimizer instances (a layer's blocks, the TP
    collectives, the pipeline sends, the embedding's sync) are kept by shape without R, so the same plans with
    R > 1 (search's hybrid variants) compute none of them again; every
    number is the one a context keeping nothing gives (the data-parallel groups' links, which read R, are computed
    per plan: estimate.group_links). A view by that key refuses R and what depends on it."""
    ctx, grid = _grid(*case)
    part = grid.take(np.random.default_rng(7).choice(len(grid), size=min(300, len(grid)), replace=False))
    part = replace(part, tp_comm_overlap=(np.arange(len(part)) % 2).astype(np.int8))
    R = np.where((part.dp * part.cp) % 2 == 0, 2, 1)  # two replicas where d·c allows them
    hybrid = replace(part, do_instances=R.astype(part.do_instances.dtype))
    kept = keep_shapes(_fresh(ctx))
    store = kept.__dict__[KEPT_SHAPES]
    with np.errstate(divide="ignore", invalid="ignore"):
        iteration_s(part, kept)
        before = {name: k.n for name, k in store.kept.items()}
        np.testing.assert_array_equal(iteration_s(hybrid, kept), iteration_s(hybrid, _fresh(ctx)))
    grew = {name for name, k in store.kept.items() if k.n > before[name]}
    assert not grew, grew
    view, _ = Letters(part, ctx).distinct(LAYER_KEY, LAYER_CARRIED)
    for letter in ("R", "N", "edp_in"):
        with pytest.raises(TypeError, match="not in this view's key"):
            getattr(view, letter) + 1


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(2, 300))
def test_the_letters_of_some_plans_give_those_plans_terms(case, seed, rows):
    """``Letters.take``: the letters of some plans, with what the cost modules cached for every plan (the
    ``once`` terms, the stage tables), give each of those plans the time terms it has among all the plans
    (``estimate._on_rows`` computes a term only some plans have, the data-parallel sync, on those alone)."""
    ctx, grid = _grid(*case)
    rng = np.random.default_rng(seed)
    grid = grid.take(rng.choice(len(grid), size=min(rows, len(grid)), replace=False))
    grid = replace(grid, tp_comm_overlap=rng.integers(0, 2, len(grid)).astype(np.int8))
    some = np.flatnonzero(rng.integers(0, 2, len(grid)))
    with np.errstate(divide="ignore", invalid="ignore"):
        lt = Letters(grid, ctx)
        mem = stage_params(lt, ctx, lt.type_index)
        mem = {"dense_params": mem["dense"], "expert_params": mem["expert"]}
        every, _, _ = _time_terms(lt, ctx, mem)  # caches the once terms on lt, which take carries
        part = lt.take(some)
        assert part.type_index.flags.f_contiguous or part.type_index.shape[1] == 1
        terms, _, _ = _time_terms(part, ctx, {k: v[some] for k, v in mem.items()})
    for k, v in every.items():
        np.testing.assert_array_equal(terms[k], v[some], err_msg=k)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_grids_with_the_same_splits_share_their_stage_tables(case):
    """``letters._split_tables``: two grids of one model whose plans have the same distinct splits (the grid and
    its plans in reverse order) read one set of stage tables, made once, and each plan still reads its own
    split's stages: plan j of the reversed grid holds on every rank what plan N-1-j of the grid holds."""
    ctx, grid = _grid(*case)
    some = np.random.default_rng(0).choice(len(grid), size=min(len(grid), 4000), replace=False)
    grid = grid.take(np.sort(some))  # 4,000 plans (DeepSeek-V3's whole grid took 48 s here)
    back = grid.take(np.arange(len(grid))[::-1])
    lt, lt_back = Letters(grid, ctx), Letters(back, ctx)
    assert all(a is b for a, b in zip(lt._table, lt_back._table, strict=True))
    assert not lt._table[0].flags.writeable  # shared: no grid may change another's tables
    ranks = np.broadcast_to(np.arange(int(np.max(grid.pp)))[None, :], (len(grid), int(np.max(grid.pp))))
    ours, theirs = lt.stage(ranks), lt_back.stage(ranks)
    for name in ("layers", "moe", "mtp", "first", "last"):
        np.testing.assert_array_equal(theirs[name], ours[name][::-1], err_msg=name)
    np.testing.assert_array_equal(lt_back.type_count, lt.type_count[::-1])
    np.testing.assert_array_equal(lt_back.split_legal, lt.split_legal[::-1])
