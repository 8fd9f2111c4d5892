"""--microbatch-group-size-per-virtual-pipeline-stage (issue 18): Megatron-LM's rule, the smallest legal
group search takes, its warm-up in memory, the schedule's order, and the flag both ways."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.api import explain, make_request
from planner.costs.pipeline import in_flight_microbatches, microbatch_group_legal, smallest_microbatch_group
from planner.megatron.export import flags_text
from planner.megatron.importer import import_megatron
from planner.search import search
from planner.space.candidates import Pins
from planner.timeline import FWD, op_order


def test_megatrons_rule_by_hand():
    """p ≤ G ≤ m and m mod G ∈ {0} ∪ [p, G) (schedules.py @ d98e8a64)."""
    p, m = 8, 12
    assert not microbatch_group_legal(p, m, 8)  # 12 mod 8 = 4 < 8: the last group would stall
    assert microbatch_group_legal(p, m, 12)  # one group
    assert not microbatch_group_legal(p, m, 10)  # 12 mod 10 = 2
    assert not microbatch_group_legal(p, m, 13)  # more than m
    assert microbatch_group_legal(4, 10, 5) and microbatch_group_legal(4, 10, 6)  # 10 mod 6 = 4 ≥ 4
    assert microbatch_group_legal(4, 16, 4)  # the default G = p with p | m
    assert not microbatch_group_legal(4, 10.5, 5)  # no whole micro-batches


def test_smallest_group_search_takes():
    got = smallest_microbatch_group(np.array([8, 4, 4, 8, 4]), np.array([12, 10, 16, 7, 10.5]))
    assert got.tolist() == [12, 5, 4, 0, 0]  # 0: none (m < p, or m not whole)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 32), st.integers(1, 700)), min_size=1, max_size=20))
def test_smallest_group_is_the_first_legal_one_counting_up_from_p(pairs):
    p, m = (np.array(x) for x in zip(*pairs, strict=True))
    got = smallest_microbatch_group(p, m)
    for pk, mk, g in zip(p.tolist(), m.tolist(), got.tolist(), strict=True):
        want = next((k for k in range(pk, mk + 1) if microbatch_group_legal(pk, mk, k)), 0)
        assert g == want


def test_a_larger_group_keeps_more_chunks_in_warm_up():
    """Stage 0 of p 4, vpp 2, m 10: 2(p − 1) + (vpp − 1)·G + 1 chunks of 1/vpp of the stage: G 5 gives
    (6 + 5 + 1)/2 = 6.0 stages of activations, G = p 4 gives (6 + 4 + 1)/2 = 5.5."""
    assert in_flight_microbatches(4, 10, 2, 0, G=5) == 6.0
    assert in_flight_microbatches(4, 10, 2, 0) == 5.5


def test_schedule_order_is_megatrons_example():
    """model_parallel_config.py's docstring: PP 2, VP 2, G 3, 5 micro-batches, rank 0 runs the forwards
    0 1 2 0 1 2 3 4 3 4 (chunks 0 0 0 1 1 1 0 0 1 1)."""
    forwards = [(j, c) for kind, j, c in op_order(2, 5, 2, 0, G=3) if kind == FWD]
    assert [j for j, _ in forwards] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert [c for _, c in forwards] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]


def test_search_offers_interleaving_when_pp_does_not_divide_m():
    """GPT-3 175B, global batch 12 on 64 GPUs: TP8 PP8 DP1 gives m = 12, not a multiple of 8; the
    interleaved plans search now offers carry G = 12 (the only legal group)."""
    req = make_request(model="gpt3-175b", global_batch=12)
    pins = Pins(tp=8, pp=8, micro_batch=1, recompute=None)
    plans = search(req.ctx, 64, pins, top=50).plans
    interleaved = [pj for pj in plans if pj["parallel"]["vpp"] > 1]
    assert interleaved and {pj["parallel"]["microbatch_group_size"] for pj in interleaved} == {12}


def test_flag_round_trip_and_memory():
    base = dict(model="gpt3-175b", gpus=64, tp=8, pp=8, vpp=3, global_batch=16, sequence_parallel=True)
    req = make_request(**base, microbatch_group_size=16)
    flags = flags_text(req)
    assert "--microbatch-group-size-per-virtual-pipeline-stage 16" in flags
    back = import_megatron(flags, gpus=64).request
    assert back.plan.microbatch_group_size == 16
    default = explain(make_request(**base))["estimate"]
    grouped = explain(req)["estimate"]
    assert grouped["memory"]["activations"] > default["memory"]["activations"]
    assert grouped["iteration_s"] == default["iteration_s"]  # same bubble, same steady state
