"""Memory a training process holds besides its model states and activations, in bytes: the CUDA
context, NCCL's communicator buffers, GEMM workspaces and Transformer Engine's userbuffers, CUDA-graph
static buffers, and what the caching allocator reserves but cannot hand out (fragmentation).

Each is a pure function of the plan's letters and the hardware preset's ``memory`` facts; the preset
names the measurement behind each fact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.costs import Formula
from planner.plan import Context, CudaGraphImpl, ParallelPlan, PlanOptions

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

DEFAULT_MEMORY_HEADROOM = 0.08  # share of the allocatable memory kept free by default (docs/cost-model.md §5.5)
TE_UB_STREAMS = 3  # Transformer Engine's _NUM_MAX_UB_STREAMS: its GEMM workspace is repeated per userbuffer stream
UB_BUFFERS = 10  # TE initialize_ub: qkv/fc1 fprop, proj/fc2 dgrad (ring), proj/fc2 fprop (pipeline), 4 bulk
UB_FP8_BUFFERS = 6  # of which the all-gather ones (qkv/fc1 fprop and dgrad, proj/fc2 dgrad) are uint8 under FP8
GRAPH_STATIC_TENSORS = 4  # a captured callable's static input and output, forward and backward


def usable_bytes(allocatable_bytes: float, headroom: float | None) -> float:
    """Memory a plan may fill: what PyTorch can allocate, less the headroom kept free against the
    memory model's error (``DEFAULT_MEMORY_HEADROOM`` unless given)."""
    return allocatable_bytes * (1.0 - resolve_headroom(headroom))


def resolve_headroom(headroom: float | None) -> float:
    return DEFAULT_MEMORY_HEADROOM if headroom is None else headroom


def nccl_communicators(
    t: ArrayLike,
    c: ArrayLike,
    p: ArrayLike,
    d: ArrayLike,
    ep: ArrayLike = 1,
    etp: ArrayLike = 1,
    edp: ArrayLike = 1,
    *,
    tied_embeddings: bool,
    moe: bool,
) -> np.ndarray | float:
    """NCCL communicators a Megatron-LM rank moves bulk data on (Megatron-LM parallel_state.py at
    d98e8a64; PyTorch creates each at its first collective):

      TP (1165-1172)                             t > 1
      CP (1118-1125)                             c > 1
      DP×CP: gradient reduction (964-1013)       d·c > 1
      PP: one per neighbour for send/recv        1 with p = 2, 2 with p > 2
      embedding: tied word-embedding grads       p > 1 with tied embeddings (1270-1288)
      EP, ETP, expert DP                         MoE: ep > 1, etp > 1, d_e > 1 (1344-1511)

    The world group (barriers), the TP×PP group (the grad-norm scalar) and the FP8 amax group carry a
    few bytes: since NCCL connects a communicator's channels at its first use of each protocol
    (NCCL_RUNTIME_CONNECT=1, the default), those set up only the small low-latency buffers. Numbers give a
    number, arrays (numpy) an array."""
    # the same operations on numbers or arrays (a plan's formula text asks with numbers: no 0-d arrays)
    count = 1.0 * (t > 1) + (c > 1) + (d * c > 1) + (p > 1) + (p > 2)  # PP: 1 with p = 2, 2 with p > 2
    if tied_embeddings:
        count = count + (p > 1)
    if moe:
        count = count + (ep > 1) + (etp > 1) + (edp > 1)
    return count


def workspace_bytes(workspace: float, *, tp_comm_overlap: ArrayLike) -> np.ndarray:
    """GEMM workspaces: PyTorch's cuBLASLt one and Transformer Engine's, per stream (pytorch
    CUDABlas.cpp; TE get_workspace), TE's repeated for its 3 userbuffer streams with --tp-comm-overlap."""
    return workspace * (1 + np.where(tp_comm_overlap, TE_UB_STREAMS, 1))


def userbuffer_bytes(
    s: int, b: ArrayLike, h: int, c: ArrayLike = 1, *, tp_comm_overlap: ArrayLike, fp8: bool, act_bytes: int = 2
) -> np.ndarray:
    """--tp-comm-overlap's userbuffers: Transformer Engine's initialize_ub registers one buffer of
    [s·b/c, h] for each of its 10 overlapped GEMMs, in the activation dtype (the 6 all-gather ones in
    uint8 under FP8) (Megatron-LM initialize.py:_initialize_tp_communicators; TE module/base.py)."""
    elements = s * np.asarray(b) * h / np.asarray(c)
    per = UB_FP8_BUFFERS * 1 + (UB_BUFFERS - UB_FP8_BUFFERS) * act_bytes if fp8 else UB_BUFFERS * act_bytes
    return np.where(tp_comm_overlap, per * elements, 0.0)


def cuda_graph_static_bytes(
    message_bytes: ArrayLike, layers: ArrayLike, graphs_per_layer: float, copies: ArrayLike
) -> np.ndarray:
    """Static buffers of per-layer CUDA graphs: each captured callable keeps its input and output, and
    the backward graph its input and output gradients (4 tensors of one micro-batch's activation
    message), for every layer, and for every micro-batch whose graph is live: one set with pp = 1,
    where graphs are reused across micro-batches, else one per micro-batch in flight (Megatron-LM
    cuda_graphs.py:1927 reuse_cudagraphs = pp == 1; TE make_graphed_callables reuses a finished
    micro-batch's buffers, cuda_graphs.py:2325-2345)."""
    return GRAPH_STATIC_TENSORS * graphs_per_layer * np.asarray(message_bytes) * np.asarray(layers) * np.asarray(copies)


def fragmentation_bytes(
    activation_bytes: ArrayLike,
    frac: float,
    *,
    expandable_segments: bool,
    moe_share: ArrayLike = 0.0,
    moe_frac: float = 0.0,
) -> np.ndarray:
    """Bytes the caching allocator reserves but cannot hand out: a share of the activations, whose
    tensors are allocated and freed every micro-batch; the model states are allocated once, in big
    buffers. By architecture: the stage's MoE layers (``moe_share`` of its layers) fragment at
    ``moe_frac`` (routed copies and expert buffers change size per layer and micro-batch), the rest at
    ``frac``: A·((1 − m)·φ + m·φ_MoE). PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True maps pages
    instead of splitting blocks: 0."""
    share = np.asarray(moe_share, dtype=float)
    phi = (1.0 - share) * frac + share * moe_frac
    return np.asarray(activation_bytes) * np.where(expandable_segments, 0.0, phi)


def te_graph_static_tensors(modules: tuple[str, ...], *, moe_layer: bool, shared_out: bool) -> int:
    """h-wide static tensors of one layer's Transformer Engine graph (``--cuda-graph-impl
    transformer_engine``): the scopes listed are one captured callable per layer
    (TransformerLayer._te_cuda_graph_capture: the attention, then the MLP part in scope), whose static
    input (the layer input) and outputs are kept forward and backward (their gradients):
    2 · (1 + outputs). Outputs: the layer output when the scope covers the whole layer, its attention
    or its whole MLP; with a MoE layer's ``moe_router`` (and ``moe_preprocess``) scope the normalised
    hidden states and the residual, and the shared experts' output when they are captured (no
    --moe-shared-expert-overlap), _te_cuda_graph_replay at Megatron-LM core_r0.17.0 (the router's
    probs, [s·b, E], are small beside them). Nothing in scope on this layer (a dense layer under a MoE
    scope without attn): 0."""
    scope = set(modules)
    if not scope:
        return 4
    whole_mlp = ("moe" if moe_layer else "mlp") in scope
    partial = moe_layer and not whole_mlp and "moe_router" in scope
    if "attn" not in scope and not whole_mlp and not partial:
        return 0
    outputs = 2 + int(shared_out) if partial else 1
    return 2 * (1 + outputs)


def cuda_graphs_per_layer(opts: PlanOptions) -> float:
    """Callables captured per layer by per-layer CUDA graphs: the whole layer, or each module listed;
    none without per-layer graphs (full_iteration captures the step, whose pool holds what the eager
    step would)."""
    if opts.cuda_graph_impl not in (CudaGraphImpl.LOCAL, CudaGraphImpl.TRANSFORMER_ENGINE):
        return 0.0
    return float(max(1, len(opts.cuda_graph_modules)))


def _graph_text(opts: PlanOptions, mo) -> str:
    """The static tensors per layer, as the cuda_graphs formula states them."""
    if opts.cuda_graph_impl != CudaGraphImpl.TRANSFORMER_ENGINE:
        return f"{GRAPH_STATIC_TENSORS} static tensors × {cuda_graphs_per_layer(opts):g} graph(s) per layer"
    modules = tuple(m.value for m in opts.cuda_graph_modules)
    shared = bool(mo.shared_ffn) and not opts.moe_shared_expert_overlap
    dense = te_graph_static_tensors(modules, moe_layer=False, shared_out=False)
    moe = te_graph_static_tensors(modules, moe_layer=True, shared_out=shared)
    kinds = f"{dense} per dense layer, {moe} per MoE layer" if mo.is_moe else f"{dense} per layer"
    return f"one TE graph per layer: 2·(1 + outputs) static tensors, {kinds}"


def process_formulas(ctx: Context, plan: ParallelPlan) -> dict[str, Formula]:
    """Formula and source of the memory the process holds besides model states and activations."""
    mem, opts, mo = ctx.hardware.memory, ctx.options, ctx.model
    hw = f"hardware preset {ctx.hardware.name}: memory."
    graphs = cuda_graphs_per_layer(opts)
    sp = plan.sequence_parallel and plan.tp > 1
    tpo = opts.tp_comm_overlap and sp
    copies = (
        "1 set (graphs reused across micro-batches, pp = 1)" if plan.pp == 1 else "one set per micro-batch in flight"
    )
    count = float(
        nccl_communicators(
            plan.tp,
            plan.cp,
            plan.pp,
            plan.dp,
            plan.ep,
            plan.etp,
            plan.world_size // (plan.etp * plan.ep * plan.pp),
            tied_embeddings=mo.tied_embeddings,
            moe=mo.is_moe,
        )
    )
    streams = "4 (PyTorch, TE × 3 userbuffer streams)" if tpo else "2 (PyTorch, TE)"
    ub = f" + {UB_BUFFERS} userbuffers of [s·b/c, h] (--tp-comm-overlap)" if tpo else ""
    frag = (
        "0 (expandable_segments: the allocator maps pages instead of splitting blocks)"
        if opts.expandable_segments
        else f"{mem.fragmentation_frac:g} × activations (reserved but not allocated)"
        + (f", {mem.moe_fragmentation_frac:g} for the MoE layers' share of them" if mo.is_moe else "")
    )
    return {
        "cuda_graphs": Formula(
            _graph_text(opts, mo) + f" × b·s·h/c{'/t' if sp else ''} × layers × {copies}"
            if graphs
            else "0 (no per-layer CUDA graphs)",
            "Megatron-LM cuda_graphs.py:1927, 2007-2020, 2325-2345 (static buffers of the captured callables); "
            "transformer_layer.py _te_cuda_graph_capture/_te_cuda_graph_replay @ core_r0.17.0 (one TE graph "
            "per layer, its outputs by scope)",
        ),
        "workspaces": Formula(
            f"{mem.cublas_workspace_mib:g} MiB GEMM workspace × {streams}" + ub,
            hw + "cublas_workspace_mib; Transformer Engine module/base.py (get_workspace, initialize_ub)",
        ),
        "nccl": Formula(
            f"{count:g} communicators × {mem.nccl_communicator_gib:g} GiB (TP, CP, DP×CP, PP neighbours, "
            "tied embedding, expert groups: those moving bulk data; NCCL connects the others' small buffers only)",
            hw + "nccl_communicator_gib; Megatron-LM parallel_state.py (the groups a rank runs collectives on)",
        ),
        "cuda_context": Formula(f"{mem.cuda_context_gib:g} GiB per process", hw + "cuda_context_gib"),
        "fragmentation": Formula(frag, hw + "fragmentation_frac" + (", moe_fragmentation_frac" if mo.is_moe else "")),
    }
