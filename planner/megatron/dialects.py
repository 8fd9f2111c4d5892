"""Flags that today's Megatron-LM parser does not have but launch scripts do: those of older
Megatron-LM releases, of the nvidia-modelopt arguments ``pretrain_gpt.py`` adds, of DeepSpeed and of
the Megatron-DeepSpeed forks (Microsoft's and BigScience's).

The table ``data/fork_flags.json`` is dumped by ``scripts/dump_fork_flags.py`` from each source's
``arguments.py`` (the sources, with commits, are in the file). The importer reads such a flag with
its values, maps the few that change the plan (``planner.megatron.deepspeed``) and lists the rest
once as not affecting the estimate.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class ForkFlag:
    """A flag of an older release or a fork: whether it takes a value, how many, and where it is from."""

    flag: str
    takes_value: bool
    nargs: int | str | None
    dialects: tuple[str, ...]

    @property
    def origin(self) -> str:
        """Where the flag is from, in a few words: the forks, or the newest Megatron-LM release that had it."""
        megatron = [d for d in self.dialects if d.startswith("Megatron-LM ")]
        others = [d for d in self.dialects if not d.startswith("Megatron-LM ")]
        parts = others[:]
        if megatron:
            parts.insert(0, megatron[0] if len(megatron) == 1 else f"{megatron[0]} to {megatron[-1].split()[-1]}")
        return ", ".join(parts)


@functools.cache
def _table() -> dict:
    text = resources.files("planner.megatron.data").joinpath("fork_flags.json").read_text("utf-8")
    return json.loads(text)


@functools.cache
def fork_flags() -> dict[str, ForkFlag]:
    return {
        flag: ForkFlag(flag, bool(v["takes_value"]), v["nargs"], tuple(v["dialects"]))
        for flag, v in _table()["flags"].items()
    }


def fork_flag(flag: str) -> ForkFlag | None:
    return fork_flags().get(flag)


def fork_sources() -> dict[str, str]:
    return dict(_table()["sources"])


# values that forks (or older releases) allow for a flag today's parser has: dest -> {value: today's value}
FORK_CHOICES: dict[str, dict[str, str]] = {
    "tokenizer_type": {
        "PretrainedFromHF": "HuggingFaceTokenizer",  # BigScience Megatron-DeepSpeed
        "HFTokenizer": "HuggingFaceTokenizer",  # Microsoft Megatron-DeepSpeed
    },
    "position_embedding_type": {
        "absolute": "learned_absolute",  # BigScience Megatron-DeepSpeed names
        "rotary": "rope",
        "alibi": "none",  # ALiBi has no parameters; its attention bias is not modelled (a note says so)
    },
}
