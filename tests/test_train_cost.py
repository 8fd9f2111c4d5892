"""Time, GPU-hours, cost and energy to train; Narayanan et al. 2021's 34-day and 84-day estimates."""

from __future__ import annotations

import pytest

from planner import api
from planner.costs.train_cost import train_cost_terms, train_time_s
from planner.plan import DEFAULT_TRAIN_TOKENS

DAY = 86_400


def test_hand_computed_terms():
    # 300e9 tokens at 1e6 tokens/s: 3e5 s = 3.4722 days; 64 GPUs: 64 × 3e5/3600 = 5333.3 GPU-hours;
    # at 2.5 per GPU-hour 13,333.3; at 700 W 5333.3 × 700 Wh = 3.7333 MWh
    t = train_cost_terms(1e6, 64, tokens=300e9, gpu_hour_price=2.5, tdp_watts=700.0)
    assert t["train_tokens"] == 300e9
    assert t["train_days"] == pytest.approx(300_000 / DAY)
    assert t["gpu_hours"] == pytest.approx(64 * 300_000 / 3600)
    assert t["cost"] == pytest.approx(5333.333 * 2.5, rel=1e-6)
    assert t["energy_mwh"] == pytest.approx(3.7333, rel=1e-4)


def test_no_price_no_power_gives_none():
    t = train_cost_terms(1e6, 8, tokens=DEFAULT_TRAIN_TOKENS)
    assert t["train_tokens"] == DEFAULT_TRAIN_TOKENS == 300e9
    assert t["cost"] is None and t["gpu_hour_price"] is None and t["energy_mwh"] is None


def narayanan_eq4_s(tokens: float, params: float, gpus: int, flops_per_gpu: float) -> float:
    """Narayanan et al. 2021 Eq. 4: end-to-end training time ≈ 8·T·P/(n·X) seconds."""
    return 8 * tokens * params / (gpus * flops_per_gpu)


def test_eq4_closed_form():
    # Narayanan 2021 Eq. 4 with the paper's own numbers: 8·T·P/(n·X)
    assert narayanan_eq4_s(300e9, 175e9, 1024, 140e12) / DAY == pytest.approx(33.9, abs=0.05)  # "34 days"
    assert narayanan_eq4_s(450e9, 1e12, 3072, 163e12) / DAY == pytest.approx(
        83.2, abs=0.05
    )  # "84 days" (P = 1008B: 83.9)
    assert train_time_s(300e9, 1e6) == 300_000


def _n21_plan(model: str, gpus: int, pp: int, global_batch: int, **run) -> dict:
    """The 2021 runs as planner/validate.py `_n21` configures them: TP 8, micro-batch 1, no
    interleaving, full recompute, fp16, unfused attention, pipeline scatter/gather, no p2p overlap,
    no async TP all-reduce, gradient all-reduce not overlapped (DDP impl local), seq 2048."""
    req = api.make_request(
        model=model,
        gpus=gpus,
        tp=8,
        pp=pp,
        vpp=1,
        micro_batch=1,
        global_batch=global_batch,
        seq_len=2048,
        precision="fp16",
        recompute="full",
        sequence_parallel=False,
        distributed_optimizer=False,
        **run,
        options=dict(
            attention_kernel="unfused",
            pp_scatter_gather=True,
            overlap_p2p_comm=False,
            overlap_grad_reduce=False,
            async_tp_comm=False,
        ),
    )
    return api.explain(req)


def test_narayanan_2021_gpt3_34_days():
    # §5.1: GPT-3 175B, T = 300B tokens, n = 1024 A100, X = 140 TFLOP/s -> "about 34 days";
    # the plan of NVIDIA's SuperPOD write-up and Megatron-LM examples/gpt3: TP 8, PP 16, DP 8, B 1536.
    # Measured: the planner predicts 143.6 TFLOP/s (Eq. 3) and 33.9 days.
    pj = _n21_plan("gpt3-175b", 1024, 16, 1536, train_tokens=300e9)
    days = pj["estimate"]["train_days"]
    assert days == pytest.approx(34, rel=0.10)
    assert days == pytest.approx(300e9 / pj["estimate"]["tokens_per_s"] / DAY)


def test_narayanan_2021_1t_84_days():
    # §5.1: 1T (1008B) on 3072 GPUs, T = 450B tokens, X = 163 TFLOP/s -> "84 days"; Table 1's last row:
    # TP 8, PP 64, DP 6, B 3072 (examples/academic_paper_scripts/sc21/run_table_1.sh).
    # Measured: the planner predicts 165.4 TFLOP/s and 83.7 days.
    est = _n21_plan("gpt-1t", 3072, 64, 3072, train_tokens=450e9, gpu_hour_price=2.0)["estimate"]
    assert est["train_days"] == pytest.approx(84, rel=0.10)
    assert est["gpu_hours"] == pytest.approx(3072 * est["train_days"] * 24)
    assert est["cost"] == pytest.approx(2.0 * est["gpu_hours"])
    assert est["energy_mwh"] == pytest.approx(0.4 * est["gpu_hours"] / 1000)  # 400 W = 0.4 kW


def test_plan_json_carries_time_and_cost():
    pj = api.explain(
        api.make_request(model="gpt3-175b", gpus=1024, tp=8, pp=16, recompute="selective", sequence_parallel=True)
    )
    est = pj["estimate"]
    for key in ("train_days", "gpu_hours", "cost", "energy_mwh", "train_tokens"):
        assert key in est
    assert est["train_tokens"] == 300e9 and est["cost"] is None
    assert est["train_days"] == pytest.approx(300e9 / est["tokens_per_s"] / DAY)
    assert est["energy_mwh"] == pytest.approx(est["gpu_hours"] * 400 / 1e6)  # A100 SXM: 400 W TDP in the preset
