"""What the published runs say about a plan: for each feature and region a plan uses, how many
distinct published settings in the fit exercise it on the plan's GPU generation.

A *setting* is one model with one plan (its TP, PP, CP, VPP, EP, micro-batch, recomputation, ...
but not its DP: a weak-scaling series on more GPUs is one setting), on one hardware preset, at one
sequence length and precision: the validation rows of ``presets/reference/*.csv`` (as
``planner.fidelity.runs.load_runs`` and ``moe_runs.load_moe_runs`` build them), shipped with the
package, that bear on the model (``bearing``): *fitted* (``Run.fit``; GB200's NVFP4 rows, which fit
its NVFP4 GEMM ratio) or *held out* (validated out of sample, never fitted: ``Run.held_out``, the
Megatron-Bridge verification cards' MoE rows; GB300's NVFP4 rows, which judge its measured ratio).
A feature's count is both kinds (``counted_settings``), its held-out part apart (``held_out_settings``).
A feature a plan uses that no setting of its generation exercises is *extrapolated*; the band of the
estimate widens for each (``band_frac``, docs/cost-model.md §10.6) and search ranks by the
pessimistic end of that band. An NVFP4 plan's band is its NVFP4 rows' (``band_parts``).

Everything is vectorised: ``feature_codes`` turns a grid of plans into one integer array per
feature kind (0: not used), and ``plan_evidence`` looks each code up in the generation's counts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from planner.hardware.collectives import group_nodes
from planner.hardware.spec import HardwareSpec
from planner.plan import Context
from planner.space.grid import PlanGrid

NOT_USED = np.iinfo(np.int64).max  # the count of a kind a plan does not use: never its weakest link
PP_BUCKETS = (1, 2, 4, 8, 16)  # PP depth classes: 2, 3-4, 5-8, 9-16, 17+
DECADES = ("1-9", "10-99", "100-999", "1,000-9,999", "10,000+")
FLEX_BACKENDS = ("deepep", "hybridep", "ncclep")
FP8_RECIPES = ("delayed", "tensorwise", "blockwise", "mxfp8", "nvfp4")  # nvfp4: --fp4-format
GRAPH_IMPLS = ("none", "local", "transformer_engine", "full_iteration")
GENERATION_NAMES = {8: "Ampere", 9: "Hopper", 10: "Blackwell"}


def _domain(hw: HardwareSpec) -> int:
    return getattr(hw, "nvlink_domain_gpus", None) or hw.gpus_per_node


def feature_codes(grid: PlanGrid, ctx: Context, gpus: int) -> dict[str, np.ndarray]:
    """Each feature kind a plan may use, as one integer code per plan (0: not used); ``LABELS`` names
    a code. Kinds from the grid vary per plan; kinds from the options are the same for every plan."""
    n, opts, moe = len(grid), ctx.options, ctx.model.is_moe
    tp, pp, ep, etp = grid.tp, grid.pp, grid.ep, grid.etp
    domain = _domain(ctx.hardware)
    expert = moe & (ep > 1)
    flex = grid.dispatcher == 2
    backend = FLEX_BACKENDS.index(opts.moe_flex_dispatcher_backend.value) if opts.moe_flex_dispatcher_backend else 0
    ep_domains, _ = group_nodes(ep * etp, 1, domain)

    def full(value: int) -> np.ndarray:  # a kind from the options: one value for every plan, broadcast (no copy)
        return np.broadcast_to(np.int64(value), (n,))

    recipe = FP8_RECIPES.index(opts.fp8_recipe.value) + 1 if opts.fp8 else 0
    recipe = len(FP8_RECIPES) if opts.fp4 is not None else recipe
    return {
        "model": full(2 if moe else 1),
        "gpus": full(min(int(np.log10(max(gpus, 1))), len(DECADES) - 1) + 1),
        "fsdp": grid.fsdp.astype(np.int64),
        "fsdp_split": grid.fsdp * ((tp > 1) + 2 * (pp > 1)),
        # the data-parallel optimizer without Megatron FSDP: the distributed optimizer (1) or DDP (2), with d·c > 1
        "optimizer": np.where(grid.fsdp | (grid.dp * grid.cp == 1), 0, np.where(grid.distributed_optimizer, 1, 2)),
        "attention": full(1 if opts.attention_kernel.value == "flash" else 2),
        # several optimizer instances: HSDP (1), HFSDP (2), or the distributed optimizer's (3)
        "replicas": np.where(grid.do_instances > 1, np.where(grid.fsdp, 1 + grid.outer_optim, 3), 0),
        "cp": np.where(grid.cp > 1, grid.cp, 0),
        "pp": np.where(pp > 1, np.searchsorted(PP_BUCKETS, pp), 0),
        "vpp": (grid.vpp > 1).astype(np.int64),
        "micro_batch": (grid.micro_batch >= 3).astype(np.int64),
        # one micro-batch a step (B = d·b): the data-parallel reduction and the parameter all-gather have one
        # backward and one forward to hide behind, and whatever a step costs beyond its micro-batches is paid whole
        "microbatches": (ctx.training.global_batch == grid.dp * grid.micro_batch).astype(np.int64),
        "recompute": grid.recompute + (grid.recompute == 2) * grid.recompute_block,
        "tp_domains": (tp > domain).astype(np.int64),
        # TP with sequence parallelism: with --tp-comm-overlap (1; 3 in a MoE model) or without it (2), each a setting
        # of its own (every Blackwell run with TP > 1 in the bar overlaps; TP without SP is an older Megatron's plan
        # and is not told apart). The overlap is told apart by model class: every dense Hopper recipe with TP turns it
        # on, every Megatron-Bridge MoE one (DeepSeek-V3 and Qwen3-235B on H100, TP 2; NeMo 2's Grok-1 TP4 keeps it)
        # off, beside the all-to-all overlap that wants more than the one CUDA connection the userbuffers' ordering
        # needs on Hopper (Megatron-LM arguments.py); without it the TP collectives are the same in either model
        "tp_overlap": np.where(
            (tp > 1) & grid.sequence_parallel, np.where(grid.option("tp_comm_overlap", opts), 3 if moe else 1, 2), 0
        ).astype(np.int64),
        # EP across NVLink domains, told apart by the dispatcher that carries it there (the dispatcher's code): NCCL's
        # all-to-all, DeepEP's internode kernels and HybridEP's RDMA path are separate code paths with separate
        # evidence - HybridEP across 8-GPU domains is NVIDIA's own open problem ("HybridEP for NVL8 with EP>8 is
        # currently [not] performant, so we are limiting the EP size to 8", Megatron-Bridge issue 2883, 2026-03-18),
        # measured only on H100 (Qwen3-30B EP16 on two nodes), never on Blackwell
        "ep_domains": np.where(expert & (ep_domains > 1), grid.dispatcher + 1 + flex * backend, 0),
        "dispatcher": np.where(expert, grid.dispatcher + 1 + flex * backend, 0),
        "a2a_overlap": (expert & grid.a2a_overlap).astype(np.int64),
        "fp8": full(recipe),
        "cuda_graphs": full(GRAPH_IMPLS.index(opts.cuda_graph_impl.value)),
        "offloading": full(int(opts.cpu_offloading_num_layers > 0)),
    }


LABELS = {
    "model": lambda c: ("dense", "MoE")[c - 1],
    "gpus": lambda c: f"{DECADES[c - 1]} GPUs",
    "fsdp": lambda c: "Megatron FSDP",
    "fsdp_split": lambda c: ("Megatron FSDP with TP", "Megatron FSDP with PP", "Megatron FSDP with TP and PP")[c - 1],
    "optimizer": lambda c: ("distributed optimizer", "DDP (no distributed optimizer)")[c - 1],
    "attention": lambda c: ("flash attention", "unfused attention")[c - 1],
    "replicas": lambda c: ("Megatron FSDP HSDP", "Megatron FSDP HFSDP", "distributed-optimizer instances")[c - 1],
    "cp": lambda c: f"CP {c}",
    "pp": lambda c: ("PP 2", "PP 3-4", "PP 5-8", "PP 9-16", "PP 17+")[c - 1],
    "vpp": lambda c: "interleaved pipeline",
    "micro_batch": lambda c: "micro-batch >= 3",
    "microbatches": lambda c: "one micro-batch a step",
    "recompute": lambda c: ("selective recomputation", "full recomputation (uniform)", "full recomputation (block)")[
        c - 1
    ],
    "tp_domains": lambda c: "TP across NVLink domains",
    "tp_overlap": lambda c: (
        "TP comm overlap",
        "TP with SP but without the TP comm overlap",
        "TP comm overlap in a MoE model",
    )[c - 1],
    "ep_domains": lambda c: (
        "EP across NVLink domains (" + ("allgather", "alltoall", *(f"flex/{b}" for b in FLEX_BACKENDS))[c - 1] + ")"
    ),
    "dispatcher": lambda c: ("allgather dispatcher", "alltoall dispatcher", *(f"flex/{b}" for b in FLEX_BACKENDS))[
        c - 1
    ],
    "a2a_overlap": lambda c: "all-to-all overlap",
    "fp8": lambda c: "NVFP4" if FP8_RECIPES[c - 1] == "nvfp4" else f"FP8 {FP8_RECIPES[c - 1]}",
    "cuda_graphs": lambda c: f"CUDA graphs ({GRAPH_IMPLS[c]})",
    "offloading": lambda c: "CPU offloading",
}


def generation(hw: HardwareSpec) -> int:
    """The GPU generation: the compute capability's major number (8 Ampere, 9 Hopper, 10 Blackwell)."""
    return int(hw.gpu.compute_capability)


def generation_name(major: int) -> str:
    return GENERATION_NAMES.get(major, f"compute capability {major}")


@dataclass(frozen=True)
class Setting:
    """One distinct published setting: its hardware, model, plan (DP aside) and the rows behind it."""

    key: tuple
    generation: int
    hardware: str
    model: str
    rows: tuple[str, ...]
    codes: dict[str, frozenset[int]]  # every code its rows use, per kind
    held_out: bool = False  # every row held out (validated out of sample, never fitted)
    fit_rows: int = 0  # its rows of the dense or MoE fit (Run.fit): the preset's fit, as validate counts it


def bearing(run) -> str | None:
    """How a reference row bears on the features it exercises: ``"fitted"``, a fit used it (``Run.fit``: the dense
    or MoE calibration; an NVFP4 row on the preset whose NVFP4 GEMM ratio is fitted on its NVFP4 rows,
    ``nvfp4_fit.FIT_PRESET``); ``"held out"``, validated out of sample and never fitted (``Run.held_out``: a
    Megatron-Bridge verification card's MoE row; an NVFP4 row on a preset whose ratio is measured, GB300: its rows
    judge the measurement; an NVFP4 row of a source the ratio's fit leaves out, MLPerf v5.1's on GB200); None, no
    evidence (flagged software, a setting assumed or searched)."""
    from planner.fidelity.nvfp4_fit import FIT_PRESET, FIT_SOURCE, is_nvfp4

    if run.fit:
        return "fitted"
    if run.searched:  # its plan is partly the model's own choice (a held-out row's too: NeMo's long-context table)
        return None
    if is_nvfp4(run):
        return "fitted" if run.hardware == FIT_PRESET and run.source == FIT_SOURCE else "held out"
    return "held out" if run.held_out else None


def _setting_key(run, req) -> tuple:
    o = req.ctx.options
    plan = req.plan.model_dump(mode="json", exclude={"dp"})
    return (
        run.hardware,
        req.ctx.model.name,
        tuple(sorted(plan.items())),
        req.ctx.training.seq_len,
        o.fp8,
        o.fp8_recipe,
        o.fp4,
    )


@functools.lru_cache(maxsize=8)
def reference_settings(major: int | None = None) -> tuple[Setting, ...]:
    """The distinct settings of every reference row that bears on the model (``bearing``: fitted or held out; dense
    and MoE), with their feature codes; with ``major``, only those on GPUs of that generation (a search needs only
    its own: each row is a whole plan request to build)."""
    from planner.fidelity.moe_runs import load_moe_runs
    from planner.fidelity.runs import load_runs
    from planner.fidelity.validate import prepared

    groups: dict[tuple, list] = {}
    for run in [*load_runs(), *load_moe_runs()]:
        if bearing(run) is None or ":" in run.id:
            continue
        if major is not None and _preset_generation(run.hardware) != major:
            continue
        req = prepared(run)
        codes = feature_codes(PlanGrid.from_plans([req.plan]), req.ctx, req.gpus)
        groups.setdefault(_setting_key(run, req), []).append((run, req, codes))
    out = []
    for key, members in groups.items():
        run, req, _ = members[0]
        codes = {k: frozenset(int(c[k][0]) for _, _, c in members) - {0} for k in members[0][2]}
        out.append(
            Setting(
                key,
                generation(req.ctx.hardware),
                run.hardware,
                req.ctx.model.name,
                tuple(r.id for r, _, _ in members),
                codes,
                held_out=all(bearing(r) == "held out" for r, _, _ in members),
                fit_rows=sum(r.fit for r, _, _ in members),
            )
        )
    return tuple(out)


@functools.lru_cache(maxsize=16)
def _preset_generation(hardware: str) -> int:
    """The GPU generation of a shipped hardware preset (the reference runs name theirs)."""
    from planner.presets import load_hardware

    return generation(load_hardware(hardware))


def generation_counts(major: int) -> dict[str, dict[int, int]]:
    """Per feature kind and code, the distinct settings of GPU generation ``major`` that use it, fitted or held
    out: the table shipped with the package (``evidence_counts.COUNTS``, written by scripts/evidence_counts.py from
    ``counted_settings``; a test checks they are equal), so a search builds no reference run's plan."""
    from planner.fidelity.evidence_counts import COUNTS

    return COUNTS.get(major) or {k: {} for k in LABELS}  # a generation absent there has no reference run


def generation_held_out(major: int) -> dict[str, dict[int, int]]:
    """The held-out part of ``generation_counts``: settings whose every row is validated out of sample, never
    fitted (``evidence_counts.HELD_OUT``, from ``held_out_settings``)."""
    from planner.fidelity.evidence_counts import HELD_OUT

    return HELD_OUT.get(major) or {k: {} for k in LABELS}


@functools.lru_cache(maxsize=16)
def counted_settings(major: int, held_out_only: bool = False) -> dict[str, dict[int, int]]:
    """Per feature kind and code, the distinct settings of GPU generation ``major`` that use it, counted
    from the reference runs (``reference_settings``): fitted or held out, or (``held_out_only``) held out."""
    counts: dict[str, dict[int, int]] = {k: {} for k in LABELS}
    for s in reference_settings(major):
        if s.generation == major and (s.held_out or not held_out_only):
            for kind, codes in s.codes.items():
                for c in codes:
                    counts[kind][c] = counts[kind].get(c, 0) + 1
    return counts


def held_out_settings(major: int) -> dict[str, dict[int, int]]:
    """``counted_settings(major)``'s held-out part: the settings whose every row is held out."""
    return counted_settings(major, held_out_only=True)


def settings_per_preset() -> dict[str, dict[str, int]]:
    """Distinct settings (model × plan) and rows behind each hardware preset's fit (``Run.fit``: the dense and MoE
    calibrations), dense and MoE apart."""
    out: dict[str, dict[str, int]] = {}
    for s in reference_settings():
        if not s.fit_rows:
            continue
        entry = out.setdefault(s.hardware, {"dense_settings": 0, "moe_settings": 0, "rows": 0})
        entry["moe_settings" if 2 in s.codes["model"] else "dense_settings"] += 1
        entry["rows"] += s.fit_rows
    return out


@dataclass
class PlanEvidence:
    """For every plan of a grid: each kind's code and the settings behind it (``NOT_USED`` where the
    plan does not use the kind), the weakest link and how many features no setting exercises."""

    generation: int
    codes: dict[str, np.ndarray]
    counts: dict[str, np.ndarray]
    disputed: dict[str, frozenset[int]] = field(default_factory=dict)  # ``disputed_codes``: counted as unsupported
    contradicted: dict[str, dict[int, Contradiction]] = field(default_factory=dict)  # ``contradicted``: of disputed

    @functools.cached_property
    def settings(self) -> np.ndarray:
        """The fewest settings behind any feature the plan uses."""
        return functools.reduce(np.minimum, self.counts.values())

    @functools.cached_property
    def extrapolated(self) -> np.ndarray:
        """How many features the plan uses that no setting of its generation supports: its counts of 0 (a kind
        it does not use counts ``NOT_USED``) and its disputed codes (``disputed_codes``), as
        ``extrapolated_features``."""
        unsupported = [
            (count == 0) | np.isin(self.codes[kind], list(self.disputed.get(kind, ())))
            for kind, count in self.counts.items()
        ]
        return np.sum(unsupported, axis=0, dtype=np.int64)

    @functools.cached_property
    def held_out(self) -> dict[str, np.ndarray]:
        """Per kind, the held-out part of ``counts``: settings whose every row is validated out of sample."""
        table = generation_held_out(self.generation)
        return {kind: _looked_up(code, table[kind]) for kind, code in self.codes.items()}

    @functools.cached_property
    def lists(self) -> tuple[dict[str, list], dict[str, list], list]:
        """The codes and counts per kind and the settings, as lists (``evidence_json`` reads a row of each)."""
        codes = {kind: code.tolist() for kind, code in self.codes.items()}
        return codes, {kind: count.tolist() for kind, count in self.counts.items()}, self.settings.tolist()


def extrapolated_features(grid: PlanGrid, ctx: Context, gpus: int) -> np.ndarray:
    """``plan_evidence(grid, ctx, gpus).extrapolated`` without the settings behind each feature (what search ranks
    by: one pass per kind that has a code no setting supports, none for the others)."""
    return _extrapolated(feature_codes(grid, ctx, gpus), _supporting_counts(ctx))


def disputed_codes(ctx: Context) -> dict[str, frozenset[int]]:
    """Per kind, the codes of the plan's generation that only held-out settings use and whose runs the model misses
    by more than a feature no run exercises is given: the RMS of their r = ln(predicted/published step) above the
    plan's δ (``band_parts``; ``generation_held_only``); and the codes NVIDIA measured slower on the plan's GPU and
    turned off there (``contradicted``). Such a feature counts as unsupported, as one no setting exercises does: in
    the band and in search's ranking (docs/cost-model.md §10.6). On Hopper today: one micro-batch a step (RMS 0.28
    over Cisco's two 8B runs and HPE's H200 one) and full-iteration CUDA graphs (HPE's H200 run alone, 0.14),
    against δ = 0.064; on DGX B300, a MoE plan's all-to-all overlap and interleaving where its MoE layers' host work
    is not all in CUDA graphs."""
    per = band_parts(ctx)[1]
    table = generation_held_only(generation(ctx.hardware))
    out = {kind: frozenset(c for c, v in codes.items() if v[1] > per) for kind, codes in table.items()}
    for kind, codes in contradicted(ctx).items():
        out[kind] = out.get(kind, frozenset()) | frozenset(codes)
    return out


@dataclass(frozen=True)
class Contradiction:
    """Features NVIDIA measured slowing one GPU's MoE runs and turned off there, by a slowdown the model does not
    reproduce: its published rows with them (set apart in validate by that finding) are ``rows``, measured on
    ``preset``. It applies to a MoE plan on any hardware with that GPU (``gpu``, the spec's ``gpu.name``: a user's
    copy of the preset too) whose MoE layers the host still issues in part (``host_paced``), as the rows ran."""

    preset: str
    gpu: str
    features: tuple[tuple[str, int], ...]  # (kind, code) of feature_codes
    rows: tuple[str, ...]
    source: str


# Qwen3-235B on 256 DGX B300, Megatron-Bridge 26.02 and 26.02.01: VP 4 with the all-to-all overlap, no CUDA graphs,
# 2,691 and 2,644 tokens/s/GPU, predicted 37-40 % fast; NVIDIA turned both off for B300 (PR 2669, 2026-03-05:
# "updating the B300 Qwen3 235B configs by disabling VP and moe_a2a_overlap") and says why (issue 3399, 2026-05-12:
# "On B300 ... moe_a2a_overlap and VP degraded perf, so we didn't enable it"); with both off the same model, GPUs and
# batch ran 1.81x faster in 26.04, where the model gives the changed settings x1.20. Without CUDA graphs no B300 MoE
# recipe has used either since; under full-iteration graphs NVIDIA turned both back on for Qwen3-235B MXFP8 (PR 4606:
# Bridge v0.5.1 qwen3_workload_base_configs.py:265-273, VP 3; v0.6.0 perf_recipes/qwen/b300/qwen3_moe.py
# qwen3_235b_a22b_pretrain_256gpu_b300_fp8mx_config, _enable_hybridep_full_iteration_mxfp8), not yet in a published
# table, and the one B300 overlap measured runs in such a graph (Qwen3-30B, 26.06, -7.4 %): the finding is the host's.
CONTRADICTIONS = (
    Contradiction(
        preset="dgx-b300-superpod",
        gpu="B300-SXM-270GB",
        features=(("a2a_overlap", 1), ("vpp", 1)),
        rows=("MB-26.02-B300-QWEN3-235B-256", "MB-26.02.01-B300-QWEN3-235B-256"),
        source="Megatron-Bridge PR 2669, issue 3399",
    ),
)


def host_paced(ctx: Context) -> bool:
    """Whether the host still issues part of every MoE layer, so that the all-to-all overlap's paired steps wait on
    it (docs/cost-model.md §13.3): true unless CUDA graphs launch both the layer's attention and its MoE block
    (full-iteration graphs, or graph scopes that name both); TE scopes of the router and preprocess alone leave the
    dispatch and the experts to the host. The contradicted B300 rows ran without graphs; the one B300 all-to-all
    overlap in the bar, Qwen3-30B in 26.06, in a full-iteration graph."""
    from planner.plan import CudaGraphModule

    opts = ctx.options
    return not (opts.graphs_launch(CudaGraphModule.ATTN) and opts.graphs_launch(CudaGraphModule.MOE))


def contradicted(ctx: Context) -> dict[str, dict[int, Contradiction]]:
    """Per kind, the codes a ``Contradiction`` disputes for ``ctx`` (its GPU, a MoE model, host-paced), each with
    the contradiction."""
    out: dict[str, dict[int, Contradiction]] = {}
    if not ctx.model.is_moe:
        return out
    for c in CONTRADICTIONS:
        if c.gpu == ctx.hardware.gpu.name and host_paced(ctx):
            for kind, code in c.features:
                out.setdefault(kind, {})[code] = c
    return out


def _supporting_counts(ctx: Context) -> dict[str, dict[int, int]]:
    """``generation_counts`` of the plan's generation with its disputed codes (``disputed_codes``) at 0 settings."""
    table = generation_counts(generation(ctx.hardware))
    disputed = {kind: codes for kind, codes in disputed_codes(ctx).items() if codes}
    if not disputed:
        return table
    return {
        kind: {c: 0 if c in disputed.get(kind, ()) else n for c, n in counts.items()} for kind, counts in table.items()
    }


def _extrapolated(codes: dict[str, np.ndarray], table: dict[str, dict[int, int]]) -> np.ndarray:
    """Per plan, how many kinds' ``codes`` are used (not 0) with no setting behind them in ``table`` (the settings
    per kind and code: ``generation_counts``). A kind of one value for every plan (broadcast) adds a number."""
    out = np.zeros(len(next(iter(codes.values()))), dtype=np.int64)
    for kind, code in codes.items():
        if code.strides == (0,) and len(code):  # every plan the same code
            out += int(_table_of(code[:1], table[kind])[0] == 0)
        elif len(code) and (unexercised := _unexercised(code, table[kind])) is not None:
            out += unexercised
    return out


def _unexercised(code: np.ndarray, counts: dict[int, int]) -> np.ndarray | None:
    """Per code, whether it is used (not 0) and no setting has it (as ``_looked_up(code, counts) == 0``); None
    where no code of ``code`` can be (a table indexed by the code, as ``_looked_up``'s)."""
    code = code.astype(np.int64, copy=False)
    top = int(code.max())
    if int(code.min()) < 0 or top > LOOKUP_MAX:
        values, inverse = np.unique(code, return_inverse=True)
        return (_table_of(values, counts) == 0)[inverse.reshape(code.shape)]
    none = _table_of(np.arange(top + 1), counts) == 0
    return none[code] if none.any() else None


def plan_evidence(grid: PlanGrid, ctx: Context, gpus: int) -> PlanEvidence:
    """The evidence behind every plan of ``grid`` (``ctx``'s options and ``gpus``), vectorised: one
    lookup per distinct code of each kind."""
    major = generation(ctx.hardware)
    table = generation_counts(major)
    codes = feature_codes(grid, ctx, gpus)
    counts = {}
    for kind, code in codes.items():
        counts[kind] = _looked_up(code, table[kind])
    return PlanEvidence(major, codes, counts, disputed_codes(ctx), contradicted(ctx))


LOOKUP_MAX = 4096  # codes up to this are looked up through a table indexed by the code itself


def _looked_up(code: np.ndarray, counts: dict[int, int]) -> np.ndarray:
    """The settings behind each code (``NOT_USED`` for 0): codes are small non-negative integers (a CP
    size, a bucket, an enum), so a table indexed by the code replaces sorting them (``np.unique``)."""
    code = code.astype(np.int64, copy=False)  # an index, never a mask
    if code.strides == (0,) and len(code):  # every plan the same code (an option's kind): looked up once
        return _table_of(code[:1], counts).repeat(len(code))
    top = int(code.max()) if len(code) else 0
    if int(code.min(initial=0)) < 0 or top > LOOKUP_MAX:
        values, inverse = np.unique(code, return_inverse=True)
        return _table_of(values, counts)[inverse.reshape(code.shape)]
    return _table_of(np.arange(top + 1), counts)[code]


def _table_of(values: np.ndarray, counts: dict[int, int]) -> np.ndarray:
    return np.array([NOT_USED if v == 0 else counts.get(int(v), 0) for v in values], dtype=np.int64)


def generation_held_only(major: int) -> dict[str, dict[int, tuple]]:
    """Per kind, the codes of generation ``major`` that only held-out settings use, with (rows, RMS, lowest, highest)
    of r = ln(predicted step time / published) over their rows (``evidence_counts.HELD_ONLY``, written by
    scripts/evidence_counts.py from validate's rows)."""
    from planner.fidelity.evidence_counts import HELD_ONLY

    return HELD_ONLY.get(major, {})


def held_only_json(ev: PlanEvidence, i: int) -> list[dict]:
    """Plan i's features that no fitted setting of its generation uses, only held-out ones, each with how far those
    runs' steps are predicted: rows, RMS, lowest and highest of r = ln(predicted/published step time), as fractions
    (r < 0: the model fast). What the band, from the fitted rows, does not say."""
    table = generation_held_only(ev.generation)
    out = []
    for kind, codes in table.items():
        code = int(ev.codes[kind][i])
        if code and code in codes:
            n, rms, low, high = codes[code]
            disputed = code in ev.disputed.get(kind, ())
            out.append(
                {
                    "feature": LABELS[kind](code),
                    "runs": n,
                    "rms_frac": rms,
                    "low_frac": low,
                    "high_frac": high,
                    "disputed": disputed,
                }
            )
    return out


def contradicted_json(ev: PlanEvidence, i: int) -> list[dict]:
    """Plan i's features a ``Contradiction`` disputes: NVIDIA measured them slower on the plan's GPU and turned them
    off there; with the GPU, the source and how far the contradiction's rows are predicted (rows, RMS, lowest and
    highest r = ln(predicted/published step time): ``evidence_counts.CONTRADICTED``)."""
    from planner.fidelity.evidence_counts import CONTRADICTED

    out = []
    for kind, codes in ev.contradicted.items():
        code = int(ev.codes[kind][i])
        if code in codes:
            c = codes[code]
            n, rms, low, high = CONTRADICTED[c.preset]
            out.append(
                {
                    "feature": LABELS[kind](code),
                    "hardware": c.preset,
                    "source": c.source,
                    "runs": n,
                    "rms_frac": rms,
                    "low_frac": low,
                    "high_frac": high,
                }
            )
    return out


def evidence_json(ev: PlanEvidence, i: int, band: tuple[float, float, float], rows: str | None = None) -> dict:
    """Plan i's evidence for the plan JSON: every feature it uses with its settings (``held_out`` of them validated
    out of sample, never fitted), the weakest link, what is extrapolated, and its band (``band``: base, per
    extrapolated feature, total, as fractions; ``rows``: the rows the band comes from where they are not the
    preset's dense rows, ``band_rows``)."""
    codes, counts, settings = ev.lists
    features = []
    for kind in LABELS:
        if codes[kind][i] != 0:
            n, held = int(counts[kind][i]), int(ev.held_out[kind][i])
            label = LABELS[kind](int(codes[kind][i]))
            features.append({"feature": label, "kind": kind, "settings": n, "held_out": held})
    held_only = held_only_json(ev, i)
    contra = contradicted_json(ev, i)
    out = {
        "generation": generation_name(ev.generation),
        "settings": int(settings[i]),
        "features": features,
        "extrapolated": [f["feature"] for f in features if f["settings"] == 0],
        "disputed": list(
            dict.fromkeys([*(f["feature"] for f in held_only if f["disputed"]), *(f["feature"] for f in contra)])
        ),
        "band_frac": band[2],
        "base_band_frac": band[0],
        "per_extrapolated_frac": band[1],
    }
    if rows:
        out["band_rows"] = rows
    if held_only:
        out["held_out_only"] = held_only
    if contra:
        out["contradicted"] = contra
    return out


def band_parts(ctx: Context) -> tuple[float, float]:
    """(ε₀, δ): the band of a plan whose every feature has a run behind it, and what each extrapolated
    feature adds in quadrature (hardware preset ``accuracy``; MoE plans: the MoE rows' figures; NVFP4 plans: the
    NVFP4 rows', ``nvfp4_band_parts``)."""
    acc = ctx.hardware.accuracy
    if ctx.model.is_moe and acc.moe_validation_error_frac is not None:
        base = (acc.moe_validation_error_frac**2 + acc.calibration_uncertainty_frac**2) ** 0.5
        return base, acc.moe_max_error_frac or base
    if _nvfp4_band(ctx):
        return nvfp4_band_parts(
            acc.nvfp4_validation_error_frac, acc.nvfp4_max_error_frac, acc.calibration_uncertainty_frac
        )
    return acc.band_frac, acc.max_error_frac if acc.max_error_frac is not None else acc.band_frac


def nvfp4_band_parts(rms_frac: float, max_frac: float, calibration_frac: float) -> tuple[float, float]:
    """(ε₀, δ) of an NVFP4 plan from its preset's NVFP4 rows (docs/cost-model.md §4.1, §10.6):

        ε₀ = √(ε_nv² + σ_cal²),  δ = max(δ_nv, ε₀)

    ε_nv (``rms_frac``) the RMS of the rows' r = ln(predicted/published), each taken out of sample (GB300: at its
    measured ratio; GB200: at the ratio fitted without the row's model), σ_cal (``calibration_frac``) the dense
    calibration's uncertainty carried to a prediction (the factors the rows do not fit), δ_nv (``max_frac``) the
    largest |r| (``nvfp4_fit.log_band``), what each feature no setting exercises adds. Scalars or arrays."""
    base = np.sqrt(np.square(rms_frac) + np.square(calibration_frac))
    return base, np.maximum(max_frac, base)


def _nvfp4_band(ctx: Context) -> bool:
    """Whether the plan's band is its NVFP4 rows' (an NVFP4 plan on a preset whose accuracy has them)."""
    acc = ctx.hardware.accuracy
    return (
        ctx.options.fp4 is not None
        and acc.nvfp4_validation_error_frac is not None
        and acc.nvfp4_max_error_frac is not None
    )


def band_rows(ctx: Context) -> str | None:
    """The rows a plan's band comes from where they are not the preset's dense fitted rows: an NVFP4 plan's, their
    count, preset, bearing and source (the accuracy's source text); a dense plan on a preset that carries another's
    factors, its own held-out runs (calibrate writes their RMS when it has no fitted row: H200's three MLPerf runs).
    explain prints it on the runs line."""
    if ctx.model.is_moe:
        return None
    if _nvfp4_band(ctx):
        return ctx.hardware.accuracy.sources.get("nvfp4_validation_error_frac")
    acc = ctx.hardware.accuracy
    if acc.held_out_runs is None:
        return None
    return acc.sources["held_out_runs"].replace("this preset's", f"{ctx.hardware.name}'s", 1)


def band_frac(extrapolated: np.ndarray, ctx: Context) -> np.ndarray:
    """ε = √(ε₀² + n·δ²) per plan, n its extrapolated features (docs/cost-model.md §10.6)."""
    base, per = band_parts(ctx)
    return np.sqrt(base**2 + np.asarray(extrapolated) * per**2)
