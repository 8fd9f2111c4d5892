"""DGX SuperPOD hardware as data: GPU, node, network tiers and the few calibrated factors.

Preset keys carry the datasheet's unit in their name (``hbm_gib``, ``nvlink_gbytes_per_s``,
``nic_gbits_per_s``); one property converts each to SI. Every number names its source in the
section's ``sources`` map, which the validator checks is complete.
"""

# No `from __future__ import annotations` here: pydantic would evaluate each model field's annotation from
# its string (typing's ForwardRef: compile and eval), about 10 % of building the models every process pays.
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from planner.hardware.calibration import Calibration

GIB = 2**30  # bytes in a GiB
FP8_RECIPES = frozenset({"delayed", "tensorwise", "mxfp8", "blockwise"})  # --fp8-recipe choices
CAST_RECIPES = FP8_RECIPES | {"nvfp4"}  # the quantisers a cast fraction is measured for (--fp8-recipe, --fp4-recipe)


class _Sourced(BaseModel):
    """A spec section whose every numeric field given names where its value came from (fields at
    their documented default - a non-blocking tier's bandwidth_frac of 1 - need no source)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    sources: dict[str, str] = Field(description="field name -> datasheet, paper or fit it came from")

    @model_validator(mode="after")
    def _every_number_sourced(self) -> Self:
        fields = type(self).model_fields
        numeric = [
            name
            for name in fields
            if name in self.model_fields_set
            and getattr(self, name) is not None
            and getattr(self, name) != fields[name].default
            and isinstance(getattr(self, name), (int, float))
            and not isinstance(getattr(self, name), bool)
        ]
        missing = [name for name in numeric if not self.sources.get(name)]
        if missing:
            raise ValueError(f"sources must name where each number comes from; missing: {', '.join(missing)}")
        unknown = sorted(set(self.sources) - set(type(self).model_fields))
        if unknown:
            raise ValueError(f"sources names unknown fields: {', '.join(unknown)}")
        return self


class GPUSpec(_Sourced):
    name: str
    hbm_gib: PositiveFloat = Field(description="HBM capacity")
    compute_capability: PositiveFloat = Field(
        description="CUDA compute capability, major.minor (8.0 Ampere, 9.0 Hopper, 10.0 Blackwell)"
    )
    peak_bf16_tflops: PositiveFloat = Field(description="dense 16-bit tensor-core peak")
    peak_tf32_tflops: PositiveFloat = Field(description="dense TF32 tensor-core peak (fp32 training)")
    peak_fp8_tflops: PositiveFloat | None = Field(None, description="dense FP8 tensor-core peak")
    peak_nvfp4_tflops: PositiveFloat | None = Field(
        None, description="dense NVFP4 tensor-core peak (block-scaled E2M1; None: no FP4 tensor cores)"
    )
    hbm_tbytes_per_s: PositiveFloat = Field(description="HBM bandwidth")
    sm_count: PositiveInt = Field(description="streaming multiprocessors (the SMs overlapped communication takes)")
    tdp_watts: PositiveFloat | None = None
    fp8_cast_hbm_frac: dict[str, float] = Field(
        default_factory=dict,
        description="fraction of HBM bandwidth Transformer Engine's FP8 cast kernels reach, by --fp8-recipe "
        "(measured); a recipe not listed runs at calibration.memory_efficiency",
    )
    eager_elementwise_tbytes_per_s: PositiveFloat | None = Field(
        None,
        description="HBM bytes per second PyTorch's eager, op-by-op elementwise kernels move on broadcast and "
        "strided operands (measured); the op-by-op RoPE runs at it (compute.unfused_rope_extra_bytes); None: at "
        "the calibrated HBM law like every other memory-bound op",
    )
    eager_hbm_frac: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="fraction of the HBM bandwidth PyTorch's eager, op-by-op kernels reach on large contiguous "
        "operands (measured); the unfused experts' clamp and bias and an op-by-op activation run at it "
        "(compute.eager_bytes_ratio); None: at calibration.memory_efficiency like every other memory-bound op",
    )
    gemm_split_us: NonNegativeFloat | None = Field(
        None,
        description="measured time one more GEMM adds when a GEMM runs as chunks (userbuffers' split GEMMs): "
        "the whole GEMM's time + (n − 1) × this; None: each chunk at the GEMM law's efficiency of its shape",
    )
    matmul_peak_frac: dict[str, float] = Field(
        default_factory=dict,
        description="best-shape matmul throughput measured on this GPU as a fraction of its peak, by 'bf16' and "
        "'fp8' (MAMF): what carries a fitted GEMM efficiency to another preset of the same die at another "
        "power limit (planner.fidelity.calibrate.carried_values)",
    )

    @model_validator(mode="after")
    def _cast_fractions(self) -> Self:
        bad = {k: v for k, v in self.fp8_cast_hbm_frac.items() if not 0 < v <= 1}
        if bad:
            raise ValueError(f"fp8_cast_hbm_frac must lie in (0, 1], got {bad}")
        unknown = sorted(set(self.fp8_cast_hbm_frac) - CAST_RECIPES)
        if unknown:
            raise ValueError(f"fp8_cast_hbm_frac: unknown recipes {unknown}; allowed: {sorted(CAST_RECIPES)}")
        if self.fp8_cast_hbm_frac and not self.sources.get("fp8_cast_hbm_frac"):
            raise ValueError("sources must name where each number comes from; missing: fp8_cast_hbm_frac")
        bad = {k: v for k, v in self.matmul_peak_frac.items() if k not in ("bf16", "fp8") or not 0 < v <= 1}
        if bad:
            raise ValueError(f"matmul_peak_frac: keys 'bf16' and 'fp8', each in (0, 1]; got {bad}")
        if self.matmul_peak_frac and not self.sources.get("matmul_peak_frac"):
            raise ValueError("sources must name where each number comes from; missing: matmul_peak_frac")
        return self

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gib * GIB

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tbytes_per_s * 1e12

    def peak_flops_per_s(self, precision: str) -> float:
        """Dense tensor-core peak for the training precision (fp32 trains on TF32 cores)."""
        tflops = self.peak_tf32_tflops if precision == "fp32" else self.peak_bf16_tflops
        return tflops * 1e12


class NodeSpec(_Sourced):
    gpus_per_node: PositiveInt = Field(description="GPUs one host (Slurm node) holds")
    nvlink_gbytes_per_s: PositiveFloat = Field(description="NVLink/NVSwitch bandwidth per GPU per direction")
    nvlink_latency_us: PositiveFloat
    nvlink_domain_gpus: PositiveInt | None = Field(
        None, description="GPUs joined by one NVLink fabric (72 in a GB200 NVL72 rack); default: one node"
    )
    host_op_time_ratio: PositiveFloat = Field(
        1.0,
        description="ρ: the host CPU's time per eager PyTorch op over that of the x86 DGX hosts (Xeon Platinum"
        " 8480C/8570) the MoE host work H_L was solved on (planner.costs.moe.combined_host_s); default 1 (x86)",
    )
    nccl_nvlink_us: dict[str, dict[int, list[list[float]]]] | None = Field(
        None,
        description="measured NCCL collectives inside the NVLink domain: all_gather, reduce_scatter or all_reduce"
        " -> group size -> [[MiB of the whole (gathered or reduced) tensor, µs], ...], in order of size;"
        " default: the ring formula on nvlink_gbytes_per_s·η_nvl",
    )

    @model_validator(mode="after")
    def _domain_holds_whole_nodes(self) -> Self:
        domain = self.nvlink_domain_gpus
        if domain is not None and domain % self.gpus_per_node:
            raise ValueError(
                f"nvlink_domain_gpus ({domain}) must be a whole number of nodes of {self.gpus_per_node} GPUs"
            )
        return self

    @property
    def nvlink_bytes_per_s(self) -> float:
        return self.nvlink_gbytes_per_s * 1e9


class NetworkTier(_Sourced):
    """One level of the fat tree: groups spanning at most ``max_nodes`` nodes stay inside it."""

    name: str
    max_nodes: PositiveInt
    latency_us: PositiveFloat
    bandwidth_frac: PositiveFloat = Field(1.0, le=1.0, description="1 for a non-blocking tier")


class NetworkSpec(_Sourced):
    nics_per_node: PositiveInt = Field(description="compute (rail) NICs per node, storage NICs excluded")
    nic_gbits_per_s: PositiveFloat
    tiers: list[NetworkTier] = Field(min_length=1, description="leaf, spine, core: growing max_nodes")
    sharp: bool = Field(False, description="the fabric's switches reduce in the network (SHARP), for --use-sharp")
    nccl_sms: PositiveInt | None = Field(
        None,
        description="SMs an NCCL collective's kernel holds while it runs (one CTA per channel): what a hidden "
        "DP or FSDP collective takes from the compute it hides behind; None: not charged",
    )
    nccl_p2p_sms: PositiveInt | None = Field(
        None,
        description="SMs NCCL's send/receive kernel holds for one peer (one CTA per channel): what a hidden "
        "pipeline or context-parallel transfer takes from the compute; None: not charged",
    )

    @model_validator(mode="after")
    def _tiers_grow(self) -> Self:
        sizes = [t.max_nodes for t in self.tiers]
        if sizes != sorted(sizes) or len(set(sizes)) != len(sizes):
            raise ValueError(f"tiers must be listed with strictly growing max_nodes, got {sizes}")
        return self

    @property
    def nic_bytes_per_s(self) -> float:
        return self.nic_gbits_per_s * 1e9 / 8


class AttentionKernelSpec(_Sourced):
    """The flash-attention kernel Megatron-Core runs on this GPU (Transformer Engine picks it), as a
    law fitted to published kernel benchmarks (``planner.fidelity.kernels``): per pass,

        η = η_max · min(1, d/128)^α · s_kv/(s_kv + s_half),   s_half = s_nc (no mask), 2·s_nc + s_diag (causal)

    of the 16-bit dense peak; s_nc is the kernel's fixed work per query row in key positions, s_diag
    the masked diagonal tiles, α the penalty for heads narrower than 128, and the MLA factor applies
    when the query/key and value head dimensions differ (DeepSeek's 192/128)."""

    kernel: str = Field(description="the kernel and library release the law represents")
    fwd_efficiency: PositiveFloat = Field(le=1.0, description="eta_max of the forward kernel")
    fwd_row_overhead: NonNegativeFloat = Field(description="s_nc of the forward, key positions")
    fwd_diagonal_overhead: NonNegativeFloat = Field(description="s_diag of the causal forward, key positions")
    fwd_head_dim_exponent: NonNegativeFloat = Field(description="alpha of the forward for heads below 128")
    fwd_mla_factor: PositiveFloat = Field(1.0, description="forward efficiency factor when d_qk != d_v")
    bwd_efficiency: PositiveFloat = Field(le=1.0, description="eta_max of the backward kernel")
    bwd_row_overhead: NonNegativeFloat = Field(description="s_nc of the backward, key positions")
    bwd_diagonal_overhead: NonNegativeFloat = Field(description="s_diag of the causal backward, key positions")
    bwd_head_dim_exponent: NonNegativeFloat = Field(description="alpha of the backward for heads below 128")
    bwd_mla_factor: PositiveFloat = Field(1.0, description="backward efficiency factor when d_qk != d_v")
    mxfp8_fwd_time_ratio: PositiveFloat | None = Field(
        None, description="MXFP8 attention (fp8_dot_product_attention, MXFP8 recipe): forward time / 16-bit's"
    )
    mxfp8_bwd_time_ratio: PositiveFloat | None = Field(
        None, description="MXFP8 attention: backward time / 16-bit's, both over the whole causal square"
    )
    fp8_fwd_time_ratio_by_seq: dict[int, float] = Field(
        default_factory=dict,
        description="per-tensor FP8 attention (fp8_dot_product_attention under the delayed or tensorwise recipe): "
        "forward time / 16-bit's at each causal sequence length (interpolated in log s, held beyond the ends)",
    )
    fp8_bwd_time_ratio_by_seq: dict[int, float] = Field(
        default_factory=dict, description="per-tensor FP8 attention: backward time / 16-bit's by sequence length"
    )

    @model_validator(mode="after")
    def _fp8_tables(self) -> Self:
        fwd, bwd = self.fp8_fwd_time_ratio_by_seq, self.fp8_bwd_time_ratio_by_seq
        if set(fwd) != set(bwd):
            raise ValueError("fp8_fwd_time_ratio_by_seq and fp8_bwd_time_ratio_by_seq must give the same lengths")
        bad = {s: r for s, r in (fwd | {-k: v for k, v in bwd.items()}).items() if not (r > 0 and abs(s) > 0)}
        if bad:
            raise ValueError(f"fp8 attention time ratios must be positive at positive lengths, got {bad}")
        for name in ("fp8_fwd_time_ratio_by_seq", "fp8_bwd_time_ratio_by_seq"):
            if getattr(self, name) and not self.sources.get(name):
                raise ValueError(f"sources must name where each number comes from; missing: {name}")
        return self


class MemorySpec(_Sourced):
    """What PyTorch can allocate on one GPU, and what a training process holds outside its tensors."""

    allocatable_gib: PositiveFloat = Field(description="torch.cuda.get_device_properties().total_memory")
    cuda_context_gib: float = Field(ge=0, description="CUDA context and the kernels a training process loads")
    nccl_communicator_gib: float = Field(ge=0, description="buffers of one NCCL communicator with more than one rank")
    cublas_workspace_mib: float = Field(ge=0, description="one cuBLAS/Transformer Engine GEMM workspace")
    fragmentation_frac: float = Field(
        ge=0, lt=1, description="caching allocator: reserved-but-unallocated bytes per byte of activations"
    )
    moe_fragmentation_frac: float = Field(
        0.2,
        ge=0,
        lt=1,
        description="fragmentation_frac of MoE layers' activations (DeepSeek-V3 proxy: 20-23 %; GMLake: 15 %)",
    )
    host_link_gbytes_per_s: PositiveFloat = Field(description="GPU-host copy bandwidth per GPU, each direction")

    @property
    def allocatable_bytes(self) -> float:
        return self.allocatable_gib * GIB

    @property
    def host_link_bytes_per_s(self) -> float:
        return self.host_link_gbytes_per_s * 1e9


class Accuracy(_Sourced):
    """How far an iteration-time estimate on this GPU generation can be trusted: the spread of
    ``megaplan validate`` on its runs and the calibration's own uncertainty (one standard error,
    relative). The band of an estimate is iteration × exp(±√(validation² + calibration²)), widened
    by the largest error for each feature no run exercises (``planner.fidelity.evidence``)."""

    validation_error_frac: float = Field(ge=0, lt=1, description="RMS of ln(predicted/published) on the runs")
    calibration_uncertainty_frac: float = Field(ge=0, lt=1, description="relative uncertainty of the fitted factors")
    max_error_frac: float | None = Field(
        None, ge=0, lt=1, description="largest |ln(predicted/published)| on the runs: what an extrapolated feature adds"
    )
    moe_validation_error_frac: float | None = Field(
        None, ge=0, lt=1, description="RMS of ln(predicted/published) on the MoE runs in the bar (MoE plans' band)"
    )
    moe_max_error_frac: float | None = Field(
        None, ge=0, lt=1, description="largest |ln(predicted/published)| on the MoE runs in the bar"
    )
    nvfp4_validation_error_frac: float | None = Field(
        None,
        ge=0,
        lt=1,
        description="RMS of ln(predicted/published) on the NVFP4 rows, each out of sample (NVFP4 plans' band)",
    )
    nvfp4_max_error_frac: float | None = Field(
        None, ge=0, lt=1, description="largest |ln(predicted/published)| on the same NVFP4 rows"
    )
    held_out_runs: int | None = Field(
        None,
        ge=1,
        description="set when validation_error_frac and max_error_frac are this preset's own held-out runs (a preset "
        "that carries another's factors, none of its runs fitted); its source names them (explain's runs line)",
    )

    @property
    def band_frac(self) -> float:
        return (self.validation_error_frac**2 + self.calibration_uncertainty_frac**2) ** 0.5


class HardwareSpec(BaseModel):
    """A DGX SuperPOD-style cluster: identical nodes on a rail-optimised fat tree."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    name: str
    description: str = ""
    gpu: GPUSpec
    node: NodeSpec
    network: NetworkSpec
    attention: AttentionKernelSpec
    calibration: Calibration
    memory: MemorySpec
    accuracy: Accuracy

    @model_validator(mode="after")
    def _capacities_agree(self) -> Self:
        """A plan fills ``memory.allocatable_gib``; ``gpu.hbm_gib`` is the datasheet's figure. The shipped
        presets keep the two within 7 % (GiB against GB, reserved bytes), so a copy where one was edited and
        not the other — hbm_gib 141 on an 80 GB preset — would price the old capacity without a word."""
        hbm, usable = self.gpu.hbm_gib, self.memory.allocatable_gib
        if not 0.9 <= usable / hbm <= 1.1:
            raise ValueError(
                f"gpu.hbm_gib ({hbm:g}) and memory.allocatable_gib ({usable:g}) disagree by more than 10 %: "
                "a plan fills memory.allocatable_gib (what torch.cuda.get_device_properties(0).total_memory "
                "reports, in GiB); set both to your GPU's"
            )
        return self

    @property
    def gpus_per_node(self) -> int:
        return self.node.gpus_per_node

    @property
    def nvlink_domain_gpus(self) -> int:
        """GPUs on one NVLink fabric: a node's NVSwitch, or a multi-node domain such as NVL72."""
        return self.node.nvlink_domain_gpus or self.node.gpus_per_node

    @property
    def multi_node_nvlink(self) -> bool:
        """An NVLink domain wider than one node (MNNVL: GB200/GB300 NVL72, 72 GPUs over 18 hosts of 4)."""
        return self.nvlink_domain_gpus > self.gpus_per_node
