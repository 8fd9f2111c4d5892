"""Hypothesis invariants of the cost model (STYLE.md §8).

The strategies in conftest.py only build valid specs and legal plans; the first property checks
that, so the others never test a plan Megatron-LM would refuse.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.costs.estimate import MEMORY_TERMS, TIME_TERMS, evaluate
from planner.costs.flops import Shape, model_flops, recompute_flops
from planner.costs.memory import activation_bytes_per_layer, layer_activation_parts
from planner.hardware.collectives import all_gather_time_s, all_reduce_time_s, group_link, reduce_scatter_time_s
from planner.models.params import padded_vocab
from planner.plan import Context, ParallelPlan, PlanOptions, TrainingSpec
from planner.space.grid import PlanGrid
from planner.space.rules import broken_rules, rule_masks

from conftest import GIB, Setup, a100, model_specs, plan_for, setups, stage_memory_gib_of

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def replace(spec, changes: dict):
    """A copy of a spec with some fields changed, validated like any other input (fields the spec
    derived itself, such as etp = tp, are derived again)."""
    return type(spec).model_validate({**spec.model_dump(exclude_unset=True), **changes})


def evaluate_one(setup: Setup, plan: ParallelPlan | None = None, training: TrainingSpec | None = None):
    ctx = Context(setup.model, a100(), training or setup.training, setup.options)
    with np.errstate(divide="ignore", invalid="ignore"):
        return evaluate(PlanGrid.from_plans([plan or setup.plan]), ctx)


def evaluate_all(setup: Setup, plans: list[ParallelPlan], training: TrainingSpec | None = None):
    """The plans an example compares, on one context, in one grid (each row has the values it has alone:
    test_grid_evaluation_equals_one_plan_at_a_time), where one evaluation each cost three times the time."""
    ctx = Context(setup.model, a100(), training or setup.training, setup.options)
    with np.errstate(divide="ignore", invalid="ignore"):
        return evaluate(PlanGrid.from_plans(plans), ctx)


def stages(setup: Setup, *plans: ParallelPlan) -> list[list[dict]]:
    """Every stage's memory of each plan (``stage_memory_gib``), the plans evaluated in one grid (a row's branch
    another row takes may divide by zero there, as in a search's grid: ignored as evaluate_one ignores it)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return stage_memory_gib_of(plans, Context(setup.model, a100(), setup.training, setup.options))


# ----------------------------------------------------------------------------- strategy sanity


@SETTINGS
@given(setup=setups())
def test_strategy_builds_legal_plans(setup):
    masks = rule_masks(
        PlanGrid.from_plans([setup.plan]), setup.model, setup.training, setup.options, setup.gpus, hardware=None
    )
    assert broken_rules(masks) == []


# ----------------------------------------------------------------------------- activations per layer

layer_args = st.fixed_dictionaries(
    {
        "s": st.sampled_from([128, 512, 2048, 4096]),
        "b": st.integers(1, 8),
        "t": st.sampled_from([1, 2, 4, 8]),
        "unfused": st.booleans(),
        "gated": st.booleans(),
        "dropout": st.booleans(),
        "distribute_saved": st.booleans(),
    }
)


def _layer_bytes(model, args, *, sp, rc):
    h, a, g, d, f = model.hidden_size, model.num_attention_heads, model.query_groups, model.head_dim, model.ffn
    parts = layer_activation_parts(h, a, g, d, f, gated=args["gated"], dropout=args["dropout"])
    split, replicated = (parts["attention"][i] + parts["mlp"][i] for i in (0, 1))
    return float(
        activation_bytes_per_layer(
            args["s"],
            args["b"],
            h,
            a,
            args["t"],
            sequence_parallel=np.array(sp),
            recompute=np.array(rc),
            unfused_attention=args["unfused"],
            split_coeff=split,
            replicated_coeff=replicated,
            distribute_saved=args["distribute_saved"],
        )
    )


@SETTINGS
@given(model=model_specs(), args=layer_args, sp=st.booleans())
def test_activations_none_ge_selective_ge_full(model, args, sp):
    sp = sp and args["t"] > 1
    none, selective, full = (_layer_bytes(model, args, sp=sp, rc=rc) for rc in (0, 1, 2))
    assert none >= selective >= full > 0


@SETTINGS
@given(model=model_specs(), args=layer_args, rc=st.sampled_from([0, 1, 2]))
def test_sequence_parallel_never_increases_layer_activations(model, args, rc):
    assert _layer_bytes(model, args, sp=True, rc=rc) <= _layer_bytes(model, args, sp=False, rc=rc)


@SETTINGS
@given(setup=setups(t=8))
def test_sequence_parallel_never_increases_any_stage_activations(setup):
    on = replace(setup.plan, {"sequence_parallel": True})
    off = replace(setup.plan, {"sequence_parallel": False})
    stages_on, stages_off = stages(setup, on, off)
    for st_on, st_off in zip(stages_on, stages_off, strict=True):
        assert st_on["activations"] <= st_off["activations"] * (1 + 1e-12)


@SETTINGS
@given(setup=setups())
def test_recompute_never_increases_stage_activations_over_none(setup):
    none, selective, full = stages(
        setup, *(replace(setup.plan, {"recompute": rc}) for rc in ("none", "selective", "full"))
    )
    for sel, nothing in zip(selective, none, strict=True):
        assert sel["activations"] <= nothing["activations"] * (1 + 1e-12)
    # full recompute keeps 2sbh per layer and micro-batch plus one whole layer being recomputed, so
    # it saves memory once a stage holds at least two layers (with one layer in flight the kept input
    # and the recomputed layer's activations are both counted: see test_memory)
    if min(x["layers"] for x in none) >= 2:
        for f, nothing in zip(full, none, strict=True):
            assert f["activations"] <= nothing["activations"] * (1 + 1e-12)


@SETTINGS
@given(data=st.data(), t=st.sampled_from([1, 2, 4, 8]), k=st.integers(1, 4))
def test_first_stage_layer_activations_do_not_depend_on_p(data, t, k):
    # Korthikanti et al. 2022 §4.2.3: under 1F1B with m ≥ p the first stage holds p micro-batches of
    # L/p layers, L layers' worth whatever p is. The embedding's own term, p·(sbh/t_SP + 8sb)
    # (K22 §4.3, Megatron's 8sbp), is removed before comparing.
    model = data.draw(model_specs(t=t))
    model = replace(model, {"num_layers": 8 * k})  # divisible by every p below
    base, B = data.draw(plan_for(model, t, 2, 1, m=16))  # m = 16 ≥ p for p ≤ 16
    s = data.draw(st.sampled_from([256, 1024, 2048]))
    training = TrainingSpec(global_batch=B, seq_len=s)
    setup = Setup(
        model=model,
        training=training,
        options=data.draw(st.builds(PlanOptions, attention_kernel=st.sampled_from(["flash", "unfused"]))),
        plan=base,
    )
    b, h = base.micro_batch, model.hidden_size
    dropout = model.hidden_dropout > 0
    values = []
    plans = [replace(base, {"pp": p}) for p in (2, 4, 8)]
    for p, plan, stage0 in zip((2, 4, 8), plans, stages(setup, *plans), strict=True):
        first = next(x for x in stage0 if x["stage"] == 0)["activations"] * GIB
        mask = (s * b * h / (t if plan.sequence_parallel else 1)) if dropout else 0.0
        values.append(first - p * (mask + 8 * s * b))
    np.testing.assert_allclose(values, values[0], rtol=1e-9)


# ----------------------------------------------------------------------------- peak memory


@SETTINGS
@given(data=st.data())
def test_peak_memory_monotone_in_micro_batch(data):
    setup = data.draw(setups())
    p, d = setup.plan.pp, setup.plan.dp
    # B = d·p·8·r keeps m = B/(b·d) a multiple of p for every b ≤ 8 (interleaving stays legal)
    B = d * p * 8 * data.draw(st.integers(1, 3))
    training = replace(setup.training, {"global_batch": B})
    plans = [replace(setup.plan, {"micro_batch": b}) for b in (1, 2, 4, 8)]
    peaks = [float(x) for x in evaluate_all(setup, plans, training).peak_memory_bytes]
    assert all(x <= y * (1 + 1e-12) for x, y in zip(peaks, peaks[1:], strict=False)), peaks


@SETTINGS
@given(setup=setups())
def test_weights_per_gpu_never_grow_with_t_or_p(setup):
    # the most loaded stage's weights, over every stage, for t and 2t, and p and 2p
    t, p = setup.plan.tp, setup.plan.pp
    doubled = {}
    if setup.model.num_attention_heads % (2 * t) == 0 and setup.model.ffn % (2 * t) == 0:
        doubled["tp"] = replace(setup.plan, {"tp": 2 * t})
    if setup.model.num_layers % (2 * p) == 0 and setup.plan.stage_split.value == "even":
        doubled["pp"] = replace(setup.plan, {"pp": 2 * p})
    base, *more = (max(x["weights"] for x in plan) for plan in stages(setup, setup.plan, *doubled.values()))
    for knob, weights in zip(doubled, more, strict=True):
        assert weights <= base * (1 + 1e-12), knob


@SETTINGS
@given(setup=setups())
def test_sharded_optimizer_state_never_grows_with_d(setup):
    plan = replace(setup.plan, {"distributed_optimizer": True})
    opt = [max(x["optimizer"] for x in one) for one in stages(setup, *(replace(plan, {"dp": d}) for d in (1, 2, 4, 8)))]
    assert all(x >= y for x, y in zip(opt, opt[1:], strict=False))
    # and exactly 1/d of the unsharded state (Megatron dist_optimizer.md)
    np.testing.assert_allclose(opt, [opt[0] / d for d in (1, 2, 4, 8)], rtol=1e-12)


# ----------------------------------------------------------------------------- vectorised == scalar


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_grid_evaluation_equals_one_plan_at_a_time(data):
    first = data.draw(setups())
    # many plans on the same model, training and options: vary t (within what the model allows), p,
    # vpp, d, b, SP, recompute and the optimizer
    plans = [first.plan]
    for _ in range(data.draw(st.integers(3, 12))):
        t = data.draw(
            st.sampled_from(
                [
                    x
                    for x in (1, 2, 4, 8)
                    if first.model.num_attention_heads % x == 0
                    and first.model.ffn % x == 0
                    and first.model.query_groups % x == 0
                ]
            )
        )
        p = data.draw(st.sampled_from([x for x in (1, 2, 4, 8) if first.model.num_layers % x == 0]))
        plan, _ = data.draw(plan_for(first.model, t, p, 1))
        plans.append(plan)
    ctx = first.ctx
    with np.errstate(divide="ignore", invalid="ignore"):
        grid = evaluate(PlanGrid.from_plans(plans), ctx)
        singles = [evaluate(PlanGrid.from_plans([plan]), ctx) for plan in plans]

    def column(get):
        return np.array([float(np.asarray(get(ev))[0]) for ev in singles])

    np.testing.assert_allclose(grid.iteration_s, column(lambda ev: ev.iteration_s), rtol=1e-12)
    np.testing.assert_allclose(grid.peak_memory_bytes, column(lambda ev: ev.peak_memory_bytes), rtol=1e-12)
    for term in TIME_TERMS:
        np.testing.assert_allclose(
            grid.time[term], column(lambda ev, term=term: ev.time[term]), rtol=1e-12, atol=0, err_msg=term
        )
    for term in (*MEMORY_TERMS, "total"):
        np.testing.assert_allclose(
            grid.memory[term], column(lambda ev, term=term: ev.memory[term]), rtol=1e-12, err_msg=term
        )
    for term in grid.flops:
        np.testing.assert_allclose(
            grid.flops[term], column(lambda ev, term=term: ev.flops[term]), rtol=1e-12, err_msg=term
        )
    np.testing.assert_array_equal(grid.peak_stage, column(lambda ev: ev.peak_stage))


# ----------------------------------------------------------------------------- sanity of every value


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups())
def test_every_value_finite_and_non_negative(setup):
    ev = evaluate_one(setup)
    values = {
        "iteration_s": ev.iteration_s,
        "peak_memory_bytes": ev.peak_memory_bytes,
        "m": ev.m,
        "bubble_frac": ev.bubble_frac,
        **{f"time.{k}": v for k, v in ev.time.items()},
        **{f"memory.{k}": v for k, v in ev.memory.items()},
        **{f"flops.{k}": v for k, v in ev.flops.items()},
    }
    for name, v in values.items():
        v = np.asarray(v, dtype=float)
        assert np.all(np.isfinite(v)), name
        assert np.all(v >= 0), (name, v)
    assert float(ev.iteration_s[0]) > 0
    # the iteration is the sum of its terms, and the peak memory the sum of its terms
    # (to rounding: Python 3.12's sum() of floats is compensated, numpy's is not)
    assert float(ev.iteration_s[0]) == pytest.approx(sum(float(ev.time[k][0]) for k in TIME_TERMS), rel=1e-12)
    np.testing.assert_allclose(ev.peak_memory_bytes, sum(ev.memory[k] for k in MEMORY_TERMS), rtol=1e-12)


# ----------------------------------------------------------------------------- communication


@SETTINGS
@given(message=st.floats(0, 1e12), size=st.integers(1, 64), stride=st.integers(1, 4096))
def test_one_rank_collectives_take_no_time(message, size, stride):
    lk = group_link(a100(), size, stride)  # any link on the SuperPOD
    assert float(all_reduce_time_s(1, message, lk)) == 0.0
    assert float(all_gather_time_s(1, message, lk)) == 0.0
    assert float(reduce_scatter_time_s(1, message, lk)) == 0.0


@SETTINGS
@given(setup=setups(t=1, p=1))
def test_plan_without_parallel_groups_spends_no_time_on_them(setup):
    # t = 1: no TP collectives; p = 1: no p2p, no bubble, no embedding all-reduce; d = 1: no DP sync
    plan = replace(setup.plan, {"dp": 1})
    ev = evaluate_one(setup, plan)
    for term in ("tp_comm", "pp_comm", "dp_comm", "embedding_comm", "bubble"):
        assert float(ev.time[term][0]) == 0.0, term


@SETTINGS
@given(setup=setups(), k=st.integers(2, 4))
def test_dp_gradient_sync_does_not_depend_on_global_batch(setup, k):
    # the DP all-reduce moves the gradients once per iteration, whatever B is (STYLE.md §8)
    ev1 = evaluate_one(setup)
    bigger = replace(setup.training, {"global_batch": k * setup.training.global_batch})
    ev2 = evaluate_one(setup, training=bigger)
    np.testing.assert_allclose(ev2.time["dp_comm"], ev1.time["dp_comm"], rtol=1e-12)


# ----------------------------------------------------------------------------- FLOPs


@SETTINGS
@given(
    model=model_specs(),
    B=st.integers(1, 4096),
    k=st.integers(2, 16),
    s=st.sampled_from([128, 2048, 8192]),
    rc=st.sampled_from([0, 1, 2]),
)
def test_flops_linear_in_global_batch(model, B, k, s, rc):
    m = model
    shape = Shape(m.num_layers, m.hidden_size, m.num_attention_heads, m.query_groups, m.head_dim, m.ffn, m.swiglu)
    V = int(padded_vocab(model.vocab_size, model.make_vocab_size_divisible_by, 1))
    assert model_flops(k * B, s, V, shape) == np_approx(k * model_flops(B, s, V, shape))
    r1 = float(recompute_flops(B, s, shape, recompute=np.array(rc)))
    rk = float(recompute_flops(k * B, s, shape, recompute=np.array(rc)))
    assert rk == np_approx(k * r1)


@SETTINGS
@given(setup=setups())
def test_reported_flops_per_iteration_do_not_depend_on_the_plan(setup):
    # model FLOPs count the work of one iteration; how it is split does not change them. Any t ≤ 8
    # pads V to 51200-style multiples of 128·t, so compare with the same t.
    other = replace(
        setup.plan, {"pp": 1, "dp": 1, "vpp": 1, "stage_split": "even", "micro_batch": 1, "recompute": "none"}
    )
    both = evaluate_all(setup, [setup.plan, other])
    np.testing.assert_allclose(both.flops["model"][0], both.flops["model"][1], rtol=1e-12)
    assert float(both.flops["hardware"][0]) >= float(both.flops["model"][0])


def np_approx(x, rel=1e-12):
    return pytest.approx(x, rel=rel)
