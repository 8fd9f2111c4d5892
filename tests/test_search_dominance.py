"""Plans that recompute more than a twin without saving time or memory are dropped before the ranking
(``planner.space.dominance``): DeepSeek-V3's ``rc-mlp`` recomputes the MLP of its 3 dense layers only, so where
they sit off the memory peak the plan with it is the plan without it, a little slower (half of the top 10 on
1024 H100 were such twins). Search now builds DeepSeek-V3's selective rows with MLA's up-projections
(``candidates.searched_modules``), so these tests pin ``--recompute-modules mlp`` to keep the twins they are about."""

from __future__ import annotations

import dataclasses
import io
import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from planner.api import make_request
from planner.plan import RecomputeModule
from planner.report.search import search_view
from planner.search import search
from planner.space.candidates import NO_PINS
from planner.space.dominance import MEMORY_TIE_BYTES, RecomputeTwins, recomputes_more

from conftest import run_cli

GIB, MIB = 2**30, 2**20
NONE, SELECTIVE, FULL = 0, 1, 2


def _twins(rows: list[tuple]) -> tuple[RecomputeTwins, np.ndarray, np.ndarray]:
    """Rows (key, recompute, block, layers, iteration s, peak GiB) as ``RecomputeTwins`` and their times and peaks."""
    key, rc, block, layers, it, peak = (np.array(col) for col in zip(*rows, strict=True))
    return RecomputeTwins.of(key, (rc, block.astype(bool), layers)), it.astype(float), peak * GIB


def test_recomputing_more_by_hand():
    # (recompute, block, layers) of a, of b, and whether a re-runs all b does and more
    cases = [
        ((SELECTIVE, False, 0), (NONE, False, 0), True),
        ((FULL, False, 1), (NONE, False, 0), True),
        ((FULL, True, 3), (NONE, False, 0), True),
        ((FULL, False, 1), (SELECTIVE, False, 0), True),  # full re-runs every module of every layer
        ((FULL, True, 3), (SELECTIVE, False, 0), False),  # block: 3 layers whole, the others nothing
        ((FULL, True, 5), (FULL, True, 3), True),
        ((FULL, False, 1), (FULL, True, 3), True),  # uniform re-runs every layer
        ((FULL, False, 2), (FULL, False, 1), False),  # groups of 2 or 1: the same layers
        ((NONE, False, 0), (SELECTIVE, False, 0), False),
        ((SELECTIVE, False, 0), (SELECTIVE, False, 0), False),
    ]
    for a, b, want in cases:
        got = recomputes_more(*(np.array([x]) for x in (*a, *b)))
        assert bool(got[0]) is want, (a, b)


def test_a_twin_that_saves_nothing_is_dropped_and_a_tradeoff_is_kept():
    # DeepSeek-V3 on 1024 H100 (search before the drop): #1/#2 the same plan with and without rc-mlp, 63.85 GiB
    # both, 55.4248 s and 55.4257 s: rc-mlp dropped. #5/#6: 63.99 GiB at 56.5530 s against 62.45 GiB at 56.5540 s:
    # 1.54 GiB saved for 1 ms, a tradeoff, kept. Key 2: rc-mlp faster (a model quirk): kept. Key 3: 1 MiB saved
    # (below MEMORY_TIE_BYTES, 2 MiB): dropped; key 4: 4 MiB saved: kept. Key 5: full uniform over block of 30
    # layers, the same peak, slower: dropped; block of 6 kept (it is the faster).
    rows = [
        (0, NONE, 0, 0, 55.4248, 63.85),
        (0, SELECTIVE, 0, 0, 55.4257, 63.85),
        (1, NONE, 0, 0, 56.5530, 63.99),
        (1, SELECTIVE, 0, 0, 56.5540, 62.45),
        (2, NONE, 0, 0, 50.0, 60.0),
        (2, SELECTIVE, 0, 0, 49.999, 60.0),
        (3, NONE, 0, 0, 50.0, 60.0),
        (3, SELECTIVE, 0, 0, 50.5, 60.0 - 1 / 1024),
        (4, NONE, 0, 0, 50.0, 60.0),
        (4, SELECTIVE, 0, 0, 50.5, 60.0 - 4 / 1024),
        (5, FULL, 1, 6, 40.0, 70.0),
        (5, FULL, 0, 1, 41.0, 70.0),
    ]
    twins, it, peak = _twins(rows)
    assert twins.dominated(it, peak).tolist() == [0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]
    it[0] = np.inf  # a twin not timed yet decides nothing: its rc-mlp row stays until it is
    assert not twins.dominated(it, peak)[1]


def _dominated_by_hand(key, work, it, peak) -> np.ndarray:
    """Every pair compared: the definition, row by row."""
    n, out = len(key), np.zeros(len(key), dtype=bool)
    for a, b in itertools.permutations(range(n), 2):
        more = recomputes_more(*(np.array([w[a]]) for w in work), *(np.array([w[b]]) for w in work))[0]
        timed = np.isfinite(it[a]) and np.isfinite(it[b])
        if (
            key[a] == key[b]
            and more
            and timed
            and it[a] >= it[b] * (1 - 1e-9)
            and peak[a] >= peak[b] - MEMORY_TIE_BYTES
        ):
            out[a] = True
    return out


WORK = st.sampled_from([(NONE, False, 0), (SELECTIVE, False, 0), (FULL, False, 1), (FULL, False, 2), (FULL, True, 3)])


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(0, 3),
            WORK | st.tuples(st.just(FULL), st.just(True), st.integers(1, 4)),
            st.sampled_from([1.0, 1.0005, 1.5, 2.0, np.inf]),
            st.sampled_from([60 * GIB, 60 * GIB - MIB, 60 * GIB - 3 * MIB, 61 * GIB]),
        ),
        min_size=1,
        max_size=14,
    )
)
def test_no_plan_kept_recomputes_more_than_a_twin_kept_for_nothing(rows):
    key = np.array([r[0] for r in rows])
    work = tuple(np.array([r[1][i] for r in rows]) for i in range(3))
    it, peak = np.array([r[2] for r in rows]), np.array([r[3] for r in rows], dtype=float)
    dropped = RecomputeTwins.of(key, work).dominated(it, peak)
    np.testing.assert_array_equal(dropped, _dominated_by_hand(key, work, it, peak))
    kept = np.flatnonzero(~dropped)  # the invariant: among the plans kept, none is dominated by another kept
    np.testing.assert_array_equal(_dominated_by_hand(key[kept], tuple(w[kept] for w in work), it[kept], peak[kept]), 0)


CASE = dict(model="deepseek-v3", gpus=256, hardware="dgx-h100-superpod", global_batch=512)


@pytest.fixture(scope="module")
def deepseek():
    # selective recomputation of the mlp module, as search built it for every model before it took MLA's
    # up-projections for DeepSeek-V3 (``candidates.searched_modules``): the dense-layers-only twins these tests are
    # about; --recompute-modules mlp pins them (recomputation itself is still searched)
    req = make_request(**CASE, options={"recompute_modules": ("mlp",)})
    pins = dataclasses.replace(NO_PINS, recompute_modules=(RecomputeModule.MLP,))
    return req.ctx, search(req.ctx, CASE["gpus"], pins, top=10)


def _same_but_recompute(a: dict, b: dict) -> bool:
    keys = set(a["parallel"]) - {"recompute", "recompute_method", "recompute_num_layers", "stage_layers"}
    return all(a["parallel"][k] == b["parallel"][k] for k in keys)


def test_deepseek_lists_no_rc_mlp_twin_and_keeps_the_tradeoff(deepseek):
    # before: #1/#2, #3/#4, #5/#6 and #7/#8 each the same plan with and without rc-mlp, the same GiB (70.1, 70.3),
    # rc-mlp at most 10 ms slower. Now those four rc-mlp rows are gone; the PP2 plans with rc-mlp stay (71.4 GiB
    # against 71.9 without it: half a GiB saved for 0.03 s), next to their twins
    ctx, result = deepseek
    plans = result.plans
    for a, b in itertools.permutations(plans, 2):
        if _same_but_recompute(a, b) and (a["parallel"]["recompute"], b["parallel"]["recompute"]) == (
            "selective",
            "none",
        ):
            ea, eb = a["estimate"], b["estimate"]
            assert (
                ea["peak_memory_gib"] < eb["peak_memory_gib"] - MEMORY_TIE_BYTES / GIB
                or ea["iteration_s"] < eb["iteration_s"]
            )
    first = plans[0]
    assert (first["parallel"]["tp"], first["parallel"]["pp"], first["parallel"]["recompute"]) == (8, 4, "none")
    assert plans[1]["parallel"]["recompute"] == "none"  # rc-mlp's #2 of before is gone
    tradeoffs = [p for p in plans if p["parallel"]["recompute"] == "selective"]
    assert len(tradeoffs) == 2 and all(p["parallel"]["pp"] == 2 for p in tradeoffs)
    # 71.4 GiB with the TP overlap's userbuffers: a MoE plan's TP overlap counts Hopper's MoE runs, and since DGX
    # Cloud's Grok-1 recipe on 512 H100 (TP4 with the overlap, held out) Hopper has MoE runs with it and without it,
    # so the faster version is kept (70.8 GiB without it, while no Hopper MoE run overlapped)
    assert [round(p["estimate"]["peak_memory_gib"], 1) for p in tradeoffs] == [71.4, 71.4]
    # 6 since the MoE refit of 2026-12-03 (t_op 7.87 -> 7.61 µs): one more rc-mlp twin within its tie; 5 while the
    # plans ran without the TP overlap (Hopper's MoE runs): one fewer twin within its tie; 6 again with it; 5 since the
    # MoE refit of stop 39 (t_op 7.59 -> 7.74 µs): one rc-mlp twin no longer within its tie; 6 since that of
    # 2026-12-04 (t_op 7.74 -> 7.62 µs, H_L 9,437.2 -> 9,249.2 µs): one more within its tie; 5 once GPT-OSS joined
    # t_op's fit (7.62 -> 7.96 µs, H_L 9,222.8 µs): one fewer; 6 since DGX Cloud's 2024 recipes (held out) gave
    # Hopper its first PP 9-16 settings (2026-12-04): the ranking by evidence changed, one more twin within its tie
    assert result.dropped_twins == 6 and result.to_json()["dropped_recompute_twins"] == 6
    assert result.feasible == 31156  # legal and fit: the dropped are counted (as before the drop)
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(search_view(result, ctx, CASE["gpus"]))
    text = " ".join(out.getvalue().split())
    assert "31,156 legal and fit" in text
    assert "dropped: 6 plans recomputing more than one listed without saving time or memory" in text


def test_a_pinned_recompute_lists_its_plans(deepseek):
    # --recompute selective --recompute-modules mlp: every plan recomputes the MLP, and #1 is the rc-mlp twin of
    # the unpinned #1 (the same peak, 70.1 GiB, 2 ms slower), which the unpinned search drops
    _, result = deepseek
    args = ["search", "--model", "deepseek-v3", "--gpus", "256", "--hardware", "dgx-h100-superpod"]
    args += ["--global-batch", "512", "--recompute", "selective", "--recompute-modules", "mlp", "--top", "3", "--json"]
    pinned = json.loads(run_cli(args).stdout)
    assert all(p["parallel"]["recompute"] == "selective" for p in pinned["plans"])
    assert all(p["options"]["recompute_modules"] == ["mlp"] for p in pinned["plans"])
    assert pinned["dropped_recompute_twins"] == 0
    twin, plain = pinned["plans"][0], result.plans[0]
    assert _same_but_recompute(twin, plain)
    # 70.1 GiB with the TP overlap's userbuffers (69.5 without them while no Hopper MoE run overlapped: the Grok-1
    # DGX Cloud rows on H100 overlap)
    assert round(twin["estimate"]["peak_memory_gib"], 1) == round(plain["estimate"]["peak_memory_gib"], 1) == 70.1
    assert plain["estimate"]["iteration_s"] < twin["estimate"]["iteration_s"] < plain["estimate"]["iteration_s"] * 1.001
