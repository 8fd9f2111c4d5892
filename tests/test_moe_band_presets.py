"""The MoE band each hardware preset carries (megaplan calibrate --moe --write): every preset with MoE rows in the
bar gets its own, the H200 carries the H100's current one (issue 18: MoE plans get bands from the MoE validation)."""

import math

from planner.fidelity.moe_fit import moe_accuracy
from planner.presets import load_hardware


def test_a_preset_without_a_moe_band_gets_one_from_its_rows():
    # GB300 had MoE rows in the bar but no band: moe_accuracy kept "what it had" (nothing), so its MoE plans got
    # the dense band (2.1 %) where its MoE rows missed by up to 31.7 %.
    gb300 = load_hardware("gb300-nvl72")
    bare = gb300.model_copy(
        update={
            "accuracy": gb300.accuracy.model_copy(update=dict(moe_validation_error_frac=None, moe_max_error_frac=None))
        }
    )
    stats = {"rms_log_error": 0.0684, "max_abs_log_error": 0.1234, "runs": 28}
    acc = moe_accuracy(bare, stats)
    assert (acc.moe_validation_error_frac, acc.moe_max_error_frac) == (0.068, 0.123)  # rounded to 3 places
    assert "gb300-nvl72's 28 MoE rows in the bar" in acc.sources["moe_validation_error_frac"]
    assert moe_accuracy(bare, None) is None  # no rows: nothing to write


def test_the_h200_carries_the_h100_moe_band_as_it_now_is():
    h100, h200, gb300 = (load_hardware(n).accuracy for n in ("dgx-h100-superpod", "dgx-h200-superpod", "gb300-nvl72"))
    assert (h200.moe_validation_error_frac, h200.moe_max_error_frac) == (
        h100.moe_validation_error_frac,
        h100.moe_max_error_frac,
    )
    assert h200.sources["moe_validation_error_frac"].startswith("carried over from dgx-h100-superpod: ")
    assert gb300.moe_validation_error_frac is not None and "gb300-nvl72's" in gb300.sources["moe_max_error_frac"]
    # the band is the RMS of ln(predicted/published): no wider than the largest error it is drawn from
    for acc in (h100, h200, gb300):
        assert 0 < acc.moe_validation_error_frac <= acc.moe_max_error_frac < math.log(1.5)
