"""Which layers each pipeline stage holds: even, embedding/loss-accounted and explicit first/last
splits, and ``--pipeline-model-parallel-layout`` (Megatron-LM
megatron/core/transformer/pipeline_parallel_layer_layout.py at d98e8a64).

A layout lists the virtual pipeline stages in layer order, ``|`` between them, each a string of
``E`` (embedding), ``t`` (a decoder layer), ``m`` (a multi-token-prediction layer) and ``L``
(the loss); ``(…)*n`` and ``x*n`` repeat, commas are cosmetic. With p pipeline ranks and K virtual
stages, v = K/p chunks per rank and rank i holds the virtual stages i, i + p, i + 2p … .
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerError

LAYOUT_CHARS = "EtmL"
MAX_LAYOUT_CHARS = 2**17  # more than any model's layers (a layer count is < 2¹⁵) with a | between each and E, L


class _Unroll:
    """One pass of ``(…)*n`` / ``x*n`` repeats, refused once the layout it writes grows past any model's
    layers: ``t*99999999999`` was a MemoryError traceback."""

    def __init__(self, text: str):
        self.text, self.written = text, 0

    def __call__(self, mt: re.Match) -> str:
        body, n = mt.group(1), int(mt.group(2))
        self.written += len(body) * n
        if self.written > MAX_LAYOUT_CHARS:
            raise LayoutError(
                f"{self.text!r}: {mt.group()} repeats to more than {MAX_LAYOUT_CHARS:,} layers, more than any "
                f"model has; allowed: a repeat count the model's layers fill"
            )
        return body * n


class LayoutError(PlannerError, ValueError):
    """A layout string Megatron-LM would not accept (one line on stderr; a ValueError for the specs)."""


@dataclass(frozen=True)
class PipelineLayout:
    """The virtual stages of a layout in layer order (length p·v), each a string over E, t, m, L."""

    stages: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> PipelineLayout:
        """Megatron-LM's ``parse_str_to_list`` (pipeline_parallel_layer_layout.py:283-321): drop commas,
        unroll ``(…)*n`` then ``x*n``, split at ``|``."""
        flat = text.replace(",", "").replace(" ", "")
        for pattern in (r"\(([^)]+)\)\*([0-9]+)", r"(.)\*([0-9]+)"):  # [0-9]: \d takes ٢ (planner.whole)
            flat = re.sub(pattern, _Unroll(text), flat)
        bad = sorted(set(flat) - set(LAYOUT_CHARS + "|"))
        if bad:
            raise LayoutError(f"{text!r}: unknown layer character(s) {', '.join(bad)}; allowed E, t, m, L and |")
        return cls(tuple(flat.split("|")))

    @property
    def text(self) -> str:
        """A compact spelling Megatron-LM reads back: runs of equal stages as ``(…|)*n``, runs of
        equal layers as ``x*n``."""
        parts: list[str] = []
        i, k = 0, len(self.stages)
        while i < k:
            j = i
            while j + 1 < k and self.stages[j + 1] == self.stages[i]:
                j += 1
            body = _runs(self.stages[i])
            n = j - i + 1
            last = j == k - 1
            if n > 1 and not last:
                parts.append(f"({body}|)*{n}")
            elif n > 1:
                parts.append(f"({body}|)*{n - 1}{body}")
            else:
                parts.append(body + ("" if last else "|"))
            i = j + 1
        return "".join(parts)

    def ranks(self, p: int) -> list[list[str]]:
        """The chunks of each of the p ranks: rank i holds virtual stages i, i + p, … (Megatron-LM
        pipeline_parallel_layer_layout.py:48-55)."""
        v = len(self.stages) // p
        return [[self.stages[j * p + i] for j in range(v)] for i in range(p)]

    def problems(self, p: int, num_layers: int, mtp_layers: int) -> list[str]:
        """What Megatron-LM's checks (arguments.py:941-950, pipeline_parallel_layer_layout.py:86-151)
        reject in this layout for p ranks, L decoder layers and the MTP depth; empty if none."""
        k = len(self.stages)
        if k % p:
            return [f"{k} virtual stages are not divisible by pp {p}"]
        flat = "".join(self.stages)
        out = []
        if not flat.startswith("E") or flat.count("E") != 1:
            out.append("the embedding E must come first, exactly once")
        if not flat.endswith("L") or flat.count("L") != 1:
            out.append("the loss L must come last, exactly once")
        if flat.count("t") != num_layers:
            out.append(f"{flat.count('t')} decoder layers t, but the model has {num_layers}")
        if flat.count("m") != mtp_layers:
            out.append(f"{flat.count('m')} MTP layers m, but the model has {mtp_layers}")
        if "m" in flat and "t" in flat[flat.index("m") :]:
            out.append("every decoder layer t must come before the MTP layers m")
        ranks = self.ranks(p)
        for i, chunks in enumerate(ranks):
            if any("m" in c for c in chunks[:-1]):
                out.append(f"MTP layers must sit in the last chunk of their rank (rank {i})")
            if "m" in chunks[-1] and chunks[-1].count("m") != mtp_layers:
                out.append("all MTP layers must sit in one chunk")
        if any("m" in c for c in ranks[0][:-1]):
            out.append("MTP layers may not sit on the first rank")
        return out


def _runs(stage: str) -> str:
    out, i = [], 0
    while i < len(stage):
        j = i
        while j + 1 < len(stage) and stage[j + 1] == stage[i]:
            j += 1
        n = j - i + 1
        out.append(stage[i] + (f"*{n}" if n > 2 else stage[i] * (n - 1)))
        i = j + 1
    return "".join(out)


def balanced_layouts(num_layers: int, p: int, v: int, mtp_layers: int) -> list[PipelineLayout]:
    """Layouts search tries for p ranks of v chunks: K = p·v virtual stages, the middle ones n layers
    each, the first (with the embedding) and the last (with the MTP layers and the loss) sharing the
    rest, n_first + n_last = L − (K − 2)·n with 0 ≤ n_first, n_last ≤ n. For the smallest such n
    (the most even split), the rest goes either to the first stage first (a light last stage, which
    also computes the logits and the loss) or evenly."""
    k = p * v
    if p < 2 or k < 2:
        return []
    out: list[PipelineLayout] = []
    n = -(-num_layers // k)
    tried = 0
    while tried < 1 and n <= num_layers:
        rest = num_layers - (k - 2) * n
        if 0 <= rest <= 2 * n:
            tried += 1
            for first in sorted({min(n, rest), -(-rest // 2)}):
                last = rest - first
                stages = ("E" + "t" * first,) + ("t" * n,) * (k - 2) + ("t" * last + "m" * mtp_layers + "L",)
                out.append(PipelineLayout(stages))
        elif rest < 0:
            break
        n += 1
    return out


def explicit_split(L, p, first, last) -> tuple:
    """Megatron-LM's split with a first and/or last stage size given (--decoder-first/last-pipeline-num-layers;
    0: not given): the other stages share the rest evenly. Legal where there are middle stages and middle layers or
    neither ("Ensure you either have middle pp stages and layers or none of them"), the middle layers dividing over
    the middle stages, and p > 1 (transformer_config.py:2326-2340 @ d98e8a64): pp 2 with 38 + 42 of 80 layers runs,
    pp 4 with 40 + 40 leaves two stages empty and is refused. Scalars or arrays (one plan, or search's grid).
    Returns (layers per middle stage, legal)."""
    first, last = np.asarray(first), np.asarray(last)
    others = p - (first > 0).astype(np.int64) - (last > 0).astype(np.int64)
    stages = np.maximum(others, 1)
    rest = L - first - last
    with_middle = (others > 0) & (rest > 0) & (rest % stages == 0)
    return rest // stages, (rest >= 0) & (np.asarray(p) > 1) & (with_middle | ((others == 0) & (rest == 0)))


@dataclass(frozen=True)
class StageContents:
    """What each of the p ranks holds: decoder layer ids (in order), MTP layers, the embedding and the loss."""

    layers: tuple[tuple[int, ...], ...]
    mtp: tuple[int, ...]
    embedding: tuple[bool, ...]
    loss: tuple[bool, ...]


def _chunk_sizes(num_layers: int, p: int, v: int, split: int, first: int, last: int) -> list[list[int]] | None:
    """Decoder layers of each rank's v chunks without a layout (Megatron-LM transformer_block.py:76-200,
    transformer_layer.py:65-200): accounted splits count the embedding (split 1, 3) and the loss
    (split 2, 3) as one layer of the first and last virtual stage; explicit first/last stage sizes
    split each stage evenly into its v chunks. None if Megatron-LM would reject the split."""
    if p == 1:
        return [[num_layers]] if v == 1 and not (first or last) else None
    if first or last:
        n_first, n_last = first or None, last or None
        mid, legal = explicit_split(num_layers, p, first, last)
        if not legal:
            return None
        sizes = [int(mid)] * p
        if n_first is not None:
            sizes[0] = n_first
        if n_last is not None:
            sizes[-1] = n_last
        if any(s % v for s in sizes):
            return None
        return [[s // v] * v for s in sizes]
    e, lo = int(split in (1, 3)), int(split in (2, 3))
    total = num_layers + e + lo
    if total % p or (total // p) % v:
        return None
    per = total // (p * v)
    chunks = [[per] * v for _ in range(p)]
    chunks[0][0] -= e
    chunks[-1][-1] -= lo
    return None if chunks[0][0] < 0 or chunks[-1][-1] < 0 else chunks


@functools.lru_cache(maxsize=4096)
def stage_contents(
    num_layers: int, mtp_layers: int, p: int, v: int, split: int, first: int, last: int, layout: str | None
) -> StageContents | None:
    """The layers of each rank for one plan, or None if Megatron-LM would reject the split. Without
    a layout the MTP layers sit on the last rank (Megatron-LM's default placement)."""
    if layout:
        lay = PipelineLayout.parse(layout)
        if lay.problems(p, num_layers, mtp_layers) or len(lay.stages) != p * v:
            return None
        ranks = lay.ranks(p)
        flat_ids, next_id = {}, 0
        for j in range(v):  # virtual stages in layer order: chunk j of every rank
            for i in range(p):
                count = ranks[i][j].count("t")
                flat_ids[(i, j)] = tuple(range(next_id, next_id + count))
                next_id += count
        layers = tuple(tuple(x for j in range(v) for x in flat_ids[(i, j)]) for i in range(p))
        mtp = tuple(sum(c.count("m") for c in ranks[i]) for i in range(p))
        embedding = tuple(any("E" in c for c in ranks[i]) for i in range(p))
        loss = tuple(any("L" in c for c in ranks[i]) for i in range(p))
        return StageContents(layers, mtp, embedding, loss)
    sizes = _chunk_sizes(num_layers, p, v, split, first, last)
    if sizes is None:
        return None
    ids: list[list[int]] = [[] for _ in range(p)]
    next_id = 0
    for j in range(v):
        for i in range(p):
            ids[i].extend(range(next_id, next_id + sizes[i][j]))
            next_id += sizes[i][j]
    mtp = tuple(mtp_layers if i == p - 1 else 0 for i in range(p))
    return StageContents(
        tuple(tuple(x) for x in ids), mtp, tuple(i == 0 for i in range(p)), tuple(i == p - 1 for i in range(p))
    )


COUNT_FIELDS = ("layers", "moe", "window", "mtp", "first", "last", "bf16", "bf16_moe", "bf16_window")


def bf16_pattern(num_layers: int, start: int, end: int) -> tuple[bool, ...]:
    """Which decoder layers run outside the FP8 context with --first-last-layers-bf16: global layer numbers
    below N = ``start`` or at least L − M (M = ``end``) (Megatron-Core fp8_utils.py is_first_last_bf16_layer @
    d98e8a64, which TransformerBlock calls with each layer's global number, so the pipeline stage and model chunk
    holding it follow from the split); () when none does."""
    if not start and not end:
        return ()
    return tuple(x < start or x >= num_layers - end for x in range(num_layers))


def stage_counts(
    contents: StageContents,
    moe_pattern: tuple[bool, ...],
    window_pattern: tuple[bool, ...],
    bf16: tuple[bool, ...] = (),
) -> np.ndarray:
    """Per rank: [decoder layers, of them MoE, of them sliding-window, MTP layers, embedding, loss, BF16 layers
    (``bf16_pattern``; () for none), of them MoE, of them sliding-window]."""

    def ends(ids) -> list[int]:
        if not bf16:
            return [0, 0, 0]
        return [sum(bf16[x] for x in ids), sum(bf16[x] and moe_pattern[x] for x in ids),
                sum(bf16[x] and window_pattern[x] for x in ids)]  # fmt: skip

    return np.array(
        [
            [len(ids), sum(moe_pattern[x] for x in ids), sum(window_pattern[x] for x in ids), mtp, emb, loss]
            + ends(ids)
            for ids, mtp, emb, loss in zip(
                contents.layers, contents.mtp, contents.embedding, contents.loss, strict=True
            )
        ],
        dtype=np.int64,
    )
