"""Rich renderables for the model's fidelity: validation against published runs and the calibration.
Returned, never printed here."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from planner.errors import counted
from planner.plan import plan_label
from planner.report.layout import KEEP, Column, FittedTable
from planner.report.wrap import NBSP, Hanging


def _regret(r: dict) -> str:
    g = r.get("regret")
    return f"{g['speedup_pct']:+.1f}% ({g['same_recompute_speedup_pct']:+.1f}%)" if g else ""


def _best_plan(r: dict) -> str:
    g = r.get("regret")
    return plan_label(g["best_plan"]) if g else ""


def settings_table(settings: dict) -> Table:
    """Rows in the bar and the distinct settings (model × plan, DP aside) behind them, per preset."""
    table = Table(title="Distinct settings behind the fit (model × plan; rows in the bar)", title_justify="left")
    for col, just in (("hardware", "left"), ("rows", "right"), ("dense settings", "right"), ("MoE settings", "right")):
        table.add_column(col, justify=just)
    for name, st in settings.items():
        table.add_row(name, str(st["rows"]), str(st["dense_settings"]), str(st["moe_settings"]))
    return table


def drift_table(factors: dict) -> Table:
    """Each preset's fitted factors: value ± σ and the range of the refits leaving one source out."""
    table = Table(
        title="Fitted factors: value ± σ and leave-one-source-out drift (refit without each source in turn)",
        title_justify="left",
    )
    table.add_column("preset / factor", justify="left", min_width=24)  # a factor name never wraps
    for col in ("value", "± σ", "without one source", "drift"):
        table.add_column(col, justify="right", no_wrap=col != "without one source")
    for name, rows in factors.items():
        if not rows:
            continue
        n = next((f["loso_sources"] for f in rows.values() if f["loso_sources"]), None)
        carried = " (carried over)" if all(f["status"] == "carried over" for f in rows.values()) else ""
        table.add_row(Text(name + carried, style="bold"), "", "", f"{n} sources" if n else "", "")
        for factor, f in rows.items():
            loso = "—" if f["loso"] is None else f"{_value(f['loso'][0])}–{_value(f['loso'][1])}"
            drift = "—" if f["drift_pct"] is None else f"{f['drift_pct']:.1f}%"
            sigma = "—" if f["sigma"] is None else _value(f["sigma"])
            table.add_row("  " + factor, _value(f["value"]), sigma, loso, drift)
    return table


def replicates_text(summary: dict, what: str = "runs") -> Text | None:
    """One line: how much the same configuration, measured more than once, scatters (``validate.replicate_scatter``)."""
    rep = summary.get("replicates") or {}
    said = [
        f"{label} σ {100 * r['sigma_log']:.1f} % ({r['groups']} groups, {r['dof']} degrees of freedom)"
        for label, r in (
            ("across MLPerf submitters' systems of one round", rep.get("clusters")),
            ("across later releases", rep.get("releases")),
        )
        if r and r["sigma_log"] is not None
    ]
    if not said:
        return None
    return Text(
        f"Replicates among the {what}: the same configuration to megaplan (every input it reads equal) measured more "
        f"than once scatters in ln(published) {' and '.join(said)}: a floor under the RMS error of any estimate that "
        "reads only these inputs."
    )


def validation_view(result: dict) -> Group:
    parts = [_runs_table(result, "Predicted vs published (error = predicted/published − 1)")]
    parts += [summary_table(result["summary"]), assumptions_text(result)]
    parts += [t for t in (replicates_text(result["summary"], "dense runs"),) if t is not None]
    if result["summary"].get("settings_by_hardware"):
        parts.append(settings_table(result["summary"]["settings_by_hardware"]))
    if result["summary"].get("factors_by_hardware"):
        parts.append(drift_table(result["summary"]["factors_by_hardware"]))
    if "moe" in result:  # out of sample: the efficiency factors were fitted on the dense runs above
        moe = result["moe"]
        title = "Mixture-of-experts runs, out of sample (fitted on the dense runs above)"
        parts += [_runs_table(moe, title), summary_table(moe["summary"]), assumptions_text(moe)]
        parts += [t for t in (replicates_text(moe["summary"], "MoE runs"),) if t is not None]
    return Group(*parts)


def measured_text(value: float) -> str:
    """A published or predicted value: 4 significant digits, a value from 1,000 up whole with thousands
    separators (tokens/s per GPU read "2.17e+04" for 21,700: ux13's newcomer pass)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _runs_table(result: dict, title: str) -> FittedTable:
    columns = [
        # the longest ids wrap at their hyphens; a value is shown only with its metric (predicted goes first)
        Column("run", lambda r: r["id"], KEEP, "left", wrap=True, breaks="-", min_width=44),
        Column("metric", lambda r: r["metric"], 1, "left", wrap=True),
        Column("published", lambda r: measured_text(r["published"]), 3),
        Column("predicted", lambda r: measured_text(r["predicted"]), 2),
        Column(
            "error",
            lambda r: Text(
                f"{r['error_pct']:+.1f}%",
                style="green" if abs(r["error_pct"]) <= 5 else "yellow" if abs(r["error_pct"]) <= 12 else "red",
            ),
            KEEP,
        ),
    ]
    if any("regret" in r for r in result["runs"]):
        columns += [Column("best faster (same rc/SP)", _regret, 2), Column("best plan", _best_plan, 4, "left")]
    return FittedTable(columns, result["runs"], title)


def summary_table(summary: dict) -> Group:
    parts = []
    for title, key in (
        ("Absolute error by source", "by_source"),
        (
            "Absolute error by hardware: runs whose whole configuration is published (fitted, or NVFP4's rows, out "
            "of the dense fit), or whose unpublished knobs are searched (the best plan consistent with the published "
            "settings)",
            "by_hardware",
        ),
        ("Absolute error by GPU generation: the same runs", "by_generation"),
        (
            "Absolute error by GPU generation: only the fitted runs (whole plan published; the presets' dense bands)",
            "by_generation_published",
        ),
        (
            "Absolute error by hardware: runs reported apart (an assumed setting, superseded software, unpriced path)",
            "by_hardware_assumed",
        ),
        ("Absolute error by model: runs in the bar (not superseded or regressed software)", "by_model"),
    ):
        if not summary.get(key) or (key == "by_generation_published" and summary[key] == summary.get("by_generation")):
            continue  # the published-plan table only where searched rows make it differ
        table = Table(title=title, title_justify="left")
        for col, just in ((key.split("_")[1], "left"), ("rows", "right"), ("median", "right"), ("max", "right")):
            table.add_column(col, justify=just)
        for name, st in summary.get(key, {}).items():
            table.add_row(
                name, str(st["runs"]), f"{st['median_abs_error_pct']:.1f}%", f"{st['max_abs_error_pct']:.1f}%"
            )
        total = {"by_source": ("all", summary), "by_model": ("in the bar", summary.get("in_bar"))}.get(key)
        if total and total[1]:
            label, st = total
            table.add_row(
                Text(label, style="bold"),
                str(st["runs"]),
                f"{st['median_abs_error_pct']:.1f}%",
                f"{st['max_abs_error_pct']:.1f}%",
            )
        parts.append(table)
    return Group(*parts)


def assumptions_text(result: dict) -> Hanging:
    """The assumptions under the runs, one item a line; an item wider than the terminal goes on under its text, not
    at column 0 ("... (its config) [2\nruns]" at 80 columns, qa21)."""
    seen: dict[str, list[str]] = {}
    for r in result["runs"]:
        for a in r["assumptions"]:
            seen.setdefault(a, []).append(r["id"].split(":")[0])
    lines = ["Assumptions:"] + [
        f"  - {a} [{counted(len(set(ids)), 'run').replace(' ', NBSP)}]" for a, ids in seen.items()
    ]
    return Hanging(Text("\n".join(lines)), indent=4)


def _band(band) -> str:
    return f"{band[0]:.4g}–{band[1]:.4g}"


def _value(x: float) -> str:
    return "0" if abs(x) < 5e-5 else f"{x:.4g}"


def factors_table(name: str, fit: dict) -> Group:
    """One preset's factors: value ± σ, band, and whether the runs identify it (why not, below)."""
    title = f"{name}: {counted(fit['runs'], 'run')}, rms log error {fit['rms_log_error']:.3f}"
    if fit.get("prediction_sigma"):
        title += f", the factors' σ on a prediction {100 * fit['prediction_sigma']:.1f} %"
    table = Table(title=title, title_justify="left")
    for col, just in (("factor", "left"), ("value", "right"), ("± σ", "right"), ("band", "right"), ("status", "left")):
        # names never truncate: a factor name is what the user looks up in the preset
        table.add_column(col, justify=just, no_wrap=col != "status", min_width=22 if col == "factor" else None)
    notes = []
    for factor, f in fit["factors"].items():
        status = f["status"] + (f", at its {f['at_bound']} bound" if f.get("at_bound") else "")
        if f.get("informed") is not None and f["status"] == "fitted":
            status += f", {f['informed']:.0%} from the runs, the rest from its kernel prior"
        if f.get("at_bound") == "lower" and f["band"][0] == 0:
            status += " (0, the physical floor)"
        if f["why"]:
            notes.append((f"  ({len(notes) + 1})", f"{factor}: {f['why']}"))
            status += f" ({len(notes)})"
        sigma = _value(f["sigma"]) if f.get("sigma") is not None else "—"
        table.add_row(factor, _value(f["value"]), sigma, _band(f["band"]), status)
    if not notes:
        return Group(table)
    footnotes = Table.grid(padding=(0, 1))  # each note wraps under its own text, not under its number
    footnotes.add_column(no_wrap=True)
    footnotes.add_column()
    for mark, text in notes:
        footnotes.add_row(mark, text)
    return Group(table, footnotes)


def calibration_view(out: dict) -> Group:
    parts: list = [factors_table(name, fit) for name, fit in out["fits"].items()]
    parts.append(summary_table(out["summary"]))
    if out.get("leave_one_source_out"):
        loso = Table(title="Leave one source out: fit without the source, predict it", title_justify="left")
        for col, just in (
            ("hardware", "left"),
            ("held-out source", "left"),
            ("rows", "right"),
            ("median", "right"),
            ("max", "right"),
        ):
            loso.add_column(col, justify=just)
        for hw, by_source in out["leave_one_source_out"].items():
            for src, st in by_source.items():
                loso.add_row(
                    hw, src, str(st["runs"]), f"{st['median_abs_error_pct']:.1f}%", f"{st['max_abs_error_pct']:.1f}%"
                )
        parts.append(loso)
    if out.get("written"):
        parts.append(Text(f"wrote the fitted values into {out['written']}"))
    return Group(*parts)


def log_calibration_view(out: dict) -> Group:
    """Your runs against the prediction before and after the fit, and the factors refitted."""
    runs = Table(title=f"Your runs on {out['hardware']}: steady iteration time", title_justify="left")
    for col, just in (("log", "left"), ("measured", "right"), ("before", "right"), ("after", "right")):
        runs.add_column(col, justify=just)
    for r in out["runs"]:
        before, after = r["before_s"] / r["measured_s"] - 1, r["after_s"] / r["measured_s"] - 1
        runs.add_row(
            r["log"],
            f"{r['measured_s']:.3f} s",
            f"{r['before_s']:.3f} s ({before:+.1%})",
            f"{r['after_s']:.3f} s ({after:+.1%})",
        )
    wrote = f"wrote {out['output']}: use it as --hardware {out['output']}" if out["output"] else "nothing written"
    return Group(runs, factors_table("refitted", out["fit"]), Text(wrote))


def _phi_line(name: str, pf: dict) -> Text:
    """φ's line: solved on its A/B, or why it is not identifiable."""
    if pf["sigma"] is None:
        return Text(f"{name}: persistent_gemm_comm_share {pf['status']} ({pf['why']}), kept at {pf['value']:.3f}")
    return Text(
        f"{name}: persistent_gemm_comm_share = {pf['value']:.3f} ± {pf['sigma']:.3f} (band {_band(pf['band'])}), "
        f"solved on the Model Zoo A/B: x{pf['gain_predicted']:.3f} predicted, x{pf['gain_measured']:.3f} measured"
    )


def moe_calibration_view(out: dict) -> Group:
    """``megaplan calibrate --moe``: the factor ± σ, the MoE rows with it, each family held out."""
    f = Text(
        f"{out['factor']} = {out['value']:.2f} ± {out['sigma']:.2f} µs (band {_band(out['band'])}), "
        f"fitted on {out['runs']} MoE rows in the bar, rms log error {out['rms_log_error']:.3f}"
    )
    parts: list = [f]
    if out.get("pooling_text"):
        parts.append(Text(out["pooling_text"]))
    parts += [factors_table(f"{name}, the expert all-to-all", fa) for name, fa in out.get("a2a", {}).items()]
    parts += [_phi_line(name, pf) for name, pf in out.get("phi", {}).items()]
    parts.append(summary_table(out["validation"]))
    if out.get("leave_one_model_out"):
        table = Table(title="Leave one model out: fit without the family, predict it", title_justify="left")
        for col, just in (
            ("held-out model", "left"),
            ("pooled", "left"),
            ("fit", "right"),
            ("rows", "right"),
            ("median", "right"),
            ("max", "right"),
        ):
            table.add_column(col, justify=just)
        for model, st in out["leave_one_model_out"].items():
            table.add_row(
                model,
                "yes" if st.get("pooled", True) else "no: predicted",
                f"{st['value']:.2f} ± {st['sigma']:.2f}",
                str(st["runs"]),
                f"{st['median_abs_error_pct']:.1f}%",
                f"{st['max_abs_error_pct']:.1f}%",
            )
        parts.append(table)
    if out.get("written"):
        also = " and a2a_network_efficiency" if out.get("a2a") else ""
        also += ", persistent_gemm_comm_share" if out.get("phi") else ""
        parts.append(Text(f"wrote {out['factor']}{also} into {out['written']}"))
    return Group(*parts)


def nvfp4_calibration_view(out: dict) -> Group:
    """``megaplan calibrate --nvfp4``: GB200's NVFP4 GEMM ratio ± σ, each model held out, the NVFP4 rows before
    and after."""
    status = out["status"] + (f", at its {out['at_bound']} bound" if out.get("at_bound") else "")
    why = f" ({out['why']})" if out.get("why") else ""
    sigma = f" ± {out['sigma']:.3f}" if out.get("sigma") is not None else ""
    parts: list = [
        Text(
            f"{out['factor']} = {out['value']:.3f}{sigma} on {out['preset']} (band {_band(out['band'])}), "
            f"{status}{why}, on {out['runs']} NVFP4 rows, rms log error {out['rms_log_error']:.3f}"
        )
    ]
    if out.get("leave_one_model_out"):
        held = ", ".join(f"without {m} {v:.3f}" for m, v in out["leave_one_model_out"].items())
        parts.append(Text(f"leave one model out: {held}"))
    for name, b in (out.get("bands") or {}).items():
        whence = f"carried over from {b['carried_from']}'s" if b.get("carried_from") else "its"
        how = "each predicted with its model left out of the fit" if b["bearing"] == "fitted" else "out of sample"
        parts.append(
            Text(
                f"NVFP4 band of {name}: {whence} {b['rows']} rows ({b['bearing']}, {how}): RMS log error "
                f"{b['rms_log_error']:.3f}, largest {b['max_abs_log_error']:.3f}"
            )
        )
    table = Table(title="NVFP4 rows: error before (shipped) and after (this fit)", title_justify="left")
    for col, just in (("run", "left"), ("before", "right"), ("after", "right")):
        table.add_column(col, justify=just, overflow="fold")
    for rid, e in out["errors_pct"].items():
        table.add_row(rid, f"{e['before']:+.1f}%", f"{e['after']:+.1f}%")
    parts.append(table)
    if out.get("written"):
        parts.append(
            Text(
                f"wrote {out['factor']} into {out['written']} ({out['preset']}, carried to dgx-b200-superpod) and the "
                "NVFP4 bands into their accuracy sections"
            )
        )
    return Group(*parts)


def _claim_cell(r: dict) -> Text:
    g = r["claimed_gain_pct"]
    style = "green" if g <= 5 else "yellow" if g <= 10 or r["rank1_validated"] else "red"
    return Text(f"{g:+.1f}%", style=style)


def _best_cell(r: dict) -> str:
    """The same setup's fastest published throughput and where (a verification card, or the release of the run's
    id: MB-26.04.01-... → 26.04.01), '=' where that is the recipe itself; the run's id is in --json."""
    if r["best_published_id"] == r["id"]:
        return "="
    rid = r["best_published_id"]
    where = "card" if rid.startswith("MB-CARD-") else rid.split("-")[1]
    return f"{r['best_published_tokens_per_gpu']:,.0f} ({where})"


def _vs_best_cell(r: dict) -> str:
    return "=" if r["best_published_id"] == r["id"] else f"{r['claimed_gain_vs_best_pct']:+.1f}%"


def _evidence_cell(r: dict) -> Text:
    if r["rank1_extrapolated"]:
        return Text("extrapolated: " + ", ".join(r["rank1_extrapolated"]), style="yellow")
    weakest = min(r["rank1_features"], key=lambda f: f["settings"])
    n = r["rank1_settings"]
    return Text(f"validated: {n} setting{'s' if n != 1 else ''} (fewest: {weakest['feature']})")


def choice_view(result: dict) -> Group:
    """What search's rank 1 claims over each tuned recipe's published throughput, and on what evidence."""
    columns = [
        Column("recipe", lambda r: r["id"], KEEP, "left", wrap=True, breaks="-", min_width=24),
        Column("published", lambda r: f"{r['published_tokens_per_gpu']:,.0f}", 3),
        Column("rank 1", lambda r: r["rank1_plan"], 1, "left", wrap=True, min_width=20),
        Column("rank 1 tok/s", lambda r: f"{r['rank1_tokens_per_gpu']:,.0f}", 4),
        Column("claim", _claim_cell, KEEP),
        # added beside the claim, dropped first when the width is short (the columns above keep their places)
        Column("best published", _best_cell, 5),
        Column("vs best", _vs_best_cell, 5),
        Column("± band", lambda r: f"{100 * r['rank1_band_frac']:.1f}%", 4),
        Column("evidence", _evidence_cell, 2, "left", wrap=True),
        Column("recipe pred.", lambda r: f"{r['recipe_error_pct']:+.1f}%", 3),
    ]
    title = "Search's rank 1 against NVIDIA's tuned recipes (tokens/s per GPU; claim = rank 1 / published − 1)"
    table = FittedTable(columns, result["recipes"], title)
    s = result["summary"]
    big = [r["id"] for r in result["recipes"] if r["claimed_gain_pct"] > 10 and r["rank1_validated"]]
    extrapolated = s["max_gain_extrapolated_pct"]
    foot = (
        f"{s['recipes']} recipes: median claim {s['median_gain_pct']:+.1f}%, largest {s['max_gain_pct']:+.1f}%; "
        + (
            f"largest where rank 1 extrapolates {extrapolated:+.1f}%"
            if extrapolated is not None
            else "every rank 1 has published settings behind each feature"
        )
        + f". Target: median ≤ 5 %, max ≤ 10 % unless every feature of rank 1 is validated: "
        f"{'met' if s['meets_target'] else 'NOT met: ' + ', '.join(s['over_target'])}."
        + (f" Claims above 10 % on validated features: {', '.join(big)}." if big else "")
        + " 'recipe pred.': the model's error on the recipe itself (predicted/published − 1)"
        + (
            f"; net of it (rank 1 over the recipe, both predicted) the median claim is"
            f" {s['median_model_gain_pct']:+.1f}%, the largest {s['max_model_gain_pct']:+.1f}%."
            if s.get("median_model_gain_pct") is not None
            else "."
        )
        + " 'best published': the same model, GPUs, batch, sequence and precision measured faster in another"
        " release or a verification card, 'vs best' rank 1 against it; '=' where the recipe is the best."
    )
    return Group(table, Text(foot, style="dim"))
