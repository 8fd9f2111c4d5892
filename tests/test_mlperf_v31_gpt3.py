"""MLPerf Training v3.1's GPT-3 175B: NVIDIA's runs on 512 to 10,752 H100 and Azure's on 10,752, one plan at 128, 16
and 8 micro-batches a step, held out (docs/cost-model.md §10.1): the scale the fit never saw below 10,752 GPUs."""

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
