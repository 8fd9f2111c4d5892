"""The search table: one row per plan, its columns a list of ``Column`` specs with priorities, so the
table fits any terminal and a new column is one more entry in ``SEARCH_COLUMNS``."""

from __future__ import annotations

from planner.errors import counted
from planner.fidelity.published import nearby_setups, published_text
from planner.plan import plan_label_legend
from planner.report.layout import CSV_TOO, KEEP, Column, FittedTable, plan_text, tokens_text
from planner.report.memory import band_text, evidence_cell, ranking_headline, tie_cell, ties_footnote
from planner.space.warnings import mlp_recompute_note, no_dense


def _est(key: str, fmt: str):
    return lambda pj: format(pj["estimate"][key], fmt)


def _pct(key: str):
    return lambda pj: f"{100 * pj['estimate'][key]:.1f}%"


def search_columns(capacity_gib: float) -> list[Column]:
    """The search table's columns, most important first; priority 0 is never dropped, and the column
    with the largest priority goes first when the terminal is narrow."""
    return [
        Column("#", lambda pj: str(pj["rank"]), priority=2),
        Column("plan", plan_text, priority=KEEP, justify="left", wrap_priority=2),  # wraps before # and GiB go
        Column(f"GiB/{capacity_gib:g}", _est("peak_memory_gib", ".1f"), priority=1),
        Column("iter s", _est("iteration_s", ".2f"), priority=KEEP),
        Column("≈", tie_cell, priority=KEEP),
        Column("band s", lambda pj: band_text(pj["estimate"]), priority=2),
        Column("runs", evidence_cell, priority=3),
        Column("MFU", _pct("mfu"), priority=1),
        Column("cMFU", _pct("mfu_causal"), priority=3),
        Column("tokens/s", _est("tokens_per_s", ",.0f"), priority=2),
        Column("TFLOP/s", _est("tflops_per_gpu", ".0f"), priority=4),
        Column("bubble", _pct("bubble_frac"), priority=3),
        Column("days", lambda pj: f"{pj['estimate'].get('train_days', float('nan')):,.1f}", priority=4),
    ]


def setup_words(ctx) -> str:
    """The setup a title names after the model, GPUs and hardware: global batch × sequence, precision (FP8, its
    BF16 end layers and MXFP8 output layer, NVFP4) and attention (in FP8 where it runs so)."""
    tr, opt = ctx.training, ctx.options
    fp8 = ", FP8" if opt.fp8 else ""
    if any(opt.bf16_end_layers):
        fp8 += " (BF16 first {}, last {} layers)".format(*opt.bf16_end_layers)
    if opt.fp8_output_proj:
        fp8 += ", MXFP8 output layer"
    fp4 = ", NVFP4" if opt.fp4 else ""
    attention = f"{opt.attention_kernel.value} attention"
    if opt.quantised and opt.fp8_dot_product_attention:
        attention += " in " + ("MXFP8" if opt.fp8 and opt.fp8_recipe.value == "mxfp8" else "FP8")
    return f"global batch {tr.global_batch} × seq {tr.seq_len}, {tr.precision.value}{fp8}{fp4}, {attention}"


def search_title(ctx, gpus: int) -> str:
    return f"{ctx.model.name} on {gpus:,} GPUs of {ctx.hardware.name}: {setup_words(ctx)}"


def search_view(result, ctx, gpus: int) -> FittedTable:
    capacity = round(result.plans[0]["estimate"]["capacity_gib"], 1)  # what a plan may fill: usable memory
    ranks = [pj["rank"] for pj in result.plans]
    gaps = [k for k in range(1, len(ranks)) if ranks[k] > ranks[k - 1] + 1]  # the fastest, after the top N
    rejected = ", ".join(f"{name}: {count:,}" for name, count in sorted(result.rejected.items(), key=lambda kv: -kv[1]))
    tokens = tokens_text(result.plans[0]["estimate"].get("train_tokens", 300e9))
    labels = " ".join(map(plan_text, result.plans))
    if pub := result.plans[0].get("published"):  # the footer names the setup's fastest published plan too
        labels += " " + pub["fastest_plan"]
    legend = plan_label_legend(labels)  # the codes the plans shown use
    if "rc-mlp" in labels.split() and no_dense(ctx):  # its rows repeat the rows without it (ux15)
        legend += f". {mlp_recompute_note(ctx.model.name)}"
    dropped = result.dropped_twins  # twins of the plans listed (planner.space.dominance)
    dropped = (
        f"; dropped: {counted(dropped, 'plan')} recomputing more than one listed without saving time or memory "
        "(pin --recompute to list them)"
        if dropped
        else ""
    )
    foot = (
        f"{result.evaluated:,} plans evaluated, {result.feasible:,} legal and fit; rejected: {rejected or 'none'}"
        f"{dropped}.\n"
        f"{legend}. TFLOP/s and MFU count model FLOPs (no recomputation) with attention over "
        "the whole s² (the papers')"
    )

    def footer(shown: list[str]) -> str:
        cmfu = "; cMFU halves causal attention (Megatron-LM's and Megatron-Bridge's MFU)" if "cMFU" in shown else ""
        both = "; both" if cmfu else ","
        peak = f"{both} against the BF16 peak" if ctx.options.quantised else ""
        ties = ties_footnote(result, shown)
        days = f"; days to train {tokens} tokens (--tokens)" if "days" in shown else ""
        rest = f"{cmfu}{peak}{days}. "
        rest += "Each plan's explain and export command lines are in --json."
        headline = ranking_headline(result, shown)
        pub = result.plans[0].get("published")  # what was measured for this setup, and #1 against its fastest
        published = f"{published_text(pub, '#1')}.\n" if pub else ""
        if not pub and (near := nearby_setups(ctx, gpus)):  # runs of this model on these GPUs, asked for otherwise
            published = (
                f"Published runs of {ctx.model.name} on {gpus:,} GPUs of {ctx.hardware.name} are of other setups: "
                f"{'; '.join(near)} (--global-batch, --seq-len, --fp8/--fp8-recipe to see them beside #1).\n"
            )
        return (f"{headline}\n" if headline else "") + published + foot + rest + (f"\n{ties}" if ties else "")

    title = search_title(ctx, gpus)
    return FittedTable(search_columns(capacity), result.plans, title, gaps, footer=footer, elsewhere=CSV_TOO)
