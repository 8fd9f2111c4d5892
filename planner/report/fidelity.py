"""Rich renderables for the model's fidelity: validation against published runs and the calibration.
Returned, never printed here."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from planner.plan import plan_label
from planner.report.layout import KEEP, Column, FittedTable


def _regret(r: dict) -> str:
    g = r.get("regret")
    return f"{g['speedup_pct']:+.1f}% ({g['same_recompute_speedup_pct']:+.1f}%)" if g else ""


def _best_plan(r: dict) -> str:
    g = r.get("regret")
    return plan_label(g["best_plan"]) if g else ""


def validation_view(result: dict) -> Group:
    parts = [_runs_table(result, "Predicted vs published (error = predicted/published − 1)")]
    parts += [summary_table(result["summary"]), assumptions_text(result)]
    if "moe" in result:  # out of sample: the efficiency factors were fitted on the dense runs above
        moe = result["moe"]
        title = "Mixture-of-experts runs, out of sample (fitted on the dense runs above)"
        parts += [_runs_table(moe, title), summary_table(moe["summary"]), assumptions_text(moe)]
    return Group(*parts)


def _runs_table(result: dict, title: str) -> FittedTable:
    columns = [
        Column("run", lambda r: r["id"], KEEP, "left", wrap=True),
        Column("metric", lambda r: r["metric"], 1, "left", wrap=True),
        Column("published", lambda r: f"{r['published']:.4g}", 3),
        Column("predicted", lambda r: f"{r['predicted']:.4g}", KEEP),
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


def summary_table(summary: dict) -> Table:
    table = Table(title="Absolute error", title_justify="left")
    for col, just in (("source", "left"), ("rows", "right"), ("median", "right"), ("max", "right")):
        table.add_column(col, justify=just)
    for src, st in summary["by_source"].items():
        table.add_row(src, str(st["runs"]), f"{st['median_abs_error_pct']:.1f}%", f"{st['max_abs_error_pct']:.1f}%")
    table.add_row(
        Text("all", style="bold"),
        str(summary["runs"]),
        f"{summary['median_abs_error_pct']:.1f}%",
        f"{summary['max_abs_error_pct']:.1f}%",
    )
    return table


def assumptions_text(result: dict) -> Text:
    seen: dict[str, list[str]] = {}
    for r in result["runs"]:
        for a in r["assumptions"]:
            seen.setdefault(a, []).append(r["id"].split(":")[0])
    lines = ["Assumptions:"] + [f"  - {a} [{len(set(ids))} runs]" for a, ids in seen.items()]
    return Text("\n".join(lines))


def calibration_view(out: dict) -> Group:
    fits = Table(title="Fitted calibration (hardware preset: value)", title_justify="left")
    fits.add_column("preset")
    fits.add_column("runs", justify="right")
    fits.add_column("rms log error", justify="right")
    fits.add_column("values")
    for name, f in out["fits"].items():
        fits.add_row(
            name,
            str(f["runs"]),
            f"{f['loss'] ** 0.5:.3f}",
            Text(", ".join(f"{k} {v:.4g}" for k, v in f["values"].items())),
        )
    parts = [fits, summary_table(out["summary"])]
    if "leave_one_source_out" in out:
        loso = Table(title="A100 leave-one-source-out: calibrate without the source, predict it", title_justify="left")
        for col in ("held-out source", "rows", "median", "max"):
            loso.add_column(col)
        for src, st in out["leave_one_source_out"].items():
            loso.add_row(src, str(st["runs"]), f"{st['median_abs_error_pct']:.1f}%", f"{st['max_abs_error_pct']:.1f}%")
        parts.append(loso)
    h = out["h100_with_a100_values"]
    parts.append(
        Text(
            f"H100 predicted with the A100 values of {', '.join(h['carried'])} (its own flash-attention and "
            f"layer overhead as preset): median {h['median_abs_error_pct']:.1f}%, max {h['max_abs_error_pct']:.1f}%"
        )
    )
    if out.get("written"):
        parts.append(Text(f"wrote the fitted values into {out['written']}"))
    return Group(*parts)
