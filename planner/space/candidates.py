"""The candidate grid: every combination of the searched knobs for N GPUs, built with numpy
cartesian products (no Python loop over plans); pins narrow an axis to one value.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from planner.costs.pipeline import smallest_microbatch_group
from planner.models.pipeline_layout import LayoutError, PipelineLayout, balanced_layouts
from planner.plan import (
    DISPATCHER_CODES,
    RECOMPUTE_CODES,
    SPLIT_CODES,
    AttentionKernel,
    Context,
    FsdpSharding,
    Recompute,
    RecomputeMethod,
    RecomputeModule,
    StageSplit,
    TokenDispatcher,
)
from planner.space.grid import COLUMNS, OPTION_COLUMNS, PlanGrid, distinct, shared_constant, stage_layers
from planner.space.warnings import no_dense

SEARCHED_MODULES = {  # selective recomputation's modules when not pinned, by attention kernel
    AttentionKernel.FLASH: (RecomputeModule.MLP,),  # flash attention keeps no scores: the MLP is what saves memory
    AttentionKernel.UNFUSED: (RecomputeModule.CORE_ATTN,),  # Korthikanti et al. 2022's selective recomputation
}
# A multi-latent-attention model's under flash attention: its up-projections (mla_up_proj), what every published
# DeepSeek-V3 recipe that recomputes selectively names (Megatron-Bridge's B200, B300, GB200 and H100 tables, the
# verification cards, DGX Cloud's; with mlp on H100 and B200 26.04.01): they rebuild q, k and v of 128 heads from
# the latents, where the mlp module reaches only DeepSeek-V3's first three dense layers
MLA_SEARCHED_MODULES = (RecomputeModule.MLA_UP_PROJ,)


def searched_modules(ctx: Context) -> tuple[RecomputeModule, ...]:
    """Selective recomputation's modules search builds its rows with when none are pinned: ``MLA_SEARCHED_MODULES``
    for a multi-latent-attention model under flash attention, else ``SEARCHED_MODULES`` of the attention kernel."""
    if ctx.model.multi_latent_attention and ctx.options.attention_kernel is AttentionKernel.FLASH:
        return MLA_SEARCHED_MODULES
    return SEARCHED_MODULES[ctx.options.attention_kernel]


MIN_CP_TOKENS = 4096  # context parallelism is searched while each rank keeps at least this many tokens
MAX_LAYOUT_CHUNKS = 8  # search tries pipeline layouts of up to this many chunks per stage


def divisors(n: int) -> np.ndarray:
    """The divisors of n, ascending (trial division up to √n: fast for any GPU count)."""
    low = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return np.array(sorted(set(low + [n // k for k in low])), dtype=np.int64)


def cp_searched(seq_len: int, c: int) -> bool:
    """Context-parallel sizes search tries: 1, or c with s divisible by 2·c (Megatron's rule) that
    leaves each rank at least MIN_CP_TOKENS tokens."""
    return c == 1 or (seq_len % (2 * c) == 0 and seq_len // c >= MIN_CP_TOKENS)


@dataclass(frozen=True)
class Pins:
    """Knobs fixed by the user; None searches every legal value."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    cp: int | None = None
    ep: int | None = None
    etp: int | None = None
    fsdp: bool | None = None
    vpp: int | None = None
    micro_batch: int | None = None
    recompute: Recompute | tuple[Recompute, ...] | None = None
    recompute_method: RecomputeMethod | None = None  # full: None searches uniform and block (layers solved)
    recompute_num_layers: int | None = None
    sequence_parallel: bool | None = None
    distributed_optimizer: bool | None = None
    stage_split: StageSplit | None = None
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    pipeline_layout: str | None = None
    moe_token_dispatcher: TokenDispatcher | str | None = None
    overlap_moe_expert_parallel_comm: bool | None = None
    # None: 1, and for Megatron FSDP the R whose replica (t·d·c/R GPUs) fills one NVLink domain (HSDP)
    distributed_optimizer_instances: int | None = None
    fsdp_outer_sharding: str | None = None  # --outer-dp-sharding-strategy (hybrid plans); None: optim where allowed
    fsdp_sharding: str | None = None  # --data-parallel-sharding-strategy; None: optim_grads and optim_grads_params
    microbatch_group_size: int | None = None  # interleaving's G; None: the smallest Megatron allows (pp when it can)
    max_tp: int | None = None
    recompute_modules: tuple | None = None  # selective recomputation's modules; None: the search picks them
    # the overlap flags: None takes today's recipes (Megatron-Bridge, NeMo): gradient reduction overlapped,
    # the parameter all-gather with the distributed optimizer, TP communication with sequence parallelism
    overlap_grad_reduce: bool | None = None
    overlap_param_gather: bool | None = None
    tp_comm_overlap: bool | None = None


NO_PINS = Pins()  # search every knob


def expert_pin_error(model, pins: Pins) -> str | None:
    """A pinned --ep that no GPU count can make legal: it must divide the model's experts (Megatron-LM
    shards whole experts over the expert-parallel group, arguments.py: num_experts % ep == 0)."""
    if pins.ep is None or pins.ep == 1:
        return None
    if not model.is_moe:
        return f"--ep {pins.ep}: {model.name} has no experts (a dense model); allowed: --ep 1"
    if model.num_experts % pins.ep:
        allowed = ", ".join(str(int(d)) for d in divisors(model.num_experts))
        return f"--ep {pins.ep} must divide the {model.num_experts} experts of {model.name}; allowed: {allowed}"
    return None


def nvlink_domain_gpus(hw) -> int:
    """GPUs on one NVLink fabric: the node's, or a multi-node domain (NVL72) when the spec gives one."""
    return getattr(hw, "nvlink_domain_gpus", None) or hw.gpus_per_node


def tp_in_domain(tp: np.ndarray, domain_gpus: int, max_tp: int | None) -> np.ndarray:
    """TP groups that stay inside one NVLink domain: t divides the GPUs of a node, so no group of
    consecutive ranks straddles two nodes (a TP 3 group on 8-GPU nodes would, and its all-reduces
    would run on the network). With --max-tp above the node, whole-node multiples up to it are allowed
    too; those groups span nodes and are priced on the network (``hardware.collectives.group_link``)."""
    g = domain_gpus
    inside = (g % tp == 0) & (tp <= min(max_tp or g, g))
    across = (tp % g == 0) & (tp > g) & (tp <= (max_tp or g))
    return inside | across


def small(values) -> np.ndarray:
    """A knob's values in the smallest dtype the grid keeps them in: int8 for codes and flags' kin, int32
    for sizes (dp stays int64: it can be as large as the world). The cost functions read them as int64
    (``planner.costs.letters``), so only memory and copies shrink."""
    values = np.asarray(values)
    if values.dtype.kind in "iu" and values.dtype.itemsize > 4:
        return values.astype(np.int32)
    return values


def _cross(cols: dict[str, np.ndarray], name: str, values: np.ndarray) -> dict[str, np.ndarray]:
    """Every existing row combined with every value of a new axis."""
    n, k = len(next(iter(cols.values()))) if cols else 1, len(values)
    out = {key: np.repeat(col, k) for key, col in cols.items()}
    out[name] = np.tile(small(values), n)
    return out


def _keep(cols: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[mask] for k, v in cols.items()}


def _cross_keep(cols: dict[str, np.ndarray], name: str, values: np.ndarray, keep) -> dict[str, np.ndarray]:
    """``_keep(_cross(cols, name, values), keep(crossed))``, the same rows in the same order, without
    building the rows ``keep`` drops (``_cross_table``)."""
    return _cross_table(cols, {name: values}, keep)


def _cross_table(cols: dict[str, np.ndarray], table: dict[str, np.ndarray], keep, reads=None) -> dict[str, np.ndarray]:
    """Every row combined with every entry of ``table`` (columns of one length, entries in order) where
    ``keep`` holds: crossing the table's columns one after the other (``_cross``, ``_keep``) when the
    table is their product, in the same order, without building a row ``keep`` drops. ``keep`` reads
    each column as a (rows, 1) or (1, entries) array and answers for every pair (numpy broadcasting):
    the grid's memory is its largest before the rules, and DeepSeek-V3's MoE axes multiply it. With
    ``reads`` (the row columns ``keep`` reads; it is given no other) it answers once for each distinct
    combination of them (``_kept_pairs``). A column every row shares stays one value (``_repeated``)."""
    entries = {key: small(values) for key, values in table.items()}
    counts, which = _kept_pairs(cols, entries, keep, reads)
    out = {key: _repeated(col, counts) for key, col in cols.items()}  # each row as often as it keeps an entry
    return out | {key: _entries(v, which) for key, v in entries.items()}


def _entries(values: np.ndarray, which: np.ndarray) -> np.ndarray:
    """``values[which]``; a table column of one value as that value broadcast to the rows (``_repeated``)."""
    if len(which) > 1 and len(values) > 1 and values.min() == values.max():
        return np.broadcast_to(values[:1].copy(), (len(which),))
    return values.take(which)


def _kept_pairs(cols: dict[str, np.ndarray], entries: dict[str, np.ndarray], keep, reads) -> tuple:
    """(each row's count of entries ``keep`` holds for, the positions of those entries row after row, each
    row's in order). With ``reads``, ``keep`` (elementwise) sees one row of each distinct combination of those
    columns, in their dtypes, and each row takes its combination's entries: DeepSeek-V3 / 1024 H100's MoE
    axes, 252 combinations of 26,400 rows."""
    n, k = len(next(iter(cols.values()))), len(next(iter(entries.values())))
    lows = {name: int(cols[name].min()) for name in reads or () if n}
    radix = {name: int(cols[name].max()) - low + 1 for name, low in lows.items()}
    if reads is None or not n or math.prod(radix.values()) >= 2**62:
        pairs = {key: col[:, None] for key, col in cols.items()}
        mask = np.broadcast_to(keep(pairs | {key: v[None, :] for key, v in entries.items()}), (n, k))
        return np.count_nonzero(mask, axis=1), np.flatnonzero(mask) % k  # row-major: each row's entries in order
    key = np.zeros(n, dtype=np.int64)
    for name in reads:  # mixed radix over the columns' value ranges: one integer per combination
        key = key * radix[name] + (cols[name].astype(np.int64) - lows[name])
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    pairs = {name: cols[name][first][:, None] for name in reads}
    once = np.broadcast_to(keep(pairs | {key: v[None, :] for key, v in entries.items()}), (len(first), k))
    per, inverse = np.count_nonzero(once, axis=1), inverse.reshape(-1)
    counts, ends = per[inverse], np.cumsum(per)
    row_ends = np.cumsum(counts)  # each row's entries: its combination's, from where that combination's start
    at = np.repeat(ends[inverse] - per[inverse] - (row_ends - counts), counts) + np.arange(row_ends[-1])
    return counts, (np.flatnonzero(once) % k)[at]


def _repeated(col: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``np.repeat(col, counts)``; a column of one value (every row, or a broadcast ``shared_constant``)
    as that value broadcast to the rows, as the grid holds it (read-only, no memory per row)."""
    rows = int(counts.sum())
    if rows > 1 and len(col) > 1 and (col.strides == (0,) or (col[0] == col[-1] and col.min() == col.max())):
        return np.broadcast_to(col[:1].copy(), (rows,))
    return np.repeat(col, counts)


def _product(axes: dict[str, list]) -> dict[str, np.ndarray]:
    """Every combination of the axes' values as a table, the last axis varying fastest (as ``_cross`` adds them)."""
    combos = list(itertools.product(*axes.values()))
    return {key: np.array([c[j] for c in combos], dtype=np.asarray(v).dtype) for j, (key, v) in enumerate(axes.items())}


def _interleaving(cols: dict[str, np.ndarray], L: int, pins: Pins) -> dict[str, np.ndarray]:
    """Every interleaving depth each row's stage split allows: the divisors of its stages' layer
    counts (the accounted stage, (L + e + l)/p; with explicit first/last stages, of each of the three),
    1 for pp = 1 (Megatron arguments.py:953-998, transformer_config.py:2296-2340)."""
    if pins.vpp is not None:
        cols = _cross(cols, "vpp", np.array([pins.vpp]))
        return _keep(cols, (cols["vpp"] == 1) | (cols["pp"] > 1))
    n = len(cols["pp"])
    first = np.full(n, pins.first_stage_layers or 0)
    last = np.full(n, pins.last_stage_layers or 0)
    lay = stage_layers(L, cols["pp"], cols["split"], first, last)
    explicit = (first > 0) | (last > 0)
    per_stage = np.where(explicit, np.gcd(np.gcd(lay.first, lay.middle), lay.last), lay.middle)
    per_stage = np.where((cols["pp"] > 1) & lay.legal, np.maximum(per_stage, 1), 1)
    values = {int(k): divisors(int(k)) for k in distinct(per_stage)}
    counts = np.array([len(values[int(k)]) for k in per_stage], dtype=np.int64)
    out = {key: np.repeat(col, counts) for key, col in cols.items()}
    out["vpp"] = small(np.concatenate([values[int(k)] for k in per_stage]) if n else np.zeros(0, dtype=np.int64))
    return out


def layout_options(ctx: Context, pp_values: np.ndarray, pins: Pins) -> tuple[dict[int, list[tuple]], list[str]]:
    """For each pipeline size, the layouts search tries (as indices into the returned list): the pinned
    --pipeline-model-parallel-layout, or for mixture-of-experts models whose layers do not divide evenly
    over p or that carry MTP layers, ``balanced_layouts`` of up to MAX_LAYOUT_CHUNKS chunks per stage."""
    model, layouts, table = ctx.model, [], {}
    L, mtp = model.num_layers, model.mtp_layers
    if pins.pipeline_layout is not None:
        try:
            PipelineLayout.parse(pins.pipeline_layout)
        except LayoutError as err:
            raise LayoutError(f"--pipeline-model-parallel-layout {err}") from None
    accounted = pins.stage_split is not None or pins.first_stage_layers or pins.last_stage_layers
    chunks = [pins.vpp] if pins.vpp is not None else range(1, MAX_LAYOUT_CHUNKS + 1)
    for p in (int(x) for x in distinct(pp_values)):
        if pins.pipeline_layout is not None:
            here = [pins.pipeline_layout]
        elif model.is_moe and (mtp or L % p) and p > 1 and not accounted:
            here = [lay.text for v in chunks for lay in balanced_layouts(L, p, v, mtp)]
        else:
            here = []
        for text in here:
            if text not in layouts:
                layouts.append(text)
        table[p] = [(layouts.index(text),) for text in here]
    return table, layouts


def _join(cols: dict[str, np.ndarray], key: str, table: dict[int, list[tuple]], names: tuple[str, ...]):
    """Every row combined with each entry of ``table[row[key]]`` (the options that row allows)."""
    counts = np.array([len(table.get(int(k), [])) for k in cols[key]], dtype=np.int64)
    out = {name: np.repeat(col, counts) for name, col in cols.items()}
    rows = [entry for k in cols[key] for entry in table.get(int(k), [])]
    for j, name in enumerate(names):
        out[name] = np.array([r[j] for r in rows], dtype=np.int64).reshape(-1)
    return out


def _layout_rows(base: dict[str, np.ndarray], ctx: Context, pins: Pins, B: int) -> tuple[dict, list[str]]:
    """The rows that place their layers by a layout: every (tp, cp, pp, dp) row with each of its layouts,
    the chunks per stage the layout gives, and every micro-batch."""
    table, layouts = layout_options(ctx, base["pp"], pins)
    cols = _join(base, "pp", table, ("layout",))
    stages = np.array([len(PipelineLayout.parse(t).stages) for t in layouts] + [0])
    cols["vpp"] = stages[cols["layout"]] // np.maximum(cols["pp"], 1)
    cols["split"] = np.zeros(len(cols["pp"]), dtype=np.int8)
    cols = _keep(cols, (cols["pp"] > 1) & ((pins.vpp is None) | (cols["vpp"] == (pins.vpp or 0))))
    cols = _cross(cols, "micro_batch", np.array([pins.micro_batch]) if pins.micro_batch else divisors(B))
    return cols, layouts


def _concat(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([a[k], b[k].astype(a[k].dtype)]) for k in a}


def _axis(pinned, values) -> np.ndarray:
    return np.array([pinned]) if pinned is not None else np.asarray(values)


def candidate_grid(ctx: Context, num_gpus: int, pins: Pins) -> PlanGrid:
    """Every combination of the searched knobs for N GPUs (pins narrow an axis to one value)."""
    base = _world_rows(ctx, num_gpus, pins)
    cols = _split_rows(base, ctx, pins)
    layout_cols, layouts = _layout_rows(base, ctx, pins, ctx.training.global_batch)
    cols = _concat(cols, layout_cols)
    cols["layout"] = cols["layout"].astype(_layout_dtype(layouts))  # as the grid keeps it, before the crossings
    if ctx.model.is_moe:  # whole micro-batches, at least pp of them with interleaving
        B = ctx.training.global_batch
        cols = _keep(cols, B % (cols["micro_batch"] * cols["dp"]) == 0)
        m = B // (cols["micro_batch"] * cols["dp"])
        cols = _keep(cols, (cols["vpp"] == 1) | (m >= cols["pp"]))
    cols["mb_group"] = small(_microbatch_groups(cols, ctx.training.global_batch, pins))  # before the knobs it ignores
    cols = _recompute_axes(cols, ctx, pins)
    cols = _memory_axes(cols, ctx, pins)
    if ctx.model.is_moe:
        cols = _moe_axes(cols, ctx, num_gpus, pins)
    else:
        cols["ep"] = np.full(len(cols["tp"]), pins.ep or 1)
        cols["etp"] = cols["tp"] if pins.etp is None else np.full(len(cols["tp"]), pins.etp)
        cols["dispatcher"] = np.zeros(len(cols["tp"]), dtype=np.int8)
        cols["a2a_overlap"] = np.zeros(len(cols["tp"]), dtype=bool)
    return _grid(cols, pins, layouts)


def _microbatch_groups(cols: dict[str, np.ndarray], B: int, pins: Pins) -> np.ndarray:
    """Interleaving's micro-batch group G per row, 0 for Megatron's default (pp) and for 1F1B: pinned, or
    the smallest Megatron allows (``pipeline.smallest_microbatch_group``): pp when pp divides m, else the
    least G that makes the schedule legal, so interleaving is offered whenever m ≥ pp."""
    p, vpp = cols["pp"], cols["vpp"]
    if pins.microbatch_group_size is not None:
        G = np.full(len(p), pins.microbatch_group_size)
    else:
        G = smallest_microbatch_group(p, B / (cols["micro_batch"] * cols["dp"]))
    return np.where((vpp > 1) & (G != p), G, 0)


def _world_rows(ctx: Context, num_gpus: int, pins: Pins) -> dict[str, np.ndarray]:
    """Every (tp, cp, pp, dp) whose product is the world; for MoE models only tp inside the NVLink
    domain and p ≤ L (the MoE knobs multiply: cut here, not in the rules later)."""
    s, model = ctx.training.seq_len, ctx.model
    cols = {"tp": small(_axis(pins.tp, divisors(num_gpus)))}
    cp_values = [c for c in divisors(num_gpus) if cp_searched(s, int(c))]
    cols = _cross(cols, "cp", _axis(pins.cp, cp_values))
    cols = _cross(cols, "pp", _axis(pins.pp, divisors(num_gpus)))
    tcp = cols["tp"].astype(np.int64) * cols["cp"] * cols["pp"]  # int64: a product of divisors may pass N
    cols = _keep(cols, num_gpus % tcp == 0)
    cols["dp"] = num_gpus // (cols["tp"].astype(np.int64) * cols["cp"] * cols["pp"])
    if pins.dp is not None:
        cols = _keep(cols, cols["dp"] == pins.dp)
    if model.is_moe:
        cols = _keep(cols, tp_in_domain(cols["tp"], nvlink_domain_gpus(ctx.hardware), pins.max_tp))
        cols = _keep(cols, cols["pp"] <= model.num_layers)
    return cols


def _split_rows(base: dict[str, np.ndarray], ctx: Context, pins: Pins) -> dict[str, np.ndarray]:
    """The rows that split their layers evenly, accounted or explicitly (not by a layout): every
    split Megatron accepts for the row's pp, every micro-batch and every interleaving depth."""
    L, B = ctx.model.num_layers, ctx.training.global_batch
    explicit = pins.first_stage_layers is not None or pins.last_stage_layers is not None
    split_values = [pins.stage_split.code] if pins.stage_split else [0] if explicit else list(SPLIT_CODES.values())
    cols = _cross(dict(base), "split", np.array(split_values, dtype=np.int8))
    if pins.stage_split is None and not explicit:  # every split Megatron accepts for the row's pp
        split = cols["split"]
        accounted = L + ((split == 1) | (split == 3)) + ((split == 2) | (split == 3))  # embedding, loss counted
        cols = _keep(cols, (cols["split"] == 0) | ((cols["pp"] > 1) & (accounted % cols["pp"] == 0)))
    cols = _cross(cols, "micro_batch", _axis(pins.micro_batch, divisors(B)))
    cols = _interleaving(cols, L, pins)
    cols["layout"] = np.full(len(cols["pp"]), -1, dtype=np.int32)
    if pins.pipeline_layout is not None:
        cols = _keep(cols, np.zeros(len(cols["pp"]), dtype=bool))  # the layout places every layer
    if ctx.model.is_moe:  # only the splits Megatron-LM accepts (the rule table would reject the rest)
        first = np.full(len(cols["pp"]), pins.first_stage_layers or 0)
        last = np.full(len(cols["pp"]), pins.last_stage_layers or 0)
        cols = _keep(cols, stage_layers(L, cols["pp"], cols["split"], first, last).legal)
    return cols


def _recompute_axes(cols: dict[str, np.ndarray], ctx: Context, pins: Pins) -> dict[str, np.ndarray]:
    """Recomputation (none, selective, full); full is uniform groups of one layer (Megatron's classic
    full recomputation) unless pinned; block rows get their layer count from the search, which solves
    for the fewest that fit (planner.search). Selective recomputation with the searched modules is left
    out where it recomputes nothing (``selective_is_none``): its rows would repeat the rows without it."""
    allowed = (pins.recompute,) if isinstance(pins.recompute, Recompute) else pins.recompute
    rc = [r.code for r in allowed] if allowed else list(RECOMPUTE_CODES.values())
    if not allowed and pins.recompute_modules is None and selective_is_none(ctx):
        rc.remove(Recompute.SELECTIVE.code)
    cols = _cross(cols, "recompute", np.array(rc, dtype=np.int8))
    full = cols["recompute"] == 2
    block = pins.recompute_method is RecomputeMethod.BLOCK
    cols["recompute_block"] = full & block
    cols["recompute_layers"] = small(np.where(full, pins.recompute_num_layers or (0 if block else 1), 0))
    return cols


def selective_is_none(ctx: Context) -> bool:
    """Whether the searched selective recomputation (``searched_modules``) recomputes nothing on this model:
    --recompute-modules mlp on a mixture-of-experts model with no dense MLP layer, since Megatron-LM
    recomputes the mlp module in dense layers only (megatron/core/transformer/transformer_layer.py:
    ``if "mlp" in recompute_modules: if not self.is_moe_layer``)."""
    modules = searched_modules(ctx)
    return no_dense(ctx) and set(modules) == {RecomputeModule.MLP}


def _memory_axes(cols: dict[str, np.ndarray], ctx: Context, pins: Pins) -> dict[str, np.ndarray]:
    """Sequence parallelism (with tp > 1; always with MoE and tp > 1), the distributed optimizer (with
    dp > 1 unless pinned) and Megatron FSDP (on the distributed optimizer, with d·c > 1), with its
    sharding strategy and the distributed-optimizer instances: every row crossed with their product once."""
    pinned = (pins.sequence_parallel, pins.distributed_optimizer, pins.fsdp)
    sp, dopt, fsdp = ([p] if p is not None else [False, True] for p in pinned)
    # FSDP's sharding strategy: weights too (optim_grads_params) or not (optim_grads); optim prices as the
    # distributed optimizer does, so search offers it only when pinned
    levels = [FsdpSharding(pins.fsdp_sharding).code] if pins.fsdp_sharding is not None else [2, 3]
    # distributed-optimizer instances: pinned, else one. More instances only add the shard's all-reduce across
    # them and R times the optimizer memory under this model (communication.hierarchical_grad_reduce_time_s):
    # never faster, never smaller, so search does not spend evaluations on them
    replicas = [pins.distributed_optimizer_instances] if pins.distributed_optimizer_instances else [1]
    table = _product(
        {"sequence_parallel": sp, "distributed_optimizer": dopt, "fsdp": fsdp, "fsdp_level": levels}
        | {"do_instances": replicas}
    )
    table["fsdp_level"] = table["fsdp_level"].astype(np.int8)
    sp_needed = ctx.model.is_moe and pins.sequence_parallel is None  # Megatron-Core's MoE layer: SP with tp > 1

    def allowed(c: dict[str, np.ndarray]) -> np.ndarray:
        sp, do, fs, dc = c["sequence_parallel"], c["distributed_optimizer"], c["fsdp"], c["dp"] * c["cp"]
        ok = (~sp | (c["tp"] > 1)) & (sp | (c["tp"] == 1) | (not sp_needed))  # SP with t = 1 is the same plan
        ok = ok & (~do | (c["dp"] > 1) | (pins.distributed_optimizer is True))
        # Megatron FSDP runs on the distributed optimizer (arguments.py: v1 turns it on) and needs d·c > 1
        ok = ok & (~fs | (do & (dc > 1))) & (fs | (c["fsdp_level"] == levels[-1]))  # one row without FSDP
        sharded_alone = do & ~fs & (dc % c["do_instances"] == 0) & (dc >= 4)
        return ok & ((c["do_instances"] == replicas[0]) | sharded_alone)

    return _outer_axis(_cross_table(cols, table, allowed, reads=("tp", "dp", "cp")), pins)


def _outer_axis(cols: dict[str, np.ndarray], pins: Pins) -> dict[str, np.ndarray]:
    """Megatron FSDP's outer sharding, as pinned with a pinned R > 1 (HFSDP needs optim_grads_params); else
    no_shard. Unpinned, Megatron FSDP's hybrid plans are tried by the search as variants of the FSDP plans
    that fit (``search.hybrid_variants``), not here."""
    n, R = len(cols["tp"]), pins.distributed_optimizer_instances or 1
    if pins.fsdp_outer_sharding != "optim" or R == 1:
        return {**cols, "outer_optim": np.zeros(n, dtype=bool)}
    cols = _keep(cols, ~cols["fsdp"] | (cols["fsdp_level"] == 3))
    return {**cols, "outer_optim": cols["fsdp"].copy()}


def _grid(cols: dict[str, np.ndarray], pins: Pins, layouts: list[str]) -> PlanGrid:
    """The grid of the columns, each column every row shares held once (``shared_constant``)."""
    grid = _columns(cols, pins, layouts)
    return PlanGrid.of_columns({name: shared_constant(getattr(grid, name)) for name in COLUMNS}, grid.layouts)


def _columns(cols: dict[str, np.ndarray], pins: Pins, layouts: list[str]) -> PlanGrid:
    n = len(cols["tp"])
    names = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "micro_batch", "sequence_parallel", "recompute")
    names += ("recompute_block", "recompute_layers", "distributed_optimizer", "fsdp", "split")
    return PlanGrid(
        **{name: cols[name] if name == "dp" else small(cols[name]) for name in names},
        layout=cols["layout"].astype(_layout_dtype(layouts), copy=False),  # an index into the layouts
        first_layers=_layer_column(n, pins.first_stage_layers or 0),
        last_layers=_layer_column(n, pins.last_stage_layers or 0),
        dispatcher=cols["dispatcher"].astype(np.int8, copy=False),
        a2a_overlap=cols["a2a_overlap"],
        mb_group=small(cols["mb_group"]),
        fsdp_level=np.where(cols["fsdp"], cols["fsdp_level"], 3).astype(np.int8, copy=False),
        do_instances=small(cols["do_instances"]),
        outer_optim=cols["outer_optim"],
        **{name: _one_value(n, -1, np.int8) for name in OPTION_COLUMNS},  # as the grid's options say (the search's)
        layouts=tuple(layouts),
    )


def _one_value(n: int, value: int, dtype) -> np.ndarray:
    """A column of n rows of one value, as ``shared_constant`` holds it (broadcast from two rows on)."""
    return np.broadcast_to(np.full(1, value, dtype=dtype), (n,)) if n > 1 else np.full(n, value, dtype=dtype)


def _layout_dtype(layouts: list[str]):
    """The grid's layout column (an index into the layouts, -1 for none): two bytes where the layouts allow."""
    return np.int16 if len(layouts) < 2**15 else np.int32


def _layer_column(n: int, layers: int) -> np.ndarray:
    """A pinned layer count for every row, in two bytes where it fits (the grid's largest arrays, N rows each)."""
    return _one_value(n, layers, np.int16 if layers < 2**15 else np.int32)


def _moe_axes(cols: dict[str, np.ndarray], ctx: Context, num_gpus: int, pins: Pins) -> dict[str, np.ndarray]:
    """Expert parallelism, expert TP (Megatron's default = tp, or 1), the token dispatcher (only one
    choice without expert communication) and the all-to-all overlap where Megatron-LM allows it
    (ep > 1, alltoall or flex, no full recomputation, interleaving when pp > 1): every row crossed with
    their product once (``_cross_table``)."""
    eps = [e for e in divisors(ctx.model.num_experts) if num_gpus % e == 0]
    kinds = (
        [DISPATCHER_CODES[TokenDispatcher(pins.moe_token_dispatcher)]]
        if pins.moe_token_dispatcher is not None
        else list(DISPATCHER_CODES.values())
    )
    overlap = pins.overlap_moe_expert_parallel_comm
    axes = {"ep": list(_axis(pins.ep, eps))}
    axes |= {"etp_is_tp": [False, True]} if pins.etp is None else {"etp": [pins.etp]}
    axes |= {"dispatcher": kinds, "a2a_overlap": [overlap] if overlap is not None else [False, True]}
    table = _product(axes)
    table["dispatcher"] = table["dispatcher"].astype(np.int8)
    pinned = pins.moe_token_dispatcher is not None  # else: without expert communication the dispatchers are one plan

    def allowed(c: dict[str, np.ndarray]) -> np.ndarray:
        etp = np.where(c["etp_is_tp"], c["tp"], 1) if pins.etp is None else c["etp"]
        ok = num_gpus % (etp.astype(np.int64) * c["ep"] * c["pp"]) == 0  # int64: a pinned --tp 2147483647 · ep
        if pins.etp is None:
            ok = ok & ~(c["etp_is_tp"] & (c["tp"] == 1))  # the same plan twice
        ok = ok & ((c["ep"] * etp > 1) | (c["dispatcher"] == kinds[0]) | pinned)
        if overlap is not None:  # where Megatron-LM allows the overlap (when not pinned)
            return ok
        full = RECOMPUTE_CODES[Recompute.FULL]
        a2a = (c["ep"] > 1) & (c["dispatcher"] > 0) & (c["recompute"] != full) & ((c["pp"] == 1) | (c["vpp"] > 1))
        return ok & (~c["a2a_overlap"] | a2a)

    cols = _cross_table(cols, table, allowed, reads=("tp", "pp", "recompute", "vpp"))
    if pins.etp is None:
        cols["etp"] = np.where(cols.pop("etp_is_tp"), cols["tp"], 1)
    return cols
