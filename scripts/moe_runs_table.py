#!/usr/bin/env python3
"""The by-model summary and the per-run table of docs/cost-model.md §13.7 (the published MoE throughputs
against megaplan's predictions), from the current code and presets, so that they are regenerated instead of
going stale (tests/test_ux14.py checks the docs against them). Run it after a change that moves the MoE
predictions (a refit, a physics change); about 2 s.
Usage: python scripts/moe_runs_table.py             (print the per-run table)
       python scripts/moe_runs_table.py --write     (replace both tables, and the summary's lead, in docs/cost-model.md)
       python scripts/moe_runs_table.py --summary   (print the summary's lead and median / max |error| by model and GPU)
"""

from __future__ import annotations

import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "cost-model.md"
LEAD = "Per run (`megaplan validate --json`, `moe.runs`"  # the paragraph the table follows
HEADER = ["| run | published | predicted | error | |", "|---|---:|---:|---:|---|"]
SUMMARY_LEAD = "By model and GPU (`megaplan validate --json`, `moe.runs`"  # the summary's lead paragraph, generated
WITHOUT = "gpt-oss-120b"  # the model a summary row leaves out (the largest misses, §13.7 "What the GPT-OSS rows ran")


def table(runs: list[dict]) -> str:
    """The markdown table of ``megaplan validate --json``'s ``moe.runs``: published and predicted tokens/s per
    GPU, the error ((predicted − published) / published), "apart" for a row reported apart from the bar and
    "held out" for a row in the bar that no fit uses (a verification card's)."""
    rows = [
        f"| {r['id']} | {r['published']:.0f} | {r['predicted']:.0f} | {r['error_pct']:+.1f} % | "
        f"{'' if r['in_fit'] else 'held out' if r.get('in_bar') else 'apart'} |"
        for r in runs
    ]
    return "\n".join([*HEADER, *rows]) + "\n"


def _stats(rows: list[dict]) -> str:
    """'rows | median / max |error| % (rows in the bar) | apart' of ``rows`` (the bar: rows not reported apart,
    the fitted and the held-out)."""
    errors = sorted(abs(r["error_pct"]) for r in rows if r.get("in_bar", r["in_fit"]))
    n = len(errors)
    median = (errors[(n - 1) // 2] + errors[n // 2]) / 2 if n else float("nan")
    bar = f"{median:.1f} / {errors[-1]:.1f} % ({n})" if n else "- (0)"
    return f"{len(rows)} | {bar} | {len(rows) - n}"


def summary(runs: list[dict], model: dict[str, str]) -> str:
    """Median / max |error| of the rows in the bar, by model (``model``: run id to model) and GPU (the run id's
    third field: MB-26.08-GB200-...), each model's and each GPU's all, and all."""
    gpu = {r["id"]: r["id"].split("-")[2] for r in runs}
    models, gpus = dict.fromkeys(model[r["id"]] for r in runs), dict.fromkeys(gpu[r["id"]] for r in runs)
    lines = ["| model | GPU | rows | in the bar (rows) | apart |", "|---|---|---:|---|---:|"]
    for m in [*models, "all"]:
        for g in [*gpus, "all"] if m != "all" else [*gpus]:
            rows = [r for r in runs if m in (model[r["id"]], "all") and g in (gpu[r["id"]], "all")]
            lines += [f"| {m} | {g} | {_stats(rows)} |"] if rows else []
    others = [r for r in runs if model[r["id"]] != WITHOUT]
    lines += [f"| all but {WITHOUT} | all | {_stats(others)} |"] if len(others) < len(runs) else []
    held = [r for r in runs if r.get("in_bar") and not r["in_fit"]]
    cards = [r for r in held if r["id"].startswith("MB-CARD-")]
    lines += [f"| verification cards (held out) | all | {_stats(cards)} |"] if cards else []
    dgxc = [r for r in runs if r["id"].startswith("DGXC-")]  # held out, or apart as superseded software
    lines += [f"| DGX Cloud recipes | all | {_stats(dgxc)} |"] if dgxc else []
    nemodoc = [r for r in runs if r["id"].startswith("NEMODOC-")]  # the NeMo docs' performance summary, held out
    lines += [f"| NeMo perf. summary | all | {_stats(nemodoc)} |"] if nemodoc else []
    lines.append(f"| **all** | all | {_stats(runs)} |")
    return "\n".join(lines) + "\n"


def summary_lead(factors: dict[str, float]) -> str:
    """The summary's lead paragraph, with the MoE factors it was computed at (``factors``: t_op in µs, H100's
    η_a2a and φ, from presets/hardware/dgx-h100-superpod.yaml)."""
    return (
        f"{SUMMARY_LEAD}; written by `python scripts/moe_runs_table.py --write` with the per-run table below, at "
        f"the shipped presets: t_op {factors['t_op']:.2f} µs, H100's η_a2a {factors['eta_a2a']:.3f}, φ "
        f"{factors['phi']:.3f}): median / max |error| of the rows in the bar (the fitted rows and the held-out "
        "rows of the verification cards, the DGX Cloud recipes and the NeMo docs' performance summary), the rows "
        "reported apart counted beside them.\n"
    )


def shipped_factors() -> dict[str, float]:
    """The MoE factors of the shipped H100 preset (t_op is one value for every GPU, `calibrate --moe`)."""
    from planner.presets import load_hardware

    cal = load_hardware("dgx-h100-superpod").calibration
    return {"t_op": cal.moe_host_op_us, "eta_a2a": cal.a2a_network_efficiency, "phi": cal.persistent_gemm_comm_share}


def replaced_summary(doc: str, lead: str, new_table: str) -> str:
    """``doc`` with the summary's lead paragraph (starting SUMMARY_LEAD) and the table right after it replaced."""
    start = doc.find("\n" + SUMMARY_LEAD)
    if start < 0:
        raise SystemExit(
            f"{DOC.name}: no paragraph starting {SUMMARY_LEAD!r}; update SUMMARY_LEAD in {Path(__file__).name}"
        )
    begin = doc.find("\n| model |", start)
    if begin < 0 or doc.find("\n\n", start) < begin - 1:
        raise SystemExit(f"{DOC.name}: no table right after {SUMMARY_LEAD!r}")
    end = doc.find("\n\n", begin + 1)
    end = len(doc) if end < 0 else end + 1
    return doc[: start + 1] + lead + "\n" + new_table + doc[end:]


def written(doc: str, runs: list[dict], model: dict[str, str], factors: dict[str, float]) -> str:
    """``doc`` with both §13.7 tables (and the summary's lead) as the generator writes them."""
    return replaced_summary(replaced(doc, table(runs)), summary_lead(factors), summary(runs, model))


def replaced(doc: str, new_table: str) -> str:
    """``doc`` with the table after the paragraph starting with LEAD replaced by ``new_table``; refused when
    the paragraph or its table is missing (the docs moved: update LEAD)."""
    start = doc.find("\n" + LEAD)
    if start < 0:
        raise SystemExit(f"{DOC.name}: no paragraph starting {LEAD!r}; update LEAD in {Path(__file__).name}")
    begin = doc.find("\n| run |", start)
    if begin < 0 or doc.find("\n\n", start) < begin - 1:
        raise SystemExit(f"{DOC.name}: no table right after {LEAD!r}")
    end = doc.find("\n\n", begin + 1)
    end = len(doc) if end < 0 else end + 1
    return doc[: begin + 1] + new_table + doc[end:]


def main(argv: list[str]) -> None:
    from planner.fidelity.validate import load_moe_runs, validate_moe

    runs = validate_moe()["runs"]
    model = {run.id: run.request["model"] for run in load_moe_runs()}
    if argv[1:] == ["--summary"]:
        print(summary_lead(shipped_factors()) + "\n" + summary(runs, model), end="")
    elif argv[1:] == ["--write"]:
        DOC.write_text(written(DOC.read_text(), runs, model, shipped_factors()))
        print(f"wrote the §13.7 summary and per-run tables of {DOC}")
    elif argv[1:]:
        raise SystemExit(__doc__)
    else:
        print(table(runs), end="")


if __name__ == "__main__":
    main(sys.argv)
