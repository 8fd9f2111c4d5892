"""Write fitted calibrations into hardware YAML files: each factor's value, status, σ, band and
source; the rest of the file - comments included - stays as it was."""

from __future__ import annotations

from pathlib import Path

from planner.fidelity.preset_text import accuracy_block, calibration_block, replace_section
from planner.hardware.calibration import Calibration, Drift, Factor, Status
from planner.hardware.spec import Accuracy, HardwareSpec
from planner.presets import load_spec

VALUE_NOTE = "; value: "
KEPT = "; kept at: "


def _band_note(factor: Factor) -> str:
    return factor.source.split(VALUE_NOTE)[0] if factor.source.startswith("band:") else ""


def fitted_calibration(
    cal: Calibration,
    fit,
    note: str,
    *,
    carried_from: str | None = None,
    keep_unidentified: bool = False,
    drift: dict[str, Drift] | None = None,
) -> Calibration:
    """``cal`` with the values, statuses and σ of ``fit`` (a calibrate.Fit); ``note`` says on which runs;
    ``keep_unidentified``: a factor these runs cannot identify keeps its entry as it was; ``drift``:
    each fitted factor's leave-one-source-out range (calibrate.loso_drift), kept beside its value."""
    values, factors = {}, dict(cal.factors)
    for name, ff in fit.factors.items():
        band = _band_note(cal.factors[name])
        prefix = band + VALUE_NOTE if band else ""
        prior = cal.factors[name].prior
        if ff.status == Status.NOT_IDENTIFIABLE.value:
            if keep_unidentified:
                continue
            values[name] = ff.value
            source = cal.factors[name].source
            old = source.split(VALUE_NOTE)[-1].split(KEPT)[-1] if VALUE_NOTE in source else f"{ff.value:g}, as preset"
            if ff.informed is not None:  # set through its prior by the factors the runs fit
                text = f"not identifiable by {note} ({ff.why})"
            elif prior is not None and prior.per is None and ff.value == prior.value:  # calibrate.held_value
                text = f"not identifiable by {note} ({ff.why}){KEPT}its kernel prior, {prior.value:g}"
            else:
                text = f"not identifiable by {note} ({ff.why}){KEPT}{old}"
            if carried_from:
                text = f"carried over from {carried_from}, where it was {text}"
            factors[name] = Factor(
                status=Status.NOT_IDENTIFIABLE.value,
                band=list(ff.band),
                sigma=ff.sigma,
                source=prefix + text,
                prior=prior,
            )
            continue
        values[name] = ff.value
        text = f"fitted by megaplan calibrate on {note}"
        if ff.informed is not None:
            text += f", with its kernel prior (the runs give {ff.informed:.0%} of its information)"
        if ff.at_bound:
            floor = ff.at_bound == "lower" and ff.band[0] == 0
            text += f", at its {ff.at_bound} bound" + (" - 0, the physical floor" if floor else "")
        status = Status.FITTED
        if carried_from:
            text, status = f"carried over from {carried_from}, where it was {text}", Status.CARRIED
        loso = (drift or {}).get(name)
        factors[name] = Factor(
            status=status.value, band=list(ff.band), sigma=ff.sigma, source=prefix + text, prior=prior, loso=loso
        )
    return cal.model_copy(update=values | {"factors": factors})


def write_hardware_file(path: Path, hw: HardwareSpec, cal: Calibration, acc: Accuracy | None = None) -> str:
    """Replace the calibration (and accuracy) section of a hardware YAML file; returns the new text, validated."""
    text = replace_section(path.read_text(), "calibration", calibration_block(cal))
    if acc is not None:
        text = replace_section(text, "accuracy", accuracy_block(acc))
    path.write_text(text)
    load_spec(HardwareSpec, str(path))  # the written file must load
    return text


def fitted_accuracy(
    fit,
    stats: dict | None,
    *,
    carried_from: str | None = None,
    donor: Accuracy | None = None,
    previous: Accuracy | None = None,
):
    """The accuracy section after a fit: the RMS and largest log error of the preset's own runs whose
    configuration is published (``stats``, validate's by_hardware entry), else the donor's; the fit's σ
    carried to the predictions (calibrate.Fit.prediction_sigma); the MoE and NVFP4 rows' figures as they were
    (``previous``: the dense fit does not move them)."""
    sigma_text = (
        f"megaplan calibrate: the fitted factors' covariance (least-squares Jacobian) carried to each run's "
        f"ln(prediction), RMS over {'the one run' if fit.runs == 1 else f'the {fit.runs} runs'} of the fit, "
        f"{100 * fit.prediction_sigma:.1f} %"
    )
    if stats:
        err = stats["rms_log_error"]
        rows = (
            f"{stats['runs']} held-out runs (validated out of sample, never fitted)"
            if stats.get("held_out")
            else f"{stats['runs']} validation rows whose configuration is published"
        )
        err_text = f"megaplan calibrate: RMS of ln(predicted/published) over this preset's {rows}, {100 * err:.1f} %"
        err_text += (
            f", with {carried_from}'s factors"
            if carried_from
            else "; in sample (docs/cost-model.md §9.3 holds each source out)"
        )
    else:
        err = donor.validation_error_frac if donor else 0.0
        err_text = f"no run on this preset: {carried_from}'s {100 * err:.1f} % (same SMs; assumption)"
    if carried_from:
        sigma_text = f"carried over from {carried_from}: " + sigma_text
    values = {"validation_error_frac": round(err, 3), "calibration_uncertainty_frac": round(fit.prediction_sigma, 3)}
    sources = {"validation_error_frac": err_text, "calibration_uncertainty_frac": sigma_text}
    if stats and stats.get("held_out"):
        values["held_out_runs"] = int(stats["runs"])
        sources["held_out_runs"] = (
            f"this preset's own {stats['runs']} runs, held out (its factors are {carried_from}'s)"
        )
    worst = stats["max_abs_log_error"] if stats else (donor.max_error_frac if donor else None)
    if worst is not None:
        values["max_error_frac"] = round(worst, 3)
        sources["max_error_frac"] = (
            f"megaplan calibrate: the largest |ln(predicted/published)| over the same rows, {100 * worst:.1f} %; what "
            "each feature no run exercises adds to the band in quadrature (docs/cost-model.md §10.6)"
            if stats
            else f"no run on this preset: {carried_from}'s {100 * worst:.1f} %"
        )
    for name in (
        "moe_validation_error_frac",
        "moe_max_error_frac",
        "nvfp4_validation_error_frac",
        "nvfp4_max_error_frac",
    ):
        if previous is not None and getattr(previous, name) is not None:
            values[name], sources[name] = getattr(previous, name), previous.sources[name]
    return Accuracy(**values, sources=sources)


def write_fits(
    write_dir: str, fits: dict, families: dict, by_hardware: dict | None = None, drift: dict | None = None
) -> None:
    """Write each fit into its preset and its family's (carried over); with ``by_hardware`` (validate's
    summary) the accuracy sections too; with ``drift`` (per preset, calibrate.loso_drift) each fitted
    factor's leave-one-source-out range."""
    from planner.fidelity.calibrate import (
        FABRIC_DONORS,
        FABRIC_NOTE,
        carried_fit,
        carry_note,
        fabric_fit,
        matmul_ratios,
    )
    from planner.presets import load_hardware

    for name, fit in fits.items():
        note = f"{fit.runs} published runs ({'; '.join(fit.sources)})"
        hw = load_hardware(name)
        mine = (drift or {}).get(name)
        acc = fitted_accuracy(fit, by_hardware.get(name), previous=hw.accuracy) if by_hardware is not None else None
        cal = fitted_calibration(hw.calibration, fit, note, drift=mine)
        write_hardware_file(Path(write_dir) / f"{name}.yaml", hw, cal, acc)
        for target in families.get(name, ()):
            thw = load_hardware(target)
            ratios = matmul_ratios(hw, thw)  # the GEMM efficiencies at the target GPU's measured matmul rate
            tfit, donor = carried_fit(fit, ratios, target), carry_note(name, ratios)
            tdrift = {
                n: d.model_copy(update={"low": d.low * ratios.get(n, 1.0), "high": d.high * ratios.get(n, 1.0)})
                for n, d in (mine or {}).items()
            }
            cal = fitted_calibration(thw.calibration, tfit, note, carried_from=donor, drift=tdrift)
            fabric = fabric_fit(fits, target)  # its fabric's factors from the preset whose fabric it has
            if fabric is not None:
                fdonor = FABRIC_DONORS[target]
                fnote = f"{fabric.runs} published runs ({'; '.join(fabric.sources)})"
                fdrift = (drift or {}).get(fdonor)
                carried = f"{fdonor} ({FABRIC_NOTE[target]})"
                cal = fitted_calibration(cal, fabric, fnote, carried_from=carried, drift=fdrift)
            tacc = None
            if by_hardware is not None:
                tacc = fitted_accuracy(
                    tfit, by_hardware.get(target), carried_from=name, donor=acc, previous=thw.accuracy
                )
            write_hardware_file(Path(write_dir) / f"{target}.yaml", thw, cal, tacc)
