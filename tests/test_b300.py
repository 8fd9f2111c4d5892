"""DGX/HGX B300 (dgx-b300-superpod): Blackwell Ultra at 1100 W, 8 GPUs a node. Its GEMM efficiencies are GB200's fit
carried by the GPUs' measured matmul rates (MAMF), its kernels Blackwell Ultra's own (GB300's attention tables,
Transformer Engine's B300 NVFP4 ratio), its fabric DGX H100's; MLPerf v5.1's four single-node B300 runs judge it."""

from __future__ import annotations

import math

import pytest

from planner.fidelity import calibrate
from planner.fidelity.runs import load_runs, release_attention_ratio
from planner.fidelity.validate import validate
from planner.hardware.names import gpu_in_name
from planner.presets import load_hardware

B300, GB300, GB200, B200, H100 = (
    "dgx-b300-superpod",
    "gb300-nvl72",
    "gb200-nvl72",
    "dgx-b200-superpod",
    "dgx-h100-superpod",
)
ROWS = {  # MLPerf v5.1 (mlcommons/training_results_v5.1 @441d65f4): the median of the runs' median step, s
    "MLPERF-v5.1-Dell-1xXE9780x8B300-SXM-270GB-llama31_8b": 0.548,  # FP8, full-iteration graph
    "MLPERF-v5.1-Supermicro-AS-8126GS-NB3RT-llama31_8b": 0.5502,  # FP8, no CUDA graphs
    "MLPERF-v5.1-Nebius-nebius_b300_n1-llama31_8b": 0.3942,  # NVFP4 + FP8 attention, full-iteration graph
    "MLPERF-v5.1-Lenovo-SR680aV4-8xB300_SXM-llama31_8b": 0.406,  # NVFP4 + FP8 attention, per-layer graphs
}


def test_the_preset_is_an_hgx_b300_node():
    hw = load_hardware(B300)
    g = hw.gpu
    assert (g.peak_bf16_tflops, g.peak_fp8_tflops, g.compute_capability, g.tdp_watts) == (2250, 4500, 10.3, 1100)
    # FP4: 144 PFLOP/s sparse over 8 GPUs = 18 each, dense 3/4 of it (GB300: 1,080 of 1,440 over 72)
    assert g.peak_nvfp4_tflops == pytest.approx(144_000 / 8 * 1080 / 1440)
    assert (hw.node.gpus_per_node, hw.network.nics_per_node, hw.network.nic_gbits_per_s) == (8, 8, 800)
    # PyTorch's total as its out-of-memory message prints it on B300, 267.69 GiB: the driver's 275,040 MiB at 0.9966,
    # beside B200's 182,631 / 183,359 MiB = 0.9960
    assert hw.memory.allocatable_gib == 267.69
    assert hw.memory.allocatable_gib * 1024 / 275040 == pytest.approx(182631 / 183359, abs=1e-3)
    mamf = {"bf16": pytest.approx(1769.0 / 2250, abs=5e-4), "fp8": pytest.approx(3353.3 / 4500, abs=5e-4)}
    assert g.matmul_peak_frac == mamf


def test_a_launch_script_naming_b300_is_read_on_the_b300_preset_and_gb300_stays_gb300():
    assert gpu_in_name("pretrain_llama3_8b_b300_fp8.sh") == ("B300", B300)
    assert gpu_in_name("pretrain_llama3_8b_gb300_fp8.sh") == ("GB300", GB300)
    assert gpu_in_name("run_b200_vs_b300.sh") is None  # two GPUs named: none taken


def test_b300_takes_gb200s_fit_at_the_measured_matmul_rates_and_h100s_fabric():
    b3, gb2, h = (load_hardware(n).calibration for n in (B300, GB200, H100))
    # MAMF: B300 1769 / 2250 = 0.786 BF16, 3353.3 / 4500 = 0.745 FP8; GB200 1822 / 2500 = 0.729, 3615.6 / 5000 = 0.723
    assert b3.gemm_efficiency == pytest.approx(gb2.gemm_efficiency * 0.786 / 0.729, abs=1.5e-4)
    assert b3.fp8_gemm_efficiency == pytest.approx(gb2.fp8_gemm_efficiency * 0.745 / 0.723, abs=1.5e-4)
    assert (b3.layer_overhead_us, b3.attention_scale) == (gb2.layer_overhead_us, gb2.attention_scale)
    assert (b3.network_bus_efficiency, b3.straggler_sigma) == (h.network_bus_efficiency, h.straggler_sigma)
    assert calibrate.FABRIC_DONORS[B300] == H100 and B300 in calibrate.FAMILIES[GB200]
    assert "carried over from gb200-nvl72" in b3.factors["gemm_efficiency"].source
    # Blackwell Ultra's own measurements: TE's B300 GEMMs, 6.812 ms per-tensor FP8 / 3.764 ms NVFP4 at 3x the peak
    assert b3.nvfp4_gemm_ratio == pytest.approx(6.812 / 3.764 / 3, abs=5e-4)
    assert b3.factors["nvfp4_gemm_ratio"].status == "measured"
    assert load_hardware(B300).attention == load_hardware(GB300).attention.model_copy(
        update={"kernel": load_hardware(B300).attention.kernel, "sources": load_hardware(B300).attention.sources}
    )


def test_mlperf_v51_cudnn_prices_b300_attention_at_gb300s_table():
    release = "MLPerf Training v5.1, Nebius B300 n1, NVIDIA's NeMo implementation"
    b300 = release_attention_ratio(release, B300, 8192)
    assert b300 == pytest.approx(release_attention_ratio(release, GB300, 8192))  # the same law and table
    assert b300 == pytest.approx(1.145, abs=0.01)  # GB300's cuDNN 9.13.1 table at 8k over its law


def test_moe_plans_on_b300_take_the_band_of_its_own_held_out_rows():
    # Megatron-Bridge's 19 B300 MoE rows (26.02-26.06), 17 in the bar: a B300 MoE plan's band is theirs, not DGX B200's
    # (moe_fit.BAND_FAMILIES carries B200's only to a preset with no MoE row of its own)
    from planner.fidelity.validate import validate_moe

    rows = [r for r in validate_moe()["runs"] if r["hardware"] == B300]
    assert len(rows) == 19 and sum(r["in_bar"] for r in rows) == 17 and not any(r["in_fit"] for r in rows)
    logs = [math.log(r["predicted"] / r["published"]) for r in rows if r["in_bar"]]
    b3 = load_hardware(B300).accuracy
    assert b3.moe_validation_error_frac == pytest.approx(math.sqrt(sum(x * x for x in logs) / len(logs)), abs=6e-4)
    assert b3.moe_max_error_frac == pytest.approx(max(map(abs, logs)), abs=6e-4)
    assert "dgx-b300-superpod's 17 MoE rows" in b3.sources["moe_validation_error_frac"]


@pytest.fixture(scope="module")
def b300_rows():
    runs = [r for r in load_runs() if r.hardware == B300]
    return {row["id"]: row for row in validate(runs)["runs"]}


def test_the_four_mlperf_b300_runs_are_held_out_and_within_four_percent(b300_rows):
    assert {i: r["published"] for i, r in b300_rows.items()} == ROWS
    assert all(r["in_bar"] and not r["in_fit"] for r in b300_rows.values())
    for rid, row in b300_rows.items():
        assert abs(row["error_pct"]) < 4.0, rid
    # the preset's band is these rows' RMS and largest log error (calibrate --write)
    acc = load_hardware(B300).accuracy
    assert acc.held_out_runs == 4 and acc.max_error_frac == pytest.approx(0.037, abs=0.002)


def test_graphs_are_priced_where_the_runs_barely_differ(b300_rows):
    # Dell's FP8 run with a full-iteration graph and Supermicro's without any differ by 0.4 % measured; the model
    # gives the eager one its per-layer host gaps (τ), 7.6 % more: a known over-charge on one-node x86 runs
    # (docs/cost-model.md), bounded here so that a change to it shows
    dell, smc = (b300_rows[i] for i in list(ROWS)[:2])
    assert smc["published"] / dell["published"] == pytest.approx(1.004, abs=0.001)
    assert 1.0 < smc["predicted"] / dell["predicted"] < 1.10


def _moe_evidence(hardware: str, ep: int, backend: str):
    from planner import api
    from planner.fidelity import evidence
    from planner.plan import ParallelPlan
    from planner.space.grid import PlanGrid

    req = api.make_request(
        model="qwen3-235b-a22b",
        hardware=hardware,
        gpus=256,
        global_batch=8192,
        seq_len=4096,
        options={"moe_flex_dispatcher_backend": backend},
    )
    plan = ParallelPlan(
        tp=1, pp=4, ep=ep, etp=1, micro_batch=2, moe_token_dispatcher="flex", distributed_optimizer=True
    )
    grid = PlanGrid.from_plans([plan])
    ev = evidence.plan_evidence(grid, req.ctx, 256)
    return evidence.evidence_json(ev, 0, (0.0, 0.0, 0.0)), list(evidence.extrapolated_features(grid, req.ctx, 256))


def test_hybridep_across_8_gpu_domains_has_no_blackwell_run_behind_it():
    # EP across NVLink domains is told apart by the dispatcher that carries it there: on Blackwell the three settings
    # that cross run alltoall (GPT-OSS EP64 on B200 and B300) or DeepEP (DeepSeek-V3 on 256 B200); HybridEP across
    # 8-GPU domains runs only on H100 (Qwen3-30B EP16 on two nodes) - NVIDIA keeps it to EP 8 on NVL8 for want of
    # performance (Megatron-Bridge issue 2883)
    got, extrapolated = _moe_evidence(B300, 16, "hybridep")
    feature = next(f for f in got["features"] if f["kind"] == "ep_domains")
    assert feature == {"feature": "EP across NVLink domains (flex/hybridep)", "kind": "ep_domains", "settings": 0,
                       "held_out": 0}  # fmt: skip
    assert extrapolated == [1]
    inside, extrapolated = _moe_evidence(B300, 8, "hybridep")  # EP 8 stays inside the node: no such feature
    assert not any(f["kind"] == "ep_domains" for f in inside["features"]) and extrapolated == [0]
    deepep, _ = _moe_evidence(B300, 16, "deepep")
    assert next(f for f in deepep["features"] if f["kind"] == "ep_domains")["settings"] == 1
    hopper, extrapolated = _moe_evidence(H100, 16, "hybridep")
    assert next(f for f in hopper["features"] if f["kind"] == "ep_domains")["settings"] == 3 and extrapolated == [0]


def _contradiction_evidence(hardware: str, model: str = "qwen3-235b-a22b", **options):
    """Evidence of one MoE plan with VP 2 and the all-to-all overlap, or of the same PP 4 VP 2 plan for a dense model
    (feature codes only: the plan's legality is not asked)."""
    from planner import api
    from planner.fidelity import evidence
    from planner.plan import ParallelPlan
    from planner.space.grid import PlanGrid

    moe = model != "llama3-70b"
    req = api.make_request(
        model=model, hardware=hardware, gpus=256, global_batch=8192, seq_len=4096, options=options or None
    )
    extra = {"ep": 8, "etp": 1, "moe_token_dispatcher": "alltoall", "overlap_moe_expert_parallel_comm": True}
    plan = ParallelPlan(
        tp=1, pp=4, vpp=2, micro_batch=1, distributed_optimizer=True, **(extra if moe else {}),
    )  # fmt: skip
    grid = PlanGrid.from_plans([plan])
    ev = evidence.plan_evidence(grid, req.ctx, 256)
    return evidence.evidence_json(ev, 0, (0.0, 0.0, 0.0)), int(evidence.extrapolated_features(grid, req.ctx, 256)[0])


def test_b300_moe_plans_paced_by_the_host_count_the_overlap_and_vp_unsupported():
    # NVIDIA measured VP and the all-to-all overlap slowing Qwen3-235B on B300 and turned both off (Megatron-Bridge PR
    # 2669, issue 3399); the model gives the two rows that ran them 37-40 % too much. On B300, a MoE plan whose layers
    # the host still issues (no CUDA graphs, as those rows ran) counts both features unsupported; graphed whole, as
    # NVIDIA's one B300 overlap in the bar (Qwen3-30B, 26.06) ran, it does not; nor on B200, nor for a dense model
    ev, n = _contradiction_evidence(B300)
    assert ev["disputed"] == ["all-to-all overlap", "interleaved pipeline"] and n == 2
    assert {f["feature"] for f in ev["contradicted"]} == {"interleaved pipeline", "all-to-all overlap"}
    assert all(f["source"] == "Megatron-Bridge PR 2669, issue 3399" for f in ev["contradicted"])
    graphed, n = _contradiction_evidence(B300, cuda_graph_impl="full_iteration")
    assert graphed["disputed"] == [] and "contradicted" not in graphed and n == 0
    scoped, n = _contradiction_evidence(B300, cuda_graph_impl="transformer_engine",
                                        cuda_graph_modules=["attn", "moe_router", "moe_preprocess"])  # fmt: skip
    assert len(scoped["contradicted"]) == 2 and n == 2  # the experts and the dispatch stay eager: still host-paced
    b200, n = _contradiction_evidence(B200)
    assert b200["disputed"] == [] and n == 0
    dense, n = _contradiction_evidence(B300, model="llama3-70b")
    assert dense["disputed"] == [] and n == 0


def test_the_contradicted_rows_are_predicted_27_to_28_percent_fast():
    # r = ln(predicted/published step) = ln(published/predicted tokens): 26.02 ln(2,691/3,697.05) = -0.3176, 26.02.01
    # ln(2,644/3,697.05) = -0.3352 (priced as v0.3.0's recipe, the same prediction); RMS √((0.1009 + 0.1124)/2) = 0.3266
    from planner.fidelity.evidence_counts import CONTRADICTED
    from planner.report.memory import held_out_miss

    n, rms, low, high = CONTRADICTED[B300]
    assert n == 2 and rms == pytest.approx(0.3266, abs=2e-4)
    assert (low, high) == (pytest.approx(-0.3352, abs=2e-4), pytest.approx(-0.3176, abs=2e-4))
    # exp(-0.3352) - 1 = -28.5 %, exp(-0.3176) - 1 = -27.2 %
    assert held_out_miss({"low_frac": low, "high_frac": high}) == "predicted 27–28 % faster than they ran"


def test_search_on_b300_ranks_the_overlap_and_vp_after_plans_nvidia_runs():
    # Qwen3-235B on 256 B300 (MXFP8, no CUDA graphs): the fastest estimates interleave with the overlap; rank 1 now
    # has neither, as NVIDIA's B300 recipes since 26.04, and the note under the table says why the fastest moved down
    from planner import api
    from planner.report.memory import evidence_text, ranking_headline
    from planner.search import search

    req = api.make_request(
        model="qwen3-235b-a22b", hardware=B300, gpus=256, options={"fp8": "e4m3", "fp8_recipe": "mxfp8"}
    )
    result = search(req.ctx, 256, top=3)
    first = result.plans[0]
    assert first["parallel"]["vpp"] == 1 and not first["parallel"]["overlap_moe_expert_parallel_comm"]
    assert first["evidence"]["disputed"] == []
    fastest = next(pj for pj in result.plans if pj["rank"] == result.fastest_rank)
    assert fastest["parallel"]["vpp"] > 1 and fastest["parallel"]["overlap_moe_expert_parallel_comm"]
    said = (
        "uses all-to-all overlap and interleaved pipeline, slower on dgx-b300-superpod by NVIDIA's own measure, "
        "which turned them off there (Megatron-Bridge PR 2669, issue 3399)"
    )
    assert said in ranking_headline(result)
    text = evidence_text(fastest).plain
    assert "its 2 runs there predicted 27–28 % faster than they ran; each counted unsupported" in text


def _dsv3_b300_step(run_id: str, plan=None, **options) -> float:
    """The model's step time (s) of a B300 DeepSeek-V3 row with its plan or options changed."""
    from dataclasses import replace

    from planner.fidelity.moe_runs import load_moe_runs
    from planner.fidelity.validate import predict

    run = next(r for r in load_moe_runs() if r.id == run_id)
    request = {**run.request, **(plan or {}), "options": {**run.request["options"], **options}}
    return predict(replace(run, request=request, metric="step time (s)"))


def test_nvidias_b300_deepseek_tuning_gains_less_than_the_model_gives():
    # Megatron-Bridge issue 3385 (DeepSeek-V3 on 256 B300, 26.04 -> 26.04.01): PP 16 -> 8 for FP8, MBS 1 -> 2 and TE
    # graphs of attention, router and preprocess for all precisions, PCT binding off "to get stable runs". Model
    # TFLOP/s: BF16 749.1 -> 770.03 (+2.8 %, its PP 8 already), FP8 806 -> 894.58 (+11.0 %); the tables' MXFP8 rows
    # 3,131 -> 3,456 tokens/s (x1.104). The model gives MXFP8 x1.135 and BF16 x1.123: most of its BF16 gain is the
    # per-micro-batch host and launch time (τ, the experts' t_op) that b 2 halves and the graphs remove, and B300
    # measures little of it - with the 4-10 % its MoE rows run faster than predicted and the graphed/eager MLPerf pair
    # above, a lead that B300 pays less per micro-batch than GB200's family fit charges - not through its CPU, which
    # pinned to PCT cores only recovers B200's (docs/cost-model.md §13.7). Bounded here so that a change to it shows
    a, b = "MB-26.04-B300-DSV3-256", "MB-26.04.01-B300-DSV3-256"
    mxfp8 = _dsv3_b300_step(a) / _dsv3_b300_step(b)
    assert 3456 / 3131 == pytest.approx(1.104, abs=1e-3) and 1.104 < mxfp8 < 1.16
    eager = {"cuda_graph_impl": "none", "cuda_graph_modules": ()}
    bf16 = {"fp8": None, "fp8_recipe": None}
    gain = _dsv3_b300_step(b, {"micro_batch": 1}, **bf16, **eager) / _dsv3_b300_step(b, **bf16)
    assert 770.03 / 749.1 == pytest.approx(1.028, abs=1e-3) and 1.08 < gain < 1.16


def test_an_exported_script_cautions_its_submitter_about_contradicted_features():
    # The Slurm script's and the Bridge override file's headers carry what NVIDIA measured against the plan's
    # features on its GPU, above everything else; a plan without them carries no such line
    from planner import api
    from planner.bridge.export import bridge_export
    from planner.megatron.export import contradiction_notes, slurm_script

    base = dict(model="qwen3-235b-a22b", hardware=B300, gpus=256, global_batch=8192, seq_len=4096)
    plan = dict(tp=1, pp=4, vpp=8, ep=16, etp=1, micro_batch=2, distributed_optimizer=True)
    plan |= dict(moe_token_dispatcher="flex", pipeline_layout="Et*3|(t*3|)*30tL")
    options = {"moe_flex_dispatcher_backend": "deepep", "fp8": "e4m3", "fp8_recipe": "mxfp8"}
    paced = api.make_request(**base, **plan, overlap_moe_expert_parallel_comm=True, options=options)
    [note] = contradiction_notes(paced)
    assert note == (
        "all-to-all overlap and interleaved pipeline: slower on dgx-b300-superpod by NVIDIA's own measure, which "
        "turned them off there (Megatron-Bridge PR 2669, issue 3399); the runs that used them ran slower than "
        "estimated (predicted 27–28 % faster than they ran)"
    )
    script = slurm_script(paced)
    assert script.splitlines()[1].startswith("# CAUTION: all-to-all overlap and interleaved pipeline")
    header = bridge_export(paced, "v0.6.0").header
    assert any(line.startswith("CAUTION: all-to-all overlap and interleaved pipeline") for line in header)
    graphed = api.make_request(
        **base, **plan, overlap_moe_expert_parallel_comm=True, options={**options, "cuda_graph_impl": "full_iteration"}
    )
    assert contradiction_notes(graphed) == [] and "CAUTION" not in slurm_script(graphed)


def test_a_users_copy_of_the_b300_preset_keeps_nvidias_finding(tmp_path):
    # the contradiction follows the GPU (gpu.name B300-SXM-270GB), not the preset's name: a copy with its own name and
    # 400 Gb/s rails still counts the all-to-all overlap and VP unsupported for a host-paced MoE plan
    from planner import api
    from planner.fidelity import evidence
    from planner.presets import presets_root

    text = (presets_root() / "hardware" / f"{B300}.yaml").read_text()
    text = text.replace(f"name: {B300}\n", "name: my-b300-cluster\n").replace(
        "nic_gbits_per_s: 800.0", "nic_gbits_per_s: 400.0"
    )
    path = tmp_path / "my-b300.yaml"
    path.write_text(text)
    ctx = api.make_request(model="qwen3-235b-a22b", hardware=str(path), gpus=256).ctx
    assert ctx.hardware.name == "my-b300-cluster" and ctx.hardware.network.nic_gbits_per_s == 400
    assert set(evidence.contradicted(ctx)) == {"a2a_overlap", "vpp"}
    assert not evidence.contradicted(api.make_request(model="qwen3-235b-a22b", hardware=GB300, gpus=256).ctx)
