"""NVFP4's GEMM rate on the Blackwell GPUs that have no NVFP4 GEMM measurement of their own, fitted on
their published NVFP4 runs: ``nvfp4_gemm_ratio`` (planner.costs.linears.low_precision_rate: an NVFP4 GEMM
runs at the NVFP4 dense peak × η_fp8 × this ratio).

The one published NVFP4 GEMM timing is Transformer Engine's B300 profile (NVIDIA/TransformerEngine
@d0067d0da6cb docs/examples/gemm_profiling/gemm_profiling.rst: per-tensor FP8 6.812 ms, NVFP4 3.764 ms a layer,
pre-quantised): NVFP4 ×1.810 the speed of FP8 on a GPU whose FP4 dense peak is 3× its FP8 (Blackwell Ultra),
so ratio = 1.810/3 = 0.603 on GB300, measured. B200 and GB200 have an FP4 peak of 2× FP8 and no such timing:
carried as a fraction of the peak the ratio stays 0.603 (NVFP4 ×1.21 FP8's speed there), carried as a speed-up
it is 1.810/2 = 0.905. That is the band ``BAND``; the value is fitted on GB200 NVFP4 rows (Megatron-Bridge
performance summaries, Llama 3 70B and Llama 3.1 405B on 64 and 256 GB200) by bounded least squares on
ln(predicted/published), every other factor at the preset's (``calibrate.fit``: σ from the Jacobian, a value
pushed to a bound or not felt reported as such), and carried to DGX B200 (the same GPU at 1000 W, no NVFP4 run
of its own). These rows enter no other fit: the dense calibration leaves NVFP4 out (its GEMMs would alias into
η_fp8), so a dense refit comes first and this fit after it. Each model is held out in turn: fitted without it,
the refits' range is the factor's drift (``Factor.loso``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from planner.fidelity.calibrate import Fit, with_calibration
from planner.fidelity.calibrate import fit as fit_factors
from planner.fidelity.runs import Run, load_runs
from planner.fidelity.validate import on_hardware, predictions, prepare, validate
from planner.hardware.calibration import Drift, Status
from planner.hardware.spec import Accuracy, HardwareSpec
from planner.presets import load_hardware

FACTOR = "nvfp4_gemm_ratio"
FIT_PRESET = "gb200-nvl72"  # the 2×-peak Blackwell with published NVFP4 runs
FIT_SOURCE = "Megatron-Bridge performance summary"  # the rows the ratio is fitted on; MLPerf v5.1's judge it
CARRIED_TO = ("dgx-b200-superpod",)  # the same B200 GPU at 1000 W: no NVFP4 run of its own
B300_SPEEDUP = 6.812 / 3.764  # TE gemm_profiling, B300: per-tensor FP8 over NVFP4 per-layer GEMM time
BAND = (round(B300_SPEEDUP / 3, 3), round(B300_SPEEDUP / 2, 3))  # (0.603, 0.905): as a peak fraction, as a speed-up


def is_nvfp4(run: Run) -> bool:
    """Whether the run trains in NVFP4 (``--fp4-format``)."""
    return bool((run.request.get("options") or {}).get("fp4"))


def preset_runs(runs: list[Run] | None = None, preset: str = FIT_PRESET) -> list[Run]:
    """The preset's NVFP4 rows, of every source, one metric per run (the first listed)."""
    seen, out = set(), []
    for run in runs if runs is not None else load_runs():
        key = run.id.split(":")[0]
        if run.hardware == preset and is_nvfp4(run) and key not in seen:
            seen.add(key)
            out.append(run)
    return out


def fit_runs(runs: list[Run] | None = None, preset: str = FIT_PRESET) -> list[Run]:
    """The preset's NVFP4 rows of Megatron-Bridge's performance summaries (``FIT_SOURCE``): the rows GB200's ratio is
    fitted on. Other sources' NVFP4 rows (NVIDIA's MLPerf v5.1 Llama 3.1 405B on 512-5,120 GB200 and 512 GB300) are
    validated in the bar out of sample and judge the ratio, as GB300's rows judge its measured one."""
    return [r for r in preset_runs(runs, preset) if r.source == FIT_SOURCE]


def _model(run: Run) -> str:
    model = run.request["model"]
    return model if isinstance(model, str) else model.name


def fit(runs: list[Run], hw: HardwareSpec | None = None) -> Fit:
    """``nvfp4_gemm_ratio`` of ``hw`` (default: the shipped GB200 preset) fitted on ``runs`` inside ``BAND``."""
    hw = hw or load_hardware(FIT_PRESET)
    reqs = [on_hardware(prepare(r), hw) for r in runs]
    return fit_factors(hw, runs, (FACTOR,), requests=reqs, noise_floor=0.0)


def leave_one_model_out(runs: list[Run], hw: HardwareSpec | None = None) -> dict[str, float]:
    """The factor fitted without each model's rows, by the model left out."""
    models = sorted({_model(r) for r in runs})
    return (
        {m: fit([r for r in runs if _model(r) != m], hw).factors[FACTOR].value for m in models}
        if len(models) > 1
        else {}
    )


def log_band(log_errors) -> tuple[float, float]:
    """(ε_v, δ) of a set of rows' residuals r_i = ln(predicted_i/published_i): ε_v = √(Σ r_i² / n), their RMS (the
    band of a plan the rows back), and δ = max |r_i| (what each feature no row exercises adds in quadrature;
    docs/cost-model.md §10.6). Both are at least the rows' spread: ε_v² = mean² + variance."""
    r = np.asarray(log_errors, dtype=float)
    return float(np.sqrt(np.mean(r**2))), float(np.max(np.abs(r)))


def band_log_errors(every: list[Run] | None = None) -> dict[str, dict]:
    """Per preset with NVFP4 rows, each row's ln(predicted/published) taken out of sample, and how the rows bear on
    the preset's ratio: GB200's rows fit it, so each is predicted at the ratio fitted without its model (the fitted
    residual plus the leave-one-model-out drift, row by row: ``held_out_log_errors``); a preset whose ratio is
    measured (GB300, TE's B300 profile) or carried over (DGX B200, GB200's) is judged by its rows as shipped, out of
    sample."""
    every = every if every is not None else load_runs()
    out: dict[str, dict] = {}
    for name in dict.fromkeys(r.hardware for r in every if is_nvfp4(r)):
        runs = preset_runs(every, name)
        fitted = fit_runs(runs, name) if name == FIT_PRESET else []
        errs = held_out_log_errors(fitted) if fitted else {}
        fitted_ids = {r.id for r in fitted}
        rest = [r for r in runs if r.id not in fitted_ids]  # out of sample as shipped: other sources', GB300's
        pred = predictions(rest, [prepare(r) for r in rest]) if rest else []
        errs |= {r.id: float(np.log(p / r.published)) for r, p in zip(rest, pred, strict=True)}
        bearing = "fitted" if fitted else "carried" if name in CARRIED_TO else "held out"
        out[name] = {"bearing": bearing, "log_errors": errs}
        out[name]["sources"] = sorted({r.source for r in runs})
    return out


def held_out_log_errors(runs: list[Run], hw: HardwareSpec | None = None) -> dict[str, float]:
    """Each row's ln(predicted/published) at the ratio fitted without its model's rows (``leave_one_model_out``): what
    the fit would have said of the row had it not seen its model. With one model only, the rows at the preset's own
    ratio (nothing to hold out)."""
    hw = hw or load_hardware(FIT_PRESET)
    held = leave_one_model_out(runs, hw)
    reqs = [on_hardware(prepare(r), with_calibration(hw, {FACTOR: held[_model(r)]}) if held else hw) for r in runs]
    pred = predictions(runs, reqs)
    return {r.id: float(np.log(p / r.published)) for r, p in zip(runs, pred, strict=True)}


def band_accuracy(preset: HardwareSpec, entry: dict, carried_from: str | None = None) -> Accuracy:
    """``preset``'s accuracy with its NVFP4 band (``entry``: ``band_log_errors``' of the preset, or of
    ``carried_from``'s for a preset with no NVFP4 row of its own): ``log_band`` of the rows, each source naming the
    rows' count, preset, how they bear on the ratio and where they are published (explain prints it)."""
    rms, worst = log_band(list(entry["log_errors"].values()))
    n, name = len(entry["log_errors"]), carried_from or preset.name
    how = {
        "fitted": "fitting its NVFP4 GEMM ratio (Megatron-Bridge's, each predicted with its model left out of the fit; "
        "the others out of sample)",
        "carried": f"out of sample (its NVFP4 GEMM ratio carried over from {FIT_PRESET}, not fitted)",
        "held out": "out of sample (its NVFP4 GEMM ratio measured, not fitted)",
    }[entry["bearing"]]
    rows = f"{n} NVFP4 rows on {name} ({'; '.join(entry['sources'])}) {how}"
    carried = f"carried over from {carried_from}: " if carried_from else ""
    sources = dict(preset.accuracy.sources) | {
        "nvfp4_validation_error_frac": f"{carried}{rows}: RMS of ln(predicted/published) {100 * rms:.1f} % "
        "(calibrate --nvfp4)",
        "nvfp4_max_error_frac": f"{carried}{rows}: the largest |ln(predicted/published)| {100 * worst:.1f} % "
        "(calibrate --nvfp4)",
    }
    values = {"nvfp4_validation_error_frac": round(rms, 3), "nvfp4_max_error_frac": round(worst, 3)}
    return preset.accuracy.model_copy(update=values | {"sources": sources})


def note(f: Fit) -> str:
    """What the fit was made on, for the preset's source text (its ``loso`` range: each model held out)."""
    return (
        f"{f.runs} NVFP4 rows on GB200 NVL72 (--nvfp4: Llama 3 70B and Llama 3.1 405B; {'; '.join(f.sources)}); "
        "loso: the refits leaving one model out"
    )


def run_nvfp4_calibration(*, loso: bool = True, write_dir: str | None = None) -> dict:
    """Fit the GB200 ratio, hold out each model, validate the NVFP4 rows with it; the NVFP4 band of each preset with
    NVFP4 rows (``band_log_errors``, ``band_accuracy``; DGX B200 carries GB200's while it has none of its own: since
    MLPerf v5.1's seven single-node NVFP4 runs it has, out of sample); optionally write the ratio into
    the GB200 preset (fitted) and DGX B200's (carried over), and the bands into their accuracy sections."""
    from planner.fidelity.writer import fitted_calibration, write_hardware_file

    every = load_runs()
    runs = fit_runs(every)
    f = fit(runs)
    ff = f.factors[FACTOR]
    held = leave_one_model_out(runs) if loso else {}
    drift = (
        Drift(low=round(min(held.values()), 4), high=round(max(held.values()), 4), sources=len(held)) if held else None
    )
    hw = {FIT_PRESET: load_hardware(FIT_PRESET)}
    cal = fitted_calibration(hw[FIT_PRESET].calibration, f, note(f), drift={FACTOR: drift} if drift else None)
    presets = {FIT_PRESET: hw[FIT_PRESET].model_copy(update={"calibration": cal})}
    for name in CARRIED_TO:
        base = load_hardware(name)
        ccal = fitted_calibration(base.calibration, f, note(f), carried_from=FIT_PRESET)
        presets[name] = base.model_copy(update={"calibration": ccal})
    bands = band_log_errors(every)
    accuracy = {name: band_accuracy(load_hardware(name), entry) for name, entry in bands.items()}
    if FIT_PRESET in bands:  # a preset the ratio is carried to has GB200's band until it has NVFP4 rows of its own
        for name in (n for n in CARRIED_TO if n not in bands):
            accuracy[name] = band_accuracy(load_hardware(name), bands[FIT_PRESET], carried_from=FIT_PRESET)
    nvfp4 = [r for r in every if is_nvfp4(r)]
    before = validate(nvfp4)["runs"]
    after = validate(nvfp4, {name: presets.get(name) or load_hardware(name) for name in {r.hardware for r in nvfp4}})
    out = {
        "factor": FACTOR,
        "preset": FIT_PRESET,
        "value": ff.value,
        "sigma": ff.sigma,
        "status": ff.status,
        "at_bound": ff.at_bound,
        "why": ff.why,
        "band": list(BAND),
        "runs": f.runs,
        "rms_log_error": f.loss**0.5,
        "leave_one_model_out": held,
        # the NVFP4 band per preset (docs/cost-model.md §4.1): its rows' out-of-sample residuals, RMS and largest
        "bands": {
            name: {
                "bearing": bands.get(name, bands.get(FIT_PRESET, {})).get("bearing"),
                "carried_from": None if name in bands else FIT_PRESET,
                "rows": len(bands.get(name, bands.get(FIT_PRESET, {})).get("log_errors", {})),
                "rms_log_error": acc.nvfp4_validation_error_frac,
                "max_abs_log_error": acc.nvfp4_max_error_frac,
            }
            for name, acc in accuracy.items()
        },
        "errors_pct": {
            r["id"]: {"before": b["error_pct"], "after": r["error_pct"]}
            for r, b in zip(after["runs"], before, strict=True)
        },
    }
    if write_dir:
        for name in dict.fromkeys([*presets, *accuracy]):
            preset = presets.get(name) or load_hardware(name)
            cal = preset.calibration
            if name in presets and cal.factors[FACTOR].status == Status.NOT_IDENTIFIABLE.value:
                cal = load_hardware(name).calibration  # the ratio as shipped; the band still written
            write_hardware_file(Path(write_dir) / f"{name}.yaml", load_hardware(name), cal, accuracy.get(name))
        out["written"] = write_dir
    return out
