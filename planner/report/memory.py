"""Rich renderables for megaplan's memory verdicts and estimate bands: Megatron-LM's own estimator
beside megaplan's, the band of an estimate, search's ties, and the memory validation table.
Returned, never printed here."""

from __future__ import annotations

import math

from rich.console import Group
from rich.padding import Padding
from rich.text import Text

from planner.errors import counted
from planner.report.layout import KEEP, Column, FittedTable, plain_table
from planner.report.wrap import NBSP

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
    """What Megatron-LM's report_theoretical_memory will print for the plan, megaplan's counterpart (the
    first stage's model states and activations) and why they differ."""
    me = pj["megatron_estimate"]
    ours = me["megaplan_first_stage_mib"]
    rows = [
        ("weight and optimizer", me["weight_and_optimizer_mib"], ours["weight_and_optimizer"]),
        (f"activation ({me['formula']} formula)", me["activation_mib"], ours["activation"]),
        ("total", me["total_mib"], ours["weight_and_optimizer"] + ours["activation"]),
    ]
    columns = [
        Column("first stage", lambda r: Text(r[0], style="bold" if r[0] == "total" else ""), KEEP, "left"),
        Column("Megatron MB", lambda r: f"{r[1]:.2f}", KEEP),
        Column("megaplan MB", lambda r: f"{r[2]:.2f}", KEEP),
    ]
    why = [Padding(Text(f"- {d}"), (0, 0, 0, 2)) for d in me["differences"]]
    return Group(
        Text("Megatron-LM's own estimate (report_theoretical_memory) beside megaplan's", style="bold"),
        plain_table(columns, rows),
        Text(f"Megatron prints: {me['log_line']}"),
        Text("It differs because (lines of megatron/training/theoretical_memory_usage.py @ d98e8a64):"),
        *why,
        *_megatron_params_view(me.get("parameters")),
        *_megatron_flops_view(me.get("flops")),
    )


def _billions(n: float) -> str:
    """A parameter difference in B (or M below 0.1 B), its sign dropped: "38.2 B", "26.8 M"."""
    n = abs(n)
    return f"{n / 1e9:.3g} B" if n >= 1e8 else f"{n / 1e6:.3g} M" if n >= 1e5 else f"{n:,.0f}"


def _megatron_params_view(par: dict | None) -> list:
    """Megatron-LM's printed parameter counts beside megaplan's, and each reason they differ with the parameters it
    moves ("fewer": Megatron counts fewer than megaplan); the reasons add up to the difference."""
    if not par:
        return []
    theirs, mine = par["megatron"], par["megaplan"]
    rows = [("total", theirs["total"], mine["total"]), ("active", theirs["active"], mine["active"])]
    columns = [
        Column("parameters", lambda r: r[0], KEEP, "left"),
        Column("Megatron B", lambda r: f"{r[1] / 1e9:.2f}", KEEP),
        Column("megaplan B", lambda r: f"{r[2] / 1e9:.2f}", KEEP),
    ]
    out = [plain_table(columns, rows), Text(f"Megatron prints: {' · '.join(par['log_lines'])}")]
    if not par["differences"]:
        return [*out, Text("The counts agree: Megatron counts every parameter this model has.")]
    out.append(Text("Its count differs because it:"))
    for d in par["differences"]:
        active = f"{_billions(d['active'])} {'fewer' if d['active'] > 0 else 'more'} active"
        moved = f"{_billions(d['total'])} {'fewer' if d['total'] > 0 else 'more'}" if d["total"] else active
        if d["total"] and d["active"] != d["total"]:
            moved += f" ({active})"
        out.append(Padding(Text(f"- {d['what']}: {moved}  [{d['source']}]"), (0, 0, 0, 2)))
    return out


def _megatron_flops_view(fl: dict | None) -> list:
    """One iteration's FLOPs as Megatron-LM logs them (its TFLOP/s) beside megaplan's model FLOPs (the MFU basis),
    and each reason they differ with its share of megaplan's count; the shares add up to the difference."""
    if not fl:
        return []
    theirs, mine = fl["megatron"], fl["megaplan_model"]
    out = [
        Text(
            f"FLOPs per iteration: Megatron logs {theirs / 1e15:,.1f} PFLOP (num_floating_point_operations: its "
            f"TFLOP/s), megaplan's model FLOPs {mine / 1e15:,.1f} PFLOP (MFU), {100 * (theirs / mine - 1):+.1f} %, "
            "because it:"
        )
    ]
    for d in fl["differences"]:
        share = -100 * d["flops"] / mine
        out.append(Padding(Text(f"- {d['what']}: {share:+.2g} %  [{d['source']}]"), (0, 0, 0, 2)))
    return out


def tie_cell(pj: dict) -> Text:
    """Search's mark for a plan: = tied with the fastest (bands overlap), * the fastest estimate itself."""
    if pj.get("fastest"):
        return Text("*", style="bold green")
    return Text("=", style="green") if pj.get("tied_with_fastest") else Text("")


def evidence_cell(pj: dict) -> Text:
    """Search's evidence column: the published settings behind the plan's least-exercised feature, or
    ×N (red) for N features no published setting of its GPU generation exercises."""
    ev = pj.get("evidence") or {}
    n = len(ev.get("extrapolated", ())) + len(ev.get("disputed", ()))
    return Text(f"×{n}", style="red") if n else Text(str(ev.get("settings", "")))


def evidence_text(pj: dict) -> Text:
    """One line: what the published runs say about the plan ("validated by 14 settings" or what is
    extrapolated; how many of the weakest feature's settings are held out, validated out of sample), and the
    band it gives, with the rows it comes from where they are not the preset's dense rows (an NVFP4 plan's:
    their count, preset, how they bear on the model and source)."""
    ev = pj.get("evidence")
    out = Text()
    if not ev:
        return out
    gen, band = ev["generation"], f"band ± {100 * ev['band_frac']:.1f} %"
    rows = f" from {ev['band_rows']}" if ev.get("band_rows") else ""
    if ev["extrapolated"]:
        out.append("extrapolated: ", "bold yellow")
        each = f"± {100 * ev['per_extrapolated_frac']:.1f} %{NBSP}each"  # the verdict's Hanging keeps it whole
        out.append(f"{', '.join(ev['extrapolated'])} on {gen}, 0 runs; {band} ({each}){rows}")
    else:
        weakest = min(ev["features"], key=lambda f: f["settings"])
        held = weakest.get("held_out", 0)
        held = f", {held} of them held out" if held else ""
        out.append(
            f"validated by {counted(ev['settings'], 'setting')} on {gen} (fewest: {weakest['feature']}{held}); "
            f"{band}{rows}"
        )
    for f in ev.get("held_out_only", ()):
        if f["rms_frac"] > ev["band_frac"]:  # what the band, from the fitted rows, does not cover
            unsupported = (
                f", counted unsupported (± {100 * ev['per_extrapolated_frac']:.1f} %)" if f["disputed"] else ""
            )
            runs = f"only held-out runs ({f['runs']})" if f["runs"] > 1 else "one held-out run"
            out.append(f"; {f['feature']}: {runs}, {held_out_miss(f)}{unsupported}", "yellow")
    for found in by_finding(ev.get("contradicted", ())):
        names = " and ".join(f["feature"] for f in found)
        each = "each " if len(found) > 1 else ""
        runs = f"its {found[0]['runs']} runs there" if found[0]["runs"] > 1 else "its one run there"
        out.append(
            f"; {names}: {contradiction_text(found)}; {runs} {held_out_miss(found[0])}; {each}counted unsupported "
            f"(± {100 * ev['per_extrapolated_frac']:.1f} %)",
            "yellow",
        )
    return out


def by_finding(contradicted) -> list[list[dict]]:
    """Contradicted features (``evidence.contradicted_json``) grouped by the finding against them (GPU and source),
    so that one finding is said once for all its features."""
    groups: dict[tuple, list[dict]] = {}
    for f in contradicted:
        groups.setdefault((f["hardware"], f["source"]), []).append(f)
    return list(groups.values())


def contradiction_text(found: list[dict]) -> str:
    """What NVIDIA found of contradicted features (one GPU, one source), in words ("slower on dgx-b300-superpod by
    NVIDIA's own measure, which turned them off there (Megatron-Bridge PR 2669, issue 3399)")."""
    them = "them" if len(found) > 1 else "it"
    gpu, source = found[0]["hardware"], found[0]["source"]
    return f"slower on {gpu} by NVIDIA's own measure, which turned {them} off there ({source})"


def held_out_miss(feature: dict) -> str:
    """How far a held-out-only feature's runs are predicted, in words: r = ln(predicted/published step time) from
    ``low_frac`` to ``high_frac``, as percentages of the step ("predicted 13–33 % faster than they ran"; one run:
    "predicted 13 % faster than it ran")."""
    low, high = (100 * math.expm1(feature[k]) for k in ("low_frac", "high_frac"))
    they = "they" if feature.get("runs", 2) > 1 else "it"

    def span(a: float, b: float) -> str:
        return f"{a:.0f}" if round(a) == round(b) else f"{a:.0f}–{b:.0f}"

    if high < 0:
        return f"predicted {span(-high, -low)} % faster than {they} ran"
    if low > 0:
        return f"predicted {span(low, high)} % slower than {they} ran"
    return f"predicted {low:+.0f} to {high:+.0f} % against what {they} ran"


def unbacked_features(labels: list[str]) -> list[str]:
    """Feature labels to name once each: a label that starts another ("Megatron FSDP" beside "Megatron FSDP HFSDP")
    is said by it (search's note read "uses Megatron FSDP and Megatron FSDP HFSDP")."""
    kept = list(dict.fromkeys(labels))
    return [a for a in kept if not any(b != a and b.startswith(a + " ") for b in kept)]


def ranking_headline(result, columns: list[str] | None = None) -> str:
    """One plain sentence, said first under a search table, when #1 is not the fastest estimate (ranked by
    evidence): what #1 is, and where the fastest estimate is and why it is lower, with both times."""
    if result.rank_by != "risk" or result.fastest_rank == 1:
        return ""
    first = result.plans[0]
    fastest = next((pj for pj in result.plans if pj["rank"] == result.fastest_rank), None)
    if fastest is None:
        return ""
    ranks = columns is None or "#" in columns
    one = "#1" if ranks else "The first row"
    where = f", #{result.fastest_rank}" if ranks else ""
    shown = "the last row" if fastest is result.plans[-1] and len(result.plans) > 1 else "a row"
    evidence, first_ev = fastest.get("evidence") or {}, first.get("evidence") or {}
    known = set(first_ev.get("extrapolated") or []) | set(first_ev.get("disputed") or [])
    unbacked = unbacked_features([f for f in evidence.get("extrapolated") or [] if f not in known])
    disputed = [f for f in evidence.get("held_out_only") or [] if f["disputed"] and f["feature"] not in known]
    generation = f" on {evidence['generation']}" if evidence.get("generation") else ""
    reasons = [f"{' and '.join(unbacked)}, which no published run{generation} exercises"] if unbacked else []
    for f in disputed:
        runs = "runs" if f["runs"] > 1 else "run"
        was = "were" if f["runs"] > 1 else "was"
        reasons.append(f"{f['feature']}, whose only published {runs}{generation}, held out, {was} {held_out_miss(f)}")
    said = known | {f["feature"] for f in disputed}
    for found in by_finding(f for f in evidence.get("contradicted") or [] if f["feature"] not in said):
        reasons.append(f"{' and '.join(f['feature'] for f in found)}, {contradiction_text(found)}")
    why = (
        "uses " + ", and ".join(reasons)
        if reasons
        else f"is tied with {one[0].lower() + one[1:]} but leaves less than 10 % of the usable memory free"
    )
    return (
        f"{one} is not the fastest estimate: plans are ranked by evidence first. {one} "
        f"({first['estimate']['iteration_s']:.2f} s) is the fastest that published runs back; the fastest "
        f"estimate{where} ({fastest['estimate']['iteration_s']:.2f} s, {shown}, marked *), {why} "
        "(--rank-by estimate ranks by the estimate)."
    )


def ties_footnote(result, columns: list[str] | None = None) -> str:
    """What the tie marks mean, how plans are ranked and how many moved down for lack of evidence;
    a rank (#N) and the runs column are named only when the table shows them (``columns``: the
    headers shown, None: all)."""
    if result.rank_by == "memory":  # it said nothing of the order, and the least-memory plan carried "*" (ux15)
        return "Ranked by peak memory, then the point estimate (--rank-by memory); no tie marks."
    rank, shown = result.fastest_rank, [pj["rank"] for pj in result.plans]
    after = f", shown after the top {len(shown) - 1}" if rank == shown[-1] != len(shown) else ""
    ranks = columns is None or "#" in columns
    first = "#1" if ranks else "the first row"
    fastest = f"the fastest estimate is #{rank} (*{after})" if ranks else f"the fastest estimate is marked *{after}"
    moved = (
        f" {counted(result.moved_down, 'plan')} faster by estimate than {first} moved down for lack of evidence "
        "(--rank-by estimate ranks by the estimate)."
        if result.moved_down
        else ""
    )
    runs = (
        " runs: published settings behind the plan's least-exercised feature; ×N: N features no published setting "
        "of this GPU generation exercises, each widening the band."
        if columns is None or "runs" in columns
        else ""
    )
    rule = getattr(result, "tp_overlap_rule", "")
    twins = f" {rule[0].upper()}{rule[1:]}." if rule else ""
    if result.rank_by == "risk":
        return (
            f"Ranked by what the runs support: fewest features no published setting exercises, then the "
            f"pessimistic end, the estimate × e^(2ε) (ε: the band, ± {100 * result.band_frac:.1f} % where every "
            f"feature has runs behind it); = tied with {first} (bands overlap), those leaving 10 % of the usable "
            f"memory free first; {fastest}.{moved}{twins}{runs}"
        )
    if not result.tied:
        return runs.strip()
    tied = "The one tied plan comes" if result.tied == 1 else f"The {result.tied:,} tied plans come"
    return (
        f"= tied with the fastest: iteration bands overlap (± {100 * result.band_frac:.1f} %, the model's error "
        f"on this GPU generation); {fastest}. {tied} first: fewer extrapolated "
        f"features, then those leaving 10 % of the usable memory free, then the faster.{runs}"
    )


def memory_validation_view(result: dict) -> Group:
    """Predicted memory against published measurements, runs that ran and out-of-memory cases."""

    def verdict(r: dict) -> Text:
        expected = {"ran": r["fits"], "oom": not r["fits"]}.get(r["kind"], True)
        return Text("fits" if r["fits"] else "does not fit", style="green" if expected else "red")

    def error(r: dict) -> Text | str:
        err = r.get("error_pct")
        return "" if err is None else Text(f"{err:+.1f}%", style="green" if abs(err) <= 5 else "yellow")

    columns = [
        Column("run", lambda r: r["id"], KEEP, "left", wrap=True),
        Column("kind", lambda r: r["kind"], 3, "left"),
        Column("plan", lambda r: r["plan"], 4, "left", wrap=True),
        Column("measured GiB", lambda r: f"{r['measured_gib']:.2f}" if "measured_gib" in r else "", 2),
        Column("predicted", lambda r: f"{r['predicted_gib']:.2f}" if "predicted_gib" in r else "", 2),
        Column("error", error, 1),
        Column("peak/GPU GiB", lambda r: f"{r['peak_gib']:.1f}/{r['allocatable_gib']:.1f}", KEEP),
        Column("verdict", verdict, KEEP, "left"),
    ]
    s = result["summary"]
    foot = Text(
        f"measured: {s['measured']} peaks of PyTorch's allocator, median |error| {s['median_abs_error_pct']:.1f} %, "
        f"max {s['max_abs_error_pct']:.1f} %, mean {s['mean_error_pct']:+.1f} % (predicted allocated memory of the "
        f"measured stage); ran: {s['ran_fit']} of {s['ran']} predicted to fit; out of memory: {s['oom_not_fit']} of "
        f"{s['oom']} predicted not to fit"
        + (
            f"; the runs behind the time validation: {s['reference_fit']} of {s['reference']} predicted to fit"
            + _misses(result.get("reference", []))
            if "reference" in s
            else ""
        )
    )
    return Group(FittedTable(columns, result["runs"], "Memory: predicted vs published (no headroom)"), foot)


def _misses(reference: list[dict]) -> str:
    """The runs behind the time validation that ran but are predicted not to fit, with their peaks: what the
    memory model over-counts, named."""
    over = [r for r in reference if not r["fits"]]
    if not over:
        return ""
    return (
        " (not, though they ran: "
        + "; ".join(
            f"{r['id']} {r['peak_gib']:.1f}/{r['allocatable_gib']:.1f} GiB "
            f"({100 * (r['peak_gib'] / r['allocatable_gib'] - 1):+.1f} %)"
            for r in over
        )
        + ")"
    )
