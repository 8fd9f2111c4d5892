#!/usr/bin/env python3
"""Write planner/fidelity/evidence_counts.py: per GPU generation, feature kind and code, the distinct
published settings that use it (``planner.fidelity.evidence.counted_settings``, computed from the
reference runs: fitted or held out), the held-out part apart (``held_out_settings``), and for the codes only
held-out settings use, how far their rows' steps are predicted (``held_only_errors``: validate's rows). A search
reads the written tables instead of building every reference run's plan request (about 40 ms and 27
preset files a process). Run it after the reference runs, the presets
they name or the feature codes change; tests/test_evidence.py checks the file equals the live count.
Usage: python scripts/evidence_counts.py
"""

from __future__ import annotations

import math
from pathlib import Path

from planner.fidelity.evidence import (
    CONTRADICTIONS,
    LABELS,
    counted_settings,
    generation,
    held_out_settings,
    reference_settings,
)
from planner.presets import load_hardware, preset_names

TARGET = Path(__file__).resolve().parent.parent / "planner" / "fidelity" / "evidence_counts.py"
HEADER = '''"""Written by scripts/evidence_counts.py (do not edit by hand): per GPU generation (compute capability
major), feature kind and code, the distinct published settings of the reference runs that use it, fitted or
held out (``planner.fidelity.evidence.counted_settings``), and in HELD_OUT those whose every row is held out
(validated out of sample, never fitted: ``held_out_settings``). HELD_ONLY: for a code no fitted setting uses, its
held-out rows in the bar and r = ln(predicted step time / published), over them: (rows, RMS, lowest, highest)
(``held_only_errors``). CONTRADICTED: per hardware preset of a ``planner.fidelity.evidence.Contradiction``, the same
over its rows, set apart in validate (``contradicted_errors``). A generation absent here has no reference run.
tests/test_evidence.py checks these tables equal the live count."""
'''


def generations() -> list[int]:
    """Every generation of a shipped hardware preset or a reference run."""
    shipped = {generation(load_hardware(name)) for name in preset_names("hardware")}
    return sorted(shipped | {s.generation for s in reference_settings()})


def step_log_ratio(row: dict) -> float:
    """r = ln(predicted step time / published) of a validate row: its metric's ratio, inverted for a rate (tokens/s,
    TFLOP/s, MFU: the higher the faster). r < 0: the model is fast."""
    r = math.log(row["predicted"] / row["published"])
    return r if "time" in row["metric"] else -r


def held_only_errors(major: int, rows: dict[str, dict]) -> dict[str, dict[int, tuple]]:
    """Per feature kind, the codes of generation ``major`` that only held-out settings use (no fitted setting), with
    (rows, RMS of r, lowest r, highest r) over those settings' rows in the bar (``rows``: validate's, dense and MoE,
    by id; ``step_log_ratio``), rounded to 1e-4."""
    counts, held = counted_settings(major), held_out_settings(major)
    behind: dict[tuple[str, int], list[str]] = {}
    for s in reference_settings(major):
        if s.generation != major or not s.held_out:
            continue
        for kind, codes in s.codes.items():
            for code in codes:
                if counts[kind].get(code) == held[kind].get(code):
                    behind.setdefault((kind, code), []).extend(s.rows)
    out: dict[str, dict[int, tuple]] = {kind: {} for kind in LABELS}
    for (kind, code), ids in behind.items():
        r = [step_log_ratio(rows[i]) for i in ids if i in rows and rows[i]["in_bar"]]
        if r:
            out[kind][code] = log_ratio_stats(r)
    return out


def log_ratio_stats(r: list[float]) -> tuple:
    """(rows, RMS, lowest, highest) of the r = ln(predicted/published step) values ``r``, rounded to 1e-4."""
    rms = math.sqrt(sum(x * x for x in r) / len(r))
    return (len(r), round(rms, 4), round(min(r), 4), round(max(r), 4))


def contradicted_errors(rows: dict[str, dict]) -> dict[str, tuple]:
    """Per preset of a ``Contradiction``: (rows, RMS of r, lowest r, highest r) over its rows (``rows``: validate's,
    by id; set apart, so in no bar: every row counts)."""
    return {c.preset: log_ratio_stats([step_log_ratio(rows[i]) for i in c.rows]) for c in CONTRADICTIONS}


def validated_rows() -> dict[str, dict]:
    """validate's rows, dense and MoE, by id."""
    from planner.fidelity.validate import validate

    out = validate()
    return {r["id"]: r for r in [*out["runs"], *out["moe"]["runs"]]}


def table_text() -> str:
    lines = [HEADER]
    for name, count in (("COUNTS", counted_settings), ("HELD_OUT", held_out_settings)):
        lines.append(f"\n{name} = {{\n")
        for major in generations():
            counts = count(major)
            if not any(counts.values()):
                continue
            lines.append(f"    {major}: {{\n")
            for kind in LABELS:
                entries = ", ".join(f"{code}: {n}" for code, n in sorted(counts[kind].items()))
                lines.append(f'        "{kind}": {{{entries}}},\n')
            lines.append("    },\n")
        lines.append("}\n")
    rows = validated_rows()
    lines.append("\nHELD_ONLY = {\n")
    for major in generations():
        errors = {kind: codes for kind, codes in held_only_errors(major, rows).items() if codes}
        if not errors:
            continue
        lines.append(f"    {major}: {{\n")
        for kind, codes in errors.items():
            entries = ", ".join(f"{code}: {values}" for code, values in sorted(codes.items()))
            lines.append(f'        "{kind}": {{{entries}}},\n')
        lines.append("    },\n")
    lines.append("}\n")
    entries = [f'"{preset}": {values}' for preset, values in contradicted_errors(rows).items()]
    one_line = "CONTRADICTED = {" + ", ".join(entries) + "}"
    if len(one_line) <= 120:  # as ruff formats it (the project's line length)
        lines.append(f"\n{one_line}\n")
    else:
        lines.append("\nCONTRADICTED = {\n" + "".join(f"    {e},\n" for e in entries) + "}\n")
    return "".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Write the tables (no options: ``--help`` prints this script's use and writes nothing)."""
    import argparse

    argparse.ArgumentParser(
        description="Write planner/fidelity/evidence_counts.py from the reference runs (tests/test_evidence.py checks)."
    ).parse_args(argv)
    TARGET.write_text(table_text())
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
