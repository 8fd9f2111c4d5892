"""HybridEP's SM knobs (hyb218): the metadata scan's blocks (--moe-hybridep-num-sms-preprocessing, Megatron-Core
default 108, Megatron-Bridge's performance recipes 32 from v0.5.0) priced and carried through every reader and
writer, and the flex dispatcher's SMs read back from a Bridge config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.api import explain, make_request
from planner.costs import moe
from planner.hardware.collectives import group_link
from planner.megatron.export import megatron_argv
from planner.megatron.flags import flag_table
from planner.megatron.importer import import_megatron
from planner.presets import load_hardware
from tests.conftest import run_cli

DATA = Path(__file__).parent / "data"


def test_scan_bandwidth_by_hand():
    """B_scan(k) = B_HBM·η_mem · min(1, min(k, S)/min(108, S)). GB200 (S = 148, 8 TB/s × 0.89 = 7.12 TB/s):
    k = 108 → 7.12 TB/s; k = 32 → 7.12 × 32/108 = 2.10963 TB/s; k = 148 → no faster than saturation, 7.12.
    A GPU with 100 SMs (k_0 = min(108, 100) = 100): k = 50 → half."""
    assert float(moe.scan_bandwidth_bytes_per_s(7.12e12, 108, 148)) == pytest.approx(7.12e12, rel=1e-12)
    assert float(moe.scan_bandwidth_bytes_per_s(7.12e12, 32, 148)) == pytest.approx(2.109630e12, rel=1e-6)
    assert float(moe.scan_bandwidth_bytes_per_s(7.12e12, 148, 148)) == pytest.approx(7.12e12, rel=1e-12)
    assert float(moe.scan_bandwidth_bytes_per_s(1e12, 50, 100)) == pytest.approx(0.5e12, rel=1e-12)
    assert float(moe.scan_bandwidth_bytes_per_s(1e12, 200, 100)) == pytest.approx(1e12, rel=1e-12)


def test_gpt_oss_scan_on_32_blocks_by_hand():
    """GPT-OSS-120B at EP 64 on GB200, b 4 (test_hybridep_metadata: the scan moves 272,760,832 bytes, 38.31 µs on
    108 blocks). On Bridge's 32: 272,760,832 / 2.10963 TB/s = 129.29 µs (× 108/32 = 3.375). The all-gather does
    not change (498.5 µs). The SM share: (24 × 498.5 + 32 × 129.29)/(148 × (498.5 + 129.29)) = 16,101.3/92,912.9
    = 0.17329; on 108 blocks (24 × 498.5 + 108 × 38.31)/(148 × 536.81) = 16,101.5/79,447.9 = 0.20267 (the scan's
    SM-seconds are the same; it holds them longer, beside more of the all-gather's time)."""
    hw = load_hardware("gb200-nvl72")
    link = group_link(hw, 64, 1)
    kw = dict(hbm_bytes_per_s=7.12e12)
    t_ag, t_scan = moe.hybridep_metadata_time_s(hw, 64, 16_384, 128, 65_536, link, scan_sms=32, **kw)
    t_ag0, t_scan0 = moe.hybridep_metadata_time_s(hw, 64, 16_384, 128, 65_536, link, **kw)
    assert float(t_ag) == float(t_ag0) == pytest.approx(498.5e-6, abs=0.1e-6)
    assert float(t_scan) == pytest.approx(272_760_832 / (7.12e12 * 32 / 108), rel=1e-12)
    assert float(t_scan) == pytest.approx(129.29e-6, abs=0.01e-6)
    assert float(t_scan / t_scan0) == pytest.approx(3.375, rel=1e-12)
    f32 = moe.metadata_sm_share(t_ag, t_scan, nccl_sms=24, scan_sms=32, sm_count=148)
    f108 = moe.metadata_sm_share(t_ag0, t_scan0, nccl_sms=24, scan_sms=108, sm_count=148)
    assert float(f32) == pytest.approx(0.17329, abs=1e-5) and float(f108) == pytest.approx(0.20267, abs=1e-5)


def _gpt_oss(**options) -> dict:
    req = make_request(
        model="gpt-oss-120b", hardware=load_hardware("gb200-nvl72"), gpus=64, ep=64, micro_batch=4, global_batch=4096,
        seq_len=4096, recompute="none", distributed_optimizer=True, moe_token_dispatcher="flex",
        options=dict(moe_flex_dispatcher_backend="hybridep", moe_load_imbalance=1.0, **options),
    )  # fmt: skip
    return req


def test_the_step_charges_the_slower_scan_and_explain_names_its_blocks():
    """Without the overlap the metadata is exposed whole: 36 MoE layers × 16 micro-batches × (129.29 − 38.31) µs
    = 52.40 ms more a step on 32 blocks than on 108. Explain names k."""
    base, fewer = explain(_gpt_oss())["estimate"], explain(_gpt_oss(moe_hybridep_num_sms_preprocessing=32))["estimate"]
    assert fewer["iteration_s"] - base["iteration_s"] == pytest.approx(36 * 16 * (129.29e-6 - 38.31e-6), rel=1e-3)
    assert "k = 32 SMs" in fewer["formulas"]["time"]["moe_comm"]["formula"]
    assert "k = 108 SMs" in base["formulas"]["time"]["moe_comm"]["formula"]


def test_megatron_flag_is_read_and_written_with_megatrons_own_name():
    """--moe-hybridep-num-sms-preprocessing (Megatron-LM d98e8a64 arguments, int, default 108): read from a
    script, written only for HybridEP when it is not the default (Megatron accepts it for any backend; the
    export keeps other plans' flags unchanged)."""
    spec = flag_table()["--moe-hybridep-num-sms-preprocessing"]
    assert (spec.dest, spec.default) == ("moe_hybridep_num_sms_preprocessing", 108)
    req = _gpt_oss(moe_hybridep_num_sms_preprocessing=32)
    argv = [str(x) for x in megatron_argv(req)]
    i = argv.index("--moe-hybridep-num-sms-preprocessing")
    assert argv[i + 1] == "32"
    assert "--moe-hybridep-num-sms-preprocessing" not in [str(x) for x in megatron_argv(_gpt_oss())]
    text = (DATA / "deepseek_v3_style.sh").read_text()
    assert (
        import_megatron(text, hardware="dgx-h100-superpod").request.ctx.options.moe_hybridep_num_sms_preprocessing
        == 108
    )
    patched = text.replace(
        "--moe-flex-dispatcher-backend deepep",
        "--moe-flex-dispatcher-backend hybridep\n    --moe-hybridep-num-sms-preprocessing 32",
    )
    assert (
        import_megatron(patched, hardware="dgx-h100-superpod").request.ctx.options.moe_hybridep_num_sms_preprocessing
        == 32
    )


def test_cli_refuses_zero_blocks_in_one_line():
    result = run_cli(
        ["explain", "--model", "gpt-oss-120b", "--hardware", "gb200-nvl72", "--gpus", "64",
         "--moe-hybridep-num-sms-preprocessing", "0"]
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--moe-hybridep-num-sms-preprocessing" in result.stderr and "Traceback" not in result.stderr


def _bridge_read(lines: list[str]):
    from planner.bridge.importer import read_bridge_text, request_from_bridge

    base = [
        "model.expert_model_parallel_size=8",
        "model.moe_token_dispatcher_type=flex",
        "model.moe_flex_dispatcher_backend=hybridep",
    ]
    fields = read_bridge_text("\n".join(base + lines) + "\n")
    return request_from_bridge(
        fields, tag="v0.6.0", recipe="qwen3_30b_a3b_pretrain_config", gpus=32, hardware="dgx-h100-superpod"
    ).request.ctx.options


def test_bridge_config_sms_are_read():
    """A Bridge config's moe_hybridep_num_sms (deprecated, routed by Megatron-Core into moe_flex_dispatcher_num_sms
    unless that is set, transformer_config.py:1792-1797 @ d98e8a64) and moe_hybridep_num_sms_preprocessing are
    read; moe_flex_dispatcher_num_sms wins over the deprecated one; a value equal to the priced default (HybridEP
    16, what the export writes for a plan without one) reads as none given."""
    o = _bridge_read(["model.moe_hybridep_num_sms=32", "model.moe_hybridep_num_sms_preprocessing=32"])
    assert (o.moe_flex_dispatcher_num_sms, o.moe_hybridep_num_sms_preprocessing) == (32, 32)
    o = _bridge_read(["model.moe_hybridep_num_sms=32", "model.moe_flex_dispatcher_num_sms=24"])
    assert (o.moe_flex_dispatcher_num_sms, o.moe_hybridep_num_sms_preprocessing) == (24, 108)
    assert _bridge_read(["model.moe_flex_dispatcher_num_sms=16"]).moe_flex_dispatcher_num_sms is None


def test_the_moe_rows_carry_their_recipes_scan_blocks():
    """32 where the recipe runs HybridEP with the fused grouped MLP and the A2A overlap from 26.06 on (v0.5.0
    overrides.py:241-243; v0.6.0 perf_recipes common.py), else 108: the 26.06 H100 row (no op fuser, no overlap),
    the H100 cards (BF16 recipes), and every row before 26.06."""
    from planner.fidelity.moe_runs import load_moe_runs

    runs = {r.id: r.request["options"] for r in load_moe_runs()}
    for run_id in (
        "MB-26.06-GB200-GPTOSS120B-64",
        "MB-26.06.01-GB300-DSV3-256",
        "MB-26.08-GB200-QWEN3-235B-256",
        "MB-CARD-GB300-QWEN3-30B-8",
        "MB-CARD-GB200-DSV3-256",
    ):
        assert runs[run_id]["moe_hybridep_num_sms_preprocessing"] == 32, run_id
    for run_id in ("MB-26.06-H100-QWEN3-30B-16", "MB-CARD-H100-DSV3-1024", "MB-26.04-GB200-GPTOSS120B-64"):
        assert runs[run_id]["moe_hybridep_num_sms_preprocessing"] == 108, run_id
    assert json.dumps(runs["MB-26.06-GB200-GPTOSS120B-64"]["moe_flex_dispatcher_num_sms"]) == "32"
