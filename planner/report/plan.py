"""Rich renderables for explain: the verdict first (at most 15 lines), then every byte and every
millisecond with its formula and source. Returned, never printed here."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.padding import Padding
from rich.text import Text

from planner.fidelity.published import published_text
from planner.report import memory as memory_report
from planner.report.layout import KEEP, Column, FittedTable, plain_table, plan_text, table_width, tokens_text
from planner.report.wrap import NBSP, Hanging, command_words
from planner.result import MEMORY_TERMS, TIME_TERMS

STATE_TERMS = MEMORY_TERMS[:4]  # weights, gradients, optimizer, activations; the rest shown as "other"

MAX_STAGE_ROWS = 8
VERDICT_TERMS = 3  # the largest memory and time terms the verdict names


def plan_line(pj: dict) -> str:
    """The plan label with what the label leaves out: precision, FP8 and the attention kernel."""
    opt, tr = pj["options"], pj["training"]
    fp8 = f" FP8-{opt['fp8']}" if opt.get("fp8") else (" NVFP4" if opt.get("fp4") else "")
    ends = (opt.get("num_layers_at_start_in_bf16") or 0, opt.get("num_layers_at_end_in_bf16") or 0)
    if fp8 and opt.get("first_last_layers_bf16") and any(ends):
        fp8 += f" (BF16 first {ends[0]}, last {ends[1]} layers)"
    if fp8 and opt.get("fp8_output_proj"):
        fp8 += " · MXFP8 output layer"
    kernel = f"{opt['attention_kernel']} attention"
    kernel = "flash-attn (--attention-backend flash)" if opt.get("te_flash_attn") else kernel
    if fp8 and opt.get("fp8_dot_product_attention"):
        kernel += " in " + ("MXFP8" if opt.get("fp8") and opt.get("fp8_recipe") == "mxfp8" else "FP8")
    return f"{plan_text(pj)} · {tr['precision']}{fp8} · {kernel}"


def _peak(est: dict) -> str:
    return str(est.get("mfu_peak", "bf16")).upper()


def mfu_text(est: dict, pj: dict) -> str:
    """MFU in both conventions, and against which peak when the GEMMs run in FP8 (or fp32 on TF32)."""
    fp8 = (pj.get("options") or {}).get("fp8") or (pj.get("options") or {}).get("fp4")
    against = f" of the {_peak(est)} peak" if fp8 or _peak(est) != "BF16" else ""
    return f"MFU{NBSP}{100 * est['mfu']:.1f}% (causal{NBSP}{100 * est['mfu_causal']:.1f}%){against}"  # verdict: Hanging


def _largest(values: dict[str, float], names, unit: str, fmt: str) -> str:
    top = sorted((k for k in names if values.get(k, 0) > 0), key=lambda k: -values[k])[:VERDICT_TERMS]
    return " · ".join(f"{k} {format(values[k], fmt)}" for k in top) or f"none above 0 {unit}"


def _count(n: float) -> str:
    """A parameter count in a few digits: 8.03 B, 671 B, 350 M."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if n >= scale:
            value = n / scale
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{n:,.0f}"


def architecture(pj: dict) -> Text:
    """The model a plan prices, in three lines: its shape, its attention, its MLP or experts and parameters
    (what explain read from a launch script)."""
    m, params = pj["model_spec"], pj.get("model_params") or {}
    heads = m["num_attention_heads"]
    groups = m.get("num_query_groups")
    if m.get("multi_latent_attention"):
        attention = f"{heads} heads, multi-latent (kv rank {m.get('kv_lora_rank')}, q rank {m.get('q_lora_rank')})"
    else:
        attention = f"{heads} heads" + (f", {groups} query groups" if groups and groups != heads else "")
    window = m.get("window_size")
    attention += f" · sliding window {window[0]}" if window else ""
    attention += f" · {m.get('position_embedding_type', 'learned_absolute')} positions"
    ffn = m.get("ffn_hidden_size") or 4 * m["hidden_size"]
    act = "SwiGLU" if m.get("swiglu") else "GeGLU" if m.get("quick_geglu") else "GeLU"
    layers = f"{m['num_layers']} layers"
    if m.get("num_experts"):
        moe = sum(st.get("moe_layers", 0) for st in pj.get("stages", ()))
        layers += f" ({moe} MoE)" if moe and moe != m["num_layers"] else ""
        shared = " + shared" if m.get("moe_shared_expert_intermediate_size") else ""
        expert_ffn = m.get("moe_ffn_hidden_size") or ffn
        mlp = f"{m['num_experts']} experts{shared}, top-{m['moe_router_topk']}, FFN {expert_ffn}"
    else:
        mlp = f"dense {'squared-ReLU' if m.get('squared_relu') else act} MLP"
    total, active = params.get("total"), params.get("active")
    if total:
        mlp += f" · {_count(total)} parameters" + (f", {_count(active)} active" if active and active != total else "")
    out = Text()
    out.append("model ", "bold")
    out.append(f"{layers} · hidden {m['hidden_size']} · FFN {ffn} · vocab {m['vocab_size']:,}\n")
    out.append(f"      {attention}\n      {mlp}\n")
    return out


def overlap_text(pj: dict) -> str:
    """Which of the overlaps today's recipes turn on the plan runs, by the flags that set them, and how to turn one
    off: a plan typed as flags runs the recipes' (plan_options.recipe_overlaps), where Megatron-LM's own default is
    off, so explain says so rather than leaving it to the label's no-ogr (ux14). The parameter all-gather shows with
    a sharded optimizer, TP communication with SP (where they apply); "" for a plan JSON without its options."""
    opts, par = pj.get("options"), pj["parallel"]
    if not opts:
        return ""
    applies = [("--overlap-grad-reduce", "overlap_grad_reduce")]
    applies += (
        [("--overlap-param-gather", "overlap_param_gather")]
        if par.get("distributed_optimizer") or par.get("fsdp")
        else []
    )
    applies += [("--tp-comm-overlap", "tp_comm_overlap")] if par.get("sequence_parallel") else []
    on = [f for f, k in applies if opts.get(k)]
    off = [f for f, k in applies if not opts.get(k)]
    if not on:
        return f"overlaps off: {', '.join(off)}"
    text = f"overlaps on: {', '.join(on)} (off with {', '.join('--no-' + f[2:] for f in on)})"
    return text + (f" ·{NBSP}off:{NBSP}{', '.join(off)}" if off else "")  # wrapped, "· off: …" starts a line


def verdict(pj: dict, note: str | None = None, read: bool = False) -> Hanging:
    """Whether the plan fits (with headroom, or by how much not and the one change that fixes it), its
    iteration time, tokens/s and MFU, and the three largest memory and time terms: at most 15 lines."""
    est, tr = pj["estimate"], pj["training"]
    cap, peak = est["capacity_gib"], est["peak_memory_gib"]
    out = Text()
    out.append(f"{pj['model']}", "bold")
    out.append(
        f" on {pj['gpus']:,} GPUs of {pj['hardware']}: global batch {tr['global_batch']} × seq {tr['seq_len']}\n"
    )
    if read:
        out.append_text(architecture(pj))
    out.append("plan  ", "bold")
    out.append(plan_line(pj) + "\n")
    overlaps = overlap_text(pj)
    if overlaps:
        out.append(f"      {overlaps}\n")
    if pj.get("model_spec", {}).get("num_experts") and pj.get("options", {}).get("moe_permute_fusion") is False:
        out.append("      token permutation unfused (no --moe-permute-fusion, Megatron-LM's default; every "
                   "Megatron-Bridge MoE recipe turns it on)\n")  # fmt: skip
    if note:
        out.append(f"      {note}\n", "dim")
    if est["fits"]:
        out.append("FITS  ", "bold green")
        out.append(f"{peak:.1f} of {cap:.1f} GiB per GPU (stage {est['peak_stage']}), {cap - peak:.1f} GiB free\n")
    elif est.get("fits_without_headroom"):
        out.append("TIGHT ", "bold yellow")
        out.append(f"{memory_report.headroom_text(est)} (stage {est['peak_stage']})\n")
    else:
        out.append("DOES NOT FIT  ", "bold red")
        out.append(
            f"needs {peak:.1f} GiB per GPU (stage {est['peak_stage']}), {peak - cap:.1f} GiB more than {cap:.1f}\n"
        )
        fix = (pj.get("fit_suggestions") or [None])[0]
        if fix:
            out.append("fix   ", "bold yellow")
            out.append(
                f"{fix['change']} → {fix['peak_memory_gib']:.1f} GiB, {fix['iteration_s']:.2f} s/iteration, "
                f"MFU {100 * fix['mfu']:.1f}%\n"
            )
        else:
            out.append("fix   ", "bold yellow")
            out.append(search_hint_text(pj.get("search_hint"), pj["gpus"]) + "\n")
        more = pj.get("more_gpus")
        if more:
            out.append("      ", "bold yellow")
            out.append(
                f"or the same layout fits on --gpus {more['gpus']:,} (DP {more['dp']}): {more['peak_memory_gib']:.1f} "
                "GiB per GPU\n"
            )
    band = est.get("iteration_s_band")
    spread = f" ({band[0]:.2f}–{band[1]:.2f})" if isinstance(band, list | tuple) and len(band) == 2 else ""
    out.append("speed ", "bold")
    out.append(
        f"{est['iteration_s']:.2f} s/iteration{spread} · {est['tokens_per_s']:,.0f} tokens/s · "
        f"{mfu_text(est, pj)} · {est['tflops_per_gpu']:.0f} TFLOP/s per GPU\n"
    )
    if pj.get("evidence"):
        out.append("runs  ", "bold")
        out.append_text(memory_report.evidence_text(pj))
        out.append("\n")
    if pj.get("published"):  # what was measured for this setup, and this plan against its fastest
        out.append("setup ", "bold")
        out.append(published_text(pj["published"]) + "\n")
    out.append("memory", "bold")
    out.append(f" {_largest(est['memory'], MEMORY_TERMS, 'GiB', '.1f')} GiB of {peak:.1f}\n")
    out.append("time  ", "bold")
    out.append(f" {_largest(est['time'], TIME_TERMS, 's', '.2f')} s of {est['iteration_s']:.2f}\n")
    days = ""
    if "train_days" in est:
        days = f" · {est['train_days']:,.1f} days for {tokens_text(est['train_tokens'])} tokens"
    out.append(f"      bubble {100 * est['bubble_frac']:.1f}% · m = {est['num_microbatches']:g} micro-batches{days}")
    return Hanging(out)


def explain_view(pj: dict, note: str | None = None, read: bool = False) -> Group:
    """The verdict (with the model's architecture when ``read`` from a script), then the full breakdown:
    stage memory, memory terms, time terms, throughput."""
    parts = [verdict(pj, note, read), Text(""), memory_stage_table(pj), TermsTable(pj, "memory")]
    if "fit_suggestions" in pj:
        parts.append(fit_suggestions_view(pj))
    rules = (
        "Megatron-LM rules: all hold" if pj["legal"] else "Megatron-LM rules broken: " + "; ".join(pj["broken_rules"])
    )
    layers = ", ".join(str(n) for n in pj["parallel"]["stage_layers"])
    return Group(
        *parts,
        TermsTable(pj, "time"),
        metrics_table(pj["estimate"]),
        *([memory_report.megatron_estimate_view(pj)] if "megatron_estimate" in pj else []),
        Text(f"{rules}; layers per stage: {layers}", style="green" if pj["legal"] else "red"),
    )


def search_hint_text(hint: dict | None, gpus: int) -> str:
    """explain's fix line when no single change fits, from what a search on the same GPUs found
    (planner.runs.hints.search_on_these_gpus); never a promise that was not checked. The search command comes
    last, held whole (``command_words``): "(megaplan search ... --precision bf16)," wrapped at 80 columns broke
    it over lines that, pasted, ran alone."""
    if hint is None:
        return "no single change fits"
    if hint["finds"]:
        plans = "a plan" if hint["feasible"] == 1 else f"{hint['feasible']:,} plans"
        how = f": {command_words(hint['command'])}" if hint["command"] else ""
        return (
            f"no single change fits; a search on these {gpus:,} GPUs finds {plans} that fit, its #1 "
            f"{hint['plan']} at {hint['iteration_s']:.2f} s/iteration{how}"
        )
    how = f"; the smallest cluster that does: {command_words(hint['command'])}" if hint["command"] else ""
    return f"no single change fits, and no legal plan fits on these {gpus:,} GPUs either{how}"


def fit_suggestions_view(pj: dict) -> Text | Hanging:
    est = pj["estimate"]
    if not pj["fit_suggestions"]:
        hint = pj.get("search_hint")
        said = search_hint_text(hint, pj["gpus"]).removeprefix("no single change fits")
        return Hanging(
            Text(
                "No single change of recompute, SP, distributed optimizer, micro-batch, VPP, stage split or CP fits it"
                + said
                + ("" if hint and hint["command"] else "."),  # no full stop after a command to paste
                style="yellow",
            ),
            indent=0,
        )
    lines = [f"One change that makes it fit (fastest first; now {est['iteration_s']:.3f} s/iteration):"]
    for sug in pj["fit_suggestions"]:
        lines.append(
            f"  {sug['change']:<28} {sug['peak_memory_gib']:6.2f} GiB  {sug['iteration_s']:.3f} s  "
            f"MFU {100 * sug['mfu']:.1f}%"
        )
    return Text("\n".join(lines), style="yellow")


def memory_stage_table(pj: dict) -> FittedTable:
    est = pj["estimate"]
    cap = est["capacity_gib"]
    stages = pj.get("stages", [])
    rows = [
        dict(st, free=cap - st["total"], other=st["total"] - sum(st[k] for k in STATE_TERMS))
        for st in stages[:MAX_STAGE_ROWS]
    ]
    if len(stages) > MAX_STAGE_ROWS:
        rest = stages[MAX_STAGE_ROWS:]
        rows.append({"stage": "…", "layers": f"{len(rest)} more", "total": max(s["total"] for s in rest), "rest": True})
    short = {"gradients": "grads", "optimizer": "optim", "activations": "activ"}
    priority = {"activations": 1, "optimizer": 2, "weights": 3, "gradients": 3, "other": 4}

    def term(k: str):
        return lambda r: "" if r.get("rest") else f"{r[k]:.2f}"

    columns = [
        Column("stage", lambda r: str(r["stage"]), KEEP),
        Column("layers", _stage_layers, 2),
        *(Column(short.get(k, k), term(k), priority.get(k, 3)) for k in (*STATE_TERMS, "other")),
        Column("total", lambda r: ("≤ " if r.get("rest") else "") + f"{r['total']:.2f}", KEEP),
        Column(
            "free",
            lambda r: "" if r.get("rest") else Text(f"{r['free']:+.2f}", style="green" if r["free"] >= 0 else "red"),
            KEEP,
        ),
    ]
    return FittedTable(columns, rows, f"Memory per GPU by pipeline stage (GiB; capacity {cap:.1f}), most loaded first")


def _stage_layers(st: dict) -> str:
    """A stage's layers, with how many of them are dense (when some but not all are MoE) and its MTP layers."""
    n, moe, mtp = st["layers"], st.get("moe_layers", 0), st.get("mtp_layers", 0)
    if isinstance(n, str):  # the "… N more" row
        return n
    text = str(n) + (f" ({n - moe} dense)" if 0 < moe < n or (moe == 0 < n and mtp) else "")
    return text + (f" +{mtp} MTP" if mtp else "")


def _parts(est: dict, kind: str, term: str) -> list[tuple[str, float]]:
    """The parts of a term explain carries (what the attention blocks and the experts take of it): the
    weights, gradients and optimizer states after the last of the three, the activations' after them, the
    forward and backward compute after backward."""
    parts = ((est.get("parts") or {}).get(kind) or {}).items()
    if kind == "memory":  # the states' parts after the last state term, the activations' after theirs
        return [(k, v) for k, v in parts if v > 0 and k.startswith("states" if term == "optimizer" else term)]
    return [(k, v) for k, v in parts if v > 0 and term == "backward"]


PART_OF = {  # what a part's number is a share of, by the prefix of its key in estimate.parts
    "states": "weights+grads+optimizer",  # the part's parameters' weights, gradients and optimizer states
    "activations": "activations",
    "fwd+bwd": "forward+backward",  # its compute forward and backward, not the backward term alone
}


def part_label(key: str) -> str:
    """How explain names a part: the whole it is taken from, then what takes it ("states: experts" is
    the routed experts' weights, gradients and optimizer states, shown under the last of the three)."""
    whole, _, what = key.partition(": ")
    what = "routed experts" if key == "states: experts" else what
    return f"of {PART_OF.get(whole, whole)}: {what}" if what else key


def _formula(est: dict, kind: str, term: str) -> tuple[str, str]:
    """A term's formula and source as the cost module that computed it wrote them."""
    f = est.get("formulas", {}).get(kind, {}).get(term)
    return (f["formula"], f["source"]) if f else ("", "")


class TermsTable:
    """Memory (GiB) or time (seconds per iteration) term by term, with each term's formula and source.

    When formula and source fit beside the numbers they are columns; on a narrower terminal the
    table keeps the numbers and the formulas follow as wrapped lines, one per term."""

    def __init__(self, pj: dict, kind: str) -> None:
        self.pj, self.kind = pj, kind
        est = pj["estimate"]
        self.names = MEMORY_TERMS if kind == "memory" else TIME_TERMS
        self.total = est["peak_memory_gib"] if kind == "memory" else est["iteration_s"]
        self.values = est[kind]
        unit = "GiB" if kind == "memory" else "seconds"
        self.title = (
            f"Most loaded GPU (stage {est['peak_stage']}): where the bytes go"
            if kind == "memory"
            else "Iteration time, term by term"
        )
        fmt = ".2f" if kind == "memory" else ".3f"
        total_row = "total" if kind == "memory" else "iteration"
        self.rows = []
        for k in self.names:
            self.rows.append((k, format(self.values[k], fmt), *_formula(est, kind, k)))
            for name, value in _parts(est, kind, k):  # MLA, experts: the parts of the term above
                label = f"  ↳ {part_label(name)}"
                self.rows.append((label, format(value, fmt), *_formula(est, f"{kind}_parts", name)))
        self.rows.append((total_row, format(self.total, fmt), self._total_note(), ""))
        self.columns = [
            Column("term", lambda r: Text(r[0], style="bold" if r[0] == total_row else ""), KEEP, "left"),
            Column(unit, lambda r: r[1], KEEP),
            Column("share", lambda r: self._share(r), KEEP),
            Column("formula", lambda r: Text(r[2]), 1, "left"),
            Column("source", lambda r: Text(r[3]), 1, "left"),
        ]

    def _share(self, row) -> str:
        return f"{100 * float(row[1]) / self.total:.1f}%" if self.total else ""

    def _total_note(self) -> str:
        est = self.pj["estimate"]
        if self.kind == "time":
            return "sum of the terms above"
        return memory_report.headroom_text(est)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        full = plain_table(self.columns, self.rows)
        yield Text(self.title, style="bold")
        if table_width(console, options, full) <= options.max_width:
            yield full
            return
        yield plain_table(self.columns[:3], self.rows)
        for name, _, formula, source in self.rows:
            if formula and source:
                yield Padding(Text.assemble((f"{name}: ", "bold"), formula, (f"  [{source}]", "dim")), (0, 0, 0, 2))


def metrics_table(est: dict) -> FittedTable:
    rows = [
        ("iteration band", memory_report.band_text(est) + " s", "estimate × e^∓ε: the model's error on this GPU"),
        ("tokens/s", f"{est['tokens_per_s']:,.0f}", "global batch × seq_len / iteration"),
        ("TFLOP/s/GPU model", f"{est['tflops_per_gpu']:.1f}", "Korthikanti 2022 Eq. 7 FLOPs, no recomputation: MFU"),
        (
            "TFLOP/s/GPU hardware",
            f"{est['hw_tflops_per_gpu']:.1f}",
            "with recomputed FLOPs (Narayanan 2021 Eq. 3): HFU",
        ),
        (
            "TFLOP/s/GPU Megatron",
            f"{est['megatron_tflops_per_gpu']:.1f}",
            "as Megatron-LM logs it: causal attention halved (each difference under Megatron-LM's own estimate)",
        ),
        ("MFU", f"{100 * est['mfu']:.1f}%", f"model FLOP/s ÷ dense {_peak(est)} peak (attention over the whole s²)"),
        (
            "MFU causal",
            f"{100 * est['mfu_causal']:.1f}%",
            "causal attention halved: Megatron-Bridge's MFU; Megatron-LM's is its TFLOP/s above ÷ peak",
        ),
        ("HFU", f"{100 * est['hfu']:.1f}%", "hardware FLOP/s ÷ dense peak"),
        ("pipeline bubble", f"{100 * est['bubble_frac']:.1f}%", "bubble time ÷ iteration"),
    ]
    if "train_days" in est:
        from planner.report.runs import cost_rows

        rows += cost_rows(est)
    columns = [
        Column("metric", lambda r: r[0], KEEP, "left"),
        Column("value", lambda r: r[1], KEEP),
        Column("meaning", lambda r: r[2], 1, "left", wrap=True),
    ]
    return FittedTable(columns, rows, "Throughput")
