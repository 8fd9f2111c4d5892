"""NeMo's long-context table: what its misses say about attention (docs/cost-model.md §10.5)."""

from __future__ import annotations

import statistics

import pytest

from planner.fidelity.calibrate import NOT_CARRIED, FactorFit, Fit, carried_fit
from planner.fidelity.long_context import attention_reading
from planner.fidelity.runs import LONG_CONTEXT, load_runs


def _rows(hardware: str):
    return [r for r in load_runs() if r.source == LONG_CONTEXT and r.hardware == hardware]


def test_the_b200_misses_are_one_attention_ratio_at_every_length_and_cp():
    # NeMo 25.04.rc2 on B200, Llama 3 8B FP8, 8K-1M, CP 1-16: each row's published step says its attention took
    # (T_pub − T + T_att)/T_att of the modelled attention; from 32k on (CP 2-16) the rows agree on 1.26-1.29x
    # the law (the 8k and 16k rows, attention a quarter and two fifths of the step, 1.23 and 1.15), so the
    # miss is the attention kernels' speed in that container, not the ring of context parallelism
    readings = [attention_reading(r) for r in _rows("dgx-b200-superpod")]
    assert len(readings) == 8
    assert statistics.median(a.law_ratio for a in readings) == pytest.approx(1.27, abs=0.02)
    long = [a.law_ratio for a in readings[2:]]
    assert max(long) - min(long) < 0.05
    assert [round(a.error_pct) for a in readings] == [5, 5, 14, 19, 23, 24, 24, 26]


def test_the_h100_misses_are_flashattention2_speed_or_slower():
    # NeMo 24.03.01 on H100, Llama 2 7B FP8: from 8k on every row implies 1.8-1.95x the law (cuDNN 9.19),
    # where the FA3 paper measured FlashAttention-2 at 1.69-1.76x and cuDNN 9.1.1 at 1.04-1.10x of it
    readings = [attention_reading(r) for r in _rows("dgx-h100-superpod")]
    assert len(readings) == 9
    assert all(1.75 < a.law_ratio < 2.0 for a in readings[1:])


def test_a_b200_keeps_its_own_fabric_factors_when_it_takes_gb200s_die():
    # a GB200 fit that measured η_net and the stragglers' σ hands the die's factors to B200, not the fabric's
    # (a fit takes 40 s: the carry is tested on a made-up one)
    made = Fit(
        "gb200-nvl72",
        {
            "gemm_efficiency": FactorFit(0.72, (0.57, 0.95), "fitted", sigma=0.02),
            "network_bus_efficiency": FactorFit(0.51, (0.45, 0.98), "fitted", sigma=0.23),
            "straggler_sigma": FactorFit(0.027, (0.0, 0.03), "fitted", sigma=0.015),
        },
        0.001,
        39,
    )
    got = carried_fit(made, {"gemm_efficiency": 1.0645}, "dgx-b200-superpod").factors
    assert got["gemm_efficiency"].value == pytest.approx(0.72 * 1.0645) and got["gemm_efficiency"].status == "fitted"
    assert (got["network_bus_efficiency"].value, got["network_bus_efficiency"].status) == (0.85, "not identifiable")
    assert (got["straggler_sigma"].value, got["straggler_sigma"].status) == (0.0, "not identifiable")
    assert set(NOT_CARRIED) == {"dgx-b200-superpod"}
    # the H200 takes H100's fabric too: the same DGX node and NIC
    same = carried_fit(made, {}, "dgx-h200-superpod").factors
    assert same["network_bus_efficiency"].value == 0.51


def test_the_table_prints_its_gpu_count_as_tp_pp_dp_cp():
    # the B200 table's HTML version repeats the sequence in K as '# of GPUs'; the rows take TP·PP·DP·CP, which its
    # markdown version printed (14d427f575): 1M at TP 4 CP 16 DP 4 is 256 GPUs, and a batch of 4 sequences
    runs = {r.id: r for r in load_runs() if r.source == LONG_CONTEXT}
    one_m = runs["NEMOLS-25.04-B200-Llama3-8B-fp8-1024K"].request
    assert (one_m["gpus"], one_m["tp"], one_m["cp"], one_m["global_batch"]) == (256, 4, 16, 4)
    assert "micro_batch" not in one_m and "recompute" not in one_m  # not published: searched
    assert runs["NEMOLS-24.03-H100-Llama2-7B-fp8-1024K"].request["gpus"] == 1024  # 8 x 4 x 32
