"""Rich renderables for the whole run: scaling sweep, smallest cluster, plan comparison, and
the time-and-cost lines of a plan. Returned, never printed here."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from planner.fidelity.published import published_text
from planner.plan import plan_label_legend
from planner.report.layout import CSV_TOO, KEEP, Column, FittedTable, plan_text, tokens_text
from planner.report.memory import evidence_text
from planner.report.wrap import Hanging, command_words

BETTER, WORSE, CHANGED = "bold green", "bold red", "bold yellow"


def _efficiency(r: dict) -> Text:
    eff = r["scaling_efficiency"]
    if eff is None:
        return Text("")
    return Text(f"{100 * eff:.0f}%", style="green" if eff >= 0.9 else "yellow" if eff >= 0.7 else "red")


def _sweep_est(key: str, fmt: str, scale: float = 1.0):
    return lambda r: format(scale * r["plan"]["estimate"][key], fmt) if r["plan"] else ""


def sweep_columns(result: dict) -> list[Column]:
    """The sweep table's columns, most important first (priority 0 is never dropped)."""
    cols = [
        Column("GPUs", lambda r: f"{r['gpus']:,}", KEEP),
        Column(
            "best plan",
            lambda r: plan_text(r["plan"]) if r["plan"] else Text(f"no plan: {r['no_plan']}", style="red"),
            KEEP,
            "left",
            wrap_priority=3,  # a long label wraps before iteration time, MFU and scaling go
        ),
        Column("iter s", _sweep_est("iteration_s", ".2f"), 2),
        Column("tokens/s", _sweep_est("tokens_per_s", ",.0f"), 1),
        Column("TFLOP/s", _sweep_est("tflops_per_gpu", ".0f"), 4),
        Column("MFU", lambda r: _sweep_est("mfu", ".1f", 100)(r) + ("%" if r["plan"] else ""), 2),
        Column("cMFU", lambda r: _sweep_est("mfu_causal", ".1f", 100)(r) + ("%" if r["plan"] else ""), 4),
        Column("scaling", _efficiency, 1),
        Column(f"days ({tokens_text(result['train_tokens'])})", _sweep_est("train_days", ",.1f"), 3),
        Column("GPU-hours", _sweep_est("gpu_hours", ",.0f"), 5),
    ]
    if any(r["plan"] and r["plan"]["estimate"].get("cost") is not None for r in result["rows"]):
        cols.append(Column("cost", _sweep_est("cost", ",.0f"), 5))
    if any(r["plan"] and r["plan"].get("published") for r in result["rows"]):  # sizes NVIDIA (or MLPerf) measured
        cols.append(Column("published", _published_cell, 4))
    return cols


def _published_cell(r: dict) -> str:
    """The fastest published tokens/s per GPU of the size's setup, and #1's estimate against it ("5,993 (+24.5 %)")."""
    pub = r["plan"].get("published") if r["plan"] else None
    return f"{pub['fastest_tokens_per_gpu']:,.0f} ({pub['claim_pct']:+.1f} %)" if pub else ""


def _labels(rows: list[dict]) -> str:
    """The plan labels of a table's rows, for the legend of the codes they use (the whole legend named FSDP,
    MoE dispatchers and layouts under plans with none of them: ux13)."""
    return " ".join(plan_text(r["plan"]) for r in rows if r.get("plan"))


def sweep_view(result: dict, title: str) -> Group:
    failed = [r for r in result["rows"] if not r["plan"]]
    rows = [r for r in result["rows"] if r["plan"]]
    foot = [
        f"scaling = tokens/s per GPU relative to {result['baseline_gpus']:,} GPUs; each size is its own search, "
        f"its #1 shown (ranked as search ranks: what published runs support first, not the fastest estimate); "
        f"TFLOP/s and MFU count model FLOPs, attention over the whole s² (cMFU: causal "
        f"attention halved, Megatron-LM's and Megatron-Bridge's MFU). {plan_label_legend(_labels(rows))}."
    ]
    if any(r["plan"].get("published") for r in rows):
        foot.append(
            "published = the fastest published tokens/s per GPU of that size's setup (model, GPUs, batch, sequence, "
            "precision) and #1's estimate against it; explain names the run and its plan"
        )
    foot += [f"{r['gpus']:,} GPUs: no plan: {r['no_plan']}" for r in failed]
    return Group(FittedTable(sweep_columns(result), rows, title, elsewhere=CSV_TOO), Text("\n".join(foot), style="dim"))


def fit_columns_spec(fit: dict) -> list[Column]:
    base = fit["sizes"][0]["plan"]["estimate"]["tokens_per_s"]
    gpn = fit.get("gpus_per_node") or 1
    smallest = fit["sizes"][0]["gpus"]
    capacity = fit["sizes"][0]["plan"]["estimate"]["capacity_gib"]  # what a plan may fill, as search's GiB/72.8
    return [
        Column("GPUs", lambda s: Text(f"{s['gpus']:,}", style="bold green" if s["gpus"] == smallest else ""), KEEP),
        Column("nodes", lambda s: f"{s['gpus'] / gpn:g}", 3),
        Column("best plan", lambda s: plan_text(s["plan"]), KEEP, "left", wrap_priority=3),  # search's #1
        Column(f"GiB/{capacity:.1f}", lambda s: f"{s['plan']['estimate']['peak_memory_gib']:.1f}", 1),
        Column("iter s", lambda s: f"{s['plan']['estimate']['iteration_s']:.2f}", 2),
        Column("tokens/s", lambda s: f"{s['plan']['estimate']['tokens_per_s']:,.0f}", 2),
        Column("MFU", lambda s: f"{100 * s['plan']['estimate']['mfu']:.1f}%", 1),
        Column("cMFU", lambda s: f"{100 * s['plan']['estimate']['mfu_causal']:.1f}%", 4),
        Column("days", lambda s: f"{s['plan']['estimate']['train_days']:,.1f}", 4),
        Column("speed", lambda s: f"×{s['plan']['estimate']['tokens_per_s'] / base:.2f}", 3),
    ]


def fit_view(fit: dict, title: str) -> Group:
    first = fit["sizes"][0]
    lines = [
        f"smallest: {first['gpus']:,} GPUs (lower bound from weights, gradients and optimizer states alone: "
        f"{fit['lower_bound_gpus']:,}); the next rows are the next node counts with a plan, each search's #1 there "
        f"(what published runs support first, as search ranks); speed is tokens/s relative to the smallest. "
        f"{plan_label_legend(_labels(fit['sizes']))}."
    ]
    # why each size below it has no plan, continued under its text (it went on at column 0, qa21)
    tried = [f"  {int(n):,} GPUs: {why}" for n, why in list(fit["tried"].items())[-3:]]
    command = first["plan"].get("commands", {}).get("explain")
    last = []
    if command:  # held whole, or continued with " \\" where it does not fit: a pasted line ran alone (ux15)
        last.append(f"explain the smallest: {command_words(command)}")
    table = FittedTable(fit_columns_spec(fit), fit["sizes"], title, elsewhere=CSV_TOO)
    parts = [Hanging(Text("\n".join(lines), style="dim"), indent=0)]
    parts += [Hanging(Text("\n".join(tried), style="dim"), indent=4)] if tried else []
    parts += [Hanging(Text("\n".join(last), style="dim"), indent=0)] if last else []
    return Group(table, *parts)


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


def _delta(r: dict) -> str:
    if r["delta"] is None or not r["differs"]:
        return ""
    if r["unit"] == "frac":
        return f"{100 * r['delta']:+.1f} pt"
    return f"{r['delta']:+,.0f}" if abs(r["delta"]) >= 1000 else f"{r['delta']:+.3g}"


def _side(r: dict, side: str) -> Text:
    other = "b" if side == "a" else "a"
    style = BETTER if r["better"] == side else WORSE if r["better"] == other else CHANGED if r["differs"] else ""
    return Text(_value(r[side], r["unit"]), style=style)


def _applies(name: str, pjs: tuple[dict, dict]) -> bool:
    """Whether a plan field means anything for either plan: a dense comparison listed "etp 8",
    "moe_token_dispatcher allgather", "fsdp_sharding optim_grads_params" and "recompute_method uniform" (ux15)."""
    par = [pj["parallel"] for pj in pjs]
    moe = any((pj.get("model_spec") or {}).get("num_experts") for pj in pjs)
    sharded = any(p.get("distributed_optimizer") or p.get("fsdp") for p in par)
    return {
        "ep": moe,
        "etp": moe,
        "moe_token_dispatcher": moe,
        "overlap_moe_expert_parallel_comm": moe,
        "fsdp_sharding": any(p.get("fsdp") for p in par),
        "fsdp_outer_sharding": any(p.get("fsdp") for p in par),
        "distributed_optimizer_instances": sharded,
        "overlap_param_gather": sharded,
        "recompute_method": any(p.get("recompute") == "full" for p in par),
        "tp_comm_overlap": any(p.get("sequence_parallel") for p in par),
    }.get(name, True)


SHARED_IN_HEAD = ("model", "hardware")  # the plans' heading lines name them


def _left_out(r: dict, pjs: tuple[dict, dict]) -> bool:
    """A row the table leaves out (--json keeps every row): the same on both sides and None, a plan field that
    applies to neither plan (even when its values differ: a dense plan's etp follows its tp), or a memory or time
    term that is zero in both."""
    if r["section"] == "plan" and not _applies(r["name"], pjs):
        return True
    if r["section"] == "plan" and r["name"] in SHARED_IN_HEAD and not r["differs"]:
        return True  # said in the heading: as wide as "dgx-a100-40gb-superpod", it pushed B − A out at 80 columns
    if r["differs"]:
        return False
    if r["a"] is None:
        return True
    return r["section"] in ("memory", "time") and r["a"] == 0


def compare_view(cmp: dict, names: tuple[str, str] = ("A", "B")) -> Group:
    rows, section = [], None
    for r in (r for r in cmp["rows"] if not _left_out(r, (cmp["a"], cmp["b"]))):
        rows.append({**r, "head": r["section"] if r["section"] != section else ""})
        section = r["section"]
    a, b = names
    columns = [
        Column("section", lambda r: Text(r["head"], style="bold"), 3, "left"),
        Column(
            "quantity", lambda r: r["name"] + (f" ({r['unit']})" if r["unit"] not in ("", "frac") else ""), KEEP, "left"
        ),
        Column(a, lambda r: _side(r, "a"), KEEP),
        Column(b, lambda r: _side(r, "b"), KEEP),
        Column(f"{b} − {a}", _delta, 1),
        Column(f"{b} / {a}", lambda r: "" if r["ratio"] is None or not r["differs"] else f"×{r['ratio']:.3f}", 2),
    ]
    s = cmp["summary"]
    verdict = (
        "the same iteration time"
        if s["faster"] is None
        else f"{b if s['faster'] == 'b' else a} is faster: {b} runs at ×{s['speedup_b_over_a']:.3f} the speed of {a}"
    )
    bands = [pj["estimate"].get("iteration_s_band") for pj in (cmp["a"], cmp["b"])]
    if s["faster"] is not None and all(bands) and max(bands[0][0], bands[1][0]) <= min(bands[0][1], bands[1][1]):
        # ×0.999 read as a winner (qa21): search marks such plans tied (=), their bands overlapping
        verdict += "; tied within the model's error (the iteration bands overlap, as search's = marks)"
    misfits = [n for n, pj in ((a, cmp["a"]), (b, cmp["b"])) if not pj["estimate"]["fits_without_headroom"]]
    if misfits:
        verdict += f"; {' and '.join(misfits)} {'do' if len(misfits) > 1 else 'does'} not fit in memory (below)"
    head = Text(verdict + "\n", style="bold")
    for name, pj in ((a, cmp["a"]), (b, cmp["b"])):
        head.append(f"{name}: ", "bold")
        head.append(f"{plan_text(pj)} ({pj['model']}, {pj['gpus']:,} GPUs of {pj['hardware']})\n")
        head.append("   ")
        head.append_text(fit_line(pj["estimate"]))
        head.append(f" · {pj['estimate']['iteration_s']:.2f} s/iteration\n")
        runs = evidence_text(pj)  # what the published runs say of it, as explain's runs line
        if runs.plain:
            head.append("   runs ")
            head.append_text(runs)
            head.append("\n")
        if pj.get("published"):  # the setup's published runs, and this plan against the fastest (explain's setup line)
            head.append(f"   setup {published_text(pj['published'], name)}\n")
    head.append(
        "green: better on that line, red: worse; yellow: a plan field that differs; left out: what applies to "
        "neither plan or is 0 in both (--json has every row)",
        "dim",
    )
    return Group(Hanging(head, indent=3), FittedTable(columns, rows, elsewhere=CSV_TOO))


def fit_line(est: dict) -> Text:
    """FITS / TIGHT / DOES NOT FIT with the most loaded GPU's memory against what a plan may fill."""
    cap, peak = est["capacity_gib"], est["peak_memory_gib"]
    if est["fits"]:
        return Text.assemble(("FITS ", "bold green"), f"{peak:.1f} of {cap:.1f} GiB per GPU, {cap - peak:.1f} GiB free")
    if est.get("fits_without_headroom"):
        return Text.assemble(("TIGHT ", "bold yellow"), f"{peak:.1f} GiB per GPU, over the {cap:.1f} GiB headroom line")
    return Text.assemble(
        ("DOES NOT FIT ", "bold red"), f"needs {peak:.1f} GiB per GPU, {peak - cap:.1f} GiB more than {cap:.1f}"
    )


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
