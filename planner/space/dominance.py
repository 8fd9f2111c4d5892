"""Plans that spend memory-saving work on nothing: the same plan as another but recomputing more, no faster
and holding no less memory per GPU. The search drops them before it ranks (``planner.search``).

In DeepSeek-V3 ``--recompute-modules mlp`` recomputes the MLP of the 3 dense layers only (Megatron-LM recomputes
the ``mlp`` module in dense layers: transformer_layer.py ``if "mlp" in recompute_modules: if not
self.is_moe_layer``); where they sit on a stage that is neither the memory peak nor the bottleneck, the plan with
``rc-mlp`` costs a little time and saves no memory: half of the top 10 of DeepSeek-V3 on 1024 H100 were such
twins. The search varies one kind of memory-saving work per plan: recomputation (none, selective with one set of
modules, full by uniform groups or by the first N layers of each chunk). CPU offloading is the context's, the same
for every plan, so no plan of a search offloads more than another.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Two peaks closer than this are the same memory: the PyTorch caching allocator hands out large blocks in multiples
# of 2 MiB (c10/cuda/CUDACachingAllocator.cpp: kRoundLarge = kSmallBuffer = 2 MiB), so a plan holding less than
# 2 MiB less need not reserve a block less. It is far below the table's 0.1 GiB step (a saving under it shows as the
# same GiB or 0.1 apart). Savings measured between such twins (DeepSeek-V3 on 1024 and 2048 H100): 0 for most,
# then 0.2, 0.6, 0.7 MiB, then 4-110 MiB (kept: a saving, however small).
MEMORY_TIE_BYTES = 2 * 2**20
# No faster: the time at most this share below the other's. Times of plans doing the same work but for the
# recomputation are summed in the same order; this absorbs float rounding only (55 ns of a 55 s iteration).
TIME_TIE_FRAC = 1e-9
WORK_FIELDS = ("recompute", "recompute_block", "recompute_layers")  # the grid's columns of memory-saving work
DROPPED_RULE = (
    "a plan that differs from another only in recomputing more (selective over none, full over selective or none, "
    "block recomputation of more layers, uniform over block), is no faster and holds less than 2 MiB less memory "
    "per GPU is dropped (--recompute pinned lists every plan of the kinds asked for)"
)


def recomputes_more(recompute_a, block_a, layers_a, recompute_b, block_b, layers_b) -> np.ndarray:
    """Whether plan a's recomputation re-runs everything plan b's does and more (per row; the grid's codes:
    recompute 0 none, 1 selective, 2 full; block: full by --recompute-method block; layers: --recompute-num-layers).
    One search's selective plans all recompute the same modules, and full recomputation re-runs every module of a
    layer: full uniform (every layer) over selective; over none, any recomputation; full block of N layers per chunk
    over block of fewer, and uniform over block. Uniform groups of another size re-run the same layers (not more),
    and block over selective re-runs some layers whole and others not at all: neither is more."""
    full_a, full_b = recompute_a == 2, recompute_b == 2
    uniform_a = full_a & ~block_a
    over_none = (recompute_b == 0) & (recompute_a != 0)
    over_selective = (recompute_b == 1) & uniform_a
    over_block = full_b & block_b & (uniform_a | (full_a & block_a & (layers_a > layers_b)))
    return over_none | over_selective | over_block


@dataclass(frozen=True)
class RecomputeTwins:
    """The pairs of rows of one set of plans that differ only in their recomputation (``more`` recomputes more than
    ``less``: ``recomputes_more``), found once from the rows' other fields (``keys``: equal exactly when every field
    but ``WORK_FIELDS`` is, and the overlap the search picks per row) and judged on their times and peaks."""

    more: np.ndarray
    less: np.ndarray
    keys: np.ndarray  # each row's key (the twins of a row share it)

    @classmethod
    def of(cls, keys: np.ndarray, work: tuple[np.ndarray, np.ndarray, np.ndarray]) -> RecomputeTwins:
        """The twins among rows whose keys are ``keys`` and whose ``WORK_FIELDS`` are ``work``: rows of equal keys
        are neighbours once sorted, and a key holds a few rows (none, selective, full uniform, full block), so
        each row is paired with the next d rows for d = 1, 2, … while any pair shares a key."""
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        more, less = [], []
        for d in range(1, len(keys)):
            same = np.flatnonzero(sorted_keys[:-d] == sorted_keys[d:])
            if not len(same):
                break
            a, b = order[same], order[same + d]
            for x, y in ((a, b), (b, a)):
                yes = recomputes_more(*(w[x] for w in work), *(w[y] for w in work))
                more.append(x[yes])
                less.append(y[yes])
        join = (lambda parts: np.concatenate(parts)) if more else (lambda _: np.zeros(0, dtype=np.int64))
        return cls(join(more), join(less), keys)

    def dominated(self, iteration_s: np.ndarray, peak_bytes: np.ndarray) -> np.ndarray:
        """Rows that recompute more than a twin, are no faster (``TIME_TIE_FRAC``) and hold no less memory
        (``MEMORY_TIE_BYTES``): judged only where both times are known (a row not timed yet is infinite)."""
        it_a, it_b = iteration_s[self.more], iteration_s[self.less]
        known = np.isfinite(it_a) & np.isfinite(it_b)
        slower = it_a >= it_b * (1 - TIME_TIE_FRAC)
        no_less = peak_bytes[self.more] >= peak_bytes[self.less] - MEMORY_TIE_BYTES
        out = np.zeros(len(iteration_s), dtype=bool)
        out[self.more[known & slower & no_less]] = True
        return out

    def to_decide(self, rows: np.ndarray, listed: np.ndarray, iteration_s: np.ndarray, peak_bytes: np.ndarray):
        """The rows whose times decide which of ``rows`` (positions) are dropped: each one's twins recomputing less
        (what could drop it), each one not timed yet (its time infinite) that holds no less memory than such a twin
        (a row's peak only falls when timed: it may keep its version without --tp-comm-overlap), and every row
        sharing a key with one ``listed`` (positions: the twins the listing counts as dropped). A mask."""
        mark = np.zeros(len(self.keys), dtype=bool)
        mark[rows] = True
        pairs = mark[self.more]
        out = self.sharing(listed)
        out[self.less[pairs]] = True
        no_less = peak_bytes[self.more] >= peak_bytes[self.less] - MEMORY_TIE_BYTES
        out[self.more[pairs & no_less & ~np.isfinite(iteration_s[self.more])]] = True
        return out

    def sharing(self, listed: np.ndarray) -> np.ndarray:
        """The rows that share a key with a row of ``listed`` (positions), as a mask."""
        return np.isin(self.keys, self.keys[listed])
