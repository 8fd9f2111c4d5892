"""Which library the flex token dispatcher may run on a cluster: DeepEP not across a multi-node NVLink domain, and
before Hopper DeepEP within one host only.

On GB200/GB300 NVL72 (an NVLink domain of 72 GPUs over hosts of 4) megaplan offers the flex dispatcher with
HybridEP only, and refuses DeepEP with its reason, for the Megatron-LM launch as for the Bridge export:

* DeepEP's normal (high-throughput) kernels, the ones Megatron-LM's flex dispatcher calls
  (megatron/core/transformer/moe/fused_a2a.py @ d98e8a64: ``Buffer(group, num_nvl_bytes, num_rdma_bytes)``, no
  fabric handles), reach at most 8 NVLink peers on one host through CUDA IPC handles and take every further rank
  as an RDMA peer in groups of 8 (DeepEP @ dd758ca csrc/legacy/buffer.hpp: ``LEGACY_NUM_MAX_NVL_PEERS == 8``,
  ``nvl_rank = rank % 8``); a GB200 host has 4 GPUs. DeepEP's maintainers: "Since the current normal kernels limits
  the number of GPUs per node to 8, the normal mode doesn't support GB200 yet" (deepseek-ai/DeepEP issue 392,
  2025-09-05); issue 579 (2026-02): the DeepEP figures on GB200 in Hybrid-EP's write-up came from a modified,
  unpublished DeepEP. Megatron-Core: 'Currently only "hybridep" backend supports the MNNVL case'
  (transformer_config.py @ d98e8a64, moe_flex_dispatcher_backend).
* Megatron-Bridge refuses it: ``validate_flex_dispatcher_backend`` (training/flex_dispatcher_backend.py, run by
  ``ConfigContainer.validate``) raises "DeepEP is supported for Ampere, Hopper, and Blackwell (B200/B300) GPUs"
  for a device named "NVIDIA GB200"/"NVIDIA GB300", and ``apply_flex_dispatcher_backend`` falls back to alltoall
  there. The refusal came with DeepEP itself (PR 415, 2025-08-18, first tag v0.1.0rc2: SM80/SM90 only); PR 1436
  (2025-11-21, v0.2.0) opened B200/B300 by name the day after PR 1367 (HybridEP, "applicable only to MoE models on
  GB200 GPUs with NVL72") made HybridEP the NVL72 path; unchanged through v0.6.0 and 067f987.
* No published run uses it: every flex row of presets/reference/moe_runs.csv on GB200 (28) and GB300 (33) runs
  HybridEP; the GB200 rows of release 25.09 ran alltoall with "DeepEP off" on GB200.

Before Hopper (compute capability < 9.0: A100) the flex dispatcher has DeepEP within one host and nothing else:

* DeepEP on SM80 is its legacy build with ``DISABLE_SM90_FEATURES=1``, which asserts NVSHMEM off and so drops the
  internode and low-latency kernels (DeepEP setup.py @ v1.2.1: "Disable internode and low-latency kernels",
  ``assert disable_nvshmem``; README @ v1.2.1: "A100 support (intranode only)", PR 204, 2025-06-11). Without
  NVSHMEM a buffer with RDMA ranks is refused (csrc/deep_ep.cpp @ v1.2.1: ``num_rdma_ranks == 1 and not
  low_latency_mode and "NVSHMEM is disabled during compilation"``), so the flex group, ETP × EP ranks (Megatron-LM
  token_dispatcher.py @ d98e8a64, ``tp_ep_group``), must lie within one host: etp·ep ≤ min(8, GPUs per node). DeepEP's
  EPv2 (b306af0, 2026-04-30) asks for SM90 outright (README "Requirements: Hopper (SM90) GPUs"); v1.2.1 is the
  last release an A100 cluster can build.
* HybridEP's kernels move data with the Tensor Memory Accelerator's bulk copies (DeepEP hybrid-ep branch @ 94a9f8f,
  csrc/hybrid_ep/backend/hybrid_ep_backend.cuh: ``cuda::ptx::cp_async_bulk`` and mbarriers), PTX that needs sm_90
  or later (libcu++'s cuda::ptx reference, cp_async_bulk: "PTX ISA 80, SM_90"); its build defaults to sm_100
  (``TORCH_CUDA_ARCH_LIST`` '10.0', setup.py). Megatron-Bridge's device check would let major 8 through
  (flex_dispatcher_backend.py @ 067f987), but the kernels cannot be built for it.
* NCCL EP (``ncclep``, Transformer Engine's ``transformer_engine.pytorch.ep``): "NCCL EP requires Hopper or newer
  (SM >= 90)", Transformer Engine setup.py and build_tools/utils.py @ d0067d0, which skip building it otherwise.
"""

from __future__ import annotations

from planner.plan import FlexBackend

RULE = "the flex dispatcher's library must run on this cluster"  # its name in space.rules.RULES
BRIDGE_REFUSES_DEEPEP = ("gb200", "gb300")  # recipes.bridge_gpu names: Bridge's "NVIDIA GB200"/"NVIDIA GB300"
HOPPER_COMPUTE_CAPABILITY = 9.0  # HybridEP (cp.async.bulk), NCCL EP and DeepEP's internode kernels need sm_90
DEEPEP_MAX_NVL_PEERS = 8  # DeepEP @ v1.2.1 csrc/kernels/configs.cuh NUM_MAX_NVL_PEERS: num_rdma_ranks = max(1, n/8)

REASON = (
    "DeepEP's normal kernels reach at most 8 NVLink peers on one host by CUDA IPC (DeepEP csrc/legacy/buffer.hpp; "
    "'the normal mode doesn't support GB200 yet', deepseek-ai/DeepEP#392), Megatron-Core has only HybridEP for "
    "multi-node NVLink (transformer_config.py @ d98e8a64), Megatron-Bridge refuses DeepEP on GB200/GB300 "
    "(training/flex_dispatcher_backend.py, since v0.1.0rc2) and no published run uses it there"
)
PRE_HOPPER_REASON = {
    "deepep": (
        "DeepEP before Hopper is its intranode-only build (DeepEP v1.2.1 setup.py: DISABLE_SM90_FEATURES asserts "
        "NVSHMEM off, 'Disable internode and low-latency kernels'; README 'A100 support (intranode only)'), so its "
        "flex group, etp·ep ranks, must lie within one host"
    ),
    "hybridep": (
        "HybridEP's kernels use the TMA bulk copy cp.async.bulk, which needs sm_90 or later (DeepEP hybrid-ep "
        "csrc/hybrid_ep/backend/hybrid_ep_backend.cuh; libcu++ cuda::ptx: SM_90)"
    ),
    "ncclep": "NCCL EP requires Hopper or newer, SM >= 90 (Transformer Engine setup.py, build_tools/utils.py)",
}


def pre_hopper(hardware) -> bool:
    """Whether ``hardware``'s GPU comes before Hopper (compute capability < 9.0: A100)."""
    return hardware is not None and hardware.gpu.compute_capability < HOPPER_COMPUTE_CAPABILITY


def deepep_refused(hardware) -> bool:
    """Whether DeepEP cannot run the flex dispatcher on ``hardware`` at any size: an NVLink domain over several
    hosts."""
    return hardware is not None and hardware.multi_node_nvlink


def flex_group_limit(hardware, backend: str) -> int | None:
    """The most ranks (etp·ep) the flex dispatcher's ``backend`` can serve on ``hardware``: 0 where it cannot run
    at all, the GPUs of one host for DeepEP before Hopper, None where the cluster sets no limit (module doc)."""
    if hardware is None:
        return None
    if backend == "deepep" and deepep_refused(hardware):
        return 0
    if pre_hopper(hardware):
        return min(hardware.gpus_per_node, DEEPEP_MAX_NVL_PEERS) if backend == "deepep" else 0
    return None


def default_backend(hardware) -> FlexBackend:
    """The flex dispatcher's library when none is given: HybridEP on a multi-node NVLink domain (every published
    GB200/GB300 flex run), else DeepEP (Megatron-Core's default, transformer_config.py @ d98e8a64)."""
    return FlexBackend.HYBRIDEP if deepep_refused(hardware) else FlexBackend.DEEPEP


def deepep_message(hardware) -> str:
    """One line: why DeepEP is refused on ``hardware``, and what is allowed."""
    return (
        f"DeepEP on {hardware.name} (an NVLink domain of {hardware.nvlink_domain_gpus} GPUs over hosts of "
        f"{hardware.gpus_per_node}): {REASON}; allowed: --moe-flex-dispatcher-backend hybridep, or "
        "--moe-token-dispatcher alltoall"
    )


def backend_message(hardware, backend: str, etp: int | None = None, ep: int | None = None) -> str:
    """One line: why the flex dispatcher's ``backend`` cannot serve a plan of etp·ep ranks on ``hardware`` (or,
    without them, any plan beyond its limit), and what is allowed."""
    if backend == "deepep" and deepep_refused(hardware):
        return deepep_message(hardware)
    cc, limit = hardware.gpu.compute_capability, min(hardware.gpus_per_node, DEEPEP_MAX_NVL_PEERS)
    name = {"deepep": "DeepEP", "hybridep": "HybridEP", "ncclep": "NCCL EP"}[backend]
    if backend == "deepep":
        ranks = "a flex group" if etp is None or ep is None else f"etp·ep = {etp}·{ep} = {etp * ep} ranks,"
        return (
            f"DeepEP on {hardware.name} (compute capability {cc:.1f}) with {ranks} more than one host's {limit}: "
            f"{PRE_HOPPER_REASON[backend]}; allowed: etp·ep ≤ {limit}, or --moe-token-dispatcher alltoall"
        )
    return (
        f"{name} on {hardware.name} (compute capability {cc:.1f}): {PRE_HOPPER_REASON[backend]}; allowed: "
        f"--moe-flex-dispatcher-backend deepep with etp·ep ≤ {limit}, or --moe-token-dispatcher alltoall"
    )
