"""Oracle's MLPerf Training v4.1 GPT-3 175B on 1,536 and 3,072 H100 (OCI BM.GPU.H100.8 nodes over RoCE v2): NVIDIA's
NeMo implementation and launch files, held out (docs/cost-model.md §10.1)."""

import pytest

from planner.fidelity.runs import load_runs
from planner.fidelity.validate import prepare, validate

N1536 = "MLPERF-v4.1-Oracle-1536xBM.GPU.H100.8-gpt3"
N3072 = "MLPERF-v4.1-Oracle-3072xBM.GPU.H100.8-gpt3"


@pytest.fixture(scope="module")
def rows():
    return {r["id"]: r for r in validate()["runs"]}


def test_the_rows_keep_their_launch_config(rows):
    # config_DGXH100_{192,384}x8x{64,32}x4x8_mbs2.sh: TP 4, PP 8, INTERLEAVED_PIPELINE 4, MICRO_BATCH_SIZE 2, MINIBS 64
    # and 32 (the sequences a DP rank runs a step), GBS 3072 as both logs record it; the medians of three runs' median
    # 'train_step_timing in s': 5.1705 and 3.0535 s
    runs = {r.id: r for r in load_runs()}
    for rid, gpus, dp, m, published in ((N1536, 1536, 48, 32, 5.1705), (N3072, 3072, 96, 16, 3.0535)):
        req = prepare(runs[rid])
        plan = req.plan
        assert (plan.tp, plan.pp, plan.vpp, plan.dp, plan.micro_batch, req.gpus) == (4, 8, 4, dp, 2, gpus)
        assert req.ctx.training.global_batch == 3072 == dp * m * 2
        assert req.ctx.options.dfa_bucket_mb == 200 and not req.ctx.options.use_sharp  # NeMo 1's Apex DFA, RoCE
        assert rows[rid]["published"] == pytest.approx(published) and not rows[rid]["in_fit"] and rows[rid]["in_bar"]


def test_the_pair_says_the_model_misses_a_per_step_cost_at_scale(rows):
    # the same plan at m = 32 and m = 16 micro-batches a step (DP 48 and 96): measured 5.1705 and 3.0535 s, so a
    # micro-batch costs (5.1705 - 3.0535) / 16 = 0.1323 s and the step 3.0535 - 16 x 0.1323 = 0.937 s beyond them;
    # the model gives 0.146 s and 0.37 s: 10 % more a micro-batch, 0.57 s less a step. 1,536 GPUs -2.5 %, 3,072 -11.4 %
    t1536, t3072 = (rows[i]["published"] for i in (N1536, N3072))
    per_mb = (t1536 - t3072) / 16
    assert per_mb == pytest.approx(0.1323, abs=1e-4) and t3072 - 16 * per_mb == pytest.approx(0.937, abs=1e-3)
    p1536, p3072 = (rows[i]["predicted"] for i in (N1536, N3072))
    model_mb = (p1536 - p3072) / 16
    assert 0.14 < model_mb < 0.15 and 0.30 < p3072 - 16 * model_mb < 0.45
    assert -3.5 < rows[N1536]["error_pct"] < -1.5 and -12.0 < rows[N3072]["error_pct"] < -10.5


SMC = "MLPERF-v4.0-SMC-64xSMC-H100-gpt3"
EOS_N64 = "MLPERF-v4.0-eos_n64_ngc24.04_nemo-gpt3"


def test_sustainable_metal_clouds_run_is_held_out_and_slower_per_micro_batch_than_nvidias(rows):
    # Sustainable Metal Cloud's MLPerf v4.0 GPT-3 on 64 immersion-cooled nodes (512 H100): NVIDIA's v4.0 implementation,
    # config_common.sh and conf/ identical, config_SMCH100_64x8x128x4x8.sh: TP 4, PP 8, MINIBS 128 (GBS 2048, 64
    # micro-batches of 2 as the log records), no INTERLEAVED_PIPELINE (custom.yaml's 12); the medians of 3 runs'
    # median 'train_step_timing in s': 10.6365 s. NVIDIA's own 512-GPU run (VP 4, GBS 2304, 72 micro-batches, fitted)
    # takes 10.9822 s: 0.1525 s a micro-batch against SMC's 10.6365/64 = 0.1662 s, 9 % more, where the model gives the
    # two plans the same rate: SMC's row is predicted 8.4 % fast, NVIDIA's 0.6 %
    runs = {r.id: r for r in load_runs()}
    req = prepare(runs[SMC])
    plan = req.plan
    assert (plan.tp, plan.pp, plan.vpp, plan.dp, plan.micro_batch, req.gpus) == (4, 8, 12, 16, 2, 512)
    assert req.ctx.training.global_batch == 2048 and req.ctx.options.dfa_bucket_mb == 200
    smc, eos = rows[SMC], rows[EOS_N64]
    assert smc["published"] == pytest.approx(10.6365) and not smc["in_fit"] and smc["in_bar"]
    assert smc["published"] / 64 / (eos["published"] / 72) == pytest.approx(1.090, abs=0.002)
    assert smc["predicted"] / 64 / (eos["predicted"] / 72) == pytest.approx(1.0, abs=0.005)
    assert -9.0 < smc["error_pct"] < -8.0 and abs(eos["error_pct"]) < 1.0
