#!/usr/bin/env python3
"""Write planner/fidelity/evidence_counts.py: per GPU generation, feature kind and code, the distinct
published settings that use it (``planner.fidelity.evidence.counted_settings``, computed from the
reference runs: fitted or held out), and the held-out part apart (``held_out_settings``). A search
reads the written tables instead of building every reference run's plan request (about 40 ms and 27
preset files a process). Run it after the reference runs, the presets
they name or the feature codes change; tests/test_evidence.py checks the file equals the live count.
Usage: python scripts/evidence_counts.py
"""

from __future__ import annotations

from pathlib import Path

from planner.fidelity.evidence import LABELS, counted_settings, generation, held_out_settings, reference_settings
from planner.presets import load_hardware, preset_names

TARGET = Path(__file__).resolve().parent.parent / "planner" / "fidelity" / "evidence_counts.py"
HEADER = '''"""Written by scripts/evidence_counts.py (do not edit by hand): per GPU generation (compute capability
major), feature kind and code, the distinct published settings of the reference runs that use it, fitted or
held out (``planner.fidelity.evidence.counted_settings``), and in HELD_OUT those whose every row is held out
(validated out of sample, never fitted: ``held_out_settings``). A generation absent here has no reference run.
tests/test_evidence.py checks these tables equal the live count."""
'''


def generations() -> list[int]:
    """Every generation of a shipped hardware preset or a reference run."""
    shipped = {generation(load_hardware(name)) for name in preset_names("hardware")}
    return sorted(shipped | {s.generation for s in reference_settings()})


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
