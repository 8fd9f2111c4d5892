"""Memory on the GPUs of each pipeline stage, term by term (bytes)."""

from __future__ import annotations

import functools

import numpy as np

from planner.costs import Formula, memory, process_memory
from planner.costs.layer_memory import kept_per_layer, layer_kinds, selective_coefficients
from planner.costs.letters import ACT_KEY, Letters, select
from planner.costs.linears import BLACKWELL, quant_recipe
from planner.costs.mla import mla_activation_parts, mla_up_proj_outputs
from planner.costs.pipeline import in_flight_microbatches
from planner.hardware.spec import GIB
from planner.models.params import dense_layer_params, embedding_params, moe_layer_params, mtp_extra_params, norm_params
from planner.plan import (
    OPTIMIZER_DTYPE_BYTES,
    AttentionKernel,
    Context,
    CudaGraphImpl,
    FsdpOuterSharding,
    ParallelPlan,
    Recompute,
    RecomputeModule,
)

ALLOCATED_TERMS = ("weights", "gradients", "optimizer", "activations", "cuda_graphs", "workspaces")
MEMORY_TERMS = (*ALLOCATED_TERMS, "nccl", "cuda_context", "fragmentation")
WORKSPACES = ALLOCATED_TERMS.index("workspaces")  # the one term --tp-comm-overlap changes
MIB = 2**20
FSDP_UNSHARDED_LAYERS = 2  # Megatron FSDP gathers the next layer while computing this one
FSDP_GRAD_BYTES = (
    2  # Megatron FSDP's main grads default to the model's 16-bit dtype (--megatron-fsdp-main-grads-dtype auto)
)
# numpy's ufunc buffer (elements) while the memory terms are computed. With its default 8192, an op between a
# (plans, stages) array and a plan's (plans, 1) letter, on fewer plans than that, grows its inner loop over the
# stages and copies the letter into the buffer piece by piece: 108 k instructions against 24 k with this buffer
# at 3,468 × 3 (callgrind), and most of a stage's terms are such ops. The numbers are the same whatever the
# buffer: every op here is elementwise arithmetic, and the only reductions (max, min, any, integer cumsum) are
# exact.
UFUNC_BUFFER = 1024


def _layer_params(lt: Letters, ctx: Context) -> dict[str, np.ndarray]:
    """Per GPU, (N, 1): a dense layer; an MoE layer's dense part (attention, norms, router, shared
    experts; sharded over d·c) and its E/ep experts (over the expert data-parallel group); what an MTP
    depth adds to its layer (projection and norms)."""
    mo = ctx.model
    out = {"dense_layer": dense_layer_params(mo, lt.t), "mtp_extra": mtp_extra_params(mo, lt.t)}
    if mo.is_moe:
        out["moe_dense"], out["moe_expert"] = moe_layer_params(mo, lt.t, lt.ep, lt.etp)
    else:  # no MoE layer reads them
        out["moe_dense"], out["moe_expert"] = out["dense_layer"], 0.0
    return out


def stage_params(lt: Letters, ctx: Context, i: np.ndarray, lp: dict | None = None) -> dict[str, np.ndarray]:
    """Parameters on one GPU of stage i: ``dense`` (sharded over d·c) and ``expert`` (over the
    expert data-parallel group) of its dense and MoE layers, MTP depths (each a layer of the last
    layer's kind, its projection and norms, and a copy of the word embedding when the MTP stage is
    not the first, Megatron-Core gpt_model.py:173), the embedding (first stage), final norm and
    output layer (last stage); ``layers`` those of its transformer layers (FP8 keeps copies of them;
    norms and biases included, a rounding error). Its largest layer's: ``largest_layer_params``. A model
    without MoE layers (or MTP depths) leaves out their terms, zero for it. ``lp``: ``_layer_params``, if known."""
    mo = ctx.model
    st = lt.stage(i)
    first, last = st["first"], st["last"]
    mtp = st["mtp"] if mo.mtp_layers else None  # read only for a model with MTP depths
    emb = embedding_params(mo, lt.t, lt.s)
    word = emb["word"]  # V·h/t
    output = word * (lt.p > 1) if mo.tied_embeddings else word  # tied: a copy only when p > 1
    lp = _layer_params(lt, ctx) if lp is None else lp
    layers_dense, layers_expert = st["dense"] * lp["dense_layer"], 0.0
    if mo.is_moe:
        layers_dense = layers_dense + st["moe"] * lp["moe_dense"]
        layers_expert = st["moe"] * lp["moe_expert"]
    if mo.mtp_layers:  # each depth a layer of the last layer's kind, its projection and norms
        mtp_is_moe = mo.is_moe and mo.mtp_is_moe
        layers_dense = layers_dense + mtp * ((lp["moe_dense"] if mtp_is_moe else lp["dense_layer"]) + lp["mtp_extra"])
        layers_expert = layers_expert + mtp * (lp["moe_expert"] if mtp_is_moe else 0.0)
    dense = layers_dense + first * (emb["word"] + emb["position"]) + last * (norm_params(mo) + output)
    if mo.mtp_layers:  # the MTP stage's embedding (and output layer)
        dense = dense + (mtp > 0) * ((1.0 - first) * word + (1.0 - last) * word)
    return {
        "dense": dense,
        "expert": np.broadcast_to(layers_expert, np.shape(dense)),
        "layers": layers_dense + layers_expert if mo.is_moe or mo.mtp_layers else layers_dense,
    }


def largest_layer_params(lt: Letters, ctx: Context, i: np.ndarray, lp: dict) -> np.ndarray:
    """Parameters on one GPU of stage i's largest transformer layer: a dense one if it holds any, an MoE
    one (its dense part and its experts) if it holds any (``lp``: ``_layer_params``); 0 for a stage of none."""
    mo, st = ctx.model, lt.stage(i)
    largest = lp["dense_layer"] * (st["dense"] > 0)
    if mo.is_moe:
        largest = np.maximum(largest, (lp["moe_dense"] + lp["moe_expert"]) * (st["moe"] > 0))
    return np.broadcast_to(largest, np.shape(st["layers"]))


def fp8_weight_bytes(ctx: Context) -> float:
    """Bytes per linear-layer weight element Transformer Engine holds in FP8 on this GPU with this
    recipe (``memory.fp8_weight_bytes_per_param``): one per-tensor copy serves both GEMM layouts from
    compute capability 10 (Blackwell), where Hopper needs a transposed copy too."""
    one_copy = ctx.hardware.gpu.compute_capability >= BLACKWELL
    return memory.fp8_weight_bytes_per_param(quant_recipe(ctx.options), one_copy_serves_both=one_copy)


def dfa_keeps_remainders(ctx: Context) -> bool:
    """Whether NeMo 1's Apex DistributedFusedAdam (``dfa_bucket_mb``) keeps each fp32 master weight as the 16-bit
    remainder beside the bf16 weight: bf16 weights without FP8 parameters (NVIDIA/NeMo megatron_base_model.py
    setup_optimization @ v2.0.0rc0: optim dtype fp32 and model dtype bf16 -> store_params False,
    store_param_remainders True; fp8_params -> store_params True, the whole fp32 master)."""
    opts = ctx.options
    return opts.dfa_bucket_mb is not None and ctx.precision == "bf16" and not opts.fp8_param_gather


def state_bytes_per_param(ctx: Context) -> tuple[int, int]:
    """(gradient, optimizer) bytes per parameter: the gradient buffer's dtype and Adam's states (with NeMo 1's
    DistributedFusedAdam keeping remainders, ``dfa_keeps_remainders``, 2 + 4 + 4 as the precision-aware optimizer's
    remainder)."""
    opts = ctx.options
    grad = memory.gradient_bytes_per_param(ctx.precision, grads_in_16_bits=opts.grad_buffer_in_16_bits)
    optimizer = memory.optimizer_bytes_per_param(
        ctx.precision,
        precision_aware=opts.use_precision_aware_optimizer or dfa_keeps_remainders(ctx),
        master_bytes=OPTIMIZER_DTYPE_BYTES[opts.main_params_dtype],
        exp_avg_bytes=OPTIMIZER_DTYPE_BYTES[opts.exp_avg_dtype],
        exp_avg_sq_bytes=OPTIMIZER_DTYPE_BYTES[opts.exp_avg_sq_dtype],
    )
    return grad, optimizer


def _states(lt: Letters, ctx: Context, params: dict[str, np.ndarray], i: np.ndarray, lp: dict) -> dict:
    """Weights, gradients and optimizer states of stage i's ``params`` (``stage_params``; ``lp``: its layers'),
    sharded as each plan's distributed optimizer and Megatron FSDP level say."""
    grad_b, opt_b = state_bytes_per_param(ctx)
    kw = dict(
        precision=ctx.precision, distributed_optimizer=lt.dopt | lt.fsdp, gradient_bytes=grad_b, optimizer_bytes=opt_b
    )
    # the optimizer over one instance's d·c/R ranks (experts: edp/R), or over all d·c with Megatron FSDP's HFSDP
    states = memory.param_state_bytes(params["dense"], lt.opt_group, **kw)
    if ctx.model.is_moe:  # a dense model has no expert parameters
        expert = memory.param_state_bytes(params["expert"], lt.opt_group_e, **kw)
        states = {k: states[k] + expert[k] for k in states}
    # Megatron FSDP shards the weights (optim_grads_params) and the gradients (optim_grads too), dense over
    # d·c/R (R replicas: HSDP), experts over the expert data-parallel group's edp/R, keeping a couple of
    # layers whole while they run
    w_bytes, _, _ = memory.BYTES_PER_PARAM[ctx.precision]
    fsdp = np.count_nonzero(lt.fsdp_grads)  # a grid without Megatron FSDP's sharded weights or gradients skips them
    if fsdp:
        sharded = params["dense"] / lt.N
        if ctx.model.is_moe:
            sharded = sharded + params["expert"] / lt.edp_in
        held = sharded + FSDP_UNSHARDED_LAYERS * largest_layer_params(lt, ctx, i, lp)
        states["weights"] = np.where(lt.fsdp_params, w_bytes * held, states["weights"])
        states["gradients"] = np.where(lt.fsdp_grads, FSDP_GRAD_BYTES * held, states["gradients"])
    opts = ctx.options
    if opts.quantised:  # FP8/NVFP4 copies (and transposes), or instead of the 16-bit weight with --fp8/4-param-gather
        extra = fp8_weight_bytes(ctx) - (w_bytes if opts.fp8_param_gather or opts.fp4_param_gather else 0)
        layers_here = _fp8_layer_params(lt, ctx, params, i, lp)
        if fsdp:
            whole = np.maximum(params["dense"] + params["expert"], 1)
            layers_here = np.where(lt.fsdp_params, layers_here * sharded / whole, layers_here)
        states["weights"] = states["weights"] + extra * layers_here
    if opts.fp8_output_proj:  # the MXFP8 output layer's cached copy of its 16-bit V/t × h weight (last stage)
        word = embedding_params(ctx.model, lt.t, lt.s)["word"]
        states["weights"] = states["weights"] + lt.stage(i)["last"] * fp8_weight_bytes(ctx) * word
    return states


def _fp8_layer_params(lt: Letters, ctx: Context, params: dict, i: np.ndarray, lp: dict) -> np.ndarray:
    """The stage's transformer-layer parameters Transformer Engine holds FP8 copies of (``params["layers"]``): all
    but the BF16 end layers', built outside fp8_model_init and run outside fp8_autocast (get_fp8_context gives
    them a nullcontext: transformer_block.py:354, 689 @ d98e8a64), so neither quantised weights nor FP8 primaries."""
    if not lt.bf16_ends:
        return params["layers"]
    st = lt.stage(i)
    bf16 = st["bf16"] * lp["dense_layer"]
    if ctx.model.is_moe:
        bf16 = bf16 + st["bf16_moe"] * (lp["moe_dense"] + lp["moe_expert"] - lp["dense_layer"])
    return params["layers"] - bf16


def _per_micro_batch(lt: Letters, ctx: Context) -> dict:
    """What one micro-batch keeps, by the letters of ``ACT_KEY``: a dense and an MoE layer (``layer_kinds``),
    the embedding (first stage), the output layer (last stage) and an MTP depth's 2h-wide projection input."""
    kinds = layer_kinds(lt, ctx)
    out = {
        "dense": kinds["dense"],
        "moe": kinds["moe"],
        "output": memory.output_layer_activation_bytes(lt.s, lt.b, lt.h, lt.V, lt.t, lt.c, sequence_parallel=lt.sp),
        "embedding": memory.embedding_activation_bytes(
            lt.s, lt.b, lt.h, lt.t, lt.c, sequence_parallel=lt.sp, dropout=lt.dropout
        ),
    }
    if ctx.model.mtp_layers:
        out["mtp_projection"] = 2 * lt.act_bytes * lt.b * lt.s * lt.h / lt.c / np.where(lt.sp, lt.t, 1)
    if ctx.options.fp8_output_proj:  # the MXFP8 output layer saves its input column-wise in MXFP8, not in 16 bits
        saved = lt.act_bytes - memory.fp8_saved_bytes_per_element("mxfp8")
        out["output"] = out["output"] - saved * lt.b * lt.s * lt.h / lt.c / np.where(lt.sp, lt.t, 1)
    if lt.bf16_ends:  # a BF16 end layer keeps its linear layers' inputs in 16 bits (``layer_memory.layer_kinds``)
        kinds16 = layer_kinds(lt.in_bf16(), ctx)
        out["dense16"], out["moe16"] = kinds16["dense"], kinds16["moe"]
    return out


def _bf16_kept(lt: Letters, ctx: Context, st: dict, per: dict) -> np.ndarray:
    """What a stage's BF16 end layers keep per micro-batch beyond the same layers in FP8 (``st``: its ``bf16`` layers,
    of them ``bf16_moe``; ``per``: ``_per_micro_batch``): 16-bit saved inputs where FP8 layers keep one byte and
    the recipe's scales; nothing under full recomputation, which keeps each layer's 16-bit input either way."""
    dense = st["bf16"] - st["bf16_moe"] if ctx.model.is_moe else st["bf16"]
    extra = dense * (kept_per_layer(lt, per["dense16"]) - kept_per_layer(lt, per["dense"]))
    if ctx.model.is_moe:
        extra = extra + st["bf16_moe"] * (kept_per_layer(lt, per["moe16"]) - kept_per_layer(lt, per["moe"]))
    return extra


def _activations(lt: Letters, ctx: Context, i: np.ndarray) -> np.ndarray:
    """Activations of stage i at its peak: the micro-batches in flight times what each of its layers
    keeps (its dense and MoE layers each their own, ``layer_memory.layer_kinds``), the working
    set of the layers being recomputed, less what waits in host memory, plus the embedding (first
    stage), the output layer (last stage) and the MTP depths (each a layer, its 2h-wide projection
    input and, for the micro-batch at the loss, its own logits). What one micro-batch keeps is computed
    once per distinct ``ACT_KEY`` (``_per_micro_batch``); terms zero for the model or the grid (MoE
    layers, MTP depths, offloading, a recomputation no plan has) are left out."""
    mo = ctx.model
    st = lt.stage(i)
    per = lt.once(lambda v: _per_micro_batch(v, ctx), "micro_batch_activations", ACT_KEY)
    dense, moe_layer = per["dense"], per["moe"]
    n = st["layers"]
    share = st["moe"] / np.maximum(n, 1) if mo.is_moe else None  # of the stage's layers, MoE (None: none)

    def mean(kind: str) -> np.ndarray:  # full recomputation's blocks take the mean
        return dense[kind] if share is None else (1 - share) * dense[kind] + share * moe_layer[kind]

    whole = mean("whole")
    in_flight = in_flight_microbatches(lt.p, lt.m, lt.vpp, i, a2a_overlap=lt.a2a_overlap, layers=n, G=lt.G)
    # what the layers keep: n × the layer's (whole, or selective's), full recomputation its own
    kept = n * select(lt.rc == 1, lambda: mean("selective"), lambda: whole)
    full_rows = lt.rc == 2
    full = np.count_nonzero(full_rows)
    if full:
        full_kept, full_working = _full_recompute(lt, st, whole, dense, moe_layer if mo.is_moe else None)
        kept = select(full_rows, lambda: full_kept, lambda: kept)
    if mo.mtp_layers:
        mtp_layer = moe_layer if mo.is_moe and mo.mtp_is_moe else dense
        kept = kept + st["mtp"] * (kept_per_layer(lt, mtp_layer) + per["mtp_projection"])
    if lt.bf16_ends:
        kept = kept + _bf16_kept(lt, ctx, st, per)
    out = in_flight * kept
    if full:
        out = out + select(full_rows, lambda: full_working, lambda: 0.0)
    if ctx.options.cpu_offloading_num_layers:
        # offloaded layers' copies finish during the next layer's compute, long before the peak at the end
        # of the forward, so none of them is left on the GPU then
        offloaded = np.minimum(ctx.options.cpu_offloading_num_layers, n) * whole
        out = out - np.where(lt.rc == 0, offloaded, 0.0)
    output = (st["last"] + st["mtp"]) * per["output"] if mo.mtp_layers else st["last"] * per["output"]
    return out + st["first"] * (np.minimum(lt.p, lt.m) * per["embedding"]) + output


def _full_recompute(lt: Letters, st: dict, whole: np.ndarray, dense: dict, moe_layer: dict | None) -> tuple:
    """Full recomputation of a stage (``st``): what it keeps, and the working set of the layers being recomputed
    beyond the inputs kept (``whole``: its mean layer's whole activations; ``moe_layer``: None without MoE
    layers). Uniform keeps the input of every group of N layers and re-runs a group at a time; block keeps the
    input of its first k layers of each chunk and everything of the rest (megatron/core/recompute.py)."""
    n, layer_input = st["layers"], dense["input"]
    largest = (st["dense"] > 0) * dense["whole"]
    if moe_layer is not None:
        largest = np.maximum(largest, (st["moe"] > 0) * moe_layer["whole"])
    vpp = np.asarray(lt.vpp, dtype=float)  # the letters in floats (``Letters`` keeps them so), as against n
    chunk = n / vpp  # layers of one model chunk on this stage
    rec = lt.recomputed_layers(n)
    group = functools.cache(lambda: np.minimum(np.maximum(np.asarray(lt.rlayers, dtype=float), 1), chunk))
    kept = select(
        lt.rblock, lambda: rec * layer_input + (n - rec) * whole, lambda: vpp * np.ceil(chunk / group()) * layer_input
    )
    used = rec > 0  # a stage recomputing any layer (block); times a number, as 1.0 or 0.0
    working = select(lt.rblock, lambda: used, group) * largest
    return kept, working - np.where(used, layer_input, 0)


def _moe_layer_share(lt: Letters, ctx: Context, i: np.ndarray) -> np.ndarray:
    """Of stage i's layers (with its MTP depths), the share that are MoE layers."""
    st = lt.stage(i)
    moe = st["moe"] + (st["mtp"] if ctx.model.is_moe and ctx.model.mtp_is_moe else 0.0)
    return moe / np.maximum(st["layers"] + st["mtp"], 1)


def _cuda_graph_bytes(lt: Letters, ctx: Context, i: np.ndarray) -> np.ndarray | float:
    """Static buffers of per-layer CUDA graphs on stage i (``process_memory.cuda_graph_static_bytes``); 0
    without them."""
    opts, mo = ctx.options, ctx.model
    graphs = process_memory.cuda_graphs_per_layer(opts)
    if not graphs:
        return 0.0
    if opts.cuda_graph_impl == CudaGraphImpl.TRANSFORMER_ENGINE:  # one graph per layer, its outputs by scope
        modules = tuple(m.value for m in opts.cuda_graph_modules)
        shared_out = bool(mo.shared_ffn) and not opts.moe_shared_expert_overlap
        per_moe = process_memory.te_graph_static_tensors(modules, moe_layer=True, shared_out=shared_out)
        per_dense = process_memory.te_graph_static_tensors(modules, moe_layer=False, shared_out=False)
        m_share = _moe_layer_share(lt, ctx, i) if mo.is_moe else 0.0
        graphs = ((1.0 - m_share) * per_dense + m_share * per_moe) / process_memory.GRAPH_STATIC_TENSORS
    copies = np.where(lt.p == 1, 1.0, in_flight_microbatches(lt.p, lt.m, lt.vpp, i, G=lt.G))
    message = lt.act_bytes * lt.b * lt.s * lt.h / (lt.c * np.where(lt.sp, lt.t, 1))
    return process_memory.cuda_graph_static_bytes(message, lt.stage(i)["layers"], graphs, copies)


def _process_bytes(lt: Letters, ctx: Context, i: np.ndarray, activations: np.ndarray) -> dict:
    """What the process holds besides model states and activations (planner.costs.process_memory): per stage
    (fragmentation), per plan ((N, 1): workspaces, NCCL) or one value (CUDA context; CUDA graphs without them)."""
    mem, opts, mo = ctx.hardware.memory, ctx.options, ctx.model
    communicators = process_memory.nccl_communicators(
        lt.t, lt.c, lt.p, lt.d, lt.ep, lt.etp, lt.edp, tied_embeddings=mo.tied_embeddings, moe=mo.is_moe
    )
    return {
        "cuda_graphs": _cuda_graph_bytes(lt, ctx, i),
        "workspaces": _workspaces(lt, ctx, lt.tpo & lt.sp),
        "nccl": communicators * mem.nccl_communicator_gib * GIB,
        "cuda_context": mem.cuda_context_gib * GIB,
        "fragmentation": process_memory.fragmentation_bytes(
            activations,
            mem.fragmentation_frac,
            expandable_segments=opts.expandable_segments,
            moe_share=_moe_layer_share(lt, ctx, i) if mo.is_moe else 0.0,  # a dense model's: 0
            moe_frac=mem.moe_fragmentation_frac,
        ),
    }


def _workspaces(lt: Letters, ctx: Context, tpo: np.ndarray) -> np.ndarray:
    """GEMM workspaces and (``tpo``: --tp-comm-overlap with sequence parallelism) userbuffers, per plan (N, 1); with
    BF16 end layers a second set of userbuffers in 16 bits beside the FP8 one (Transformer Engine ≥ 2.7:
    Megatron-LM initialize.py:228-245 @ d98e8a64 adds UserBufferQuantizationMode.NONE)."""
    ub = process_memory.userbuffer_bytes(
        lt.s, lt.b, lt.h, lt.c, tp_comm_overlap=tpo, fp8=lt.fp8, act_bytes=lt.act_bytes
    )
    if lt.bf16_ends:
        ub = ub + process_memory.userbuffer_bytes(
            lt.s, lt.b, lt.h, lt.c, tp_comm_overlap=tpo, fp8=False, act_bytes=lt.act_bytes
        )
    return process_memory.workspace_bytes(ctx.hardware.memory.cublas_workspace_mib * MIB, tp_comm_overlap=tpo) + ub


def _memory_terms(lt: Letters, ctx: Context, i: np.ndarray) -> tuple[dict, dict]:
    """Each term of ``MEMORY_TERMS`` of stage i, as computed: per stage, per plan or one value (summed as they
    are: a value broadcast along the stages adds the same); and the stage's parameters (``stage_params``).
    Computed with numpy's ufunc buffer at ``UFUNC_BUFFER`` elements."""
    caller = np.setbufsize(UFUNC_BUFFER)  # the caller's size, restored on leaving (numpy 1.26 keeps no scope for it)
    try:
        lp = _layer_params(lt, ctx)
        params = stage_params(lt, ctx, i, lp)
        activations = _activations(lt, ctx, i)
        terms = {**_states(lt, ctx, params, i, lp), "activations": activations}
        terms.update(_process_bytes(lt, ctx, i, activations))
    finally:
        np.setbufsize(caller)
    return terms, params


def _allocated_and_total(terms: dict) -> tuple[np.ndarray, np.ndarray]:
    """``allocated``: the sum of ``ALLOCATED_TERMS``, what PyTorch's allocator hands out (the peak Megatron logs
    as max allocated); ``total``: that plus the rest of ``MEMORY_TERMS``, in their order."""
    allocated = _summed(terms, ALLOCATED_TERMS)
    return allocated, _summed(terms, MEMORY_TERMS[len(ALLOCATED_TERMS) :], allocated)


def _summed(terms: dict, names: tuple, start=None):
    """``start`` (None: nothing) plus the ``terms`` ``names``, added one at a time in their order."""
    for k in names:
        start = terms[k] if start is None else start + terms[k]
    return start


def stage_max(x: np.ndarray) -> np.ndarray:
    """``np.max(x, axis=1)`` of a (plans, stages) array: the maximum of its columns, taken in their order by
    ``np.maximum`` (a NaN wins, as in the reduction, which also takes them pairwise in that order), a new array. One
    ufunc call per column after the first over contiguous columns (``Letters.stage``'s arrays are column-major):
    about 22 k instructions at 2,448 × 3 against the reduction's 50 k over rows of 3 (callgrind)."""
    if x.shape[1] == 1:
        return x[:, 0].copy()
    out = np.maximum(x[:, 0], x[:, 1])
    for j in range(2, x.shape[1]):
        np.maximum(out, x[:, j], out=out)
    return out


def stage_memory_total(lt: Letters, ctx: Context, i: np.ndarray) -> np.ndarray:
    """The ``total`` of ``stage_memory_bytes`` alone (bytes): no term spread over every stage of every plan."""
    return _allocated_and_total(_memory_terms(lt, ctx, i)[0])[1]


def stage_memory_total_and_twins(lt: Letters, ctx: Context, i: np.ndarray, twins: np.ndarray) -> tuple:
    """``stage_memory_total`` of every plan, and of the plans at ``twins`` (positions) without --tp-comm-overlap:
    the overlap changes their workspaces alone (``_workspaces``: its userbuffers and TE's streams), so their
    other terms are the plans' own, summed again in the same order with the twins' workspaces (the twins' totals
    are those of their own evaluation, number for number, without evaluating them): the sum of the terms before
    the workspaces is the plans' own, read at the twins."""
    terms = _memory_terms(lt, ctx, i)[0]
    head = _summed(terms, ALLOCATED_TERMS[:WORKSPACES])  # the terms before the workspaces, as the total adds them
    tail = MEMORY_TERMS[WORKSPACES:]  # the workspaces and the terms after them
    total = _summed(terms, tail, head)
    n = len(lt.t)

    def rows(v):  # a per-plan term's twin rows, column-major as the terms (``Letters.stage``); one value as it is
        return v.T.take(twins, axis=1).T if np.ndim(v) == 2 and np.shape(v)[0] == n else v

    off = {k: rows(terms[k]) for k in tail[1:]}
    caller = np.setbufsize(UFUNC_BUFFER)
    try:
        off["workspaces"] = rows(_workspaces(lt, ctx, np.zeros((n, 1), dtype=bool)))
        return total, _summed(off, tail, rows(head))
    finally:
        np.setbufsize(caller)


def stage_memory_bytes(lt: Letters, ctx: Context, i: np.ndarray) -> dict[str, np.ndarray]:
    """Memory on the GPUs of pipeline stage i, term by term (bytes), each (plans, stages); ``allocated`` and
    ``total`` (``_allocated_and_total``); the stage's parameters, dense and expert."""
    terms, params = _memory_terms(lt, ctx, i)
    allocated, total = _allocated_and_total(terms)
    shape = np.shape(total)
    out = {k: v if np.shape(v) == shape else np.broadcast_to(v, shape) for k, v in terms.items()}
    out["params"] = params["dense"] + params["expert"] if ctx.model.is_moe else params["dense"]
    out["dense_params"], out["expert_params"] = params["dense"], params["expert"]
    out["allocated"], out["total"] = allocated, total
    return out


K22 = "Korthikanti et al. 2022, Table 2, §4.2.3, §4.3"
DIST_OPT = "Megatron-LM docs/user-guide/features/dist_optimizer.md; parameters: Narayanan et al. 2021 Eq. 2 generalised"


def memory_formulas(ctx: Context, plan: ParallelPlan, fixed: dict | None = None) -> dict[str, Formula]:
    """The formula and source of each memory term for one plan, as ``stage_memory_bytes`` computes it; ``fixed``:
    the context's ``memory_context_formulas`` (computed here when not given)."""
    fixed = memory_context_formulas(ctx) if fixed is None else fixed
    opts = ctx.options
    w, g, o = fixed["state_bytes"]
    expert = " (experts over the expert data-parallel group)" if ctx.model.is_moe else ""
    level = plan.fsdp_sharding.code if plan.fsdp else 0
    R = plan.distributed_optimizer_instances
    inner = "(d·c)" if R == 1 else f"(d·c/{R}), one of {R} replicas (HSDP),"
    held = f"(P_stage/{inner} + {FSDP_UNSHARDED_LAYERS} whole layers being gathered){expert}"
    if level == 3:
        weights = Formula(f"{w} bytes × {held}", "Megatron FSDP (ZeRO-3, Rajbhandari et al. 2020); " + DIST_OPT)
        gradients = Formula(
            f"{FSDP_GRAD_BYTES} bytes × {held}", "Megatron FSDP: main grads in the model dtype by default"
        )
    elif level == 2:
        weights = Formula(f"P_stage × {w} bytes ({ctx.precision} weights, whole: FSDP optim_grads)", DIST_OPT)
        gradients = Formula(
            f"{FSDP_GRAD_BYTES} bytes × {held.replace('gathered', 'reduced')}",
            "Megatron FSDP optim_grads (ZeRO-2, Rajbhandari et al. 2020 §5.2): main grads in the model dtype",
        )
    else:
        weights = Formula(f"P_stage × {w} bytes ({ctx.precision} weights)", DIST_OPT)
        main = "fp32 main grads" if g == 4 and ctx.precision == "bf16" else f"{ctx.precision} grads"
        why = " (--grad-reduce-in-bf16: a bf16 buffer)" if g == 2 and ctx.precision == "bf16" else ""
        gradients = Formula(f"P_stage × {g} bytes ({main}){why}", DIST_OPT + "; Megatron-LM arguments.py:1204-1217")
    if opts.quantised:
        weights = _with_fp8_weights(ctx, weights)
    optimizer = _optimizer_formula(ctx, plan, o, expert)
    return {
        "weights": weights,
        "gradients": gradients,
        "optimizer": optimizer,
        "activations": activation_formula(ctx, plan, fixed["layer_parts"]),
        **process_memory.process_formulas(ctx, plan),
    }


def memory_context_formulas(ctx: Context) -> dict:
    """What ``memory_formulas`` reads of the context alone (the same for its plans): the bytes per parameter of the
    weights, gradients and optimizer states, and a layer's activation coefficients (``_layer_parts``)."""
    w, _, _ = memory.BYTES_PER_PARAM[ctx.precision]
    return {"state_bytes": (w, *state_bytes_per_param(ctx)), "layer_parts": _layer_parts(ctx)}


def _with_fp8_weights(ctx: Context, weights: Formula) -> Formula:
    """The weights' formula with the FP8 copy Transformer Engine holds of the linear layers' weights."""
    opts = ctx.options
    fp8_b, recipe = fp8_weight_bytes(ctx), quant_recipe(opts)
    what = {
        "nvfp4": "row-wise and column-wise NVFP4 data with their E4M3 scales per 16",
        "mxfp8": "row-wise and column-wise MXFP8 data with their E8M0 scales",
        "blockwise": "row-wise and transposed FP8 data with their 128×128-block scales",
    }.get(recipe, "an FP8 copy read both ways" if fp8_b == 1 else "an FP8 copy and its transpose")
    size = f"{fp8_b:.4g} byte{'' if fp8_b == 1 else 's'}"
    extra = (
        f"{what} ({size}) instead of the 16-bit weight"
        if opts.fp8_param_gather or opts.fp4_param_gather
        else f"+ {size} ({what}, cached between micro-batches)"
    )
    if any(opts.bf16_end_layers):
        start, end = opts.bf16_end_layers
        extra += f"; none for the first {start} and last {end} layers (BF16: --first-last-layers-bf16)"
    if opts.fp8_output_proj:
        extra += f"; the MXFP8 output layer: + {fp8_weight_bytes(ctx):.4g} bytes × V·h/t (last stage)"
    return Formula(
        f"{weights.text}; linear-layer weights: {extra}",
        weights.source + "; Transformer Engine module/base.py reset_parameters (both GEMM layouts) and "
        "pytorch/csrc/quantizer.cpp create_tensor (a transposed copy only where FP8 GEMMs are TN-only: "
        "Hopper)",
    )


def _optimizer_formula(ctx: Context, plan: ParallelPlan, o: float, expert: str) -> Formula:
    """The optimizer states' formula: what each parameter holds (``o`` bytes) and how it is sharded."""
    opts = ctx.options
    if opts.use_precision_aware_optimizer:
        states = (
            f"master weight {opts.main_params_dtype} (an fp32 one kept as its 16-bit remainder beside the bf16 "
            f"weight), Adam m {opts.exp_avg_dtype}, v {opts.exp_avg_sq_dtype}: {o} bytes"
        )
    elif dfa_keeps_remainders(ctx):
        states = "fp32 master weight kept as its 16-bit remainder beside the bf16 weight (Apex DistributedFusedAdam's "
        states += "store_param_remainders, NeMo 1), Adam m and v"
    elif ctx.precision == "fp16":
        states = "fp32 master weight and grad, Adam m and v"
    else:
        states = "fp32 master weight, Adam m and v"
    sharded = _optimizer_shard_text(plan)
    aware = "; --use-precision-aware-optimizer: optimizer_config.py:187-207, distrib_optimizer.py:1005-1013"
    return Formula(
        f"P_stage × {o} bytes ({states}){sharded}{expert if sharded else ''}",
        DIST_OPT
        + (aware if opts.use_precision_aware_optimizer else "")
        + ("; NVIDIA/NeMo megatron_base_model.py setup_optimization" if dfa_keeps_remainders(ctx) else ""),
    )


def _optimizer_shard_text(plan: ParallelPlan) -> str:
    """What the optimizer states are divided by, as text: d·c, one instance's d·c/R, or nothing."""
    R = plan.distributed_optimizer_instances
    if plan.fsdp and R > 1:
        if plan.fsdp_outer_sharding is FsdpOuterSharding.OPTIM:
            return f" ÷ d·c (Megatron FSDP {plan.fsdp_sharding.value}, HFSDP: sharded across the {R} replicas too)"
        return f" ÷ (d·c/{R}) (Megatron FSDP {plan.fsdp_sharding.value}, HSDP: {R} replicas)"
    if plan.fsdp:
        return f" ÷ d·c (Megatron FSDP {plan.fsdp_sharding.value})"
    if plan.distributed_optimizer and R > 1:
        return f" ÷ (d·c/{R}) (distributed optimizer, {R} instances)"
    return " ÷ d·c (distributed optimizer)" if plan.distributed_optimizer else ""


def _layer_parts(ctx: Context) -> dict[str, tuple[float, float]]:
    """Korthikanti et al. 2022 §4.1's (split, replicated) coefficients of sbh of the attention block (MLA's with
    multi-latent attention) and of the MLP, as the formula text states them (``layer_memory.activation_parts``)."""
    mo, opts = ctx.model, ctx.options
    parts = memory.layer_activation_parts(
        mo.hidden_size,
        mo.num_attention_heads,
        mo.query_groups,
        mo.head_dim,
        mo.ffn,
        gated=mo.gated,
        dropout=mo.hidden_dropout > 0,
        fp8=opts.quantised,
        flash_attention=opts.attention_kernel is AttentionKernel.FLASH,
        fp8_scale_bytes=memory.fp8_saved_bytes_per_element(quant_recipe(opts)) - 1,
    )
    if mo.multi_latent_attention:
        parts["attention"] = mla_activation_parts(
            mo,
            dropout=mo.hidden_dropout > 0,
            fp8=opts.quantised,
            flash_attention=opts.attention_kernel is AttentionKernel.FLASH,
        )
    return parts


def _per_layer_text(ctx: Context, plan: ParallelPlan, selective: bool, parts: dict) -> str:
    """A layer's activation bytes as text, sbh × its coefficients ``parts`` (``_layer_parts``); ``selective``: with
    selective recomputation's modules (``plan.recompute`` is selective), else everything the layer keeps."""
    mo, opts = ctx.model, ctx.options
    sp = plan.sequence_parallel and plan.tp > 1
    cp = "/c" if plan.cp > 1 else ""
    unfused = opts.attention_kernel is AttentionKernel.UNFUSED
    if selective:
        split, replicated, rc = selective_coefficients(parts, opts.recompute_modules, mo.hidden_dropout > 0)
        if mo.multi_latent_attention and RecomputeModule.MLA_UP_PROJ in opts.recompute_modules:
            split -= mla_up_proj_outputs(mo)
        scores = " + 5as/(ht)" if unfused and rc == 0 else ""
        modules = ", ".join(m.value for m in opts.recompute_modules) or "none"
        return f"sbh{cp}·({replicated:.3g}{'/t' if sp else ''} + {split:.3g}/t{scores}) (selective: {modules})"
    split = parts["attention"][0] + parts["mlp"][0]
    replicated = parts["attention"][1] + parts["mlp"][1]
    scores = " + 5as/(ht)" if unfused else ""
    return f"sbh{cp}·({replicated:.3g}{'/t' if sp else ''} + {split:.3g}/t{scores})"


def activation_formula(ctx: Context, plan: ParallelPlan, parts: dict | None = None) -> Formula:
    """Activations of the most loaded stage: in-flight micro-batches × layers × the per-layer bytes; ``parts``: the
    context's ``_layer_parts`` (computed here when not given)."""
    mo, opts = ctx.model, ctx.options
    parts = _layer_parts(ctx) if parts is None else parts
    sp = plan.sequence_parallel and plan.tp > 1
    cp = "/c" if plan.cp > 1 else ""
    in_flight = "min(p − i, m)" if plan.vpp == 1 else "min(m·v, 2(p − i − 1) + (v − 1)p + 1)/v"
    selective = plan.recompute is Recompute.SELECTIVE
    whole = "" if selective else _per_layer_text(ctx, plan, False, parts)  # every layer's whole activations
    shard = "/t" if sp or opts.distribute_saved_activations else ""
    layer_input = f"2sbh{cp}{shard}"
    source = K22
    if plan.recompute is Recompute.FULL and plan.recompute_method.value == "block":
        k = plan.recomputed_layers
        per_layer = (
            f"per chunk, the first {k} layers keep their input {layer_input} and the rest everything, "
            f"{whole} (--recompute-method block); + one layer's whole activations while it is recomputed"
        )
        source += "; Megatron-LM megatron/core/recompute.py (block: the first N layers of each model chunk)"
    elif plan.recompute is Recompute.FULL:
        k = plan.recomputed_layers
        group = f"every group of {k} layers keeps its input" if k > 1 else "each layer keeps its input"
        per_layer = (
            f"{group}, {layer_input}; + {k if k > 1 else 'one'} layer{'s' if k > 1 else ''}' whole activations, "
            f"{whole}, while recomputed"
        )
        if k > 1:
            source += "; Megatron-LM megatron/core/recompute.py (uniform: groups of --recompute-num-layers)"
    else:
        per_layer = _per_layer_text(ctx, plan, True, parts) if selective else whole
    offload = ""
    if opts.cpu_offloading_num_layers and plan.recompute is Recompute.NONE:
        offload = (
            f"; − {opts.cpu_offloading_num_layers} layers' whole activations, in host memory at the peak "
            "(--cpu-offloading-num-layers)"
        )
        source += "; Megatron-LM transformer_block.py:304-318 (Transformer Engine CPU offload context)"
    moe = (
        "; MoE layers keep the routed tokens A·h and the experts' internals instead of the MLP's, each stage its "
        "own dense and MoE layers"
        if mo.is_moe
        else ""
    )
    if mo.mtp_layers:
        moe += "; each MTP depth a layer, its 2sbh projection input and its own logits (its stage)"
    if any(opts.bf16_end_layers):
        start, end = opts.bf16_end_layers
        moe += (
            f"; the first {start} and last {end} decoder layers (--first-last-layers-bf16) keep their linear layers' "
            "inputs in 16 bits, not FP8"
        )
    if opts.fp8_output_proj:
        moe += "; the MXFP8 output layer keeps its input in MXFP8 (1 + 1/32 bytes)"
    return Formula(
        f"{in_flight} micro-batches × layers × {per_layer}; + embedding (first stage) and fp32 logits "
        f"4sbV/t (last stage){offload}{moe}",
        source + ("; Megatron-Core MoE" if mo.is_moe else ""),
    )
