"""Write a hardware YAML's ``attention`` and ``calibration`` sections, keeping the rest of the file -
comments included - as it was (``megaplan calibrate --write`` and ``--from-log -o``)."""

from __future__ import annotations

import json
import re

from planner.hardware.calibration import Calibration
from planner.hardware.spec import Accuracy, AttentionKernelSpec


def _number(x: float) -> str:
    """Four significant digits, never in exponent form (YAML 1.1 reads '1e-10' as a string)."""
    if abs(x) < 5e-5:
        return "0"
    text = f"{x:.4g}" if abs(x) < 1e5 else f"{x:.6g}"
    return text if "e" not in text else f"{x:.6f}".rstrip("0").rstrip(".")


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def calibration_block(cal: Calibration) -> str:
    """The ``calibration:`` section: each value, then each factor's status, band, sigma and source."""
    lines = ["calibration:"]
    names = [n for n in type(cal).model_fields if n != "factors" and getattr(cal, n) is not None]
    lines += [f"  {n}: {_number(getattr(cal, n))}" for n in names]
    lines.append("  factors:")
    for n in names:
        f = cal.factors[n]
        lines.append(f"    {n}:")
        lines.append(f"      status: {f.status}")
        if f.band is not None:
            lines.append(f"      band: [{_number(f.band[0])}, {_number(f.band[1])}]")
        if f.sigma is not None:
            lines.append(f"      sigma: {f.sigma:.2g}")
        if f.prior is not None:
            per = f", per: {f.prior.per}" if f.prior.per else ""
            lines.append(f"      prior: {{value: {_number(f.prior.value)}, sigma: {_number(f.prior.sigma)}{per}}}")
        if f.loso is not None:
            d = f.loso
            lines.append(f"      loso: {{low: {_number(d.low)}, high: {_number(d.high)}, sources: {d.sources}}}")
        lines.append(f"      source: {_quote(f.source)}")
    return "\n".join(lines) + "\n"


def attention_block(spec: AttentionKernelSpec) -> str:
    lines = ["attention:", f"  kernel: {_quote(spec.kernel)}"]
    names = [n for n in type(spec).model_fields if n not in ("kernel", "sources")]
    lines += [f"  {n}: {_number(getattr(spec, n))}" for n in names]
    lines.append("  sources:")
    lines += [f"    {n}: {_quote(spec.sources[n])}" for n in names if n in spec.sources]
    return "\n".join(lines) + "\n"


def accuracy_block(acc: Accuracy) -> str:
    lines = ["accuracy:"]
    names = [n for n in type(acc).model_fields if n != "sources" and getattr(acc, n) is not None]
    lines += [f"  {n}: {v}" if isinstance(v := getattr(acc, n), int) else f"  {n}: {v:.3f}" for n in names]
    lines.append("  sources:")
    lines += [f"    {n}: {_quote(text)}" for n, text in acc.sources.items()]
    return "\n".join(lines) + "\n"


def replace_section(text: str, name: str, block: str, *, before: str | None = None) -> str:
    """``text`` with its top-level ``name:`` section replaced by ``block`` (or inserted before the
    top-level section ``before``, or at the end, when it has none)."""
    pattern = re.compile(rf"(?ms)^{re.escape(name)}:\n.*?(?=^\S|\Z)")
    if pattern.search(text):
        return pattern.sub(lambda _: block, text, count=1)
    if before is not None:
        anchor = re.search(rf"(?m)^{re.escape(before)}:", text)
        if anchor:
            return text[: anchor.start()] + block + text[anchor.start() :]
    return text.rstrip("\n") + "\n" + block
