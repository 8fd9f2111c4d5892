"""The candidate grid's crossing of a knob with the rows a rule keeps (``_cross_keep``) builds exactly the
rows of crossing every value and then keeping (``_cross`` then ``_keep``), in the same order and dtypes."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.space.candidates import _cross, _cross_keep, _cross_table, _keep, _product
from planner.space.grid import TABLE_ROWS, _stage_layers, stage_layers


@settings(max_examples=60, deadline=None)
@given(
    tp=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=12),
    values=st.lists(st.integers(0, 5), min_size=1, max_size=4),
    threshold=st.integers(0, 40),
)
def test_cross_keep_is_cross_then_keep(tp, values, threshold):
    cols = {"tp": np.array(tp, dtype=np.int32), "dp": np.arange(len(tp), dtype=np.int64) * 3}

    def keep(c):  # reads a crossed column, a column of the rows and the new knob
        return (c["tp"] * c["knob"] + c["dp"]) % 7 <= threshold % 7

    crossed = _cross(cols, "knob", np.array(values))
    want = _keep(crossed, keep(crossed))
    got = _cross_keep(cols, "knob", np.array(values), keep)
    assert list(got) == list(want)
    for name in want:
        assert got[name].dtype == want[name].dtype
        np.testing.assert_array_equal(got[name], want[name])


def test_cross_keep_by_hand():
    """Rows tp = (1, 2) crossed with knob (0, 1), keeping tp·knob != 1: (1,0), (2,0), (2,1)."""
    cols = {"tp": np.array([1, 2], dtype=np.int32)}
    got = _cross_keep(cols, "knob", np.array([0, 1]), lambda c: c["tp"] * c["knob"] != 1)
    assert got["tp"].tolist() == [1, 2, 2] and got["knob"].tolist() == [0, 0, 1]


@settings(max_examples=60, deadline=None)
@given(
    tp=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=12),
    first=st.lists(st.booleans(), min_size=1, max_size=2, unique=True),
    second=st.lists(st.integers(1, 6), min_size=1, max_size=3, unique=True),
    threshold=st.integers(0, 40),
)
def test_cross_table_of_a_product_is_crossing_each_axis_then_keeping(tp, first, second, threshold):
    # the memory axes cross every row with the product of several knobs at once: the same rows, order and
    # dtypes as crossing the knobs one after the other and keeping the rows the rule allows
    cols = {"tp": np.array(tp, dtype=np.int32), "dp": np.arange(len(tp), dtype=np.int64) * 3}

    def keep(c):
        return ((c["tp"] * c["b"] + c["dp"]) % 7 <= threshold % 7) | c["a"]

    crossed = _cross(_cross(cols, "a", np.array(first)), "b", np.array(second))
    want = _keep(crossed, keep(crossed))
    table = _product({"a": first, "b": second})
    # ``reads``: the rule answered once per distinct (tp, dp) and each row given its answers (DeepSeek-V3's MoE axes)
    for got in (_cross_table(cols, table, keep), _cross_table(cols, table, keep, reads=("tp", "dp"))):
        assert list(got) == list(want)
        for name in want:
            assert got[name].dtype == want[name].dtype
            np.testing.assert_array_equal(got[name], want[name])


def test_cross_table_reads_one_row_of_each_combination_and_keeps_shared_columns_once():
    """Rows (tp, dp) = (1, 0), (2, 3), (1, 0), (2, 6) with a column every row shares (cp = 1), crossed with
    knob (0, 1) keeping tp·knob != 1: the rule sees the three distinct (tp, dp) rows only; rows 1 and 3 (tp 1)
    keep knob 0, rows 2 and 4 (tp 2) keep both, so tp = 1, 2, 2, 1, 2, 2 and knob = 0, 0, 1, 0, 0, 1; cp is one
    value broadcast to the six rows (as the grid holds it), the other columns one value a row."""
    cols = {
        "tp": np.array([1, 2, 1, 2], dtype=np.int32),
        "dp": np.array([0, 3, 0, 6], dtype=np.int64),
        "cp": np.ones(4, dtype=np.int32),
    }
    seen = []

    def keep(c):
        seen.append((sorted(c), c["tp"].shape, c["tp"].dtype))
        return c["tp"] * c["knob"] != 1

    got = _cross_table(cols, {"knob": np.array([0, 1])}, keep, reads=("tp", "dp"))
    assert seen == [(["dp", "knob", "tp"], (3, 1), np.int32)]
    assert got["tp"].tolist() == [1, 2, 2, 1, 2, 2] and got["knob"].tolist() == [0, 0, 1, 0, 0, 1]
    assert got["dp"].tolist() == [0, 3, 3, 0, 6, 6]
    assert got["cp"].strides == (0,) and got["cp"].tolist() == [1] * 6 and got["cp"].dtype == np.int32
    assert got["tp"].strides != (0,)


@settings(max_examples=40, deadline=None)
@given(
    pp=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    layers=st.integers(1, 130),
    first=st.integers(0, 9),
    last=st.integers(0, 9),
    seed=st.integers(0, 2**16),
)
def test_stage_layers_by_table_is_the_formula_row_by_row(pp, layers, first, last, seed):
    # a search's grid (thousands of rows) computes each distinct (p, split) once: the same numbers and dtypes
    rng = np.random.default_rng(seed)
    n = TABLE_ROWS + 7
    p = rng.choice(np.array(pp, dtype=np.int32), n)
    split = rng.integers(0, 4, n).astype(np.int8)
    f, lst = np.full(n, first, dtype=np.int32), np.full(n, last, dtype=np.int32)
    got, want = stage_layers(layers, p, split, f, lst), _stage_layers(layers, p, split, f, lst)
    for name in ("first", "middle", "last", "legal"):
        assert getattr(got, name).dtype == getattr(want, name).dtype
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))


def test_the_grid_keeps_pinned_layer_counts_and_layout_indices_in_two_bytes():
    """The candidate grid's columns hold N rows each (1.36 M for DeepSeek-V3 on 1,024 GPUs): the pinned first
    and last stages' layers and the layout indices take two bytes a row, and keep their values exactly; a
    layer count beyond two bytes takes four."""
    from planner.api import make_request
    from planner.space.candidates import NO_PINS, Pins, _layer_column, candidate_grid

    ctx = make_request(model="deepseek-v3", gpus=256, hardware="dgx-h100-superpod", global_batch=512).ctx
    grid = candidate_grid(ctx, 256, NO_PINS)
    assert grid.layout.dtype == grid.first_layers.dtype == grid.last_layers.dtype == np.int16
    assert grid.layout.min() == -1 and grid.layout.max() == len(grid.layouts) - 1 > 0
    assert grid.plan(int(np.argmax(grid.layout))).pipeline_layout == grid.layouts[-1]
    pinned = candidate_grid(ctx, 256, Pins(pp=4, first_stage_layers=13, last_stage_layers=14))
    assert len(pinned) and set(pinned.first_layers.tolist()) == {13} and set(pinned.last_layers.tolist()) == {14}
    wide = _layer_column(3, 40_000)
    assert wide.dtype == np.int32 and wide.tolist() == [40_000] * 3


def test_constant_columns_are_held_once():
    """A column every candidate shares is one value broadcast (no memory per row), and taking rows of it gives
    the values gathering would: DeepSeek-V3 on 1024 H100 has cp = 1 and no pinned first/last stage (0) on
    all 1,355,312 rows, and a mask, a slice and positions take 3, 2 and 2 rows of it."""
    from planner.api import make_request
    from planner.space.candidates import NO_PINS, candidate_grid
    from planner.space.grid import shared_constant, take_column

    ctx = make_request(model="deepseek-v3", gpus=1024, hardware="dgx-h100-superpod").ctx
    grid = candidate_grid(ctx, 1024, NO_PINS)
    assert len(grid) == 1_355_312
    for name in ("cp", "first_layers", "last_layers"):
        assert getattr(grid, name).strides == (0,)
    assert grid.tp.strides != (0,) and len(np.unique(grid.tp)) == 4  # tp 1, 2, 4, 8: kept row by row
    col = shared_constant(np.full(5, 7, dtype=np.int32))
    assert col.strides == (0,) and col.tolist() == [7] * 5
    mask = np.array([True, False, True, True, False])
    for index, rows in ((mask, 3), (slice(1, 3), 2), (np.array([4, 0]), 2)):
        assert take_column(col, index).tolist() == [7] * rows
    varied = np.array([1, 2, 1], dtype=np.int8)
    assert shared_constant(varied) is varied
    assert take_column(varied, np.array([1, 2])).tolist() == [2, 1]


def test_a_table_column_of_one_value_and_the_options_are_held_once():
    """Rows tp = (1, 2) crossed with the table (knob, R) = (0, 1), (1, 1) keeping tp·knob != 1: tp = 1, 2, 2,
    knob = 0, 0, 1 and R = 1 on all three rows, one value broadcast (as ``shared_constant`` holds it). GPT-3
    175B on 64 GPUs: the distributed-optimizer instances (1), the option columns (-1: as the options say) and
    the pinned stage sizes (0) are one value each over all 20,601 candidates."""
    from planner.api import make_request
    from planner.space.candidates import NO_PINS, candidate_grid
    from planner.space.grid import OPTION_COLUMNS

    cols = {"tp": np.array([1, 2], dtype=np.int32)}
    table = {"knob": np.array([0, 1]), "R": np.array([1, 1], dtype=np.int32)}
    got = _cross_table(cols, table, lambda c: c["tp"] * c["knob"] != 1)
    assert got["tp"].tolist() == [1, 2, 2] and got["knob"].tolist() == [0, 0, 1] and got["knob"].strides != (0,)
    assert got["R"].strides == (0,) and got["R"].tolist() == [1, 1, 1] and got["R"].dtype == np.int32
    grid = candidate_grid(
        make_request(model="gpt3-175b", gpus=64, hardware="dgx-a100-superpod", global_batch=64).ctx, 64, NO_PINS
    )
    assert len(grid) == 20_601
    for name, value in (
        ("do_instances", 1),
        ("first_layers", 0),
        ("last_layers", 0),
        *((n, -1) for n in OPTION_COLUMNS),
    ):
        col = getattr(grid, name)
        assert col.strides == (0,) and int(col[0]) == value, name


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(1, 12), st.integers(0, 3), st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=8
    ),
    layers=st.integers(1, 40),
)
def test_stage_layers_of_a_grid_are_each_rows_alone(rows, layers):
    # a grid whose rows give no first/last stage size takes the accounted split alone (``_explicit_stages`` is
    # skipped): every row's numbers are what it gets alone, or in a grid where other rows give sizes
    p, split, first, last = (np.array(col, dtype=np.int32) for col in zip(*rows, strict=True))
    whole = _stage_layers(layers, p, split, first, last)
    for i in range(len(rows)):
        one = _stage_layers(layers, p[i : i + 1], split[i : i + 1], first[i : i + 1], last[i : i + 1])
        for name in ("first", "middle", "last", "legal"):
            assert getattr(one, name).dtype == getattr(whole, name).dtype
            assert getattr(one, name).tolist() == [getattr(whole, name)[i]], (name, rows[i])


def test_stage_layers_by_hand():
    """96 layers over 8 stages: even, 12 each; embedding and loss accounted (split 3), (96 + 2)/8 is not whole:
    rejected; 95 layers with the embedding accounted (split 1), 96/8 = 12 a stage, the first 11. First stage
    given as 12 of 96 over 8: 84 left over 7 stages, 12 each; given as 10: 86 over 7, rejected."""
    lay = _stage_layers(
        96, np.array([8, 8, 8, 8]), np.array([0, 3, 0, 0]), np.array([0, 0, 12, 10]), np.array([0, 0, 0, 0])
    )
    assert lay.first.tolist()[:3] == [12, 11, 12] and lay.middle.tolist()[:3] == [12, 12, 12]
    assert lay.legal.tolist() == [True, False, True, False]
    acc = _stage_layers(95, np.array([8]), np.array([1]), np.array([0]), np.array([0]))
    assert (acc.first.tolist(), acc.middle.tolist(), acc.last.tolist(), acc.legal.tolist()) == (
        [11],
        [12],
        [12],
        [True],
    )


def test_a_grid_of_its_columns_is_the_dataclass_grid():
    """``PlanGrid.of_columns`` (what ``take`` and ``stack`` make) holds exactly the columns given, as the
    dataclass's own ``PlanGrid(**columns)`` does when none is None; rows 2 and 0 of a three-plan grid are its
    plans 2 and 0, the stack of two grids their plans one after the other."""
    from planner.plan import ParallelPlan
    from planner.space.grid import COLUMNS, PlanGrid

    plans = [ParallelPlan(tp=t, pp=p, dp=64 // (t * p)) for t, p in ((1, 1), (2, 4), (8, 2))]
    grid = PlanGrid.from_plans(plans)
    columns = {name: getattr(grid, name) for name in COLUMNS}
    made, own = PlanGrid.of_columns(columns, grid.layouts), PlanGrid(**columns, layouts=grid.layouts)
    assert vars(made).keys() == vars(own).keys() and all(vars(made)[k] is vars(own)[k] for k in vars(own))
    taken = grid.take(np.array([2, 0]))
    assert [taken.plan(i) for i in range(2)] == [plans[2], plans[0]]
    both = PlanGrid.stack(grid, taken)
    assert [both.plan(i) for i in range(5)] == [*plans, plans[2], plans[0]]


def test_selective_recomputation_is_searched_only_where_it_recomputes_something():
    # the searched selective recomputation with flash attention is --recompute-modules mlp; Megatron-LM recomputes
    # the mlp module in dense layers only (transformer_layer.py: `if not self.is_moe_layer`), so on qwen3-30b-a3b
    # (48 MoE layers, no dense one) its rows were the rows without it; deepseek-v3 has 3 dense layers first
    from dataclasses import replace

    from planner import api
    from planner.plan import AttentionKernel, Recompute, RecomputeModule
    from planner.space.candidates import NO_PINS, candidate_grid, selective_is_none

    qwen = api.make_request(model="qwen3-30b-a3b", gpus=32, hardware="dgx-h100-superpod").ctx
    dsv3 = api.make_request(model="deepseek-v3", gpus=256, hardware="dgx-h100-superpod").ctx
    unfused = replace(qwen, options=qwen.options.model_copy(update={"attention_kernel": AttentionKernel.UNFUSED}))
    assert selective_is_none(qwen) and not selective_is_none(dsv3) and not selective_is_none(unfused)
    codes = set(np.unique(candidate_grid(qwen, 32, NO_PINS).recompute).tolist())
    assert codes == {0, 2}  # none and full
    pinned = replace(NO_PINS, recompute_modules=(RecomputeModule.MOE_ACT,))  # a module that recomputes MoE work
    assert set(np.unique(candidate_grid(qwen, 32, pinned).recompute).tolist()) == {0, 1, 2}
    asked = replace(NO_PINS, recompute=Recompute.SELECTIVE)  # asked for: kept (search's table says it does nothing)
    assert set(np.unique(candidate_grid(qwen, 32, asked).recompute).tolist()) == {1}
    assert set(np.unique(candidate_grid(unfused, 32, NO_PINS).recompute).tolist()) == {0, 1, 2}


def test_a_grid_option_is_its_rows_else_the_options():
    """--tp-comm-overlap per row: 1 on, 0 off, -1 as the options say (on here, off there); a grid of set rows
    only (the search's) gives its own values. Runs of rows alike: rows (1, 1, 2, 2, 2, 1) are 3 runs starting
    at 0, 2, 5, the rows in runs 0, 0, 1, 1, 1, 2."""
    from types import SimpleNamespace

    from planner.plan import ParallelPlan
    from planner.space.grid import PlanGrid
    from planner.space.rules import _runs

    grid = PlanGrid.from_plans([ParallelPlan(tp=2, pp=1, dp=4)] * 3)
    flags = np.array([1, 0, -1], dtype=np.int8)
    on, off = SimpleNamespace(tp_comm_overlap=True), SimpleNamespace(tp_comm_overlap=False)
    mixed = PlanGrid.of_columns({**vars(grid), "tp_comm_overlap": flags}, grid.layouts)
    assert mixed.option("tp_comm_overlap", on).tolist() == [True, False, True]
    assert mixed.option("tp_comm_overlap", off).tolist() == [True, False, False]
    two = grid.take(np.array([0, 1]))
    set_rows = PlanGrid.of_columns({**vars(two), "tp_comm_overlap": flags[:2]}, two.layouts)
    assert set_rows.option("tp_comm_overlap", on).tolist() == [True, False]
    first, run = _runs([np.array([1, 1, 2, 2, 2, 1])], 6)
    assert first.tolist() == [0, 2, 5] and run.tolist() == [0, 0, 1, 1, 1, 2]
