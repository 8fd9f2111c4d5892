"""The TP comm overlap as the published runs support it: TP with sequence parallelism is a setting with
--tp-comm-overlap (evidence code 1) or without it (code 2), and search chooses between a plan and its twin without
the overlap as the evidence ranking would (``search._twin_rule``)."""

import pytest

from planner.api import explain, make_request
from planner.fidelity import evidence
from planner.fidelity.evidence_counts import COUNTS
from planner.plan_file import request_from_plan
from planner.presets import load_hardware
from planner.search import BY_TIME, KEEP_TWIN, _twin_rule, search


def _ctx(hardware: str, model: str = "gpt3-175b"):
    return make_request(model=model, hardware=load_hardware(hardware), gpus=128).ctx


def test_the_tables_tell_overlap_from_no_overlap_per_generation():
    # written out from the reference runs (scripts/evidence_counts.py): Blackwell's runs with TP > 1 and SP overlap,
    # but for the NeMo docs' Mixtral 8x22B row on 256 GB200 (25.04), TP2 with SP and no TP overlap (NeMo
    # mixtral_8x22b recipes: MegatronCommOverlapCallback's tp_comm_overlap defaults off; held out), one setting (its
    # 25.02 twin on 256 B200 and DGX Cloud's 25.04 DeepSeek-V3 on GB200, TP2 without it, are apart as superseded
    # software: 2 settings until the B200 row was set apart, 2026-12-04); Hopper has
    # both (the DGX Cloud and Megatron-Bridge recipes overlap, five settings do not, one of them DGX Cloud's 25.04
    # DeepSeek-V3 recipe on 512 H100, TP2 with SP, held out); no Ampere run overlaps ([K22]'s sequence-parallel runs on
    # A100 are TP with SP and no userbuffers); DGX Cloud's Grok-1 recipe (NeMo pretrain_grok1_314b.py @ 6f2c6fda:
    # tp_comm_overlap=True, TP4 with SP; held out) is a MoE model with the overlap (code 3) on both GB200 and H100
    # NVIDIA's MLPerf v5.1 NVFP4 Llama 3.1 405B (held out, 2026-12-04; config_common_fp4.sh TP_COMM_OVERLAP=False: 'TP
    # overlap not supported yet') adds two: TP4 PP8 CP2 VP8 on GB200 (512-5,120 GPUs, one setting) and TP2 on GB300;
    # its FP8 Llama 3.1 8B on 512 GB200 and GB300 (TP2 CP4 with the overlap, held out) two with it (code 1)
    assert COUNTS[10]["tp_overlap"] == {1: 27, 2: 3, 3: 2}
    # 19 and 2 until DGX Cloud's 2024 recipes (held out, 2026-12-04): 7 dense settings with the overlap, and its Grok-1
    # (NeMo 1, TP4 with the overlap on TE 1.x's defaults) BF16 and FP8; 26 until Nebius's MLPerf v5.0 405B on 512 and
    # 1,024 H200 (TP4 PP8 VP8 CP2 with the overlap, held out), one more; 27 until Cisco's MLPerf v5.1 8B on 128 H100
    # (TP2 with SP and its own userbuffer config, held out); 28 until Sustainable Metal Cloud's v4.0 GPT-3 on 512 H100;
    # 29 until MLPerf v3.1's GPT-3 series
    assert COUNTS[9]["tp_overlap"] == {1: 30, 2: 5, 3: 4}
    assert COUNTS[8]["tp_overlap"] == {2: 6}


@pytest.mark.parametrize(
    ("hardware", "rank_by", "rule"),
    [
        ("gb200-nvl72", "risk", BY_TIME),  # both versions published since the Mixtral 8x22B rows (above)
        ("dgx-b200-superpod", "risk", BY_TIME),
        ("dgx-h100-superpod", "risk", BY_TIME),
        ("dgx-a100-superpod", "risk", KEEP_TWIN),
        ("gb200-nvl72", "estimate", BY_TIME),
        ("dgx-a100-superpod", "memory", BY_TIME),
    ],
)
def test_twin_rule_follows_the_generation_s_settings(hardware, rank_by, rule):
    assert _twin_rule(_ctx(hardware), rank_by) == rule


@pytest.mark.parametrize(
    ("hardware", "rule"),
    [
        # the five Hopper settings without the overlap are all MoE (DeepSeek-V3 and Qwen3-235B on H100, TP 2: NVIDIA's
        # recipes set tp_comm_overlap=False, beside the all-to-all overlap or, in NeMo 2's DeepSeek-V3 script, with
        # token drop); DGX Cloud's Grok-1 recipe (NeMo 2, no all-to-all overlap) runs TP4 with it: both, the faster
        ("dgx-h100-superpod", BY_TIME),
        # Blackwell's MoE recipes with TP: Grok-1 on GB200 (TP4) overlaps, NeMo's Mixtral 8x22B (TP2, B200 and GB200)
        # does not: both published, the faster
        ("gb200-nvl72", BY_TIME),
        ("dgx-a100-superpod", KEEP_TWIN),  # TP without the overlap has Ampere (dense) runs; the overlap none
    ],
)
def test_a_moe_plan_s_overlap_counts_the_generation_s_moe_runs(hardware, rule):
    assert _twin_rule(_ctx(hardware, "deepseek-v3"), "risk") == rule
    assert evidence.LABELS["tp_overlap"](3) == "TP comm overlap in a MoE model"
    # the Grok-1 rows' BF16 and FP8 settings: DGX Cloud's v25.05.05 recipe on both generations, and its v24.11.1 one
    # (NeMo 1, ETP = TP 4) on Hopper
    assert COUNTS[10]["tp_overlap"][3] == 2 and COUNTS[9]["tp_overlap"][3] == 4
    assert COUNTS[8]["tp_overlap"].get(3, 0) == 0


def test_hopper_moe_search_takes_the_faster_twin_now_moe_runs_have_both():
    """DeepSeek-V3 on 1,024 H100 (GBS 8192): rank 1 is TP4 PP4 EP64 VP4 b1 with MLA's up-projections recomputed,
    DeepEP and both overlaps, 50.84 s by the estimate; without the TP overlap the same plan is 54.54 s. (Until search
    took mla_up_proj for MLA models' selective rows, stop 51: TP4 PP16 EP16 b1, 54.01 s with the overlap and 56.06 s
    without; 56.05 s at t_op 9.06 µs and H_L 9,130.1 µs, before GB300 took CUDA's
    152 SMs; 54.00 s at t_op 9.06 µs and H_L 9,131.6 µs, before Megatron-Bridge
    25.09's cuDNN 9.11 was priced; 54.04 and 56.08 s at t_op 9.18 µs and H_L 9,128.2 µs, before
    graphed CP ring steps were priced and GB200 refitted, docs/cost-model.md §6.7.1). (Until DGX Cloud's 2024 Llama
    3.1 405B rows at PP 9, held out, gave
    Hopper its first PP 9-16 settings, 2026-12-04, PP 16 was extrapolated and moved down: rank 1 was TP4 PP8 EP64 VP4 b1
    55.18 s, 58.42 s without the overlap, now second; 55.17 s with it at t_op 9.23 µs and H_L 9,124.3 µs, before GB300's
    stragglers left their band's floor, stop 43; 55.42 and 58.66 s until t_op pooled only the families within 2 σ of
    each other, 7.96 -> 9.23 µs, H_L 9,222.8 -> 9,124.3 µs, 2026-12-04; EP32 VP1 second at 55.39 s). (Since GPT-OSS
    joined t_op's fit, 7.62 -> 7.96 µs, 2026-12-04: before
    it rank 1 was TP4 PP8 EP32 b1, 55.45 s, now second at 55.44 s, and 57.50 s without the overlap; 55.46 and 57.50 s
    before the MoE refit of stop 39, t_op 7.59 -> 7.74 µs.)
    While every Hopper MoE recipe with TP turned the overlap off (DeepSeek-V3 and
    Qwen3-235B beside the all-to-all overlap), "TP comm overlap in a MoE model" had no Hopper setting and search kept
    the twin without it (KEEP_TWIN, 57.50 s); DGX Cloud's Grok-1 recipe (NeMo 2 pretrain_grok1_314b.py @ 6f2c6fda:
    TP4 with SP and tp_comm_overlap=True on 512 H100, held out) is a Hopper MoE run with it, so both versions are
    published and search keeps the faster (BY_TIME)."""
    h100 = load_hardware("dgx-h100-superpod")
    result = search(make_request(model="deepseek-v3", hardware=h100, gpus=1024).ctx, 1024, top=1)
    assert result.tp_overlap_rule == ""
    first = result.plans[0]
    par = first["parallel"]
    assert (par["tp"], par["pp"], par["ep"], par["vpp"], par["micro_batch"]) == (4, 4, 64, 4, 1)
    assert first["options"]["recompute_modules"] == ["mla_up_proj"]
    assert first["options"]["tp_comm_overlap"] is True and first["evidence"]["extrapolated"] == []
    assert first["estimate"]["iteration_s"] == pytest.approx(50.84, abs=0.005)
    off = explain(
        request_from_plan({**first, "options": {**first["options"], "tp_comm_overlap": False}}, h100), suggest=False
    )
    assert off["estimate"]["iteration_s"] == pytest.approx(54.54, abs=0.005)
    assert off["evidence"]["extrapolated"] == []


def test_a_blackwell_plan_without_the_overlap_is_supported_by_the_mixtral_8x22b_rows():
    """TP with SP and no TP overlap on Blackwell: extrapolated while every Blackwell run with TP overlapped; the NeMo
    docs' Mixtral 8x22B row on GB200 (NEMODOC-25.04-GB200-MIXTRAL8X22B-256: TP2, SP, NeMo's recipes leave
    tp_comm_overlap off) is a published setting of it (its B200 twin of 25.02 was the second until it was set apart
    as superseded software, 2026-12-04); NVIDIA's MLPerf v5.1 NVFP4 405B runs on GB200 (TP4) and GB300 (TP2), held
    out, are two more since 2026-12-04."""
    req = make_request(
        model="gpt3-175b",
        hardware=load_hardware("gb200-nvl72"),
        gpus=128,
        tp=4,
        pp=8,
        vpp=12,
        micro_batch=4,
        sequence_parallel=True,
        distributed_optimizer=True,
        options={"tp_comm_overlap": False},
    )
    from planner.space.grid import PlanGrid

    grid = PlanGrid.from_plans([req.plan])
    assert int(evidence.feature_codes(grid, req.ctx, 128)["tp_overlap"][0]) == 2
    ev = evidence.plan_evidence(grid, req.ctx, 128)
    assert int(ev.counts["tp_overlap"][0]) == 3 and int(ev.extrapolated[0]) == 0
    assert evidence.LABELS["tp_overlap"](2) == "TP with SP but without the TP comm overlap"
    plan = explain(req, suggest=False)
    assert plan["evidence"]["extrapolated"] == []


def test_blackwell_search_takes_the_faster_twin_now_both_are_published():
    """GPT-3 175B on 128 GB200: rank 1 is TP4 PP8 b4 V12 without the overlap, 22.04 s by the estimate; with it the
    same plan is 22.70 s (22.71 s before GB200's refit with Megatron-Bridge 25.09's cuDNN 9.11 priced; 21.96 and 22.63 s
    before GB200's refit with graphed CP ring steps, docs/cost-model.md §6.7.1;
    22.83 s before GB200's refit of 2026-12-04; the GEMM law's price of userbuffer chunks,
    docs/cost-model.md §6.3.1). While every Blackwell
    run with TP overlapped, search kept the overlapped twin (KEEP_OVERLAP, 22.81 s); since the Mixtral 8x22B rows of
    the NeMo docs (TP2 with SP, no overlap, on B200 and GB200) both versions are published and search keeps the
    faster (BY_TIME), as on Hopper."""
    gb200 = load_hardware("gb200-nvl72")
    ctx = make_request(model="gpt3-175b", hardware=gb200, gpus=128).ctx
    risk = search(ctx, 128, top=1)
    assert risk.tp_overlap_rule == ""
    first = risk.plans[0]
    par = first["parallel"]
    assert (par["tp"], par["pp"], par["vpp"], par["micro_batch"]) == (4, 8, 12, 4)
    assert first["options"]["tp_comm_overlap"] is False and first["evidence"]["extrapolated"] == []
    assert first["estimate"]["iteration_s"] == pytest.approx(22.04, abs=0.005)
    keys = ("tp", "pp", "vpp", "micro_batch", "sequence_parallel", "distributed_optimizer")
    twin = make_request(
        model="gpt3-175b", hardware=gb200, gpus=128, **{k: par[k] for k in keys}, options={"tp_comm_overlap": True}
    )
    on = explain(twin, suggest=False)
    assert on["estimate"]["iteration_s"] == pytest.approx(22.70, abs=0.005)
    assert on["evidence"]["extrapolated"] == []
    estimate = search(ctx, 128, top=1, rank_by="estimate")
    assert estimate.tp_overlap_rule == ""  # by the estimate: the faster of the two
    fastest = next(pj for pj in estimate.plans if pj["fastest"])
    assert fastest["estimate"]["iteration_s"] <= first["estimate"]["iteration_s"] * (1 + 1e-9)


def test_ampere_search_runs_without_the_overlap_no_ampere_run_uses():
    """Llama 3 8B on 64 A100 (GBS 512): rank 1 is TP4 PP1 b2 with SP and no TP overlap, 18.30 s. With the overlap the
    same plan is 18.23 s by the estimate but uses a feature no Ampere run has ("TP comm overlap", 0 settings: every
    A100 reference run predates userbuffers), so search keeps its supported twin (``search._twin_rule``, KEEP_TWIN);
    before the rule it kept the faster, overlapped version, which the ranking then moved down, and ranked first TP2
    PP2 b1 V8 at 18.39 s."""
    a100 = load_hardware("dgx-a100-superpod")
    first = search(make_request(model="llama3-8b", hardware=a100, gpus=64).ctx, 64, top=1).plans[0]
    par = first["parallel"]
    assert (par["tp"], par["pp"], par["micro_batch"], par["sequence_parallel"]) == (4, 1, 2, True)
    assert first["options"]["tp_comm_overlap"] is False
    assert first["estimate"]["iteration_s"] == pytest.approx(18.30, abs=0.005)
    on = request_from_plan({**first, "options": {**first["options"], "tp_comm_overlap": True}}, a100)
    overlapped = explain(on, suggest=False)
    assert overlapped["estimate"]["iteration_s"] == pytest.approx(18.23, abs=0.005)
    assert "TP comm overlap" in overlapped["evidence"]["extrapolated"]
