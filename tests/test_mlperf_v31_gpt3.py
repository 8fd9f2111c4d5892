"""MLPerf Training v3.1's GPT-3 175B: NVIDIA's runs on 512 to 10,752 H100 and Azure's on 10,752, one plan at 128, 16
and 8 micro-batches a step, held out (docs/cost-model.md §10.1): the scale the fit never saw below 10,752 GPUs. And
v3.0's, the same plan on 512 to 3,584 H100 under flash-attn 1."""

import pytest

from planner.fidelity.runs import load_runs
from planner.fidelity.series import step_split_s
from planner.fidelity.validate import prepare, validate

# (run id, GPUs, global batch, published step s: the median block over its steps, as the logs give no per-step stats)
V31 = (
    ("MLPERF-v3.1-eos_n64_ngc23.09_nemo-gpt3", 512, 2048, 132.86 / 12),
    ("MLPERF-v3.1-eos_n96_ngc23.09_nemo-gpt3", 768, 3072, 88.74 / 8),
    ("MLPERF-v3.1-eos-dfw_n512_ngc23.09_nemo-gpt3", 4096, 2048, 19.53 / 12),
    ("MLPERF-v3.1-eos-dfw_n768_ngc23.09_nemo-gpt3", 6144, 3072, 13.09 / 8),
    ("MLPERF-v3.1-eos-dfw_n1024_ngc23.09_nemo-gpt3", 8192, 4096, 9.84 / 6),
    ("MLPERF-v3.1-eos-dfw_n1280_ngc23.09_nemo-gpt3", 10240, 2560, 9.47 / 10),
    ("MLPERF-v3.1-eos-dfw_n1344_ngc23.09_nemo-gpt3", 10752, 2688, 9.52 / 10),
    ("MLPERF-v3.1-Azure-ND_H100_v5_n1344_pytorch-gpt3", 10752, 2688, 9.79 / 10),
)


@pytest.fixture(scope="module")
def rows():
    return {r["id"]: r for r in validate()["runs"]}


def test_the_rows_read_the_launch_files_and_logs():
    # config_DGXH100_<nodes>x8x<minibs>x4x8_mbs1.sh: TP 4, PP 8, MICRO_BATCH_SIZE 1, no INTERLEAVED_PIPELINE
    # (custom.yaml's 12); the logs' global_batch_size over DP = GPUs/32 micro-batches a step; Apex
    # DistributedFusedAdam in 100 MB buckets (its yaml's default), no FP8 parameters in this round; flash-attn 2.0.8,
    # which TE @09ba8427 calls first
    runs = {r.id: r for r in load_runs()}
    for rid, gpus, gbs, _ in V31:
        req = prepare(runs[rid])
        plan, o = req.plan, req.ctx.options
        assert (plan.tp, plan.pp, plan.vpp, plan.micro_batch, plan.dp) == (4, 8, 12, 1, gpus // 32)
        assert req.ctx.training.global_batch == gbs and gbs // plan.dp in (128, 16, 8)
        assert o.dfa_bucket_mb == 100 and not o.fp8_param_gather and o.cuda_graph_impl.value == "none"
        assert o.attention_time_ratio > 1.5  # FlashAttention-2's time over the Hopper law
        assert o.tp_only_amax_red  # config_common.sh NVTE_DP_AMAX_REDUCE_INTERVAL=0: TE <= 1.5 reduces amaxes over TP
        ub = dict(o.tp_comm_overlap_cfg.ops)
        assert ub["proj_fprop"].atomic_gemm == 1 and ub["fc2_fprop"].num_sm == 4 and ub["fc2_dgrad"].aggregate == 1


def test_every_row_is_held_out_and_within_5_percent_and_the_8k_ones_within_6(rows):
    # predicted +0.2, +0.2 (m 128), -4.4, -3.9, -3.2 (m 16), -1.1, -0.0, -2.8 % (m 8): the runs of 8,192 GPUs and more
    # (-3.2, -1.1, -0.0, -2.8 %) within the 6 %
    for rid, gpus, _, published in V31:
        row = rows[rid]
        assert row["published"] == pytest.approx(published, abs=5e-5)
        assert row["in_bar"] and not row["in_fit"] and abs(row["error_pct"]) < 5.0
        if gpus >= 8192:
            assert abs(row["error_pct"]) < 6.0


def test_the_series_split_holds_the_step_beyond_its_micro_batches(rows):
    # T = a·m + b through the seven NVIDIA points (m 128, 128, 16, 16, 16, 8, 8): measured a 0.0844 s and b 0.285 s,
    # predicted 0.0848 s and 0.243 s - the part of a step beyond its micro-batches within 42 ms at this plan, where
    # MLPerf v4.1's GPT-3 (VP 4-6, b 2) and v5.0's 405B leave 0.2-0.6 s of it out (scripts/series_split.py)
    nvidia = [(gbs // (gpus // 32), rows[rid]) for rid, gpus, gbs, _ in V31 if "Azure" not in rid]
    a_pub, b_pub = step_split_s([m for m, _ in nvidia], [r["published"] for _, r in nvidia])
    a_pred, b_pred = step_split_s([m for m, _ in nvidia], [r["predicted"] for _, r in nvidia])
    assert a_pub == pytest.approx(0.0844, abs=5e-4) and b_pub == pytest.approx(0.285, abs=5e-3)
    assert a_pred == pytest.approx(0.0848, abs=5e-4) and abs(b_pred - b_pub) < 0.05


V30 = (
    ("MLPERF-v3.0-dgxh100_n64_nemo-gpt3", 512, 2048, 12.0739),
    ("MLPERF-v3.0-dgxh100_n96_nemo-gpt3", 768, 3072, 12.1274),
    ("MLPERF-v3.0-CoreWeave-coreweave_hgxh100_n96_ngc23.04_pytorch-gpt3", 768, 3072, 12.3048),
    ("MLPERF-v3.0-CoreWeave-coreweave_hgxh100_n192_ngc23.04_pytorch-gpt3", 1536, 3072, 6.3397),
    ("MLPERF-v3.0-CoreWeave-coreweave_hgxh100_n448_ngc23.04_pytorch-gpt3", 3584, 2688, 2.6004),
)


def test_flash_attn_1_on_h100_is_the_fa2_papers_ratio_over_flashattention_2():
    # Dao 2023 Fig. 7 (H100, forward + backward, causal, head width 128, 2k keys): FlashAttention-2 265 TFLOP/s,
    # FlashAttention (v1) 108: 265/108 = 2.4537; over the Hopper law, FlashAttention-2's 1.699 (the FA3 paper's rows):
    # 1.699 x 2.4537 = 4.170
    from planner.fidelity.kernels import flash_attn_1_over_2, hopper_flash_attn_1_ratio, hopper_flash_attn_2_ratio
    from planner.presets import load_hardware

    params = load_hardware("dgx-h100-superpod").attention.model_dump()
    assert flash_attn_1_over_2(2048) == pytest.approx(265 / 108, rel=1e-12)
    assert hopper_flash_attn_1_ratio(params, 2048) == pytest.approx(hopper_flash_attn_2_ratio(params) * 265 / 108)
    assert hopper_flash_attn_1_ratio(params, 2048) == pytest.approx(4.170, abs=0.005)


def test_v30_rows_run_flash_attn_1_and_are_within_3_percent(rows):
    # the same plan as v3.1 (TP4 PP8 VP12 b1), Transformer Engine release_v0.8 calling flash_attn 1.0.5; amaxes over
    # TP x DP (no NVTE_DP_AMAX_REDUCE_INTERVAL set); predicted +2.7, +2.9, +1.4, +0.8, -0.9 %
    runs = {r.id: r for r in load_runs()}
    for rid, gpus, gbs, published in V30:
        req = prepare(runs[rid])
        plan, o = req.plan, req.ctx.options
        assert (plan.tp, plan.pp, plan.vpp, plan.micro_batch, plan.dp, req.ctx.training.global_batch) == (
            4,
            8,
            12,
            1,
            gpus // 32,
            gbs,
        )
        assert o.attention_time_ratio == pytest.approx(4.170, abs=0.005) and not o.tp_only_amax_red
        row = rows[rid]
        assert row["published"] == pytest.approx(published) and row["in_bar"] and not row["in_fit"]
        assert abs(row["error_pct"]) < 3.0


def test_v30_to_v31_is_the_attention_kernel(rows):
    # NVIDIA's 512-GPU runs of both rounds, GBS 2048, 128 micro-batches a step: 12.0739 s (flash-attn 1) against
    # 11.0717 s (flash-attn 2 and TP-only amaxes), x1.091 measured; the model gives the two x1.12
    v30, v31 = rows["MLPERF-v3.0-dgxh100_n64_nemo-gpt3"], rows["MLPERF-v3.1-eos_n64_ngc23.09_nemo-gpt3"]
    assert v30["published"] / v31["published"] == pytest.approx(1.0905, abs=5e-4)
    assert v30["predicted"] / v31["predicted"] == pytest.approx(1.118, abs=0.005)
