"""Rich renderables for megaplan's memory verdicts and estimate bands: Megatron-LM's own estimator
beside megaplan's, the band of an estimate, search's ties, and the memory validation table.
Returned, never printed here."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

GIB_PER_MIB = 1 / 1024


def band_text(est: dict, key: str = "iteration_s_band", fmt: str = "{:.2f}") -> str:
    """An estimate's band as "low–high"."""
    low, high = est[key]
    return f"{fmt.format(low)}–{fmt.format(high)}"


def headroom_text(est: dict) -> str:
    """The memory verdict with its headroom, in one line."""
    free = est["allocatable_gib"] - est["peak_memory_gib"]
    share = 100 * est["memory_headroom"]
    if est["fits"]:
        return f"fits: {free:.1f} GiB free of {est['allocatable_gib']:.1f} (keeps the {share:g} % headroom)"
    if est["fits_without_headroom"]:
        return (
            f"fits only without the headroom: {free:.1f} GiB free of {est['allocatable_gib']:.1f}, less than the "
            f"{share:g} % kept against the memory model's error"
        )
    return f"does NOT fit: {-free:.2f} GiB more than the {est['allocatable_gib']:.1f} GiB PyTorch can allocate"


def megatron_estimate_view(pj: dict) -> Group:
    """What Megatron-LM's report_theoretical_memory will print for the plan, megaplan's counterpart and
    why they differ."""
    me = pj["megatron_estimate"]
    ours = me["megaplan_first_stage_mib"]
    table = Table(
        title="Megatron-LM's own estimate (report_theoretical_memory, first stage) and why megaplan's differs",
        title_justify="left",
    )
    for col, just in (("", "left"), ("Megatron MB", "right"), ("megaplan MB", "right")):
        table.add_column(col, justify=just)
    table.add_row(
        "weight and optimizer", f"{me['weight_and_optimizer_mib']:.2f}", f"{ours['weight_and_optimizer']:.2f}"
    )
    table.add_row(f"activation ({me['formula']} formula)", f"{me['activation_mib']:.2f}", f"{ours['activation']:.2f}")
    table.add_row(
        Text("total", style="bold"),
        f"{me['total_mib']:.2f}",
        f"{ours['weight_and_optimizer'] + ours['activation']:.2f}",
    )
    notes = Text(
        "\n".join(
            [f"Megatron prints: {me['log_line']}", "It differs because:"] + [f"  - {d}" for d in me["differences"]]
        )
    )
    return Group(table, notes)


def tie_cell(pj: dict) -> Text:
    """Search's mark for a plan: = tied with the fastest (bands overlap), * the fastest estimate itself."""
    if pj.get("fastest"):
        return Text("*", style="bold green")
    return Text("=", style="green") if pj.get("tied_with_fastest") else Text("")


def ties_footnote(result) -> str:
    """What the tie marks mean and how tied plans are ordered."""
    if not result.tied:
        return ""
    where = f"#{result.fastest_rank}" if result.fastest_rank <= len(result.plans) else f"#{result.fastest_rank}, below"
    fastest = f"the fastest estimate is {where} (*)"
    return (
        f"\n= tied with the fastest: iteration bands overlap (± {100 * result.band_frac:.1f} %, the model's error "
        f"on this GPU generation); {fastest}. The {result.tied} tied plans come first: fewer risky features, then "
        "those leaving 10 % of the usable memory free, then the faster."
    )


def memory_validation_view(result: dict) -> Group:
    """Predicted memory against published measurements, runs that ran and out-of-memory cases."""
    table = Table(title="Memory: predicted vs published (no headroom)", title_justify="left")
    for col, just in (
        ("run", "left"),
        ("kind", "left"),
        ("plan", "left"),
        ("measured GiB", "right"),
        ("predicted", "right"),
        ("error", "right"),
        ("peak / GPU GiB", "right"),
        ("verdict", "left"),
    ):
        table.add_column(col, justify=just)
    for r in result["runs"]:
        err = r.get("error_pct")
        expected = {"ran": r["fits"], "oom": not r["fits"]}.get(r["kind"], True)
        verdict = "fits" if r["fits"] else "does not fit"
        table.add_row(
            r["id"],
            r["kind"],
            r["plan"],
            f"{r['measured_gib']:.2f}" if "measured_gib" in r else "",
            f"{r['predicted_gib']:.2f}" if "predicted_gib" in r else "",
            Text(f"{err:+.1f}%", style="green" if abs(err) <= 5 else "yellow") if err is not None else "",
            f"{r['peak_gib']:.1f} / {r['allocatable_gib']:.1f}",
            Text(verdict, style="green" if expected else "red"),
        )
    s = result["summary"]
    foot = Text(
        f"measured: {s['measured']} peaks of PyTorch's allocator, median |error| {s['median_abs_error_pct']:.1f} %, "
        f"max {s['max_abs_error_pct']:.1f} %, mean {s['mean_error_pct']:+.1f} % (predicted allocated memory of the "
        f"measured stage); ran: {s['ran_fit']} of {s['ran']} predicted to fit; out of memory: {s['oom_not_fit']} of "
        f"{s['oom']} predicted not to fit"
    )
    return Group(table, foot)
