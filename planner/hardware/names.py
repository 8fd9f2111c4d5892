"""The hardware preset of each GPU by the name launch scripts and recipes give it (``h100``, ``GB200``)."""

from __future__ import annotations

import re

PRESET_BY_GPU = {  # the GPU as NVIDIA names it -> the shipped preset of the system built from it
    "A100": "dgx-a100-superpod",
    "H100": "dgx-h100-superpod",
    "H200": "dgx-h200-superpod",
    "B200": "dgx-b200-superpod",
    "B300": "dgx-b300-superpod",
    "GB200": "gb200-nvl72",
    "GB300": "gb300-nvl72",
}

# a GPU's name as a word of a file name: train_llama3_8b_h100_fp8.sh, not a part of another word (gb200 is not b200)
_IN_NAME = re.compile(
    r"(?<![a-z0-9])(" + "|".join(sorted(PRESET_BY_GPU, key=len, reverse=True)) + r")(?![a-z0-9])", re.I
)


def gpu_in_name(name: str) -> tuple[str, str] | None:
    """(the GPU, its preset) a file name states as one of its words, if it names exactly one GPU."""
    found = {m.group(1).upper() for m in _IN_NAME.finditer(name)}
    if len(found) != 1:
        return None
    gpu = found.pop()
    return gpu, PRESET_BY_GPU[gpu]
