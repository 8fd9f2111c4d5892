"""Which library the flex token dispatcher may run on a cluster: DeepEP not across a multi-node NVLink domain.

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
"""

from __future__ import annotations

from planner.plan import FlexBackend

RULE = "DeepEP does not run across a multi-node NVLink domain"  # its name in space.rules.RULES
BRIDGE_REFUSES_DEEPEP = ("gb200", "gb300")  # recipes.bridge_gpu names: Bridge's "NVIDIA GB200"/"NVIDIA GB300"

REASON = (
    "DeepEP's normal kernels reach at most 8 NVLink peers on one host by CUDA IPC (DeepEP csrc/legacy/buffer.hpp; "
    "'the normal mode doesn't support GB200 yet', deepseek-ai/DeepEP#392), Megatron-Core has only HybridEP for "
    "multi-node NVLink (transformer_config.py @ d98e8a64), Megatron-Bridge refuses DeepEP on GB200/GB300 "
    "(training/flex_dispatcher_backend.py, since v0.1.0rc2) and no published run uses it there"
)


def deepep_refused(hardware) -> bool:
    """Whether DeepEP cannot run the flex dispatcher on ``hardware``: an NVLink domain over several hosts."""
    return hardware is not None and hardware.multi_node_nvlink


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
