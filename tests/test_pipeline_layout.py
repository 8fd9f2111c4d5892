"""--pipeline-model-parallel-layout: Megatron-LM's grammar and checks (pipeline_parallel_layer_layout.py
at d98e8a64), what each rank holds, and the layout through explain, search, export and import."""

from __future__ import annotations

import shlex

import pytest

from planner.api import explain, make_request
from planner.errors import InfeasibleError, PlannerError
from planner.megatron import export
from planner.megatron.importer import import_megatron
from planner.models.pipeline_layout import PipelineLayout, balanced_layouts, stage_contents
from planner.plan import ParallelPlan
from planner.plan_file import request_from_plan
from planner.search import search
from planner.space.candidates import Pins

H100 = "dgx-h100-superpod"


@pytest.mark.parametrize(
    "text, stages, first, last",
    [
        ("Et*4|(t*4|)*14tmL", 16, "Etttt", "tmL"),  # Megatron-LM's DeepSeek-V3 PP16 layout
        ("Et|(tt|)*30mL", 32, "Et", "mL"),  # PP8 × VPP4
        ("Ettt|(tt|)*29,m|L", 32, "Ettt", "L"),  # parse_str_to_list's docstring example
    ],
)
def test_layouts_parse_as_megatron_does(text, stages, first, last):
    lay = PipelineLayout.parse(text)
    assert len(lay.stages) == stages and lay.stages[0] == first and lay.stages[-1] == last
    assert PipelineLayout.parse(lay.text) == lay  # the compact spelling reads back the same


def test_layout_problems_are_megatrons_checks():
    assert PipelineLayout.parse("Et*4|(t*4|)*14tmL").problems(16, 61, 1) == []
    assert PipelineLayout.parse("Et*4|(t*4|)*14tmL").problems(8, 61, 1) == []  # 16 stages: vpp 2 on 8 ranks
    assert "not divisible by pp 16" in PipelineLayout.parse("Et*4|(t*4|)*15tmL").problems(16, 65, 1)[0]
    assert any("60 decoder layers" in p for p in PipelineLayout.parse("Et*4|(t*4|)*14mL").problems(16, 61, 1))
    assert any("before the MTP" in p for p in PipelineLayout.parse("Et*4|(t*4|)*14mtL").problems(16, 61, 1))
    assert any("loss L must come last" in p for p in PipelineLayout.parse("Et*4|(t*4|)*14Ltm").problems(16, 61, 1))
    with pytest.raises(ValueError, match="unknown layer character"):
        PipelineLayout.parse("Ex|tL")


def test_what_each_rank_holds():
    # PP8 × VPP4: rank i holds virtual stages i, i+8, i+16, i+24 (pipeline_parallel_layer_layout.py:48-55)
    c = stage_contents(61, 1, 8, 4, 0, 0, 0, "Et|(tt|)*30mL")
    assert [len(ids) for ids in c.layers] == [7, 8, 8, 8, 8, 8, 8, 6]
    assert c.layers[0] == (0, 15, 16, 31, 32, 47, 48)  # virtual stages 0 (E t), 8, 16, 24
    assert c.mtp == (0,) * 7 + (1,) and c.embedding[0] and c.loss[-1]
    # without a layout: the accounted split with interleaving, (L + 1 + 1)/(p·v) per chunk
    even = stage_contents(94, 0, 8, 4, 3, 0, 0, None)
    assert [len(ids) for ids in even.layers] == [11] + [12] * 6 + [11]
    assert stage_contents(61, 0, 16, 1, 0, 0, 0, None) is None  # 61 layers do not split over 16


def test_balanced_layouts_include_megatrons_deepseek_layouts():
    pp16 = [lay.text for lay in balanced_layouts(61, 16, 1, 1)]
    assert "Et*4|(t*4|)*14tmL" in pp16
    assert "Et|(tt|)*30mL" in [lay.text for lay in balanced_layouts(61, 8, 4, 1)]
    for lay in balanced_layouts(61, 8, 2, 1):
        assert lay.problems(8, 61, 1) == []


def test_a_layout_sets_the_chunks_per_rank():
    plan = ParallelPlan(pp=8, pipeline_layout="Et|(tt|)*30mL")
    assert plan.vpp == 4
    with pytest.raises(ValueError, match="vpp is 2"):
        ParallelPlan(pp=8, vpp=2, pipeline_layout="Et|(tt|)*30mL")
    with pytest.raises(ValueError, match="no first/last stage layers"):
        ParallelPlan(pp=8, pipeline_layout="Et|(tt|)*30mL", first_stage_layers=3)


def _deepseek(**kw):
    base = dict(
        model="deepseek-v3",
        hardware=H100,
        gpus=1024,
        pp=16,
        ep=64,
        etp=1,
        global_batch=1024,
        pipeline_layout="Et*4|(t*4|)*14tmL",
        moe_token_dispatcher="flex",
        recompute="full",
        distributed_optimizer=True,
    )
    return make_request(**{**base, **kw})


def test_dense_and_moe_stages_differ_in_explain():
    pj = explain(_deepseek())
    stages = {st["stage"]: st for st in pj["stages"]}
    assert pj["parallel"]["stage_layers"] == [4] * 15 + [1]
    # stage 0: three dense layers (MLP 18432 wide) and one MoE layer; stage 1: four MoE layers
    assert (stages[0]["layers"], stages[0]["moe_layers"]) == (4, 1)
    assert (stages[1]["layers"], stages[1]["moe_layers"]) == (4, 4)
    assert (stages[15]["layers"], stages[15]["moe_layers"], stages[15]["mtp_layers"]) == (1, 1, 1)
    # the dense layers' parameters are sharded over the 64-way DP, the experts over expert-DP 1:
    # stage 0 holds more bf16 weights (dense MLPs, embedding) but less optimizer state than stage 1
    assert stages[0]["weights"] > stages[1]["weights"] and stages[0]["optimizer"] < stages[1]["optimizer"]
    parts = pj["estimate"]["parts"]
    assert parts["memory"]["states: experts"] > 0 and parts["memory"]["states: attention"] > 0
    assert parts["time"]["fwd+bwd: routed-expert GEMMs"] > 0 and parts["time"]["fwd+bwd: attention"] > 0
    formulas = pj["estimate"]["formulas"]
    assert "MLA" in formulas["memory_parts"]["states: attention"]["formula"]
    assert "DeepSeek-V2" in formulas["memory_parts"]["states: attention"]["source"]
    assert "grouped GEMMs" in formulas["time_parts"]["fwd+bwd: routed-expert GEMMs"]["formula"]


def test_layout_plan_exports_and_imports_unchanged():
    req = _deepseek()
    argv = export.megatron_argv(req)
    assert argv[argv.index("--pipeline-model-parallel-layout") + 1] == "Et*4|(t*4|)*14tmL"
    assert "--num-virtual-stages-per-pipeline-rank" not in argv
    assert argv[argv.index("--moe-layer-freq") + 1] == "([0]*3+[1]*58)"
    back = import_megatron(shlex.join(argv), gpus=1024, hardware=H100).request
    assert back.plan == req.plan and back.ctx.model.moe_pattern == req.ctx.model.moe_pattern
    assert explain(back)["estimate"]["iteration_s"] == pytest.approx(explain(req)["estimate"]["iteration_s"])


def test_import_refuses_a_layout_with_virtual_stage_flags():
    argv = shlex.join(export.megatron_argv(_deepseek())) + " --num-layers-per-virtual-pipeline-stage 2"
    with pytest.raises(PlannerError, match="give only one of"):
        import_megatron(argv, gpus=1024, hardware=H100)


def test_a_layout_megatron_rejects_is_refused_with_its_reason():
    with pytest.raises(InfeasibleError, match="60 decoder layers t, but the model has 61"):
        explain(_deepseek(pipeline_layout="Et*4|(t*4|)*14mL"))


def test_search_places_deepseek_v3_with_layouts():
    req = make_request(model="deepseek-v3", hardware=H100, gpus=1024, global_batch=1024)
    result = search(req.ctx, 1024, Pins(pp=16, fsdp=False), top=3)
    for pj in result.plans:
        plan = request_from_plan(pj).plan
        assert plan.pipeline_layout is not None and plan.pp == 16
        assert sum(pj["parallel"]["stage_layers"]) == 61


def test_explicit_split_is_megatrons_rule_for_one_plan_and_a_grid():
    # transformer_config.py:2326-2340 @ d98e8a64: middle stages and middle layers, or neither; the middle layers
    # divide over the middle stages. One function serves _chunk_sizes (a plan) and grid._explicit_stages (search)
    import numpy as np

    from planner.models.pipeline_layout import explicit_split

    cases = [  # (L, p, first, last) -> (layers per middle stage, legal), by hand
        ((80, 2, 38, 42), (0, True)),  # no middle stage, no layer left: runs
        ((80, 4, 40, 40), (0, False)),  # two middle stages left empty: refused
        ((80, 4, 20, 0), (20, True)),  # 60 layers over 3 stages
        ((80, 3, 21, 0), (29, False)),  # 59 over 2 does not divide
        ((80, 1, 80, 0), (0, False)),  # pp 1 has no first/last stage to size
        ((80, 4, 50, 40), (-5, False)),  # more layers given than the model has
    ]
    for (L, p, first, last), (mid, legal) in cases:
        got_mid, got_legal = explicit_split(L, p, first, last)
        assert (int(got_mid), bool(got_legal)) == (mid, legal), (L, p, first, last)
    L = 80
    p = np.array([c[0][1] for c in cases])
    first = np.array([c[0][2] for c in cases])
    last = np.array([c[0][3] for c in cases])
    mids, legal = explicit_split(L, p, first, last)
    assert legal.tolist() == [c[1][1] for c in cases] and mids.tolist() == [c[1][0] for c in cases]
