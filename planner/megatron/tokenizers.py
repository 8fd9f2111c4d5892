"""The vocabulary of a launch script's tokenizer, as ``pretrain_gpt.py`` would build it.

Megatron-LM builds the tokenizer from ``--tokenizer-type`` (``megatron/training/tokenizer``): the GPT-2
BPE for ``GPT2BPETokenizer`` (also what a script with ``--vocab-file``/``--merge-file`` and no type, or
no tokenizer flags at all, describes), the Llama 2 SentencePiece model for ``Llama2Tokenizer``, and a
Hugging Face or SentencePiece tokenizer named by ``--tokenizer-model`` otherwise. Sizes are never
written here: they are the vocabularies of the model presets whose tokenizers the names match
(``presets/reference/tokenizers.csv``).
"""

from __future__ import annotations

import csv
import functools
import io
import re

from planner.presets import load_model, preset_names, presets_root

GPT2_BPE_VOCAB = 50257  # entries of gpt2-vocab.json (Radford et al. 2019); the gpt3-175b preset's vocabulary
PRESET_OF_TYPE = {"Llama2Tokenizer": "llama2-7b", "GPT2BPETokenizer": "gpt3-175b"}
NAMED_TYPES = {"HuggingFaceTokenizer", "SentencePieceTokenizer", "GPTSentencePieceTokenizer"}
KNOWN_TYPES = {  # --tokenizer-type's choices in Megatron-LM's arguments.py (planner/megatron/data)
    "BertWordPieceLowerCase",
    "BertWordPieceCase",
    "GPT2BPETokenizer",
    "SentencePieceTokenizer",
    "GPTSentencePieceTokenizer",
    "HuggingFaceTokenizer",
    "Llama2Tokenizer",
    "TikTokenizer",
    "MultimodalTokenizer",
    "NullTokenizer",
    "NullMultimodalTokenizer",
    "SFTTokenizer",
}


@functools.cache
def tokenizer_table() -> tuple[tuple[re.Pattern, str, str], ...]:
    """(pattern on a tokenizer's name or path, preset whose vocabulary it has, the tokenizer's name)."""
    text = (presets_root() / "reference" / "tokenizers.csv").read_text(encoding="utf-8")
    return tuple(
        (re.compile(row["pattern"], re.IGNORECASE), row["preset"], row["tokenizer"])
        for row in csv.DictReader(io.StringIO(text))
    )


def _own_preset(text: str, pattern: re.Pattern) -> str | None:
    """The model preset a tokenizer's name or path names itself (``Qwen/Qwen3-235B-A22B``: qwen3-235b-a22b),
    of the tokenizer's family; None when no preset has its name."""
    name = text.rstrip("/").rsplit("/", 1)[-1].lower()
    return name if name in preset_names("models") and pattern.search(name) else None


def _preset_vocab(preset: str) -> int:
    return load_model(preset).vocab_size


def tokenizer_vocab(v: dict, fork: dict[str, list[str]]) -> tuple[int | None, str]:
    """(vocabulary size, how it was found) of the tokenizer a parsed command line describes; None when
    the tokenizer is named but not one megaplan knows."""
    kind = v.get("tokenizer_type")
    name = v.get("tokenizer_model") or " ".join(fork.get("--tokenizer-name-or-path", []))
    if kind in PRESET_OF_TYPE:
        return _preset_vocab(PRESET_OF_TYPE[kind]), f"--tokenizer-type {kind}"
    if kind is None and not name:
        reason = "--vocab-file/--merge-file: the GPT-2 BPE" if v.get("vocab_file") else "no tokenizer flags: "
        reason += "" if v.get("vocab_file") else "pretrain_gpt.py's default, the GPT-2 BPE"
        return GPT2_BPE_VOCAB, reason
    unknown = kind is not None and kind not in KNOWN_TYPES  # a fork's tokenizer type, e.g. DeepSeekV3Tokenizer
    for pattern, preset, tokenizer in tokenizer_table():
        for flag, text in (("--tokenizer-model", name), ("--tokenizer-type", kind if unknown else None)):
            if text and pattern.search(text):
                preset = _own_preset(text, pattern) or preset  # a model with a preset of its own: its vocabulary
                return _preset_vocab(preset), f"{flag} {text}: {tokenizer} (preset {preset})"
    if unknown:
        return None, f"--tokenizer-type {kind} is not a tokenizer today's Megatron-LM builds"
    return None, f"--tokenizer-type {kind} --tokenizer-model {name or '(none)'}"
