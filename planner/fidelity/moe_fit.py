"""The efficiency factors fitted on the mixture-of-experts rows: ``moe_host_op_us``, the host time
of each eager op a MoE layer issues per local expert (planner.costs.moe.expert_host_time_s), and on
the presets whose MoE rows' all-to-all crosses nodes, ``a2a_network_efficiency`` (``fit_a2a``).

Fitted by least squares on ln(predicted/published) over the MoE rows in the bar of the families it pools
(``pooled_models``, from DeepSeek-V3, Qwen3-235B-A22B, Qwen3-30B-A3B and GPT-OSS-120B), one value for DGX H100,
DGX B200, GB200 NVL72 and GB300 NVL72 together, inside its band; σ from the Jacobian. A family is pooled while its
rows alone give a value within two combined σ of the other pooled families' (``CONSISTENT_SIGMAS``); ``calibrate
--moe`` tests every family and predicts, instead of fitting, the one furthest out until the rest agree. GPT-OSS alone
gave 13.6 ± 2.5 µs against 7.6 ± 0.6 (2.3 σ) until NeMo's and the long-context rows' cuDNN releases were priced and
DGX B200 took DGX H100's fabric, 11.7 ± 2.1 against 7.66 ± 0.63 (1.8 σ) since; Qwen3-235B-A22B's rows alone reach
the band's floor, 5.0 ± 1.0 µs against the other three's 9.23 ± 0.70 (3.5 σ: predicted since 2026-12-04; its
residuals do not follow the host time - its rows where t_op does not enter, under full-iteration CUDA graphs, read
−4.9..+4.9 %, and its H100 and GB200 rows stay below zero at any t_op in the band - so t_op was absorbing another
term's bias).
Each family is then held out in turn: fit without it, predict it (``leave_one_model_out``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.fidelity.moe_runs import load_moe_runs
from planner.fidelity.runs import Run
from planner.fidelity.validate import on_hardware, predictions, prepare, validate_moe
from planner.hardware.calibration import Factor, Status
from planner.hardware.spec import HardwareSpec
from planner.presets import load_hardware

FACTOR = "moe_host_op_us"
FIT_MODELS = ("deepseek-v3", "qwen3-235b-a22b", "qwen3-30b-a3b", "gpt-oss-120b")  # the families t_op may pool
FAMILY_NAMES = {
    "deepseek-v3": "DeepSeek-V3",
    "qwen3-235b-a22b": "Qwen3-235B-A22B",
    "qwen3-30b-a3b": "Qwen3-30B-A3B",
    "gpt-oss-120b": "GPT-OSS-120B",
}
CONSISTENT_SIGMAS = 2.0  # a family whose own fit is further from the other pooled ones' is predicted, not fitted
MIN_POOLED = 2  # the pooling test needs the others' fit: it never leaves fewer than two families
# GB300 NVL72 with GB200 NVL72: its MoE rows are the same tables' GB300 twins, encoded as GB200's
FIT_PRESETS = ("dgx-h100-superpod", "dgx-b200-superpod", "gb200-nvl72", "gb300-nvl72")
BAND = (5.0, 25.0)
BAND_SOURCE = (
    "band: 5-25 µs of CPU per eager PyTorch op (Python, autograd, ATen dispatcher, cudaLaunchKernel; "
    "jiahuanglin.xyz gpu_kernel_serving lesson 18 'From PyTorch op to kernel launch': ~5-25 µs per op)"
)


@dataclass(frozen=True)
class MoeFit:
    value: float
    sigma: float
    runs: int
    rms_log_error: float


def with_host_op(hw: HardwareSpec, op_us: float) -> HardwareSpec:
    """The preset with ``moe_host_op_us`` = ``op_us`` (a trial value: no re-validation)."""
    cal = hw.calibration.model_copy(update={FACTOR: float(op_us)})
    return hw.model_copy(update={"calibration": cal})


def fit_runs(runs: list[Run] | None = None, models: tuple[str, ...] = FIT_MODELS) -> list[Run]:
    """The rows the factor is fitted on: in the bar (not flagged) and of the fitted families."""
    runs = runs if runs is not None else load_moe_runs()
    return [r for r in runs if r.fit and r.request["model"] in models and r.hardware in FIT_PRESETS]


Presets = dict[str, HardwareSpec]  # hardware presets by name: the values a fit starts from (default: as shipped)


def _preset(name: str, base: Presets | None) -> HardwareSpec:
    return base[name] if base and name in base else load_hardware(name)


def _log_errors(runs: list[Run], op_us: float, prepared: dict, base: Presets | None = None) -> np.ndarray:
    hw = {name: with_host_op(_preset(name, base), op_us) for name in FIT_PRESETS}
    pred = predictions(runs, [on_hardware(prepared[r.id], hw[r.hardware]) for r in runs])  # alike plans: one grid
    return np.array([np.log(p / r.published) for p, r in zip(pred, runs, strict=True)])


def fit(runs: list[Run], base: Presets | None = None) -> MoeFit:
    """Least squares on ln(predicted/published) inside ``BAND``, the other factors at ``base``'s (default: the
    shipped presets'); σ from the Jacobian. It starts from the value the presets hold (H100's) and stops, as the
    dense fit does (calibrate.fit), when a step moves t_op by less than 10⁻⁴ of it or the cost by less than 10⁻⁴
    of itself: 0.001 µs, a tenth of the 0.01 µs the presets are written to."""
    from scipy.optimize import least_squares

    prepared = {r.id: prepare(r) for r in runs}
    start = float(np.clip(_preset(FIT_PRESETS[0], base).calibration.moe_host_op_us or 10.0, *BAND))
    sol = least_squares(
        lambda x: _log_errors(runs, x[0], prepared, base),
        x0=[start],
        bounds=([BAND[0]], [BAND[1]]),
        diff_step=1e-3,
        xtol=1e-4,
        ftol=1e-4,
    )
    r, J = sol.fun, sol.jac
    var = float(r @ r) / max(len(r) - 1, 1) * float(np.linalg.pinv(J.T @ J)[0, 0])
    return MoeFit(float(sol.x[0]), float(np.sqrt(max(var, 0.0))), len(runs), float(np.sqrt(np.mean(r**2))))


A2A_FACTOR = "a2a_network_efficiency"
A2A_PRESETS = ("dgx-h100-superpod",)  # 8-GPU NVLink domains: the MoE rows' all-to-all crosses nodes
A2A_FAMILIES = {"dgx-h100-superpod": ("dgx-h200-superpod",)}  # the same GPU, node and NIC
# A preset with no MoE row of its own takes the MoE band of the preset whose all-to-all has its shape: DGX/HGX B300's
# EP leaves an 8-GPU NVLink domain over 8 InfiniBand rails as DGX B200's does (GB300's rows stay inside NVL72 domains)
BAND_FAMILIES = A2A_FAMILIES | {"dgx-b200-superpod": ("dgx-b300-superpod",)}


def fit_a2a(
    preset: str,
    runs: list[Run] | None = None,
    op_us: float | None = None,
    phi: float | None = None,
    base: Presets | None = None,
):
    """The expert all-to-all's network efficiency η_a2a of one preset (calibrate.fit, bounded least squares
    inside the preset's band, σ from the Jacobian; not identifiable when the rows do not feel it) on
    the preset's MoE rows in the bar, every family - GPT-OSS too: a rail's bandwidth is the
    dispatch's, whatever the experts - with moe_host_op_us at ``op_us`` (default: the preset's). Apart
    from network_bus_efficiency, which the dense runs' DP and CP rings fit: the all-to-all's pieces
    cross the spine to every other rail and the rings' do not (collectives.group_link). ``phi``: φ
    (connection_fit) at this value, where the preset has one; ``base``: the presets to start from (default: shipped)."""
    from planner.fidelity.calibrate import fit as fit_factors
    from planner.fidelity.connection_fit import with_phi

    runs = [r for r in (runs if runs is not None else load_moe_runs()) if r.fit and r.hardware == preset]
    hw = _preset(preset, base)
    if op_us is not None:
        hw = with_host_op(hw, op_us)
    if phi is not None and hw.calibration.persistent_gemm_comm_share is not None:
        hw = with_phi(hw, phi)
    reqs = [on_hardware(prepare(r), hw) for r in runs]
    return fit_factors(hw, runs, (A2A_FACTOR,), requests=reqs)


def _no_step(description: str | None = None) -> None:
    """The default progress callback: nothing to show."""


def moe_calibration_steps(*, loso: bool = True) -> int:
    """How many times run_moe_calibration calls ``step`` when its fit takes two rounds (from presets it wrote
    itself: ``calibrated``) and its pooling holds: the pooling test before and after the rounds, each round, the
    validation, each held-out family."""
    return 5 + (len(FIT_MODELS) if loso else 0)


def a2a_and_phi(runs: list[Run], op_us: float, passes: int = 2, base: Presets | None = None) -> tuple[dict, dict]:
    """η_a2a and φ, each at the other's value: η_a2a at the preset's φ, φ at that η_a2a, then η_a2a
    again at the new φ and φ at it (``passes`` rounds; five H100 rows in the bar feel both)."""
    phis: dict = {}
    for _ in range(passes):
        a2a = {
            name: fit_a2a(name, runs, op_us, phis[name].value if name in phis else None, base) for name in A2A_PRESETS
        }
        phis = solved_phi(a2a, op_us, base)
    return a2a, phis


def solved_phi(a2a: dict, op_us: float, base: Presets | None = None) -> dict:
    """φ (connection_fit.solve_phi) on each preset that carries it, at the fitted t_op and η_a2a."""
    from planner.fidelity.connection_fit import PHI_PRESETS, solve_phi

    out = {}
    for name in PHI_PRESETS:
        hw = with_host_op(_preset(name, base), op_us)
        fa = a2a[name].factors.get(A2A_FACTOR) if name in a2a else None
        if fa is not None and fa.status == Status.FITTED.value:
            cal = hw.calibration.model_copy(update={A2A_FACTOR: fa.value})
            hw = hw.model_copy(update={"calibration": cal})
        out[name] = solve_phi(hw)
    return out


def _with_phi(cal, name: str, phis: dict):
    """``cal`` with φ written: solved on its own preset, carried to the same GPU's other presets."""
    from planner.fidelity.connection_fit import PHI, PHI_PRESETS, phi_factor

    donor = next((d for d, kin in PHI_PRESETS.items() if name == d or name in kin), None)
    if donor is None or donor not in phis:
        return cal
    fit = phis[donor]
    entry = phi_factor(fit, cal.factors[PHI], carried_from=None if name == donor else donor)
    value = round(fit.value, 3)
    return cal.model_copy(update={PHI: value, "factors": dict(cal.factors) | {PHI: entry}})


def consistency_sigma(a: MoeFit, b: MoeFit) -> float:
    """How far apart two fits of the factor are, in combined σ: |v_a − v_b| / √(σ_a² + σ_b²)."""
    return abs(a.value - b.value) / float(np.hypot(a.sigma, b.sigma))


def consistency_sigmas(
    model: str, runs: list[Run] | None = None, base: Presets | None = None, pooled: tuple[str, ...] = FIT_MODELS
) -> float:
    """How far ``model``'s rows alone put the factor from the fit of the other ``pooled`` families, in combined σ
    (``consistency_sigma``); within ``CONSISTENT_SIGMAS`` the family is pooled (``pooled_models``)."""
    runs = runs if runs is not None else load_moe_runs()
    alone = fit(fit_runs(runs, (model,)), base)
    return consistency_sigma(alone, fit(fit_runs(runs, tuple(m for m in pooled if m != model)), base))


@dataclass(frozen=True)
class Pooling:
    """Which families the factor is pooled over (``pooled``, in FIT_MODELS' order), each family's own fit
    (``alone``) and its distance in combined σ from the fit of the other pooled families (``sigmas``; a family
    left out: from the fit of all the pooled ones)."""

    pooled: tuple[str, ...]
    alone: dict[str, MoeFit]
    sigmas: dict[str, float]

    def left_out(self) -> tuple[str, ...]:
        return tuple(m for m in FIT_MODELS if m not in self.pooled)


def _fits(families: list[tuple[str, ...]], runs: list[Run], base: Presets | None) -> list[MoeFit]:
    """``fit`` over each tuple of families' rows, the fits split between two processes (``parallel.map_jobs``:
    independent fits, the same numbers whichever process runs one)."""
    from functools import partial

    from planner import parallel

    jobs = [partial(fit, fit_runs(runs, f), base) for f in families]
    return parallel.map_jobs(jobs, len(jobs) > 1 and parallel.can_fork())


def pooled_models(runs: list[Run] | None = None, base: Presets | None = None) -> Pooling:
    """The families t_op is fitted on: from all of FIT_MODELS, while the pooled family furthest from the fit of
    the other pooled ones lies beyond ``CONSISTENT_SIGMAS``, predict it instead and test the rest again (never
    fewer than ``MIN_POOLED``). Each family alone is fitted once; ``base``: the presets to fit at."""
    runs = runs if runs is not None else load_moe_runs()
    alone = dict(zip(FIT_MODELS, _fits([(m,) for m in FIT_MODELS], runs, base), strict=True))
    pooled = list(FIT_MODELS)
    while True:
        others = _fits([tuple(p for p in pooled if p != m) for m in pooled], runs, base)
        sigmas = {m: consistency_sigma(alone[m], f) for m, f in zip(pooled, others, strict=True)}
        worst = max(sigmas, key=lambda m: sigmas[m])
        if sigmas[worst] <= CONSISTENT_SIGMAS or len(pooled) <= MIN_POOLED:
            break
        pooled.remove(worst)
    if len(pooled) < len(FIT_MODELS):
        whole = fit(fit_runs(runs, tuple(pooled)), base)
        sigmas |= {m: consistency_sigma(alone[m], whole) for m in FIT_MODELS if m not in pooled}
    return Pooling(tuple(pooled), alone, {m: sigmas[m] for m in FIT_MODELS})


def left_out_text(pooling: Pooling) -> str:
    """Why each family the fit does not pool is predicted instead (empty when all are pooled)."""
    parts = []
    for m in pooling.left_out():
        a = pooling.alone[m]
        bound = (
            " (the band's floor)"
            if a.value <= BAND[0] + 0.01
            else " (the band's ceiling)"
            if a.value >= BAND[1] - 0.01
            else ""
        )
        parts.append(
            f"{FAMILY_NAMES[m]} predicted, not pooled: its rows alone give {a.value:.2f} ± {a.sigma:.2f} µs{bound}, "
            f"{pooling.sigmas[m]:.1f} σ from the pooled fit (a pooled family is within {CONSISTENT_SIGMAS:g} σ)"
        )
    return "; ".join(parts)


def pooling_text(pooling: Pooling) -> str:
    """One line: the pooled families and why each other one is predicted instead."""
    names = ", ".join(FAMILY_NAMES[m] for m in pooling.pooled)
    out = f"pooled over {names} (each within {CONSISTENT_SIGMAS:g} σ of the others' fit)"
    return f"{out}; {left_out_text(pooling)}" if pooling.left_out() else out


def leave_one_model_out(
    runs: list[Run] | None = None, step=_no_step, base: Presets | None = None, pooled: tuple[str, ...] = FIT_MODELS
) -> dict[str, dict]:
    """For each family: the factor fitted on the other ``pooled`` families (the others at ``base``'s; a family not
    pooled: the pooled fit, which never saw it), and that family's rows predicted with it; ``step(description)``
    after each."""
    from functools import partial

    from planner import parallel

    runs = runs if runs is not None else load_moe_runs()
    jobs = [partial(_held_out_family, model, runs, base, pooled) for model in FIT_MODELS]
    done = parallel.map_jobs(jobs, parallel.can_fork(), lambda i: step(f"fitted without {FIT_MODELS[i]}"))
    return dict(zip(FIT_MODELS, done, strict=True))


def _held_out_family(model: str, runs: list[Run], base: Presets | None, pooled: tuple[str, ...]) -> dict:
    """``leave_one_model_out``'s entry of one family: the fit without it and its rows predicted with that fit."""
    f = fit(fit_runs(runs, tuple(m for m in pooled if m != model)), base)
    held = [r for r in runs if r.fit and r.request["model"] == model]
    hw = {name: with_host_op(_preset(name, base), f.value) for name in FIT_PRESETS}
    summary = validate_moe(held, hw)["summary"]
    out = {"value": f.value, "sigma": f.sigma, **{k: summary[k] for k in ("runs", "median_abs_error_pct")}}
    return out | {"max_abs_error_pct": summary["max_abs_error_pct"], "pooled": model in pooled}


def factor_entry(f: MoeFit, *, fitted: bool, pooling: Pooling | None = None) -> Factor:
    """The preset's factor entry: fitted on the four presets, carried over to the others; ``pooling``: which
    families the fit pooled (default: all of FIT_MODELS) and why any other is predicted."""
    pooled = pooling.pooled if pooling is not None else FIT_MODELS
    families = ", ".join(FAMILY_NAMES[m] for m in pooled)
    note = (
        f"fitted by megaplan calibrate --moe on {f.runs} MoE rows in the bar ({families}"
        f" on DGX H100, DGX B200, GB200 NVL72 and GB300 NVL72; Megatron-Bridge performance summaries), one value for "
        f"the four"
    )
    if pooling is not None and pooling.left_out():
        note += f"; {left_out_text(pooling)}"
    if fitted:
        return Factor(
            status=Status.FITTED.value, band=list(BAND), sigma=round(f.sigma, 2), source=f"{BAND_SOURCE}; value: {note}"
        )
    return Factor(
        status=Status.CARRIED.value, band=list(BAND), source=f"{BAND_SOURCE}; value: carried over from the fit: {note}"
    )


def moe_accuracy(preset: HardwareSpec, stats: dict | None, carried_from: str | None = None):
    """The preset's accuracy with its MoE band refreshed from its MoE rows in the bar (``stats``, the
    MoE validation's by_hardware entry with the new factors): the RMS and largest |ln| error, as
    before; ``carried_from``: the rows are that preset's (H200 carries H100's, A2A_FAMILIES); a preset
    without such rows keeps what it had."""
    acc = preset.accuracy
    if acc is None or stats is None:  # GB300's band was never written: its first MoE rows came after the field
        return None
    rms, worst, n = stats["rms_log_error"], stats["max_abs_log_error"], stats["runs"]
    where = f"over {carried_from or preset.name}'s {n} MoE rows in the bar (presets/reference/moe_runs.csv)"
    carried = f"carried over from {carried_from}: " if carried_from else ""
    sources = dict(acc.sources) | {
        "moe_validation_error_frac": f"{carried}megaplan validate: RMS of ln(predicted/published) {where}, "
        f"{100 * rms:.1f} %: the band of a MoE plan",
        "moe_max_error_frac": f"{carried}megaplan validate: the largest |ln(predicted/published)| {where}, "
        f"{100 * worst:.1f} %: what each extrapolated feature adds to a MoE plan's band",
    }
    values = {"moe_validation_error_frac": round(rms, 3), "moe_max_error_frac": round(worst, 3)}
    return acc.model_copy(update=values | {"sources": sources})


def fitted_presets(
    f: MoeFit, a2a: dict, phis: dict, base: Presets | None = None, pooling: Pooling | None = None
) -> Presets:
    """Every hardware preset (``base``'s, default: shipped) with the MoE calibration's values: t_op (fitted on
    the four over ``pooling``'s families, carried to the rest), η_a2a (fitted on the H100, carried to the H200),
    φ (solved on the H100, carried)."""
    from planner.fidelity.writer import fitted_calibration
    from planner.presets import preset_names

    donors = {t: (d, a2a[d]) for d in a2a for t in A2A_FAMILIES.get(d, ())} | {d: (None, a2a[d]) for d in a2a}
    out = {}
    for name in preset_names("hardware"):
        preset = _preset(name, base)
        entry = factor_entry(f, fitted=name in FIT_PRESETS, pooling=pooling)
        factors = dict(preset.calibration.factors) | {FACTOR: entry}
        cal = preset.calibration.model_copy(update={FACTOR: round(f.value, 2), "factors": factors})
        if name in donors:
            donor, fa = donors[name]
            note = f"{fa.runs} MoE rows in the bar ({'; '.join(fa.sources)}), moe_host_op_us at its fit"
            cal = fitted_calibration(cal, fa, note, carried_from=donor, keep_unidentified=True)
        out[name] = preset.model_copy(update={"calibration": _with_phi(cal, name, phis)})
    return out


MAX_PASSES = 20  # rounds of (t_op, then η_a2a and φ at it) a calibration takes at most to reach its fixed point


def as_written(presets: Presets) -> Presets:
    """Each preset as ``calibrate --moe --write`` writes its calibration section and the next run reads it back
    (every value as the YAML writes it, rounded): the presets a second run starts from."""
    from planner.fidelity.preset_text import calibration_block, replace_section
    from planner.presets import preset_text, safe_load

    out = {}
    for name, hw in presets.items():
        text = replace_section(preset_text("hardware", name), "calibration", calibration_block(hw.calibration))
        out[name] = HardwareSpec.model_validate(safe_load(text))
    return out


def _rounds(runs: list[Run], state: Presets, pooling: Pooling, step) -> tuple:
    """Rounds of t_op over ``pooling``'s families, then η_a2a and φ at it, from ``state`` until a round writes what
    it started from (``calibrated``): the last round's fits, presets and round count (None: no fixed point)."""
    for rounds in range(1, MAX_PASSES + 1):
        f = fit(fit_runs(runs, pooling.pooled), state)
        a2a, phis = a2a_and_phi(runs, f.value, base=state)
        new = as_written(fitted_presets(f, a2a, phis, state, pooling))
        step(f"round {rounds}: t_op {f.value:.3f} µs")
        if all(new[name].calibration == state[name].calibration for name in new):
            return f, a2a, phis, new, rounds
        state = new
    return f, a2a, phis, new, None


MAX_POOLINGS = 3  # pooling tests a calibration runs at most: the families are retested at the fixed point


def calibrated(runs: list[Run], base: Presets | None = None, step=_no_step) -> tuple:
    """t_op, η_a2a and φ fitted together: t_op at the presets' η_a2a and φ, then η_a2a and φ at that t_op
    (``a2a_and_phi``), again from the presets as written, until a round writes what it started from.

    Each fit holds the others at the values it is given, and one round from the shipped presets stops short
    of where the rounds meet: a run of ``calibrate --moe --write`` took one round, so running it a second time
    took the next and changed the presets (t_op 8.30 → 8.29 µs, H100 η_a2a 0.8336 → 0.8333 on main at
    14c9e22). Rounds from the presets as written (``as_written``) meet where a round starting there writes
    it again, so a second run writes the same files. t_op is pooled over the families ``pooled_models`` admits at
    the presets it starts from; they are tested again at the fixed point, and the rounds rerun over the new pooling
    if it changed. ``base``: the presets to start from (default: shipped). Returns the t_op fit, η_a2a's and φ's
    fits, the presets (as written), the rounds taken (None: no fixed point within MAX_PASSES; the last round's
    values are returned) and the pooling."""
    from planner.presets import preset_names

    state = as_written({name: _preset(name, base) for name in preset_names("hardware")})
    pooling = pooled_models(runs, state)
    step(f"pooled over {len(pooling.pooled)} families")
    for _ in range(MAX_POOLINGS):
        tested = state
        f, a2a, phis, state, rounds = _rounds(runs, state, pooling, step)
        same = all(state[name].calibration == tested[name].calibration for name in state)
        again = pooling if same else pooled_models(runs, state)  # the same presets: the same test, not run twice
        step(f"pooled over {len(again.pooled)} families at the fixed point")
        if again.pooled == pooling.pooled:
            if pooling_text(again) != pooling_text(pooling):  # the notes written give the fixed point's figures
                f, a2a, phis, state, rounds = _rounds(runs, state, again, _no_step)
            return f, a2a, phis, state, rounds, again
        pooling = again
    return f, a2a, phis, state, None, pooling


def run_moe_calibration(*, loso: bool = True, write_dir: str | None = None, step=_no_step) -> dict:
    """Fit the factor, η_a2a and φ together (``calibrated``), validate every MoE row with them, hold out each
    family; optionally write them into every hardware preset (fitted_presets). ``step(description)`` after
    each round of the fit, the validation and each held-out fit."""
    from pathlib import Path

    from planner.fidelity.writer import write_hardware_file

    runs = load_moe_runs()
    f, a2a, phis, presets, rounds, pooling = calibrated(runs, step=step)
    validation = validate_moe(runs, presets)["summary"]
    step("every MoE run validated")
    out = {
        "factor": FACTOR,
        "value": f.value,
        "sigma": f.sigma,
        "band": list(BAND),
        "runs": f.runs,
        "rms_log_error": f.rms_log_error,
        "validation": validation,
        "a2a": {name: fa.to_json() for name, fa in a2a.items()},
        "phi": {name: pf.to_json() for name, pf in phis.items()},
        "rounds": rounds,
        "pooled": list(pooling.pooled),
        "pooling": {
            m: {"value": a.value, "sigma": a.sigma, "sigmas_from_the_rest": pooling.sigmas[m]}
            for m, a in pooling.alone.items()
        },
        "pooling_text": pooling_text(pooling),
    }
    if loso:
        out["leave_one_model_out"] = leave_one_model_out(runs, step, presets, pooling.pooled)
    if write_dir:
        by_hw = validation.get("by_hardware", {})
        family = {t: d for d, ts in BAND_FAMILIES.items() for t in ts if t not in by_hw}  # H200: H100's rows
        for name, hw in presets.items():
            acc = moe_accuracy(load_hardware(name), by_hw.get(name) or by_hw.get(family.get(name)), family.get(name))
            write_hardware_file(Path(write_dir) / f"{name}.yaml", load_hardware(name), hw.calibration, acc)
        out["written"] = write_dir
    return out
