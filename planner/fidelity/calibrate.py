"""Fit the hardware presets' few efficiency factors to the published runs.

One calibration per GPU generation, never per-run factors: minimise the mean squared log error
of the runs' published metrics (one metric per run) with Nelder-Mead over the factors, each
mapped to an unbounded variable by a logit of its position inside its physical range (BOUNDS).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.fidelity.runs import Run, load_runs
from planner.fidelity.validate import predict, validate
from planner.hardware.spec import HardwareSpec
from planner.presets import load_hardware

FITTED = {  # hardware preset -> the calibration fields fitted on its runs
    "dgx-a100-superpod": (
        "gemm_efficiency",
        "gemm_half_dim",
        "memory_efficiency",
        "network_bus_efficiency",
        "layer_overhead_us",
    ),
    "dgx-h100-superpod": (
        "gemm_efficiency",
        "gemm_half_dim",
        "flash_attention_efficiency",
        "memory_efficiency",
        "layer_overhead_us",
    ),
}
# Physical ranges the fit must stay in, and why:
BOUNDS = {
    "gemm_efficiency": (0.5, 0.95),  # cuBLAS reaches 70-90 % of dense peak on large GEMMs
    "gemm_half_dim": (8.0, 512.0),  # of the order of a tensor-core tile (64-256)
    "memory_efficiency": (0.5, 0.95),  # elementwise kernels reach 60-90 % of HBM bandwidth
    "network_bus_efficiency": (0.6, 0.98),  # nccl-tests busbw over InfiniBand: 80-95 % of line rate
    "flash_attention_efficiency": (
        0.1,
        0.8,
    ),  # of the causal-halved FLOPs; FlashAttention-2/cuDNN reach 35-70 % of peak (Dao 2023)
    "layer_overhead_us": (1.0, 2000.0),  # host (Python) and launch time of a layer's ~15-30 kernels
}


def _to_free(name: str, value: float) -> float:
    lo, hi = BOUNDS[name]
    u = np.clip((value - lo) / (hi - lo), 1e-6, 1 - 1e-6)
    return float(np.log(u / (1 - u)))


def _from_free(name: str, x: float) -> float:
    lo, hi = BOUNDS[name]
    return float(lo + (hi - lo) / (1 + np.exp(-x)))


def with_calibration(hw: HardwareSpec, values: dict[str, float]) -> HardwareSpec:
    cal = hw.calibration.model_copy(update=values)
    return hw.model_copy(update={"calibration": cal})


def nelder_mead(f, x0: np.ndarray, *, step: float = 0.3, iters: int = 400, tol: float = 1e-9) -> np.ndarray:
    """Minimise f from x0 (Nelder & Mead 1965, standard coefficients 1, 2, 0.5, 0.5)."""
    n = len(x0)
    simplex = [x0] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        xr = centroid + (centroid - simplex[-1])
        fr = f(xr)
        if fr < values[0]:
            xe = centroid + 2 * (centroid - simplex[-1])
            fe = f(xe)
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(xc)
            if fc < values[-1]:
                simplex[-1], values[-1] = xc, fc
            else:
                simplex = [simplex[0]] + [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    return simplex[int(np.argmin(values))]


def fit_runs(runs: list[Run]) -> list[Run]:
    """One metric per run: the first listed (MFU/HFU rows repeat their run's iteration time)."""
    seen, out = set(), []
    for run in runs:
        key = run.id.split(":")[0]
        if key not in seen:
            seen.add(key)
            out.append(run)
    return out


@dataclass
class Fit:
    hardware: str
    values: dict[str, float]
    loss: float
    runs: int


def fit(hardware_name: str, runs: list[Run], fields: tuple[str, ...] | None = None) -> Fit:
    """Fitted calibration values for one hardware preset on the given runs."""
    fields = fields or FITTED[hardware_name]
    hw0 = load_hardware(hardware_name)
    runs = [r for r in fit_runs(runs) if r.hardware == hardware_name]
    x0 = np.array([_to_free(k, getattr(hw0.calibration, k)) for k in fields])

    def loss(x):
        hw = with_calibration(hw0, {k: _from_free(k, v) for k, v in zip(fields, x, strict=False)})
        errs = [np.log(predict(r, hw) / r.published) for r in runs]
        return float(np.mean(np.square(errs)))

    x = nelder_mead(loss, x0)
    return Fit(hardware_name, {k: _from_free(k, v) for k, v in zip(fields, x, strict=False)}, loss(x), len(runs))


def calibrate_all(runs: list[Run] | None = None) -> dict[str, Fit]:
    runs = runs if runs is not None else load_runs()
    return {name: fit(name, runs) for name in FITTED}


def leave_one_source_out(runs: list[Run] | None = None, hardware_name: str = "dgx-a100-superpod") -> dict[str, dict]:
    """Calibrate without each source in turn and predict it: how well the model generalises."""
    runs = runs if runs is not None else load_runs()
    runs = [r for r in runs if r.hardware == hardware_name]
    out = {}
    for source in dict.fromkeys(r.source for r in runs):
        train = [r for r in runs if r.source != source]
        held = [r for r in runs if r.source == source]
        f = fit(hardware_name, train)
        hw = with_calibration(load_hardware(hardware_name), f.values)
        out[source] = {"fitted": f.values, **validate(held, {hardware_name: hw})["summary"]}
    return out


def write_calibration(path, fitted: Fit, sources: list[str], carried_from: str | None = None) -> str:
    """Rewrite the fitted values (and their ``sources`` entries) of a hardware preset YAML file in
    place, keeping everything else - comments included - as it was. Returns the new text."""
    import re
    from pathlib import Path

    path = Path(path)
    text = path.read_text()
    note = f"fitted by megaplan calibrate on {fitted.runs} published runs ({'; '.join(sources)})"
    if carried_from:
        note = f"carried over from {carried_from}, where it was {note} (an assumption)"
    for key, value in fitted.values.items():
        text, n = re.subn(rf"(?m)^(  {key}: )[-0-9.eE+]+$", rf"\g<1>{value:.4g}", text)
        if n != 1:
            raise ValueError(f"{path}: expected one calibration line '{key}:', found {n}")
        text = re.sub(rf"(?m)^(    {key}: ).*$", rf'\g<1>"{note}"', text)
    path.write_text(text)
    return text


FAMILIES = {  # presets that take a fitted preset's values: the same GPU, or no published run of their own
    "dgx-a100-superpod": ("dgx-a100-40gb-superpod",),
    "dgx-h100-superpod": ("dgx-h200-superpod", "dgx-b200-superpod", "gb200-nvl72"),
}


def run_calibration(*, loso: bool = True, write_dir: str | None = None) -> dict:
    """The whole documented procedure: fit each generation, validate with the fit, hold out sources,
    predict H100 with the A100 values carried over, and optionally write the presets."""
    from pathlib import Path

    runs = load_runs()
    fits = calibrate_all(runs)
    hw = {name: with_calibration(load_hardware(name), f.values) for name, f in fits.items()}
    result = validate(runs, hw)
    out = {
        "fits": {n: {"values": f.values, "loss": f.loss, "runs": f.runs} for n, f in fits.items()},
        "summary": result["summary"],
        "runs": result["runs"],
    }
    if loso:
        out["leave_one_source_out"] = leave_one_source_out(runs)
    a100 = fits["dgx-a100-superpod"].values
    carried = {k: v for k, v in a100.items() if k in FITTED["dgx-h100-superpod"] and k != "layer_overhead_us"}
    h100_runs = [r for r in runs if r.hardware == "dgx-h100-superpod"]
    h100_carried = with_calibration(load_hardware("dgx-h100-superpod"), carried)
    out["h100_with_a100_values"] = {
        "carried": carried,
        **validate(h100_runs, {"dgx-h100-superpod": h100_carried})["summary"],
    }
    if write_dir:
        for name, f in fits.items():
            sources = sorted({r.source for r in runs if r.hardware == name})
            write_calibration(Path(write_dir) / f"{name}.yaml", f, sources)
            for target in FAMILIES.get(name, ()):
                write_calibration(Path(write_dir) / f"{target}.yaml", f, sources, carried_from=name)
        out["written"] = write_dir
    return out
