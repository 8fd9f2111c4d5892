"""Plan labels: every distinct plan a search can return has its own label (issue 18), and the label
names what differs from today's recipes."""

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.plan import ParallelPlan, PlanOptions, plan_label

CHOICES = {
    "tp": [1, 2, 4],
    "pp": [1, 2],
    "dp": [1, 2],
    "cp": [1, 2],
    "ep": [1, 2],
    "etp": [1, 2],
    "vpp": [1, 2],
    "micro_batch": [1, 2],
    "sequence_parallel": [False, True],
    "recompute": ["none", "selective", "full"],
    "recompute_method": ["uniform", "block"],
    "recompute_num_layers": [None, 1, 2, 3],
    "distributed_optimizer": [False, True],
    "fsdp": [False, True],
    "fsdp_sharding": ["optim", "optim_grads", "optim_grads_params"],
    "distributed_optimizer_instances": [1, 2, 4],
    "fsdp_outer_sharding": ["no_shard", "optim"],
    "stage_split": ["even", "embedding", "embedding+loss"],
    "moe_token_dispatcher": ["allgather", "alltoall", "flex"],
    "overlap_moe_expert_parallel_comm": [False, True],
    "overlap_grad_reduce": [False, True],
    "overlap_param_gather": [False, True],
    "tp_comm_overlap": [False, True],
    "recompute_modules": [("core_attn",), ("mlp",), ("core_attn", "mlp"), ("moe_act",)],
}
KNOBS = st.fixed_dictionaries({k: st.sampled_from(v) for k, v in CHOICES.items()})
OPTION_KEYS = ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap", "recompute_modules")


def _plan(k: dict) -> tuple[dict, dict]:
    """A plan and the options as search builds them (the all-gather overlap needs a sharded optimizer
    and the reduction overlapped; TP overlap needs SP; modules only mean something with selective)."""
    par = {key: v for key, v in k.items() if key not in OPTION_KEYS}
    par["distributed_optimizer"] |= par["fsdp"]  # search's FSDP rows carry the distributed optimizer
    if not par["distributed_optimizer"]:
        par["distributed_optimizer_instances"] = 1  # instances shard an optimizer
    hfsdp = par["fsdp"] and par["distributed_optimizer_instances"] > 1 and par["fsdp_sharding"] == "optim_grads_params"
    par["fsdp_outer_sharding"] = par["fsdp_outer_sharding"] if hfsdp else "no_shard"  # what Megatron allows
    if par["recompute"] != "full":
        par.update(recompute_method="uniform", recompute_num_layers=None)
    par["recompute_num_layers"] = par["recompute_num_layers"] or (1 if par["recompute"] == "full" else None)
    plan = ParallelPlan(**par).model_dump(mode="json")
    sharded = plan["distributed_optimizer"] or plan["fsdp"]
    opts = PlanOptions(
        overlap_grad_reduce=k["overlap_grad_reduce"],
        overlap_param_gather=k["overlap_param_gather"] and sharded and k["overlap_grad_reduce"],
        tp_comm_overlap=k["tp_comm_overlap"] and plan["sequence_parallel"],
        recompute_modules=k["recompute_modules"] if plan["recompute"] == "selective" else ("core_attn",),
    ).model_dump(mode="json")
    return plan, opts


def _identity(plan: dict, opts: dict) -> tuple:
    return tuple(sorted(plan.items())), tuple(
        tuple(v) if isinstance(v, list) else v for v in map(opts.get, OPTION_KEYS)
    )


@settings(max_examples=150, deadline=None)
@given(KNOBS)
def test_distinct_plans_have_distinct_labels(base):
    """A plan and every plan one knob away from it: equal labels only for the same plan."""
    seen: dict[str, tuple] = {}
    for knob, values in CHOICES.items():
        for value in values:
            plan, opts = _plan({**base, knob: value})
            label = plan_label(plan, moe=True, options=opts)
            assert seen.setdefault(label, _identity(plan, opts)) == _identity(plan, opts), label


def test_label_names_overlaps_off_and_recompute_kinds():
    plan = ParallelPlan(tp=8, pp=4, dp=2, sequence_parallel=True, distributed_optimizer=True).model_dump(mode="json")
    recipes = PlanOptions(overlap_grad_reduce=True, overlap_param_gather=True, tp_comm_overlap=True)
    assert plan_label(plan, options=recipes.model_dump(mode="json")) == "TP8 PP4 DP2 b1 · SP DO"
    assert (
        plan_label(plan, options=PlanOptions().model_dump(mode="json")) == "TP8 PP4 DP2 b1 · SP DO no-ogr no-opg no-tpo"
    )
    assert plan_label(plan) == "TP8 PP4 DP2 b1 · SP DO"  # options unknown: nothing said about them
    block = ParallelPlan(tp=2, recompute="full", recompute_method="block", recompute_num_layers=5)
    uniform = ParallelPlan(tp=2, recompute="full", recompute_num_layers=5)
    assert plan_label(block.model_dump(mode="json")) == "TP2 PP1 DP1 b1 · rc-blk:5"
    assert plan_label(uniform.model_dump(mode="json")) == "TP2 PP1 DP1 b1 · rc-full:u5"
    sel = ParallelPlan(tp=2, recompute="selective").model_dump(mode="json")
    mlp = PlanOptions(recompute_modules=("mlp", "moe_act")).model_dump(mode="json")
    assert plan_label(sel, options=mlp).endswith("· no-ogr rc-mlp+moeact")


def test_a_flex_dispatcher_is_named_by_its_library():
    """DeepEP and HybridEP are priced apart (and HybridEP is GB200's only flex backend), so the label names the
    library where the options give it; without options the dispatcher's own name."""
    par = dict(
        tp=2, pp=1, dp=32, ep=64, etp=1, micro_batch=4, sequence_parallel=True, stage_split="even",
        moe_token_dispatcher="flex", overlap_moe_expert_parallel_comm=True,
    )  # fmt: skip
    assert plan_label(par, moe=True) == "TP2 PP1 DP32 EP64 ETP1 b4 · SP flex+ov"
    for backend in ("deepep", "hybridep"):
        options = PlanOptions(
            moe_flex_dispatcher_backend=backend, overlap_grad_reduce=True, tp_comm_overlap=True
        ).model_dump(mode="json")
        assert plan_label(par, moe=True, options=options).endswith(f" · SP {backend}+ov")
    alltoall = dict(par, moe_token_dispatcher="alltoall", overlap_moe_expert_parallel_comm=False)
    options = PlanOptions(
        moe_flex_dispatcher_backend="hybridep", overlap_grad_reduce=True, tp_comm_overlap=True
    ).model_dump(mode="json")
    assert plan_label(alltoall, moe=True, options=options).endswith(" · SP alltoall")
