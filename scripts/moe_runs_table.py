#!/usr/bin/env python3
"""The per-run table of docs/cost-model.md §13.7 (the published MoE throughputs against megaplan's
predictions), from the current code and presets, so that it is regenerated instead of going stale.
Run it after a change that moves the MoE predictions (a refit, a physics change); about 5 s.
Usage: python scripts/moe_runs_table.py             (print the table)
       python scripts/moe_runs_table.py --write     (replace the table in docs/cost-model.md)
       python scripts/moe_runs_table.py --summary   (print median / max |error| by model and GPU)
"""

from __future__ import annotations

import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "cost-model.md"
LEAD = "Per run (`megaplan validate --json`, `moe.runs`"  # the paragraph the table follows
HEADER = ["| run | published | predicted | error | |", "|---|---:|---:|---:|---|"]


def table(runs: list[dict]) -> str:
    """The markdown table of ``megaplan validate --json``'s ``moe.runs``: published and predicted tokens/s per
    GPU, the error ((predicted − published) / published) and "apart" for a row reported apart from the bar."""
    rows = [
        f"| {r['id']} | {r['published']:.0f} | {r['predicted']:.0f} | {r['error_pct']:+.1f} % | "
        f"{'' if r['in_fit'] else 'apart'} |"
        for r in runs
    ]
    return "\n".join([*HEADER, *rows]) + "\n"


def _stats(rows: list[dict]) -> str:
    """'rows | median / max |error| % (rows in the bar) | apart' of ``rows`` (the bar: rows not reported apart)."""
    errors = sorted(abs(r["error_pct"]) for r in rows if r["in_fit"])
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
    lines.append(f"| **all** | all | {_stats(runs)} |")
    return "\n".join(lines) + "\n"


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
    text = table(runs)
    if argv[1:] == ["--summary"]:
        print(summary(runs, {run.id: run.request["model"] for run in load_moe_runs()}), end="")
    elif argv[1:] == ["--write"]:
        DOC.write_text(replaced(DOC.read_text(), text))
        print(f"wrote the §13.7 per-run table of {DOC}")
    elif argv[1:]:
        raise SystemExit(__doc__)
    else:
        print(text, end="")


if __name__ == "__main__":
    main(sys.argv)
