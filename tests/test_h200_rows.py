"""Nebius's MLPerf v5.0 Llama 3.1 405B on H200: the first H200 rows, held out (docs/cost-model.md §10.1)."""

import pytest

from planner.fidelity.validate import validate

H200_512 = "MLPERF-v5.0-nebius_soperator_8xH200_n64_ngc25.01_nemo-llama31_405b"
H200_1024 = "MLPERF-v5.0-nebius_soperator_8xH200_n128_ngc25.01_nemo-llama31_405b"
H100_512 = "MLPERF-v5.0-eos-dfw_n64_ngc25.01_nemo-llama31_405b"


@pytest.fixture(scope="module")
def rows():
    return {r["id"]: r for r in validate()["runs"]}


def test_the_h200_rows_are_held_out_and_in_the_bar(rows):
    # 512 H200 (TP4 PP8 VP8 CP2, GBS 1152): 50.014 s measured (the median of 3 runs' median train_step_time), 1,024:
    # 25.356 s; the same NeMo 25.01 image as NVIDIA's H100 rows (fitted), H200 taking H100's factors
    for rid, published in ((H200_512, 50.014), (H200_1024, 25.356)):
        row = rows[rid]
        assert row["hardware"] == "dgx-h200-superpod" and not row["in_fit"] and row["in_bar"]
        assert row["published"] == pytest.approx(published)
        assert -8.0 < row["error_pct"] < -6.0  # -7.0 and -7.1 %: fast, by the same share at both sizes


def test_the_model_gives_h200s_tp4_more_over_h100s_tp8_than_measured(rows):
    # measured at 512 GPUs: H100 TP8 55.143 s, H200 TP4 50.014 s, x1.103; the model x1.22 (56.86 / 46.52 s): most of
    # it TP 4's exposed TP communication (2.3 s against TP 8's 8.9 s), H200's faster HBM 1-2 % - the miss is there
    measured = rows[H100_512]["published"] / rows[H200_512]["published"]
    model = rows[H100_512]["predicted"] / rows[H200_512]["predicted"]
    assert measured == pytest.approx(55.143 / 50.014, rel=1e-3)
    assert 1.20 < model < 1.24 and model / measured > 1.09
