"""What is trained and how it is split: TrainingSpec, PlanOptions, ParallelPlan, and the Context
that bundles the specs a cost function reads.

Rules that span several specs (t divides the heads, the batch splits evenly, the plan fits)
are the rule table of ``planner.space.rules``, so a rejected plan can say which rule it broke.
"""

# No `from __future__ import annotations` here: pydantic would evaluate each model field's annotation from
# its string (typing's ForwardRef: compile and eval), about 10 % of building the models every process pays.
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PositiveFloat, field_validator, model_validator

from planner.hardware.spec import HardwareSpec
from planner.hardware.userbuffers import UbConfig, load_config_file
from planner.models.pipeline_layout import LayoutError, PipelineLayout
from planner.models.spec import ModelSpec
from planner.models.spec import PositiveInt as _Bounded  # sizes the grid's 32-bit integers hold (a plan file's 1e30)
from planner.whole import python_int, whole_number


def _typed_whole(value):
    """A size written as text (a quoted "8" in a hand-edited plan file or a Bridge YAML) read by megaplan's one
    parser of whole numbers (planner.whole: pydantic's lax mode took "2_0" for 20), and true/false refused (it took
    true for 1). Text no parser reads is left to pydantic's "unable to parse string as an integer". The model
    specs are strict and refuse text and booleans already."""
    if isinstance(value, bool):
        raise ValueError(f"{str(value).lower()} is not a number; allowed: a whole number ≥ 1")
    return whole_number(value) if isinstance(value, str) and python_int(value) is not None else value


PositiveInt = Annotated[_Bounded, BeforeValidator(_typed_whole)]

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

# a kilobyte: 1e-320 MB made every chunk infinitely many buckets (an overflow warning, then "nan GPU-hours");
# Apex's default is 100 MB, NeMo 1's recipes 125-200 MB
DFA_BUCKET_MIN_MB = 1e-3
DEFAULT_TRAIN_TOKENS = 300e9  # GPT-3's 300B training tokens (Brown et al. 2020; Narayanan et al. 2021 §5.1)


class Precision(StrEnum):
    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"


class Recompute(StrEnum):
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"

    @property
    def code(self) -> int:
        return RECOMPUTE_CODES[self]


RECOMPUTE_CODES = {Recompute.NONE: 0, Recompute.SELECTIVE: 1, Recompute.FULL: 2}
RECOMPUTE_BY_CODE = {code: r for r, code in RECOMPUTE_CODES.items()}


class AttentionKernel(StrEnum):
    FLASH = "flash"  # Transformer Engine fused/flash attention: today's Megatron default
    UNFUSED = "unfused"  # explicit softmax over the s x s scores, as in the 2021-22 papers


class StageSplit(StrEnum):
    """How layers are assigned to pipeline stages (Megatron arguments.py:984-998)."""

    EVEN = "even"
    EMBEDDING = "embedding"  # --account-for-embedding-in-pipeline-split
    LOSS = "loss"  # --account-for-loss-in-pipeline-split
    EMBEDDING_AND_LOSS = "embedding+loss"

    @property
    def code(self) -> int:
        return SPLIT_CODES[self]

    @property
    def embedding_counted(self) -> bool:
        return self in (StageSplit.EMBEDDING, StageSplit.EMBEDDING_AND_LOSS)

    @property
    def loss_counted(self) -> bool:
        return self in (StageSplit.LOSS, StageSplit.EMBEDDING_AND_LOSS)

    @classmethod
    def from_flags(cls, embedding: bool, loss: bool) -> "StageSplit":
        """The split Megatron-LM's --account-for-embedding/loss-in-pipeline-split flags select."""
        return {
            (False, False): cls.EVEN,
            (True, False): cls.EMBEDDING,
            (False, True): cls.LOSS,
            (True, True): cls.EMBEDDING_AND_LOSS,
        }[(bool(embedding), bool(loss))]


SPLIT_CODES = {StageSplit.EVEN: 0, StageSplit.EMBEDDING: 1, StageSplit.LOSS: 2, StageSplit.EMBEDDING_AND_LOSS: 3}
SPLIT_BY_CODE = {code: s for s, code in SPLIT_CODES.items()}


class Fp8Format(StrEnum):
    E4M3 = "e4m3"
    HYBRID = "hybrid"


class Fp4Format(StrEnum):
    E2M1 = "e2m1"  # --fp4-format: the only FP4 format (arguments.py --fp4-format choices)


class Fp4Recipe(StrEnum):
    """--fp4-recipe: how Transformer Engine scales FP4 tensors (``custom`` loads user code: not priced)."""

    NVFP4 = "nvfp4"  # NVFP4BlockScaling: 1x16 blocks, E4M3 scales, an FP32 per-tensor scale


class RecomputeMethod(StrEnum):
    """--recompute-method with full recomputation (transformer_block.py: megatron/core/recompute.py)."""

    UNIFORM = "uniform"  # every layer, in groups of --recompute-num-layers whose input is kept
    BLOCK = "block"  # the first --recompute-num-layers layers of each model chunk; the rest keep everything


class RecomputeModule(StrEnum):
    """--recompute-modules with selective recomputation (transformer_config.py:1940-1962), those
    megaplan models; Megatron's others need model features megaplan has no field for (Mamba, GDN, mHC)."""

    CORE_ATTN = "core_attn"
    MLP = "mlp"
    LAYERNORM = "layernorm"
    MOE_ACT = "moe_act"
    MOE = "moe"
    MLA_UP_PROJ = "mla_up_proj"  # multi-latent attention's up-projections (multi_latent_attention.py:171-174)
    SHARED_EXPERTS = "shared_experts"  # the MoE layers' shared experts (moe_layer.py:252-255)


class CudaGraphImpl(StrEnum):
    """--cuda-graph-impl (arguments.py:611-631; --enable-cuda-graph is today's local)."""

    NONE = "none"
    LOCAL = "local"
    TRANSFORMER_ENGINE = "transformer_engine"
    FULL_ITERATION = "full_iteration"


class CudaGraphModule(StrEnum):
    """--cuda-graph-modules (--cuda-graph-scope before): the parts of a layer captured; none: all of it."""

    ATTN = "attn"
    MLP = "mlp"
    MOE = "moe"
    MOE_ROUTER = "moe_router"
    MOE_PREPROCESS = "moe_preprocess"


OPTIMIZER_DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


class FsdpSharding(StrEnum):
    """--data-parallel-sharding-strategy with Megatron FSDP (arguments.py @ d98e8a64; no_shard is DDP)."""

    OPTIM = "optim"  # optimizer states sharded (ZeRO-1: the distributed optimizer's)
    OPTIM_GRADS = "optim_grads"  # and gradients (ZeRO-2): weights whole, gradients reduce-scattered per micro-batch
    OPTIM_GRADS_PARAMS = "optim_grads_params"  # and weights (ZeRO-3), Megatron's default

    @property
    def code(self) -> int:
        return FSDP_SHARDING_CODES[self]


FSDP_SHARDING_CODES = {FsdpSharding.OPTIM: 1, FsdpSharding.OPTIM_GRADS: 2, FsdpSharding.OPTIM_GRADS_PARAMS: 3}
FSDP_SHARDING_BY_CODE = {code: s for s, code in FSDP_SHARDING_CODES.items()}
FSDP_TAGS = {"optim": "FSDP:o", "optim_grads": "FSDP:og", "optim_grads_params": "FSDP"}


class FsdpOuterSharding(StrEnum):
    """--outer-dp-sharding-strategy: Megatron FSDP's sharding across the R replicas of its hybrid mode
    (HSDP, --num-distributed-optimizer-instances R > 1; arguments.py @ d98e8a64, docs/user-guide/
    parallelism-guide.md "Sharding Strategies")."""

    NO_SHARD = "no_shard"  # HSDP: everything the inner group shards is replicated across the R replicas
    OPTIM = "optim"  # Hybrid-FSDP (HFSDP): the optimizer states sharded across all d·c ranks as well


class TokenDispatcher(StrEnum):
    """--moe-token-dispatcher-type (Megatron-Core moe/token_dispatcher.py)."""

    ALLGATHER = "allgather"  # Megatron-LM's default
    ALLTOALL = "alltoall"
    FLEX = "flex"  # DeepEP / HybridEP: deduplicated node-level dispatch (--moe-flex-dispatcher-backend)

    @property
    def code(self) -> int:
        return DISPATCHER_CODES[self]


DISPATCHER_CODES = {TokenDispatcher.ALLGATHER: 0, TokenDispatcher.ALLTOALL: 1, TokenDispatcher.FLEX: 2}
DISPATCHER_BY_CODE = {code: d for d, code in DISPATCHER_CODES.items()}


class FlexBackend(StrEnum):
    """--moe-flex-dispatcher-backend: the library behind the flex dispatcher."""

    DEEPEP = "deepep"
    HYBRIDEP = "hybridep"
    NCCLEP = "ncclep"


class Fp8Recipe(StrEnum):
    """--fp8-recipe: how Transformer Engine scales FP8 tensors."""

    DELAYED = "delayed"  # Megatron-LM's default: per-tensor scales from an amax history
    TENSORWISE = "tensorwise"  # per-tensor current scaling
    BLOCKWISE = "blockwise"  # 1x128 / 128x128 blocks (DeepSeek-V3's recipe; Hopper)
    MXFP8 = "mxfp8"  # 1x32 blocks with E8M0 scales (OCP MX; Blackwell tensor cores)


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)


class TrainingSpec(_Spec):
    global_batch: PositiveInt = Field(description="B, sequences per iteration")
    seq_len: PositiveInt = Field(description="s, tokens per sequence")
    precision: Precision = Precision.BF16
    optimizer: str = Field("adam", pattern="^adam$", description="Adam (the only optimizer modelled)")
    train_tokens: PositiveFloat = Field(
        DEFAULT_TRAIN_TOKENS, description="T, tokens to train on (days, GPU-hours, cost)"
    )
    gpu_hour_price: PositiveFloat | None = Field(None, description="price of one GPU-hour, any currency (cost)")


class PlanOptions(_Spec):
    """Which Megatron-LM behaviour is modelled; defaults are today's Megatron-LM defaults."""

    attention_kernel: AttentionKernel = AttentionKernel.FLASH
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    grad_reduce_in_bf16: bool = False
    pp_scatter_gather: bool = Field(False, description="2021 code: p2p split over the t NICs, all-gathered on NVLink")
    overlap_p2p_comm: bool = Field(True, description="interleaved schedule overlaps p2p (today's default)")
    async_tp_comm: bool = Field(
        True,
        description="backward TP collectives overlap the weight-gradient GEMMs "
        "(Megatron's LinearWithGradAccumulationAndAsyncCommunication; not in the 2021 code)",
    )
    tp_comm_overlap: bool = Field(
        False, description="--tp-comm-overlap: TP collectives pipelined with GEMMs (needs SP)"
    )
    tp_comm_overlap_cfg: UbConfig | None = Field(
        None,
        description="--tp-comm-overlap-cfg: Transformer Engine's userbuffer config (a YAML path), or 'bridge' "
        "(Megatron-Bridge's preset for the GPU and shape); None: Transformer Engine's defaults",
    )
    activation_fusion: bool = Field(
        True, description="MLP activation in one kernel; False: op by op (--no-bias-swiglu-fusion, NeMo's squared ReLU)"
    )
    distribute_saved_activations: bool = Field(
        False, description="full recompute: shard layer inputs over TP without SP"
    )
    use_sharp: bool = Field(
        False,
        description="--use-sharp: the data-parallel group's collectives reduced in the switches (SHARP, NCCL "
        "CollNet) where the cluster has it",
    )
    dp_max_ctas: int | None = Field(
        None,
        gt=0,
        description="--nccl-communicator-config-path: the data-parallel communicator's max_ctas, the SMs its "
        "collectives may hold (NCCL's own choice when None: the hardware's nccl_sms)",
    )
    ddp_bucket_size: int | None = Field(
        None,
        gt=0,
        description="--ddp-bucket-size: parameters per gradient bucket of Megatron-Core's DDP (each bucket its own "
        "reduce-scatter and all-gather); None: Megatron's max(40M, 1M·d·c)",
    )
    dfa_bucket_mb: float | None = Field(
        None,
        ge=DFA_BUCKET_MIN_MB,
        description="NeMo 1's Apex DistributedFusedAdam (optim distributed_fused_adam): every model chunk's "
        "gradients reduce-scattered and its parameters all-gathered in buckets of bucket_cap_mb MB of the gradient "
        "dtype; None: Megatron-Core's DDP buckets",
    )
    fp8: Fp8Format | None = Field(None, description="--fp8-format: linear layers' GEMMs in FP8 (Transformer Engine)")
    fp8_param_gather: bool = Field(
        False, description="--fp8-param-gather: keep and all-gather FP8 weights, no bf16 copy"
    )
    fp8_recipe: Fp8Recipe = Field(Fp8Recipe.DELAYED, description="--fp8-recipe (Megatron-LM default: delayed)")
    fp4: Fp4Format | None = Field(
        None,
        description="--fp4-format: linear layers' GEMMs in NVFP4 (Transformer Engine NVFP4BlockScaling; compute "
        "capability >= 10; not with --fp8-format)",
    )
    fp4_recipe: Fp4Recipe = Field(Fp4Recipe.NVFP4, description="--fp4-recipe (Megatron-LM default: nvfp4)")
    fp4_param_gather: bool = Field(
        False, description="--fp4-param-gather: keep and all-gather NVFP4 weights, no bf16 copy"
    )
    first_last_layers_bf16: bool = Field(
        False,
        description="--first-last-layers-bf16: with FP8, the first and last decoder layers' GEMMs in BF16 "
        "(Megatron-Core fp8_utils.is_first_last_bf16_layer; not with delayed scaling)",
    )
    num_layers_at_start_in_bf16: int = Field(
        1, ge=0, description="--num-layers-at-start-in-bf16 N: the first N decoder layers in BF16 (default 1)"
    )
    num_layers_at_end_in_bf16: int = Field(
        1, ge=0, description="--num-layers-at-end-in-bf16 M: the last M decoder layers in BF16 (default 1)"
    )
    fp8_output_proj: bool = Field(
        False, description="--fp8-output-proj: the output layer's logits GEMM in MXFP8 (the MXFP8 recipe only)"
    )
    moe_flex_dispatcher_backend: FlexBackend = Field(
        FlexBackend.DEEPEP, description="--moe-flex-dispatcher-backend with the flex dispatcher"
    )
    moe_shared_expert_overlap: bool = Field(
        False, description="--moe-shared-expert-overlap: shared experts run while tokens are dispatched"
    )
    moe_flex_dispatcher_num_sms: int | None = Field(
        None,
        ge=1,
        description="--moe-flex-dispatcher-num-sms (--moe-hybridep-num-sms, --moe-deepep-num-sms): SMs the flex "
        "dispatcher's kernels hold; None: the backend's default",
    )
    moe_hybridep_num_sms_preprocessing: int = Field(
        108,
        ge=1,
        description="--moe-hybridep-num-sms-preprocessing: blocks (one an SM) of HybridEP's metadata scan kernel "
        "(Megatron-Core's default 108)",
    )
    delay_wgrad_compute: bool = Field(
        False,
        description="--delay-wgrad-compute: with the A2A overlap, the experts' weight gradients run beside the "
        "backward dispatch",
    )
    moe_router_padding_for_quantization: bool = Field(
        False,
        description="--moe-router-padding-for-quantization: the router pads each expert's tokens to the "
        "quantisation alignment (more routed rows, no Transformer Engine padding copies); needs FP8",
    )
    moe_permute_fusion: bool = Field(
        True,
        description="--moe-permute-fusion: MoE token permutation by Transformer Engine's fused kernels (every "
        "Megatron-Bridge MoE recipe sets it); off: Megatron-Core's index_select / scatter_add_ path (moe_utils.py)",
    )
    use_transformer_engine_op_fuser: bool = Field(
        False,
        description="--use-transformer-engine-op-fuser: MoE experts as TE's fused grouped MLP (one grouped kernel, "
        "activation, bias and probabilities in its epilogues); dense MLPs: not modelled",
    )
    fp8_dot_product_attention: bool = Field(
        False,
        description="Megatron-Core fp8_dot_product_attention (Megatron-Bridge "
        "mixed_precision.fp8_dot_product_attention; no Megatron-LM flag): the attention core in the FP8 "
        "recipe (MXFP8 with the MXFP8 recipe, Transformer Engine DotProductAttention)",
    )
    moe_capacity_factor: float | None = Field(None, gt=0, description="--moe-expert-capacity-factor; None: dropless")
    moe_load_imbalance: float = Field(1.1, ge=1.0, description="busiest expert's tokens / the mean (dropless routing)")
    recompute_modules: tuple[RecomputeModule, ...] = Field(
        (RecomputeModule.CORE_ATTN,), description="--recompute-modules: what selective recomputation re-runs"
    )
    cpu_offloading_num_layers: int = Field(
        0, ge=0, description="--cpu-offloading-num-layers: layers whose activations wait in host memory (pp = 1)"
    )
    use_precision_aware_optimizer: bool = Field(
        False, description="--use-precision-aware-optimizer: Transformer Engine's FusedAdam with the dtypes below"
    )
    main_params_dtype: Literal["fp32", "fp16"] = Field("fp32", description="--main-params-dtype (master weights)")
    main_grads_dtype: Literal["fp32", "bf16"] = Field("fp32", description="--main-grads-dtype (the gradient buffer)")
    exp_avg_dtype: Literal["fp32", "fp16", "bf16", "fp8"] = Field("fp32", description="--exp-avg-dtype (Adam m)")
    exp_avg_sq_dtype: Literal["fp32", "fp16", "bf16", "fp8"] = Field("fp32", description="--exp-avg-sq-dtype (Adam v)")
    cuda_graph_impl: CudaGraphImpl = Field(CudaGraphImpl.NONE, description="--cuda-graph-impl")
    cuda_graph_modules: tuple[CudaGraphModule, ...] = Field((), description="--cuda-graph-modules; empty: whole layers")
    expandable_segments: bool = Field(
        False, description="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (no caching-allocator fragmentation)"
    )
    tp_only_amax_red: bool = Field(
        False,
        description="Megatron-Core TransformerConfig.tp_only_amax_red (NeMo and Megatron-Bridge recipes; no "
        "Megatron-LM flag): delayed-scaling FP8 reduces its amaxes over the TP×CP group only; False: over TP×DP×CP",
    )
    te_flash_attn: bool = Field(
        False,
        description="--attention-backend flash: Transformer Engine's flash-attn backend with cuDNN's fused attention "
        "off (or NVTE_FUSED_ATTN=0 at the launch); its time is attention_time_ratio's (FlashAttention-2's measured "
        "ratio on Hopper, set where the plan is read); False: Megatron's auto, TE's pick",
    )
    attention_time_ratio: float = Field(
        1.0,
        gt=0,
        description="the flash-attention calls' time over the GPU preset's kernel law: the software that ran them, "
        "not a setting (the law is today's cuDNN; validation prices an older container's measured ratio, "
        "planner.fidelity.runs.release_attention_ratio: NeMo 1's FlashAttention-2 on H100); 1: the law",
    )
    ub_graph_reorders_rs: bool = Field(
        False,
        description="Transformer Engine before v2.16 under CUDA graphs: a ring-exchanged reduce-scatter's GEMM "
        "chunks lose their order in the graph and its pieces wait for all of them (TE PR #2056); today's TE: False",
    )

    @field_validator("tp_comm_overlap_cfg", mode="before")
    @classmethod
    def _read_cfg_file(cls, value):
        return load_config_file(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _own_rules(self) -> Self:
        defaults = {k: PlanOptions.model_fields[k].default for k in PRECISION_AWARE_FIELDS}
        changed = [k for k in PRECISION_AWARE_FIELDS if getattr(self, k) != defaults[k]]
        if changed and not self.use_precision_aware_optimizer:
            flags = ", ".join("--" + k.replace("_", "-") for k in changed)
            raise ValueError(f"{flags}: only with --use-precision-aware-optimizer ({PRECISION_AWARE_RULE})")
        if len(set(self.recompute_modules)) != len(self.recompute_modules):
            raise ValueError("recompute_modules lists a module twice")
        if self.cuda_graph_impl is CudaGraphImpl.FULL_ITERATION and self.cuda_graph_modules:
            raise ValueError("--cuda-graph-modules must be empty with --cuda-graph-impl full_iteration (arguments.py)")
        self._low_precision_rules()
        return self

    def _low_precision_rules(self) -> None:
        """transformer_config.py:1527-1575 @ d98e8a64: BF16 end layers not with delayed scaling (its amaxes are
        reduced once for all FP8 layers); the MXFP8 output layer with FP8 and the MXFP8 recipe only; FP4 not with FP8
        and its parameter gather only with it (arguments.py:1099-1109)."""
        if self.fp4 is not None and self.fp8 is not None:
            raise ValueError(
                "--fp4-format with --fp8-format: Megatron-LM takes one of them (arguments.py:1100 refuses the pair); "
                "allowed: one of them"
            )
        if self.fp4_param_gather and self.fp4 is None:
            raise ValueError("--fp4-param-gather needs --fp4-format (arguments.py:1104); allowed: drop it")
        if self.fp8 is not None and self.first_last_layers_bf16 and self.fp8_recipe is Fp8Recipe.DELAYED:
            raise ValueError(
                "--first-last-layers-bf16 with --fp8-recipe delayed: Megatron-LM refuses it "
                "(transformer_config.py:1530, 'Delayed scaling does not support first / last layer in BF16'); "
                "allowed: --fp8-recipe tensorwise, blockwise or mxfp8"
            )
        if self.fp8_output_proj and (self.fp8 is None or self.fp8_recipe is not Fp8Recipe.MXFP8):
            got = f"--fp8-recipe {self.fp8_recipe.value}" if self.fp8 is not None else "no --fp8-format"
            raise ValueError(
                f"--fp8-output-proj needs --fp8-format with --fp8-recipe mxfp8 (transformer_config.py:1569-1575); "
                f"got {got}; allowed: drop it"
            )

    @property
    def quantised(self) -> bool:
        """Whether the decoder layers' linear GEMMs run quantised (FP8 or NVFP4: Transformer Engine's autocast)."""
        return self.fp8 is not None or self.fp4 is not None

    @property
    def bf16_end_layers(self) -> tuple[int, int]:
        """(N, M): the first N and last M decoder layers Megatron-Core runs outside the FP8 context
        (fp8_utils.py is_first_last_bf16_layer @ d98e8a64, on global layer numbers); (0, 0) without FP8 or the flag."""
        if not self.quantised or not self.first_last_layers_bf16:  # FP4 too: fp4_utils.get_fp4_context
            return (0, 0)
        return (self.num_layers_at_start_in_bf16, self.num_layers_at_end_in_bf16)

    def graphs_launch(self, module: CudaGraphModule) -> bool:
        """Whether CUDA graphs launch ``module``'s block (attention, MLP or MoE) without the host."""
        if self.cuda_graph_impl is CudaGraphImpl.NONE:
            return False
        if self.cuda_graph_impl is CudaGraphImpl.FULL_ITERATION or not self.cuda_graph_modules:
            return True
        return module in self.cuda_graph_modules

    @property
    def grad_buffer_in_16_bits(self) -> bool:
        """bf16 training reduces and keeps gradients in fp32 unless --grad-reduce-in-bf16 or
        --main-grads-dtype bf16 (arguments.py:1204-1217)."""
        return self.grad_reduce_in_bf16 or self.main_grads_dtype == "bf16"


PRECISION_AWARE_FIELDS = ("main_params_dtype", "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
# megatron/core/optimizer/optimizer_config.py @ d98e8a64 (since 47a175b, Dec 2024), __post_init__ without it:
# "main_grads_dtype can only be fp32 when not using precision-aware optimizer", and so for the three others
PRECISION_AWARE_RULE = "Megatron-LM's OptimizerConfig asserts fp32 without it"


class ParallelPlan(_Spec):
    tp: PositiveInt = Field(1, description="t, tensor-parallel size")
    pp: PositiveInt = Field(1, description="p, pipeline-parallel size")
    dp: PositiveInt = Field(1, description="d, data-parallel size")
    cp: PositiveInt = Field(1, description="c, context-parallel size")
    ep: PositiveInt = Field(1, description="expert-parallel size")
    etp: PositiveInt | None = Field(None, description="expert tensor-parallel size (Megatron default: tp)")
    vpp: PositiveInt = Field(1, description="model chunks per pipeline stage (1: no interleaving)")
    microbatch_group_size: PositiveInt | None = Field(
        None,
        description="--microbatch-group-size-per-virtual-pipeline-stage G: micro-batches each virtual stage runs "
        "at a time (interleaving; None: Megatron's default, pp)",
    )
    micro_batch: PositiveInt = Field(1, description="b, sequences per micro-batch")
    sequence_parallel: bool = False
    recompute: Recompute = Recompute.NONE
    recompute_method: RecomputeMethod = Field(RecomputeMethod.UNIFORM, description="--recompute-method (full only)")
    recompute_num_layers: PositiveInt | None = Field(
        None, description="--recompute-num-layers (full only): group size (uniform) or layers per chunk (block)"
    )
    distributed_optimizer: bool = False
    fsdp: bool = Field(False, description="Megatron FSDP: weights, gradients and optimizer states sharded over d·c")
    distributed_optimizer_instances: PositiveInt = Field(
        1,
        description="--num-distributed-optimizer-instances R: the optimizer sharded over d·c/R ranks, R replicas "
        "(hierarchical sharding: gradients reduce-scattered in an instance, all-reduced across instances)",
    )
    fsdp_sharding: FsdpSharding = Field(
        FsdpSharding.OPTIM_GRADS_PARAMS,
        description="--data-parallel-sharding-strategy (Megatron FSDP): what is sharded",
    )
    fsdp_outer_sharding: FsdpOuterSharding = Field(
        FsdpOuterSharding.NO_SHARD,
        description="--outer-dp-sharding-strategy (Megatron FSDP with R > 1 replicas): no_shard (HSDP) or optim "
        "(HFSDP: the optimizer states sharded over all d·c)",
    )
    stage_split: StageSplit = StageSplit.EVEN
    first_stage_layers: PositiveInt | None = Field(None, description="--decoder-first-pipeline-num-layers")
    last_stage_layers: PositiveInt | None = Field(None, description="--decoder-last-pipeline-num-layers")
    pipeline_layout: str | None = Field(
        None, description="--pipeline-model-parallel-layout: the virtual stages' layers, e.g. Et*4|(t*4|)*14tmL"
    )
    moe_token_dispatcher: TokenDispatcher = Field(
        TokenDispatcher.ALLGATHER, description="--moe-token-dispatcher-type (MoE; Megatron-LM default allgather)"
    )
    overlap_moe_expert_parallel_comm: bool = Field(
        False, description="--overlap-moe-expert-parallel-comm: expert all-to-all hidden behind another micro-batch"
    )

    @model_validator(mode="after")
    def _own_rules(self) -> Self:
        if self.etp is None:
            object.__setattr__(self, "etp", self.tp)  # Megatron: expert TP defaults to TP (arguments.py:587)
        explicit = self.first_stage_layers is not None or self.last_stage_layers is not None
        if explicit and self.stage_split is not StageSplit.EVEN:
            raise ValueError("give either explicit first/last stage layers or an accounted stage_split, not both")
        if self.recompute is not Recompute.FULL and (
            self.recompute_num_layers is not None or self.recompute_method is not RecomputeMethod.UNIFORM
        ):
            raise ValueError("--recompute-method and --recompute-num-layers go with full recomputation only")
        if self.recompute_method is RecomputeMethod.UNIFORM and self.recompute_num_layers == 1:
            object.__setattr__(self, "recompute_num_layers", None)  # Megatron's uniform group of one layer
        if self.pipeline_layout is not None:
            if explicit or self.stage_split is not StageSplit.EVEN:
                raise ValueError(
                    "pipeline_layout places every layer itself: give no first/last stage layers or accounted split"
                )
            try:
                stages = len(PipelineLayout.parse(self.pipeline_layout).stages)
            except LayoutError as err:
                raise ValueError(f"pipeline_layout: {err}") from None
            if stages % self.pp:
                raise ValueError(f"pipeline_layout has {stages} virtual stages, not divisible by pp {self.pp}")
            if self.vpp not in (1, stages // self.pp):
                raise ValueError(
                    f"pipeline_layout gives {stages // self.pp} chunks per stage ({stages} virtual stages over "
                    f"pp {self.pp}) but vpp is {self.vpp}"
                )
            object.__setattr__(self, "vpp", stages // self.pp)  # Megatron: vpp = stages/pp (arguments.py:941-952)
        if self.vpp == 1 or self.microbatch_group_size == self.pp:
            object.__setattr__(self, "microbatch_group_size", None)  # 1F1B has no groups; pp is the default
        if not self.fsdp:
            object.__setattr__(self, "fsdp_sharding", FsdpSharding.OPTIM_GRADS_PARAMS)  # meaningless without FSDP
        self._hybrid_rules()
        if self.tp == 1 and self.sequence_parallel:
            # Megatron turns SP off silently when t = 1 (arguments.py:1430-1439)
            object.__setattr__(self, "sequence_parallel", False)
        return self

    def _hybrid_rules(self) -> None:
        """R distributed-optimizer instances (Megatron FSDP: HSDP) and the outer sharding strategy, as
        Megatron-LM @ d98e8a64 takes them: R > 1 shards over d·c/R ranks and needs the distributed optimizer
        (Megatron FSDP v1 turns it on, arguments.py); --outer-dp-sharding-strategy is read only with Megatron
        FSDP, and optim needs R > 1 (else the first all-gather reads a helper buffer never built) and
        optim_grads_params (param_and_grad_buffer.py raises "not implemented" otherwise)."""
        if self.distributed_optimizer_instances > 1 and not (self.distributed_optimizer or self.fsdp):
            raise ValueError(
                "--num-distributed-optimizer-instances > 1 needs --use-distributed-optimizer or Megatron FSDP"
            )
        if self.fsdp_outer_sharding is FsdpOuterSharding.NO_SHARD:
            return
        if not self.fsdp:
            object.__setattr__(self, "fsdp_outer_sharding", FsdpOuterSharding.NO_SHARD)  # read only by Megatron FSDP
        elif self.distributed_optimizer_instances == 1:
            raise ValueError(
                "--outer-dp-sharding-strategy optim needs --num-distributed-optimizer-instances > 1 (Megatron FSDP's "
                "hybrid mode; with one instance Megatron-LM fails at the first all-gather)"
            )
        elif self.fsdp_sharding is not FsdpSharding.OPTIM_GRADS_PARAMS:
            raise ValueError(
                "--outer-dp-sharding-strategy optim needs --data-parallel-sharding-strategy optim_grads_params "
                f"(Megatron FSDP param_and_grad_buffer.py), not {self.fsdp_sharding.value}"
            )

    @property
    def recomputed_layers(self) -> int:
        """--recompute-num-layers as Megatron reads it: 1 when full recomputation leaves it out."""
        return self.recompute_num_layers or 1

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    def num_microbatches(self, training: TrainingSpec) -> float:
        return num_microbatches(training.global_batch, self.micro_batch, self.dp)


def recompute_layers_run(plan: ParallelPlan, stage_layers: list[int]) -> int | None:
    """--recompute-num-layers as Megatron-LM runs it: at most the layers of the plan's largest model chunk
    (``stage_layers``: decoder layers per stage). Megatron accepts a larger value; block recomputes the
    layers ``layer_idx < n`` of each chunk and uniform groups end at ``min(layer_idx + n, layers)``
    (megatron/core/recompute.py), so any n beyond the chunk recomputes all of it. A chunk is a stage's
    layers over vpp (with a pipeline layout, the whole stage is taken: a bound, never too small)."""
    n = plan.recompute_num_layers
    if n is None or plan.recompute is not Recompute.FULL or not stage_layers:
        return n
    most = max(stage_layers)
    chunk = most if plan.pipeline_layout else -(-most // plan.vpp)
    if chunk < 1 or n <= chunk:
        return n
    return None if plan.recompute_method is RecomputeMethod.UNIFORM and chunk == 1 else chunk


def num_microbatches(B: "ArrayLike", b: "ArrayLike", d: "ArrayLike") -> "ArrayLike":
    """m = B/(b·d): micro-batches each pipeline runs per iteration (Narayanan et al. 2021 §2.2)."""
    return B / (b * d)


@dataclass(frozen=True)
class Context:
    """The specs every plan of a grid shares: what is trained, on what, with which Megatron-LM behaviour."""

    model: ModelSpec
    hardware: HardwareSpec
    training: TrainingSpec
    options: PlanOptions

    @property
    def precision(self) -> str:
        return self.training.precision.value


RECOMPUTE_TAGS = {"selective": "rc-sel", "full": "rc-full"}
SPLIT_TAGS = {"embedding": "acc-emb", "loss": "acc-loss", "embedding+loss": "acc-emb+loss"}
MODULE_TAGS = {
    "core_attn": "attn",
    "layernorm": "ln",
    "moe_act": "moeact",
    "mla_up_proj": "mlaup",
    "shared_experts": "shexp",
}
PLAN_LABEL_CODES = (  # (the label words a piece of the legend explains, the piece)
    (r"b\d+", "b micro-batch"),
    (r"[VG]\d+", "V interleaved chunks per stage (G: micro-batches a virtual stage runs at a time, when not pp)"),
    (r"SP", "SP sequence parallel"),
    (r"DO(×\d+)?", "DO distributed optimizer (DO×R: R instances, --num-distributed-optimizer-instances)"),
    (
        r"H?F?SDP\S*",
        "FSDP Megatron FSDP (weights, gradients and optimizer sharded; FSDP:og gradients and optimizer, FSDP:o the "
        "optimizer; HSDP×R: R replicas of d·c/R ranks, HFSDP×R: the optimizer sharded across them too)",
    ),
    (
        r"rc-\S+",
        "rc-sel/rc-full selective/full recomputation (rc-mlp etc.: selective of other "
        "modules than core_attn; rc-full:uN uniform groups of N layers; rc-blk:N the first N layers of each chunk)",
    ),
    (
        r"no-(ogr|opg|tpo)",
        "no-ogr/no-opg/no-tpo: an overlap today's recipes turn on is off (gradient reduction; parameter "
        "all-gather with DO/FSDP; TP communication with SP)",
    ),
    (
        r"tpo:TE",
        "tpo:TE: --tp-comm-overlap-cfg bridge, but Megatron-Bridge has no userbuffer preset for this plan's shape "
        "(GPU, hidden size, TP): Transformer Engine's defaults",
    ),
    (
        r"acc-(emb|loss|emb\+loss)",
        "acc-emb/acc-loss/acc-emb+loss: the embedding/the loss/both counted as a layer when the pipeline stages "
        "are split (--account-for-embedding/loss-in-pipeline-split)",
    ),
    (
        r"first(\d+|-)/last(\d+|-)",
        "firstN/lastM: N layers on the first stage, M on the last (--decoder-first/last-pipeline-num-layers; -: "
        "not set)",
    ),
    (
        r"(allgather|alltoall|flex|deepep|hybridep|ncclep)(\+ov)?",
        "MoE token dispatcher allgather, alltoall or flex, named by its library (deepep, hybridep, ncclep: "
        "--moe-token-dispatcher flex --moe-flex-dispatcher-backend) (+ov: --overlap-moe-expert-parallel-comm)",
    ),
    (r"layout", "layout: --pipeline-model-parallel-layout"),
)
PLAN_LABEL_LEGEND = " · ".join(piece for _, piece in PLAN_LABEL_CODES)


def plan_label_legend(label: str) -> str:
    """The legend of the codes one plan's label uses (the export header explains its plan; it carried every
    code's, 1,000 characters, FSDP and MoE dispatchers for a dense plan without either: ux13)."""
    import re

    words = label.replace("·", " ").split()
    return " · ".join(piece for code, piece in PLAN_LABEL_CODES if any(re.fullmatch(code, w) for w in words))


def _recompute_tag(par: Mapping, options: Mapping | None) -> list[str]:
    """rc-sel (Megatron's default module, core_attn; other modules: rc-mlp, rc-attn+mlp, ...), rc-full
    (uniform, one layer per group), rc-full:uN (uniform groups of N) or rc-blk:N (block: the first N
    layers of each model chunk)."""
    kind = str(par.get("recompute"))
    if kind == "selective":
        modules = tuple(str(m) for m in (options or {}).get("recompute_modules") or ("core_attn",))
        return ["rc-sel" if modules == ("core_attn",) else "rc-" + "+".join(MODULE_TAGS.get(m, m) for m in modules)]
    if kind != "full":
        return []
    layers = par.get("recompute_num_layers")
    if str(par.get("recompute_method", "uniform")) == "block":
        return [f"rc-blk:{layers or 1}"]
    return ["rc-full" + (f":u{layers}" if layers and layers > 1 else "")]


def _overlap_tags(par: Mapping, options: Mapping | None) -> list[str]:
    """The overlaps today's recipes turn on (Megatron-Bridge and NeMo performance recipes: gradient
    reduction always, the parameter all-gather with a sharded optimizer, TP communication with SP)
    that the plan has off; nothing when the options are not known."""
    if options is None:
        return []
    sharded = bool(par.get("distributed_optimizer") or par.get("fsdp"))
    tags = [] if options.get("overlap_grad_reduce") else ["no-ogr"]
    tags += ["no-opg"] if sharded and not options.get("overlap_param_gather") else []
    tags += ["no-tpo"] if par.get("sequence_parallel") and not options.get("tp_comm_overlap") else []
    return tags


def _sharding_tag(par: Mapping) -> list[str]:
    """The optimizer's tag: DO (×R instances), or Megatron FSDP by strategy (FSDP, FSDP:og, FSDP:o); with
    R > 1 replicas it is HSDP×R, or HFSDP×R when the optimizer is sharded across them too
    (Megatron-LM docs/user-guide/features/megatron_fsdp.md names both)."""
    replicas = par.get("distributed_optimizer_instances") or 1
    if par.get("fsdp"):
        tag = FSDP_TAGS[str(par.get("fsdp_sharding", "optim_grads_params"))]
        if replicas == 1:
            return [tag]
        hybrid = "HFSDP" if str(par.get("fsdp_outer_sharding", "no_shard")) == "optim" else "HSDP"
        return [tag.replace("FSDP", hybrid) + f"×{replicas}"]
    if par.get("distributed_optimizer"):
        return [f"DO×{replicas}" if replicas > 1 else "DO"]
    return []


def plan_label(par: Mapping, *, moe: bool = False, options: Mapping | None = None, notes: tuple = ()) -> str:
    """A parallel plan in one short line, e.g. ``TP4 PP8 DP32 b2 V12 · SP DO rc-sel``.

    ``par`` is a plan JSON's ``parallel`` (or ``ParallelPlan.model_dump(mode="json")``) and ``options``
    its ``options`` (``PlanOptions.model_dump(mode="json")``): with them the label also names the
    overlaps that differ from today's recipes and selective recomputation's modules, so two plans a
    search can tell apart never share a label; ``notes``: words a plan JSON adds after the overlaps
    (``tpo:TE``). CP shows when it is above 1, EP and ETP for a mixture-of-experts model (or EP above 1);
    Megatron FSDP, the distributed optimizer, recomputation and an accounted or explicit stage split
    always show when they are on. Every table, the export header and the notes name plans with it.
    """
    parts = [f"TP{par['tp']}", f"PP{par['pp']}", f"DP{par['dp']}"]
    if par.get("cp", 1) > 1:
        parts.append(f"CP{par['cp']}")
    if moe or par.get("ep", 1) > 1:
        parts += [f"EP{par.get('ep', 1)}", f"ETP{par.get('etp') or par['tp']}"]
    parts.append(f"b{par['micro_batch']}")
    if par.get("vpp", 1) > 1:
        parts.append(f"V{par['vpp']}")
        if par.get("microbatch_group_size") and par["microbatch_group_size"] != par["pp"]:
            parts.append(f"G{par['microbatch_group_size']}")
    tags = ["SP"] if par.get("sequence_parallel") else []
    tags += _sharding_tag(par)
    tags += _overlap_tags(par, options) + list(notes)
    tags += _recompute_tag(par, options)
    tags += [SPLIT_TAGS[str(par["stage_split"])]] if str(par.get("stage_split")) in SPLIT_TAGS else []
    if par.get("first_stage_layers") or par.get("last_stage_layers"):
        tags.append(f"first{par.get('first_stage_layers') or '-'}/last{par.get('last_stage_layers') or '-'}")
    if moe or par.get("ep", 1) > 1:
        dispatcher = str(par.get("moe_token_dispatcher", "allgather"))
        backend = (options or {}).get("moe_flex_dispatcher_backend")
        if dispatcher == "flex" and backend:  # the library, not the dispatcher's name: DeepEP and HybridEP cost apart
            dispatcher = str(backend)
        tags.append(dispatcher + ("+ov" if par.get("overlap_moe_expert_parallel_comm") else ""))
    if par.get("pipeline_layout"):
        tags.append(f"layout {par['pipeline_layout']}")
    return " ".join(parts) + (" · " + " ".join(tags) if tags else "")
