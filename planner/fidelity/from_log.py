"""Calibrate on the user's own runs: Megatron-LM logs with the launch scripts that produced them.

Each log's steady iteration time becomes a reference run of the plan its script describes; the
factors those runs can identify are refitted (planner.fidelity.calibrate.fit) and written into a
hardware YAML usable wherever a preset is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from planner import api
from planner.costs.estimate import evaluate
from planner.errors import refuse_device
from planner.fidelity.calibrate import FIT_FIELDS, MIN_INFORMED, RUN_NOISE, Fit, fit, prior_text, with_calibration
from planner.fidelity.megatron_log import LogError, TrainingLog, read_training_log
from planner.fidelity.preset_text import accuracy_block, calibration_block, replace_section
from planner.fidelity.runs import Run
from planner.fidelity.writer import fitted_calibration
from planner.hardware.calibration import Status
from planner.hardware.spec import Accuracy, HardwareSpec
from planner.space.grid import PlanGrid

if TYPE_CHECKING:
    from planner.plan_sources import ScriptSource

FLOPS_TOLERANCE = 1.35  # the log's FLOPs may differ from the script's by Megatron's causal-halving and versions
SOURCE = "your runs"
MAX_ERROR_FRAC = 0.99  # Accuracy.validation_error_frac is a fraction below 1


@dataclass(frozen=True)
class LoggedRun:
    log: TrainingLog
    script: str
    request: api.PlanRequest
    notes: tuple[str, ...] = ()  # how the run was read (a vocabulary from the log)

    def as_run(self) -> Run:
        return Run(
            self.log.name, SOURCE, "step time (s)", self.log.steady_iteration_s, self.request.ctx.hardware.name, {}
        )


STDIN = "<stdin>"  # how messages and the table name a log read from standard input (--from-log -)


def _log_bytes(path: str) -> bytes:
    """A log's bytes: ``-`` is standard input (``cat train.log | megaplan calibrate --from-log - ...``), refused
    when it is a terminal (reading would wait for typing); it was "File '-' does not exist" (ux12)."""
    import sys

    if path != "-":
        return Path(path).read_bytes()
    data = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
    if not data:
        raise LogError(
            "--from-log -: reads the log from standard input, but nothing is piped in "
            "(cat train.log | megaplan calibrate --from-log - ...)"
        )
    return data


def _log_text(path: str) -> str:
    """A training log's text; a gzip-compressed log (``train.log.gz``, as clusters keep old logs) is read
    through gzip: it was "no Megatron-LM iteration lines" (fresh user trial 9)."""
    import gzip

    data = _log_bytes(path)
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as err:
            raise LogError(f"{STDIN if path == '-' else path}: a gzip file that does not decompress ({err})") from err
    return data.decode(errors="replace")


def logged_run(
    log_path: str, script: ScriptSource, *, hardware: HardwareSpec, gpus: int | None, env: dict[str, str] | None = None
) -> LoggedRun:
    """One log with its launch script (read by explain's reader; its variables ``env``, as explain's --env),
    checked to be the same run."""
    refuse_device(log_path, "--from-log")
    log = read_training_log(_log_text(log_path), STDIN if log_path == "-" else log_path)
    log_path, script_path = log.name, script.name
    req, notes = _logged_request(log, script, hardware=hardware, gpus=gpus, env=env)
    if log.world_size is not None and log.world_size != req.gpus:
        raise LogError(f"{log_path}: the log ran on {log.world_size} GPUs; {script_path} describes {req.gpus}")
    if log.global_batch is not None and log.global_batch != req.ctx.training.global_batch:
        raise LogError(
            f"{log_path}: global batch size {log.global_batch} in the log, "
            f"{req.ctx.training.global_batch} in {script_path}: not the same run"
        )
    if log.steady_tflops_per_gpu:
        logged = log.steady_tflops_per_gpu * 1e12 * log.steady_iteration_s * req.gpus
        with np.errstate(divide="ignore", invalid="ignore"):
            ours = float(evaluate(PlanGrid.from_plans([req.plan]), req.ctx).flops["megatron"][0])
        if not 1 / FLOPS_TOLERANCE <= logged / ours <= FLOPS_TOLERANCE:
            raise LogError(
                f"{log_path}: its throughput implies {logged / 1e15:.4g} PFLOP per iteration, the model in "
                f"{script_path} {ours / 1e15:.4g} PFLOP: not the same model, batch or world size"
            )
    return LoggedRun(log, script_path, req, notes)


def _logged_request(log: TrainingLog, script: ScriptSource, **kw) -> tuple[api.PlanRequest, tuple[str, ...]]:
    """The plan of a log's launch script; a tokenizer whose vocabulary the script does not give (a Hugging Face
    tokenizer by path) takes the size the log prints (Megatron-LM's ' > padded vocab (size: N) ...' line)."""
    from planner.megatron.importer import VocabUnknown, import_megatron

    where = {"base_dir": script.base_dir, "script_path": script.script_path}
    kw["gpus"] = kw["gpus"] or log.world_size
    try:
        return import_megatron(script.text, **kw, **where).request, ()
    except VocabUnknown as err:
        if log.vocab_size is None:
            raise LogError(
                f"the tokenizer's vocabulary is unknown ({err.how}): give --vocab-size N in the script, or keep "
                f"Megatron-LM's ' > padded vocab (size: N) ...' line in {log.name} (its rank 0 prints it at start-up)"
            ) from None
    req = import_megatron(script.text, **kw, **where, extra=f"--vocab-size {log.vocab_size}").request
    return req, (f"{log.name}: vocabulary {log.vocab_size} from the log's padded vocab line",)


def calibrate_from_logs(logged: list[LoggedRun], hardware: HardwareSpec) -> Fit:
    """Refit the factors the runs identify, with the preset's kernel priors (a factor the runs give
    little information keeps its measured rate and says so; one they cannot identify keeps the base preset's
    value, the fit of the published runs, not its kernel prior: ``as_written``) and each run's σ at least RUN_NOISE: one
    run cannot measure its own noise, so its σ is what a run's time scatters by, not the fit's residual."""
    runs = [lr.as_run() for lr in logged]
    cal = hardware.calibration
    result = fit(
        hardware,
        runs,
        FIT_FIELDS,
        requests=[lr.request for lr in logged],
        max_factors=len(runs),
        anchor={n: getattr(cal, n) for n in FIT_FIELDS if getattr(cal, n, None) is not None},  # as_written's
        priors=True,
        noise_floor=RUN_NOISE,
    )
    return as_written(result, hardware, logged)


def as_written(result: Fit, hardware: HardwareSpec, logged: list[LoggedRun]) -> Fit:
    """The fit as calibrated_yaml writes it: a factor the runs cannot identify keeps the base preset's value,
    said first in its reason, with the value the fit would have given it; the error after the fit is the
    file's. One run 20 % fast showed η 0.92 "not identifiable, it follows its kernel measurement (0.803)"
    and predicted "after" with 0.92 while the file kept 0.8162 (fresh user trial 9)."""
    cal = hardware.calibration
    factors = {}
    for name, f in result.factors.items():
        if f.status != Status.NOT_IDENTIFIABLE.value:
            factors[name] = f
            continue
        kept = float(getattr(cal, name))
        why = f.why if f.why.startswith("kept at") else f"kept at {kept:.4g}: {f.why}"
        if f.informed is not None:  # the runs barely inform it: the value was its kernel measurement's pull
            sigma = f" ± {f.sigma:.2g}" if f.sigma else ""
            why = (
                f"kept at {kept:.4g}: the runs give {f.informed:.0%} of its information, too little to identify it "
                f"(under {MIN_INFORMED:.0%}); with its kernel measurement ({prior_text(cal, name)}) the fit would "
                f"put it at {f.value:.4g}{sigma}"
            )
        factors[name] = replace(f, value=kept, sigma=None, at_bound=None, why=why)
    written = replace(result, factors=factors)
    rows = run_rows(logged, written, hardware)
    written.loss = float(np.mean([np.log(r["after_s"] / r["measured_s"]) ** 2 for r in rows]))
    return written


def unreached(rows: list[dict], logged: list[LoggedRun], result: Fit, hardware: HardwareSpec) -> list[str]:
    """One sentence per run the fitted factors leave more than REACH_LOG_ERROR off, naming the
    assumptions that would explain it (log_diagnosis.likely_causes), nearest first."""
    from planner.fidelity import log_diagnosis as diag
    from planner.fidelity.validate import on_hardware
    from planner.presets import load_hardware, preset_names

    fitted = with_calibration(hardware, result.values)
    others = None
    out = []
    for row, lr in zip(rows, logged, strict=True):
        measured, after = row["measured_s"], row["after_s"]
        if abs(np.log(after / measured)) <= diag.REACH_LOG_ERROR:
            continue
        others = others or [load_hardware(n) for n in preset_names("hardware")]
        known = lr.log.world_size is not None
        causes = diag.likely_causes(on_hardware(lr.request, fitted), measured, after, others, world_known=known)
        likely = (
            "likely wrong: " + "; ".join(c.text(measured) for c in causes[:3])
            if causes
            else diag.direction_text(measured, after)
        )
        out.append(
            f"{lr.log.name}: {measured:.3g} s measured, {after:.3g} s after the fit ({after / measured - 1:+.0%}): "
            f"the factors cannot reach it within their bands; {likely}"
        )
    return out


def calibrated_yaml(base_text: str, hardware: HardwareSpec, result: Fit, logged: list[LoggedRun], name: str) -> str:
    """The base preset's YAML with the runs' fit: a hardware file of its own name."""
    logs = ", ".join(lr.log.name for lr in logged)
    note = f"{len(logged)} run{'s' if len(logged) > 1 else ''} of your own ({logs})"
    cal = fitted_calibration(hardware.calibration, result, note, keep_unidentified=True)
    text = replace_section(base_text, "calibration", calibration_block(cal))
    text = replace_section(text, "accuracy", accuracy_block(log_accuracy(hardware, result, logged, note)))
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("#"):  # the base preset's header says what IT was fitted on
        lines.pop(0)
    for i, line in enumerate(lines):
        if line.startswith("name:"):
            lines[i] = f"name: {name}\n"
        elif line.startswith("description:"):
            lines[i] = line.rstrip("\n").rstrip('"') + f' (calibrated by megaplan on {logs})"\n'
    scripts = ", ".join(dict.fromkeys(lr.script for lr in logged))
    header = (
        f"# {name}: {hardware.name} with its calibration factors refitted by `megaplan calibrate --from-log`\n"
        f"# on {note}, launched by {scripts}.\n"
        f"# The factors these runs could not identify keep {hardware.name}'s values and sources.\n"
    )
    return header + "".join(lines)


def log_accuracy(hardware: HardwareSpec, result: Fit, logged: list[LoggedRun], note: str) -> Accuracy:
    """The accuracy of the calibrated file: the RMS log error on the user's runs after the fit, no
    smaller than the base preset's (a fit on a few runs of its own is in sample), and the fit's σ."""
    rows = run_rows(logged, result, hardware)
    own = float(np.sqrt(np.mean([np.log(r["after_s"] / r["measured_s"]) ** 2 for r in rows])))
    base = hardware.accuracy.validation_error_frac
    capped = " (capped at 99 %: --force wrote a fit that does not reach the runs)" if own >= MAX_ERROR_FRAC else ""
    return Accuracy(
        validation_error_frac=round(min(max(own, base), MAX_ERROR_FRAC), 3),
        calibration_uncertainty_frac=round(result.prediction_sigma, 3),
        sources={
            "validation_error_frac": f"RMS of ln(predicted/measured) on {note} after the fit, {100 * own:.1f} %, "
            f"in sample; at least {hardware.name}'s {100 * base:.1f} % on the published runs{capped}",
            "calibration_uncertainty_frac": "megaplan calibrate --from-log: the fitted factors' covariance "
            f"(least-squares Jacobian) carried to the runs' ln(prediction), RMS {100 * result.prediction_sigma:.1f} %",
        },
    )


def base_text(ref: str) -> str:
    """The YAML text of the hardware the user's cluster starts from: a preset name or a file."""
    from planner.presets import preset_text

    path = Path(ref).expanduser()
    return path.read_text() if path.is_file() else preset_text("hardware", ref)


def run_rows(logged: list[LoggedRun], result: Fit, hardware: HardwareSpec) -> list[dict]:
    """Each run's measured iteration time against the prediction before and after the fit."""
    from planner.fidelity.validate import on_hardware, predict

    after = with_calibration(hardware, result.values)
    rows = []
    for lr in logged:
        run = lr.as_run()
        before_s = predict(run, req=lr.request)
        after_s = predict(run, req=on_hardware(lr.request, after))
        rows.append(
            {
                "log": lr.log.name,
                "script": lr.script,
                "iterations": len(lr.log.iterations),
                "measured_s": run.published,
                "before_s": before_s,
                "after_s": after_s,
                "max_allocated_mb": lr.log.max_allocated_mb,
            }
        )
    return rows
