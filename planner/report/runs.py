"""Rich renderables for the whole run: scaling sweep, smallest cluster, plan comparison, and
the time-and-cost lines of a plan. Returned, never printed here."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

BETTER, WORSE, CHANGED = "bold green", "bold red", "bold yellow"


def plan_cell(pj: dict) -> str:
    par = pj["parallel"]
    return (
        f"TP {par['tp']} PP {par['pp']} DP {par['dp']} b {par['micro_batch']} VPP {par['vpp']} "
        f"{par['recompute']}{' SP' if par['sequence_parallel'] else ''}{' DO' if par['distributed_optimizer'] else ''}"
    )


def tokens_text(tokens: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if tokens >= scale:
            return f"{tokens / scale:g}{suffix}"
    return f"{tokens:g}"


def sweep_view(result: dict, title: str) -> Group:
    table = Table(title=title, title_justify="left")
    cols = (
        "GPUs",
        "best plan",
        "iter s",
        "tokens/s",
        "TFLOP/s/GPU",
        "MFU",
        "scaling eff.",
        f"days ({tokens_text(result['train_tokens'])} tok)",
        "GPU-hours",
    )
    for c in cols:
        table.add_column(c, justify="left" if c == "best plan" else "right", no_wrap=c != "best plan")
    has_cost = any(r["plan"] and r["plan"]["estimate"].get("cost") is not None for r in result["rows"])
    if has_cost:
        table.add_column("cost", justify="right")
    for r in result["rows"]:
        if not r["plan"]:
            table.add_row(
                f"{r['gpus']:,}", Text(f"no plan: {r['no_plan']}", style="red"), *[""] * (len(cols) - 2 + has_cost)
            )
            continue
        est = r["plan"]["estimate"]
        eff = r["scaling_efficiency"]
        row = [
            f"{r['gpus']:,}",
            plan_cell(r["plan"]),
            f"{est['iteration_s']:.2f}",
            f"{est['tokens_per_s']:,.0f}",
            f"{est['tflops_per_gpu']:.0f}",
            f"{100 * est['mfu']:.1f}%",
            Text(f"{100 * eff:.0f}%", style="green" if eff >= 0.9 else "yellow" if eff >= 0.7 else "red"),
            f"{est['train_days']:,.1f}",
            f"{est['gpu_hours']:,.0f}",
        ]
        if has_cost:
            row.append(f"{est['cost']:,.0f}")
        table.add_row(*row)
    foot = Text(
        f"scaling efficiency = tokens/s per GPU relative to {result['baseline_gpus']:,} GPUs; each size is its own "
        "search (fastest plan that fits); TFLOP/s and MFU count model FLOPs. DO = distributed optimizer."
    )
    return Group(table, foot)


def fit_view(fit: dict, title: str) -> Group:
    table = Table(title=title, title_justify="left")
    for c in (
        "GPUs",
        "nodes",
        "fastest plan that fits",
        "peak GiB",
        "iter s",
        "tokens/s",
        "MFU",
        "days",
        "vs smallest",
    ):
        table.add_column(c, justify="left" if c.startswith("fastest") else "right")
    first = fit["sizes"][0]
    base = first["plan"]["estimate"]["tokens_per_s"]
    gpn = fit.get("gpus_per_node") or 1
    for k, s in enumerate(fit["sizes"]):
        est = s["plan"]["estimate"]
        table.add_row(
            Text(f"{s['gpus']:,}", style="bold green" if k == 0 else ""),
            f"{s['gpus'] / gpn:g}",
            plan_cell(s["plan"]),
            f"{est['peak_memory_gib']:.1f}/{est['capacity_gib']:.0f}",
            f"{est['iteration_s']:.2f}",
            f"{est['tokens_per_s']:,.0f}",
            f"{100 * est['mfu']:.1f}%",
            f"{est['train_days']:,.1f}",
            f"×{est['tokens_per_s'] / base:.2f}",
        )
    lines = [
        f"smallest: {first['gpus']:,} GPUs (lower bound from weights, gradients and optimizer states alone: "
        f"{fit['lower_bound_gpus']:,}); the next rows are the next node counts with a plan"
    ]
    for n, why in list(fit["tried"].items())[-3:]:
        lines.append(f"  {int(n):,} GPUs: {why}")
    return Group(table, Text("\n".join(lines)))


def _value(v, unit: str) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, str):
        return v
    if unit == "frac":
        return f"{100 * v:.1f}%"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}" if unit in ("", "MWh") else f"{v:.3f}"


def compare_view(cmp: dict, names: tuple[str, str] = ("A", "B")) -> Group:
    table = Table(
        title=f"{names[0]} vs {names[1]} (green: better on that line, red: worse; yellow: a plan field that differs)",
        title_justify="left",
    )
    for c, just in (
        ("", "left"),
        ("quantity", "left"),
        (names[0], "right"),
        (names[1], "right"),
        ("B − A", "right"),
        ("B / A", "right"),
    ):
        table.add_column(c if c != "B − A" else f"{names[1]} − {names[0]}", justify=just)
    section = None
    for r in cmp["rows"]:
        if r["a"] is None and r["b"] is None:
            continue
        head = r["section"] if r["section"] != section else ""
        section = r["section"]
        style_b = BETTER if r["better"] == "b" else WORSE if r["better"] == "a" else CHANGED if r["differs"] else ""
        style_a = BETTER if r["better"] == "a" else WORSE if r["better"] == "b" else CHANGED if r["differs"] else ""
        unit = f" ({r['unit']})" if r["unit"] not in ("", "frac") else ""
        delta = (
            ""
            if r["delta"] is None or not r["differs"]
            else (
                f"{100 * r['delta']:+.1f} pt"
                if r["unit"] == "frac"
                else f"{r['delta']:+,.0f}"
                if abs(r["delta"]) >= 1000
                else f"{r['delta']:+.3g}"
            )
        )
        ratio = "" if r["ratio"] is None or not r["differs"] else f"×{r['ratio']:.3f}"
        table.add_row(
            Text(head, style="bold"),
            r["name"] + unit,
            Text(_value(r["a"], r["unit"]), style=style_a),
            Text(_value(r["b"], r["unit"]), style=style_b),
            delta,
            ratio,
        )
    s = cmp["summary"]
    verdict = (
        "the same iteration time"
        if s["faster"] is None
        else f"{names[1] if s['faster'] == 'b' else names[0]} is faster: "
        f"{names[1]} runs at ×{s['speedup_b_over_a']:.3f} the speed of {names[0]}"
    )
    return Group(table, Text(verdict, style="bold"))


def cost_rows(est: dict) -> list[tuple[str, str, str]]:
    """(metric, value, meaning) rows of explain's throughput table: days, GPU-hours, cost, energy."""
    rows = [
        (
            "days to train",
            f"{est['train_days']:,.1f}",
            f"{tokens_text(est['train_tokens'])} tokens ÷ tokens/s (--tokens)",
        ),
        ("GPU-hours", f"{est['gpu_hours']:,.0f}", "GPUs × training hours"),
    ]
    if est.get("cost") is not None:
        rows.append(("cost", f"{est['cost']:,.0f}", f"GPU-hours × {est['gpu_hour_price']:g} (--gpu-hour-price)"))
    if est.get("energy_mwh") is not None:
        rows.append(
            ("energy (MWh)", f"{est['energy_mwh']:,.0f}", "GPU-hours × TDP: GPUs only (no CPUs, network, cooling)")
        )
    return rows
