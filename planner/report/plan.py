"""Rich renderables for explain and search; they are returned, never printed here."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from planner.costs.estimate import MEMORY_TERMS, TIME_TERMS

MAX_STAGE_ROWS = 8


def plan_line(pj: dict) -> str:
    par, opt, tr = pj["parallel"], pj["options"], pj["training"]
    extra = (f" · CP {par['cp']}" if par["cp"] > 1 else "") + (
        f" · EP {par['ep']} · ETP {par['etp']}" if par["ep"] > 1 else ""
    )
    optimizer = (
        "Megatron FSDP"
        if par.get("fsdp")
        else f"distributed optimizer {'on' if par['distributed_optimizer'] else 'off'}"
    )
    fp8 = f" (FP8 {opt['fp8']} GEMMs)" if opt.get("fp8") else ""
    return (
        f"TP {par['tp']} · PP {par['pp']} · DP {par['dp']}{extra} · VPP {par['vpp']} · "
        f"micro-batch {par['micro_batch']} "
        f"(m = {pj['estimate']['num_microbatches']:g}) · SP {'on' if par['sequence_parallel'] else 'off'} · "
        f"recompute {par['recompute']} · {optimizer} · {tr['precision']}{fp8} · {opt['attention_kernel']} attention"
    )


def explain_view(pj: dict) -> Group:
    est = pj["estimate"]
    head = Text.assemble(
        (f"{pj['model']}", "bold"),
        f" on {pj['gpus']} GPUs of {pj['hardware']}, global batch {pj['training']['global_batch']} "
        f"× seq {pj['training']['seq_len']}\n",
        plan_line(pj),
        "\n",
        (
            "Megatron-LM rules: all hold"
            if pj["legal"]
            else "Megatron-LM rules broken: " + "; ".join(pj["broken_rules"]),
            "green" if pj["legal"] else "red",
        ),
        "\nstage layers: ",
        ", ".join(str(n) for n in pj["parallel"]["stage_layers"]),
    )
    parts = [head, Text(""), memory_stage_table(pj), memory_terms_table(pj)]
    if "fit_suggestions" in pj:
        parts.append(fit_suggestions_view(pj))
    return Group(*parts, time_table(pj), metrics_table(est))


def fit_suggestions_view(pj: dict) -> Text:
    est = pj["estimate"]
    over = est["peak_memory_gib"] - est["capacity_gib"]
    lines = [
        f"Does not fit: stage {est['peak_stage']} needs {est['peak_memory_gib']:.2f} GiB, "
        f"{over:.2f} GiB more than {est['capacity_gib']:.1f}."
    ]
    if pj["fit_suggestions"]:
        lines.append("One change that makes it fit (fastest first):")
        for sug in pj["fit_suggestions"]:
            lines.append(
                f"  {sug['change']:<28} {sug['peak_memory_gib']:6.2f} GiB  {sug['iteration_s']:.3f} s/iteration  "
                f"MFU {100 * sug['mfu']:.1f}% (now {est['iteration_s']:.3f} s)"
            )
    else:
        lines.append(
            "No single change of recompute, SP, distributed optimizer, micro-batch, VPP, stage split or CP fits it; "
            "try `megaplan search` with these GPUs."
        )
    return Text("\n".join(lines), style="yellow")


def memory_stage_table(pj: dict) -> Table:
    est = pj["estimate"]
    cap = est["capacity_gib"]
    table = Table(
        title=f"Memory per GPU by pipeline stage (GiB; capacity {cap:.1f}), most loaded first", title_justify="left"
    )
    short = {"gradients": "grads", "optimizer": "optim", "activations": "activ"}
    for col in ("stage", "layers", *(short.get(k, k) for k in MEMORY_TERMS), "total", "free"):
        table.add_column(col, justify="right", no_wrap=True, min_width=len(col))
    stages = pj.get("stages", [])
    for st in stages[:MAX_STAGE_ROWS]:
        room = cap - st["total"]
        table.add_row(
            str(st["stage"]),
            str(st["layers"]),
            *(f"{st[k]:.2f}" for k in MEMORY_TERMS),
            f"{st['total']:.2f}",
            Text(f"{room:+.2f}", style="green" if room >= 0 else "red"),
        )
    if len(stages) > MAX_STAGE_ROWS:
        rest = stages[MAX_STAGE_ROWS:]
        table.add_row("…", f"{len(rest)} more", *[""] * len(MEMORY_TERMS), f"≤ {max(s['total'] for s in rest):.2f}", "")
    return table


def memory_terms_table(pj: dict) -> Table:
    est = pj["estimate"]
    table = Table(title=f"Most loaded GPU (stage {est['peak_stage']}): where the bytes go", title_justify="left")
    for col, just in (("term", "left"), ("GiB", "right"), ("formula", "left"), ("source", "left")):
        table.add_column(col, justify=just, overflow="fold")
    for k in MEMORY_TERMS:
        formula, source = _formula(est, "memory", k)
        table.add_row(k, f"{est['memory'][k]:.2f}", Text(formula), Text(source))
    verdict = "fits" if est["fits"] else f"does NOT fit: {est['peak_memory_gib'] - est['capacity_gib']:.2f} GiB over"
    table.add_row(
        Text("total", style="bold"),
        Text(f"{est['peak_memory_gib']:.2f}", style="bold"),
        Text(f"of {est['capacity_gib']:.1f} GiB: {verdict}"),
        "",
    )
    return table


def _formula(est: dict, kind: str, term: str) -> tuple[str, str]:
    """A term's formula and source as the cost module that computed it wrote them."""
    f = est.get("formulas", {}).get(kind, {}).get(term)
    return (f["formula"], f["source"]) if f else ("", "")


def time_table(pj: dict) -> Table:
    est = pj["estimate"]
    it = est["iteration_s"]
    table = Table(title="Iteration time, term by term", title_justify="left")
    for col, just in (
        ("term", "left"),
        ("seconds", "right"),
        ("share", "right"),
        ("formula", "left"),
        ("source", "left"),
    ):
        table.add_column(col, justify=just, overflow="fold")
    for k in TIME_TERMS:
        formula, source = _formula(est, "time", k)
        v = est["time"][k]
        table.add_row(k, f"{v:.3f}", f"{100 * v / it:.1f}%", Text(formula), Text(source))
    table.add_row(
        Text("iteration", style="bold"), Text(f"{it:.3f}", style="bold"), "100%", "sum of the terms above", ""
    )
    return table


def metrics_table(est: dict) -> Table:
    table = Table(title="Throughput", title_justify="left")
    for col, just in (("metric", "left"), ("value", "right"), ("meaning", "left")):
        table.add_column(col, justify=just)
    table.add_row("tokens/s", f"{est['tokens_per_s']:,.0f}", "global batch × seq_len / iteration")
    table.add_row(
        "TFLOP/s per GPU (model)",
        f"{est['tflops_per_gpu']:.1f}",
        "Korthikanti 2022 Eq. 7 FLOPs, no recomputation: MFU basis",
    )
    table.add_row(
        "TFLOP/s per GPU (hardware)",
        f"{est['hw_tflops_per_gpu']:.1f}",
        "with recomputed FLOPs (full: Narayanan 2021 Eq. 3): HFU basis",
    )
    table.add_row(
        "TFLOP/s per GPU (Megatron log)",
        f"{est['megatron_tflops_per_gpu']:.1f}",
        "as today's Megatron-LM logs it: causal attention halved",
    )
    table.add_row("MFU", f"{100 * est['mfu']:.1f}%", "model FLOP/s ÷ dense peak")
    table.add_row("HFU", f"{100 * est['hfu']:.1f}%", "hardware FLOP/s ÷ dense peak")
    table.add_row("pipeline bubble", f"{100 * est['bubble_frac']:.1f}%", "bubble time ÷ iteration")
    if "train_days" in est:
        from planner.report.runs import cost_rows

        for row in cost_rows(est):
            table.add_row(*row)
    return table


def search_view(result, ctx, gpus: int) -> Group:
    cap = ctx.hardware.gpu.hbm_gib
    table = Table(
        title=f"{ctx.model.name} on {gpus} GPUs of {ctx.hardware.name}: global batch "
        f"{ctx.training.global_batch} × seq {ctx.training.seq_len}, {ctx.training.precision.value}"
        f"{', FP8' if ctx.options.fp8 else ''}, {ctx.options.attention_kernel.value} attention",
        title_justify="left",
    )
    show_cp = any(pj["parallel"]["cp"] > 1 for pj in result.plans)
    show_ep = ctx.model.is_moe
    cols = (
        ["#", "TP", "PP", "DP"]
        + (["CP"] if show_cp else [])
        + (["EP", "ETP"] if show_ep else [])
        + [
            "b",
            "VPP",
            "recompute",
            "SP",
            "DO",
            f"mem GiB/{cap:g}",
            "iter s",
            "tokens/s",
            "TFLOP/s",
            "MFU",
            "bubble",
            "days",
        ]
    )
    for c in cols:
        table.add_column(c, justify="left" if c == "recompute" else "right", no_wrap=True)
    for pj in result.plans:
        par, est = pj["parallel"], pj["estimate"]
        optimizer = "fsdp" if par.get("fsdp") else "on" if par["distributed_optimizer"] else "-"
        row = [str(pj["rank"]), str(par["tp"]), str(par["pp"]), str(par["dp"])]
        row += [str(par["cp"])] if show_cp else []
        row += [str(par["ep"]), str(par["etp"])] if show_ep else []
        row += [
            str(par["micro_batch"]),
            str(par["vpp"]),
            par["recompute"],
            "on" if par["sequence_parallel"] else "-",
            optimizer,
            f"{est['peak_memory_gib']:.1f}",
            f"{est['iteration_s']:.2f}",
            f"{est['tokens_per_s']:,.0f}",
            f"{est['tflops_per_gpu']:.0f}",
            f"{100 * est['mfu']:.1f}%",
            f"{100 * est['bubble_frac']:.1f}%",
            f"{est.get('train_days', float('nan')):,.1f}",
        ]
        table.add_row(*row)
    rejected = ", ".join(f"{name}: {count:,}" for name, count in sorted(result.rejected.items(), key=lambda kv: -kv[1]))
    foot = Text(
        f"{result.evaluated:,} plans evaluated, {result.feasible:,} legal and fit; rejected — {rejected or 'none'}\n"
        "DO = distributed optimizer (fsdp: Megatron FSDP); TFLOP/s and MFU count model FLOPs (no recomputation)"
        f"{', against the BF16 peak' if ctx.options.fp8 else ''}; days to train "
        f"{result.plans[0]['estimate'].get('train_tokens', 300e9) / 1e9:g}B tokens (--tokens). "
        "`megaplan explain` with a plan's options shows every term."
    )
    return Group(table, foot)
