"""The MoE rows from Megatron-Bridge's model verification cards (presets/reference/moe_runs.csv, MB-CARD-*):
NVIDIA's own runs of the tuned flat performance recipes, each at the card's bridge_commit, encoded as the recipe
ran and validated out of sample - in the bar, never fitted. Values below are read from
examples/model_verification_cards/<model>/card.yaml @ 067f987 (Megatron-Bridge) and the recipes at each commit."""

import pytest

from planner.fidelity.moe_runs import (
    card_row,
    fp8_attention,
    fp8_output_layer,
    load_moe_runs,
    moe_reference_rows,
    row_options,
)
from planner.fidelity.validate import predict
from planner.hardware.collectives import expected_max_normal
from planner.presets import load_hardware

CARD_IDS = {
    "MB-CARD-H100-QWEN3-30B-16",
    "MB-CARD-GB200-QWEN3-30B-8",
    "MB-CARD-GB300-QWEN3-30B-8",
    "MB-CARD-GB300-QWEN3-30B-8-WS",
    "MB-CARD-GB300-QWEN3-30B-32-WS",
    "MB-CARD-GB300-QWEN3-30B-128-WS",
    "MB-CARD-GB300-QWEN3-30B-256-WS",
    "MB-CARD-H100-DSV3-1024",
    "MB-CARD-GB200-DSV3-256",
    "MB-CARD-GB300-DSV3-256",
    "MB-CARD-GB200-GPTOSS120B-64",
    "MB-CARD-GB300-GPTOSS120B-64",
    "MB-CARD-GB200-QWEN3-235B-256",
    "MB-CARD-GB300-QWEN3-235B-256",
}


@pytest.fixture(scope="module")
def runs():
    return {r.id: r for r in load_moe_runs()}


def test_the_cards_rows_are_the_fourteen_and_cite_card_and_commit():
    rows = {r["run_id"]: r for r in moe_reference_rows() if card_row(r)}
    assert set(rows) == CARD_IDS
    for r in rows.values():
        assert "examples/model_verification_cards/" in r["source"] and "bridge_commit " in r["source"]
        assert "(release " not in r["source"]  # a card is no performance-table release
        assert r["flag"] == ""


def test_qwen3_30b_h100_bf16_card_row_is_the_recipe_at_its_commit(runs):
    """qwen3-30b-a3b/card.yaml items.pretrain_performance.H100 (bridge_commit 3a9559f01283190bf16a7a592c1e2c35d908c496,
    container nemo:26.06): `train.sh --nodes 2 --gpus-per-node 8 --recipe qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config
    --max_steps 50`, last 10 steps 20,147.290 ms, 299.352 TFLOP/s/GPU, 13,011.378 tokens/s/GPU. The recipe at that
    commit (perf_recipes/qwen/h100/qwen3_moe.py:35-62 over recipes/qwen/h100/qwen3_moe.py:146-225): TP1 PP1 CP1 EP16
    ETP1, SP off, GBS 1024, MBS 1, seq 4096, no recompute, flex HybridEP (32 SMs from _benchmark_common), the A2A
    overlap on with delay_wgrad_compute False, TE graphs of moe_router and moe_preprocess, BF16, precision-aware Adam
    with fp32 states, expandable_segments in its env_vars."""
    run = runs["MB-CARD-H100-QWEN3-30B-16"]
    q, o = run.request, run.request["options"]
    assert run.hardware == "dgx-h100-superpod" and run.published == 13011.378
    assert (q["gpus"], q["tp"], q["pp"], q["cp"], q["vpp"], q["ep"], q["etp"]) == (16, 1, 1, 1, 1, 16, 1)
    assert (q["global_batch"], q["micro_batch"], q["seq_len"], q["sequence_parallel"]) == (1024, 1, 4096, False)
    assert q["recompute"] == "none" and q["precision"] == "bf16" and "fp8" not in o
    assert q["moe_token_dispatcher"] == "flex" and o["moe_flex_dispatcher_backend"] == "hybridep"
    assert o["moe_flex_dispatcher_num_sms"] == 32
    assert q["overlap_moe_expert_parallel_comm"] and o["delay_wgrad_compute"] is False
    assert o["cuda_graph_impl"] == "transformer_engine" and o["cuda_graph_modules"] == ("moe_router", "moe_preprocess")
    assert o["use_precision_aware_optimizer"] and "exp_avg_dtype" not in o
    assert o["expandable_segments"] and not o["use_transformer_engine_op_fuser"]
    assert not o["fp8_dot_product_attention"] and not o["fp8_output_proj"]
    # the card's throughput is its step time: B·s / t / N = 1024 · 4096 / 20.14729 s / 16
    assert 1024 * 4096 / 20.14729 / 16 == pytest.approx(run.published, rel=1e-5)
    assert any("moe_permute_fusion_into_hybridep" in a for a in run.assumptions)


def test_deepseek_v3_h100_bf16_card_row_is_the_recipe_at_its_commit(runs):
    """deepseek-v3/card.yaml items.pretrain_performance.H100 (verification_environment bridge_commit
    79308d0d99fb8c09b3f1a22baa68a4ffa4f4ce1e, nemo:26.08.rc5): 1,024 H100, 61,756.130 ms, 1,061.206 tokens/s/GPU.
    perf_recipes/deepseek/h100/deepseek_v3.py:28-72: TP2 PP8 VP4 EP64 SP, GBS 16384 MBS 1, recompute mla_up_proj and
    mlp, layout Et|(tt|)*30mL; the library recipe (recipes/deepseek/h100/deepseek_v3.py) dispatches flex HybridEP on
    Hopper (apply_flex_dispatcher_backend), no A2A overlap, no graphs, precision-aware Adam with bf16 moments and main
    gradients."""
    run = runs["MB-CARD-H100-DSV3-1024"]
    q, o = run.request, run.request["options"]
    assert (q["gpus"], q["tp"], q["pp"], q["vpp"], q["ep"], q["global_batch"], q["micro_batch"]) == (
        1024,
        2,
        8,
        4,
        64,
        16384,
        1,
    )
    assert q["pipeline_layout"] == "Et|(tt|)*30mL" and q["sequence_parallel"]
    assert o["recompute_modules"] == ("mla_up_proj", "mlp")
    assert q["moe_token_dispatcher"] == "flex" and o["moe_flex_dispatcher_backend"] == "hybridep"
    assert not q["overlap_moe_expert_parallel_comm"] and not o["delay_wgrad_compute"] and "cuda_graph_impl" not in o
    assert o["main_grads_dtype"] == o["exp_avg_dtype"] == o["exp_avg_sq_dtype"] == "bf16"
    assert 16384 * 4096 / 61.75613 / 1024 == pytest.approx(run.published, rel=1e-5)


def test_the_mxfp8_cards_read_the_26_08_recipe_facts(runs):
    """Every card commit runs v0.6.0's flat recipes: DeepSeek-V3 GB200 _enable_deepseek_full_iteration_mxfp8(
    fp8_output_proj=True), GB300 with fp8_dot_product_attention=True as well; GPT-OSS GB300
    _apply_gpt_oss_120b_full_iter_fp8mx_configs (fp8_output_proj, fp8_dot_product_attention); Qwen3
    _enable_hybridep_full_iteration_mxfp8 (fp8_dot_product_attention, no output layer in FP8)."""
    rows = {r["run_id"]: r for r in moe_reference_rows() if card_row(r)}
    assert fp8_output_layer(rows["MB-CARD-GB200-DSV3-256"]) and not fp8_attention(rows["MB-CARD-GB200-DSV3-256"])
    assert fp8_output_layer(rows["MB-CARD-GB300-DSV3-256"]) and fp8_attention(rows["MB-CARD-GB300-DSV3-256"])
    assert fp8_output_layer(rows["MB-CARD-GB300-GPTOSS120B-64"]) and fp8_attention(rows["MB-CARD-GB300-GPTOSS120B-64"])
    assert not fp8_output_layer(rows["MB-CARD-GB300-QWEN3-235B-256"])
    assert fp8_attention(rows["MB-CARD-GB300-QWEN3-235B-256"])
    assert not fp8_output_layer(rows["MB-CARD-GB200-GPTOSS120B-64"])  # the GB200 card ran BF16
    for rid in CARD_IDS:
        assert runs[rid].request["options"]["expandable_segments"], rid


def test_the_weak_scaling_series_is_the_8_gpu_recipe_with_the_batch_per_gpu_kept(runs):
    """qwen3-30b-a3b/card.yaml items.pretrain_weak_scaling.GB300 (bridge_commit fbb7570c): the 8-GPU MXFP8 recipe
    with --global_batch_size 64·N; last-10-step times 5,889.420 / 5,814.290 / 5,831.720 / 5,818.620 ms on 8 / 32 /
    128 / 256 GPUs. Each throughput is B·s / t / N. Measured, the 256-GPU point is 1.2 % faster than the 8-GPU one;
    megaplan's is 1.2 % slower: its stragglers' term at GB300's σ = 0.011 grows the step by σ·(E[max_256] − E[max_8]) =
    0.011 × (2.815 − 1.434) = 1.5 % (collectives.expected_max_normal; the rest of the plan keeps its time per GPU).
    Fitted alone the series would put σ below its band's floor, which calibrate's rule reads as the band setting it,
    not the runs: σ keeps its anchor (the band's reading of Sinha et al., SC22). Until stop 43 σ sat at that floor,
    0, and the predicted series was flat within 1 %; every point stays within 6 % of its measurement."""
    series = ((8, 512, 5.88942, 44511.004), (32, 2048, 5.81429, 45086.158), (128, 8192, 5.83172, 44951.404))
    series += ((256, 16384, 5.81862, 45052.607),)
    predicted = []
    for gpus, gbs, step_s, tokens in series:
        run = runs[f"MB-CARD-GB300-QWEN3-30B-{gpus}-WS"]
        q = run.request
        assert (q["gpus"], q["global_batch"], q["micro_batch"], q["ep"], q["tp"], q["pp"]) == (gpus, gbs, 8, 8, 1, 1)
        assert run.published == tokens == pytest.approx(gbs * 4096 / step_s / gpus, rel=1e-5)
        predicted.append(predict(run))
        assert abs(predicted[-1] / tokens - 1) < 0.06, gpus
    sigma = load_hardware("gb300-nvl72").calibration.straggler_sigma
    growth = sigma * float(expected_max_normal(256) - expected_max_normal(8))
    assert sigma == 0.011 and growth == pytest.approx(0.0152, abs=0.0002)
    assert predicted[0] / predicted[-1] == pytest.approx(1.012, abs=0.002)  # < 1 + growth: DP and PP unchanged
    assert series[-1][3] / series[0][3] == pytest.approx(1.0122, abs=1e-4)  # measured: faster at 256


def test_the_cards_rows_are_in_the_bar_and_in_no_fit(runs):
    """Held out: validated with the rows in the bar, never used by `calibrate --moe` (moe_fit.fit_runs, fit_a2a's
    rows); counted as evidence of the features they exercise, as held out (evidence.bearing)."""
    from planner.fidelity.evidence import bearing
    from planner.fidelity.moe_fit import fit_runs

    for rid in CARD_IDS:
        assert runs[rid].held_out and not runs[rid].fit and bearing(runs[rid]) == "held out"
    assert not {r.id for r in fit_runs()} & CARD_IDS
    assert (
        sum(r.fit for r in runs.values()) == 83
    )  # the table rows in the bar (84 before the B200 25.09 row left, b200q19)


def test_the_options_column_reads_plan_options():
    assert row_options({"options": "delay_wgrad_compute=False; moe_flex_dispatcher_num_sms=24"}) == {
        "delay_wgrad_compute": False,
        "moe_flex_dispatcher_num_sms": 24,
    }
    assert row_options({"options": ""}) == {} and row_options({}) == {}
