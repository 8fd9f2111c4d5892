"""NVFP4 training (--fp4-format e2m1, Megatron-LM arguments.py:1099-1109; Transformer Engine NVFP4BlockScaling):
priced on Blackwell from Transformer Engine's published B300 GEMM profile, refused on Hopper with Transformer
Engine's own reason. Hand computations below; the measurements are NVIDIA/TransformerEngine @d0067d0da6cb
docs/examples/gemm_profiling/gemm_profiling.rst (B300, 5B config, M = 15,872, per-layer GEMM time)."""

from __future__ import annotations

import numpy as np
import pytest

from planner import api
from planner.costs import memory
from planner.costs.compute import fp8_cast_bytes_per_element
from planner.costs.estimate import dp_element_bytes
from planner.costs.flops import Gemm
from planner.costs.linears import cast_bytes, gemm_times
from planner.errors import PlannerError
from planner.fidelity.runs import load_runs
from planner.megatron.export import parallel_flags
from planner.megatron.importer import import_megatron
from planner.presets import load_hardware
from tests.conftest import one_line_error, run_cli
from tests.test_low_precision import LLAMA

NVFP4 = {"fp4": "e2m1"}


def _req(hardware: str, options: dict, model: str = "llama3-8b"):
    return api.make_request(model=model, hardware=hardware, gpus=8, tp=2, options=options)


def test_the_preset_nvfp4_numbers_are_te_s_b300_profile_by_hand():
    """GEMM ratio: per-tensor FP8 6.812 ms / NVFP4 3.764 ms pre-quantised = 1.810 × the speed, at 3 × the peak
    (Blackwell Ultra: 15 / 5 PFLOP/s dense FP4 / FP8), so η_nvfp4/η_fp8 = 1.810 / 3 = 0.603. Cast rate: NVFP4 autocast
    6.453 − 3.764 = 2.689 ms for 2,483 M elements × 5.125 bytes (amax read 2, cast read 2, two E2M1 copies of
    0.5 + 1/16) = 12.73 GB, 1.591 ms at 8 TB/s: 0.59 of HBM."""
    ratio = 6.812 / 3.764 / 3
    frac = 5.125 * 2483e6 / 8e12 / (6.453e-3 - 3.764e-3)
    assert ratio == pytest.approx(0.6033, abs=1e-4)
    assert frac == pytest.approx(0.5916, abs=1e-4)
    assert fp8_cast_bytes_per_element("nvfp4", one_copy_serves_both=True) == 2 + 2 + 2 * (0.5 + 1 / 16) == 5.125
    # TE normalises in 16 bits before an NVFP4 cast with RHT: the fused norm saves no read
    assert fp8_cast_bytes_per_element("nvfp4", one_copy_serves_both=True, fused=True) == 5.125
    peaks = {"dgx-b200-superpod": 9000.0, "gb200-nvl72": 10000.0, "gb300-nvl72": 15000.0}
    for name, peak in peaks.items():
        hw = load_hardware(name)
        assert hw.gpu.peak_nvfp4_tflops == peak
        if name == "gb300-nvl72":  # the B300 die the profile measured; B200/GB200 fit theirs (tests/test_nvfp4_fit.py)
            assert hw.calibration.nvfp4_gemm_ratio == pytest.approx(ratio, abs=5e-4)
        assert hw.gpu.fp8_cast_hbm_frac["nvfp4"] == pytest.approx(frac, abs=0.005)
    assert load_hardware("dgx-h100-superpod").gpu.peak_nvfp4_tflops is None


def test_an_nvfp4_gemm_by_hand_on_gb300():
    """A 8192³ linear GEMM: F = 2·8192³ = 1.0995e12 FLOP at P_nvfp4 = 15 PFLOP/s and η = η_fp8 · 0.603 ·
    (8192/(8192 + x½))³; the attention core stays at the 16-bit law. Against per-tensor FP8 at 5 PFLOP/s and η_fp8,
    NVFP4 takes 5 / (15 · 0.603) = 0.5528 of the time."""
    req = _req("gb300-nvl72", NVFP4)
    cal = req.ctx.hardware.calibration
    n = 8192.0
    g = Gemm(flops=np.asarray(2 * n**3), M=np.asarray(n), N=np.asarray(n), K=np.asarray(n))
    shape = (n / (n + cal.gemm_half_dim)) ** 3
    by_hand = 2 * n**3 / (15000e12 * cal.fp8_gemm_efficiency * 0.603 * shape)
    t = gemm_times({"fc1": g, "attention_scores": g}, req.ctx, fp8=True)
    assert float(t["fc1"]) == pytest.approx(by_hand, rel=1e-12)
    bf16 = 2 * n**3 / (2500e12 * cal.gemm_efficiency * shape)
    assert float(t["attention_scores"]) == pytest.approx(bf16, rel=1e-12)
    fp8 = gemm_times({"fc1": g}, _req("gb300-nvl72", {"fp8": "hybrid", "fp8_recipe": "tensorwise"}).ctx, fp8=True)
    assert float(t["fc1"] / fp8["fc1"]) == pytest.approx(5000 / (15000 * 0.603), rel=1e-12)


def test_nvfp4_cast_bytes_by_hand():
    """Per element, at η_mem/η_cast of the bytes (η_cast = 0.59): 5.125 · η_mem / 0.59, the same inside the
    LayerNorm (no fused read saved)."""
    req = _req("gb300-nvl72", NVFP4)
    eta_mem = req.ctx.hardware.calibration.memory_efficiency
    per, fused = cast_bytes(req.ctx)
    assert per == pytest.approx(5.125 * eta_mem / 0.59, rel=1e-12)
    assert fused == per


def test_nvfp4_memory_and_parameter_gather_bytes():
    """A saved linear input: the column-wise E2M1 copy, 0.5 + 1/16 bytes; a cached weight both ways, 2 · 0.5625; the
    --fp4-param-gather all-gather moves the packed E2M1 data, half a byte (param_and_grad_buffer.py nvfp4_packed_numel
    = numel // 2)."""
    assert memory.fp8_saved_bytes_per_element("nvfp4") == 0.5625
    assert memory.fp8_weight_bytes_per_param("nvfp4", one_copy_serves_both=True) == 1.125
    assert dp_element_bytes(_req("gb200-nvl72", NVFP4 | {"fp4_param_gather": True}).ctx) == (4, 0.5)
    assert dp_element_bytes(_req("gb200-nvl72", NVFP4).ctx) == (4, 2)


def test_nvfp4_runs_faster_than_mxfp8_and_bf16_on_gb300():
    steps = {
        name: api.explain(_req("gb300-nvl72", opts), suggest=False)["estimate"]["iteration_s"]
        for name, opts in {"bf16": {}, "mxfp8": {"fp8": "e4m3", "fp8_recipe": "mxfp8"}, "nvfp4": NVFP4}.items()
    }
    assert steps["nvfp4"] < steps["mxfp8"] < steps["bf16"]


@pytest.mark.parametrize("hardware", ["dgx-h100-superpod", "dgx-h200-superpod", "dgx-a100-superpod"])
def test_nvfp4_is_refused_before_blackwell_with_transformer_engines_reason(hardware):
    """Transformer Engine _compute_nvfp4_support: 'NVFP4 support requires compute capability >= 10.0'."""
    with pytest.raises(PlannerError, match="needs NVFP4 tensor cores, compute capability ≥ 10"):
        _req(hardware, NVFP4)
    with pytest.raises(PlannerError, match="NVFP4 support requires compute capability >= 10.0"):
        import_megatron(f"{LLAMA} --fp4-format e2m1", gpus=8, hardware=load_hardware(hardware))
    args = ["explain", "--model", "llama3-8b", "--hardware", hardware, "--gpus", "8", "--fp4", "e2m1"]
    assert "compute capability ≥ 10" in one_line_error(run_cli(args))


def test_what_nvfp4_does_not_price_is_refused():
    with pytest.raises(PlannerError, match="NVFP4 expert GEMMs are not modelled"):
        api.make_request(model="mixtral-8x7b", hardware="gb200-nvl72", gpus=8, options=NVFP4)
    with pytest.raises(PlannerError, match="--fp4-recipe custom"):
        import_megatron(f"{LLAMA} --fp4-format e2m1 --fp4-recipe custom", gpus=8, hardware=load_hardware("gb200-nvl72"))


def test_nvfp4_flags_round_trip():
    imported = import_megatron(
        f"{LLAMA} --fp4-format e2m1 --fp4-param-gather --first-last-layers-bf16 --num-layers-at-end-in-bf16 2",
        gpus=8,
        hardware=load_hardware("gb200-nvl72"),
    )
    o = imported.request.ctx.options
    assert (o.fp4, o.fp4_recipe, o.fp4_param_gather, o.bf16_end_layers) == ("e2m1", "nvfp4", True, (1, 2))
    flags = [str(f) for f in parallel_flags(imported.request) if f is not None]
    at = flags.index("--fp4-format")
    assert flags[at : at + 3] == ["--fp4-format", "e2m1", "--fp4-param-gather"]
    assert "--fp8-format" not in flags


def test_the_published_nvfp4_runs_are_validated_with_their_release_s_recipe():
    """Megatron-Bridge performance summary archive @ 067f987: 17 Llama 3 70B / 3.1 405B NVFP4 rows on GB200 and GB300
    (26.02 through 26.06; 26.02.01's GB300 70B row is left out, its MXFP8 row too: MBS 2 at TP 1 PP 1 without FSDP,
    where the v0.3.1 preset runs PP 4 VP 5 MBS 1). bf16_with_nvfp4_mixed sets fp4_param_gather from v0.4.2 (26.04.01)
    only; the rows are validated, not fitted (the NVFP4 factors are measured). 26.04 GB300 405B (line 314): TP 4 PP 8
    VP 4, 1,424 tokens/s per GPU."""
    runs = {r.id: r for r in load_runs() if "NVFP4" in r.id}
    assert len(runs) == 17 and not any(r.fit for r in runs.values())
    gather = {rid.split("-")[1]: r.request["options"]["fp4_param_gather"] for rid, r in runs.items()}
    assert gather == {"26.02": False, "26.02.01": False, "26.04": False, "26.04.01": True, "26.06": True}
    run = runs["MB-26.04-GB300-LLAMA31_405B-PRETRAIN-NVFP4-n256-gbs1536"]
    assert run.published == 1424 and run.request["options"]["fp4"] == "e2m1"
    assert (run.request["tp"], run.request["pp"], run.request["vpp"]) == (4, 8, 4)


def test_bridges_nvfp4_preset_reads_as_nvfp4_with_its_parameter_gather():
    """Megatron-Bridge v0.6.0 bf16_with_nvfp4_mixed (training/mixed_precision.py): fp4 e2m1, fp4_recipe nvfp4,
    fp8_param_gather False, fp4_param_gather True (kept in step with fp4_param)."""
    import json

    args = ["explain", "--bridge-recipe", "llama3_70b_pretrain_config", "--gpus", "64", "--hardware", "gb200-nvl72"]
    result = run_cli([*args, "--bridge-override", "mixed_precision=bf16_with_nvfp4_mixed", "--json"])
    assert result.exit_code == 0, result.output
    options = json.loads(result.stdout)["options"]
    assert (options["fp4"], options["fp4_recipe"], options["fp4_param_gather"], options["fp8"]) == (
        "e2m1",
        "nvfp4",
        True,
        None,
    )
