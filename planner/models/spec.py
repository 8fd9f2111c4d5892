"""The transformer being trained, in Megatron-LM's own argument names."""

# No `from __future__ import annotations` here: pydantic would evaluate each model field's annotation from
# its string (typing's ForwardRef: compile and eval), about 10 % of building the models every process pays.
from enum import StrEnum
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.models.patterns import PatternError, freq_value, moe_layers, window_layers

# A size the candidate grid can hold: search keeps every size in 32-bit integers and the layer counts of a
# stage in 16-bit ones, so a larger value (a typo: 100000000000) ended in an OverflowError traceback
# (fresh user trial 8); it is refused as the field's bound instead.
PositiveInt = Annotated[int, Field(gt=0, lt=2**31)]
LayerCount = Annotated[int, Field(gt=0, lt=2**15)]


class Normalization(StrEnum):
    LAYERNORM = "LayerNorm"
    RMSNORM = "RMSNorm"


class PositionEmbedding(StrEnum):
    LEARNED = "learned_absolute"
    ROPE = "rope"
    YARN = "yarn"
    NONE = "none"


# --softmax-type (``learnable``: one learned logit per head, GPT-OSS's attention sinks) and
# --moe-router-score-function, with Megatron-LM's choices
SoftmaxType = StrEnum("SoftmaxType", [("VANILLA", "vanilla"), ("OFF_BY_ONE", "off-by-one"), ("LEARNABLE", "learnable")])
RouterScore = StrEnum("RouterScore", [("SOFTMAX", "softmax"), ("SIGMOID", "sigmoid"), ("SQRTSOFTPLUS", "sqrtsoftplus")])


ENUM_FIELDS = {
    "normalization": Normalization,
    "position_embedding_type": PositionEmbedding,
    "softmax_type": SoftmaxType,
    "moe_router_score_function": RouterScore,
}


class TrainingDefaults(BaseModel):
    """The published global batch and sequence length a model preset trains with by default."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    global_batch: PositiveInt = Field(description="B, sequences per iteration")
    seq_len: PositiveInt = Field(description="s, tokens per sequence")


class ModelSpec(BaseModel):
    """A decoder-only transformer; field names are Megatron-LM's arguments with underscores."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: str
    source: str = Field(description="paper, model card or script the shape comes from")
    num_layers: LayerCount = Field(description="L")
    hidden_size: PositiveInt = Field(description="h")
    num_attention_heads: PositiveInt = Field(description="a")
    num_query_groups: PositiveInt | None = Field(None, description="g; a (no GQA) if omitted")
    kv_channels: PositiveInt | None = Field(None, description="d, head dimension; h/a if omitted")
    ffn_hidden_size: PositiveInt | None = Field(None, description="f; 4h if omitted")
    max_position_embeddings: PositiveInt = Field(description="longest sequence the model takes")
    vocab_size: PositiveInt = Field(description="V before Megatron pads it")
    make_vocab_size_divisible_by: PositiveInt = Field(128, description="Megatron pads V to a multiple of this times t")
    swiglu: bool = Field(False, description="gated MLP with three matrices")
    squared_relu: bool = Field(False, description="squared-ReLU MLP activation (Nemotron-4) instead of GeLU")
    quick_geglu: bool = Field(
        False, description="--quick-geglu: GPT-OSS's gated activation x·σ(1.702x)·(y + offset), three matrices"
    )
    glu_linear_offset: float = Field(0.0, description="--glu-linear-offset (GPT-OSS: 1.0); no cost")
    activation_func_clamp_value: float | None = Field(None, description="--activation-func-clamp-value; no cost")
    normalization: Normalization = Normalization.LAYERNORM
    qk_layernorm: bool = Field(False, description="--qk-layernorm: a norm over each query and key head")
    position_embedding_type: PositionEmbedding = PositionEmbedding.LEARNED
    rotary_base: PositiveInt | None = Field(None, description="--rotary-base (RoPE θ); no cost")
    rope_scaling_factor: float | None = Field(
        None, gt=0, description="--use-rope-scaling --rope-scaling-factor F (Llama 3.x's RoPE frequencies); no cost"
    )
    rotary_percent: float = Field(
        1.0, gt=0, le=1, description="--rotary-percent: fraction of each head's channels RoPE rotates (Nemotron-4 0.5)"
    )
    rotary_scaling_factor: float | None = Field(
        None, gt=0, description="--rotary-scaling-factor: YaRN's context scale s (GPT-OSS 32); no cost"
    )
    mscale: float = Field(1.0, description="--mscale: YaRN's attention-scale coefficient (config.json mscale); no cost")
    mscale_all_dim: float = Field(0.0, description="--mscale-all-dim: YaRN's divisor coefficient (DeepSeek-V3 1)")
    yarn_original_max_position_embeddings: PositiveInt | None = Field(
        None, description="--yarn-original-max-position-embeddings: YaRN's pre-extension context (Megatron: 4096)"
    )
    yarn_correction_range_round_to_int: bool = Field(
        True, description="--no-yarn-correction-range-round-to-int when false (HF rope_scaling truncate false)"
    )
    norm_epsilon: float = Field(1e-5, gt=0, lt=1, description="--norm-epsilon (config.json rms_norm_eps); no cost")
    apply_layernorm_1p: bool = Field(
        False, description="--apply-layernorm-1p: LayerNorm with a zero-centred γ (Nemotron-4); no cost"
    )
    untie_embeddings_and_output_weights: bool = False
    add_bias_linear: bool = True
    hidden_dropout: float = Field(0.1, ge=0, lt=1, description="dropout after attention and MLP")
    attention_dropout: float = Field(0.1, ge=0, lt=1, description="dropout on attention probabilities")
    softmax_type: SoftmaxType = Field(SoftmaxType.VANILLA, description="learnable: attention sinks")
    window_size: tuple[int, int] | None = Field(
        None, description="--window-size (left, right): sliding-window attention over left + 1 + right keys"
    )
    window_attn_skip_freq: int | tuple[int, ...] | None = Field(
        None, description="--window-attn-skip-freq: N (every N-th layer full) or a 0/1 list (1 = windowed)"
    )
    multi_latent_attention: bool = Field(False, description="--multi-latent-attention (DeepSeek-V2/V3)")
    q_lora_rank: PositiveInt | None = Field(None, description="r_q, query latent rank (None: no q compression)")
    kv_lora_rank: PositiveInt = Field(32, description="r_kv, key/value latent rank")
    qk_head_dim: PositiveInt = Field(128, description="d_qk, the non-rotary part of a query/key head")
    qk_pos_emb_head_dim: int = Field(64, ge=0, description="d_r, the rotary part of a query/key head")
    v_head_dim: PositiveInt = Field(128, description="d_v, a value head")
    num_experts: PositiveInt | None = Field(None, description="routed experts; dense if omitted")
    moe_router_topk: PositiveInt = Field(2, description="experts per token")
    moe_ffn_hidden_size: PositiveInt | None = Field(None, description="expert MLP width; f if omitted")
    moe_shared_expert_intermediate_size: PositiveInt | None = Field(
        None, description="f_s, the width of all shared experts together (n_shared × expert width)"
    )
    moe_layer_freq: int | tuple[int, ...] = Field(
        1, description="--moe-layer-freq: every N-th layer (0, N, 2N ...) is MoE, or a 0/1 list (1 = MoE)"
    )
    mtp_num_layers: PositiveInt | None = Field(None, description="--mtp-num-layers: multi-token prediction depth")
    moe_router_score_function: RouterScore = RouterScore.SOFTMAX
    moe_router_pre_softmax: bool = Field(False, description="softmax before the top-k (no cost)")
    moe_router_num_groups: PositiveInt | None = Field(None, description="expert groups for group-limited routing")
    moe_router_group_topk: PositiveInt | None = Field(None, description="groups a token may be routed to")
    moe_router_topk_scaling_factor: float | None = Field(None, gt=0, description="routed_scaling_factor; no cost")
    moe_router_enable_expert_bias: bool = Field(False, description="aux-loss-free expert bias (DeepSeek-V3)")
    moe_router_dtype: str | None = Field(None, pattern="^fp(32|64)$", description="--moe-router-dtype: fp32 or fp64")
    not_in_megatron: str | None = Field(
        None, description="what of the published model no Megatron-LM flag carries (said by every export); no cost"
    )
    training: TrainingDefaults | None = Field(None, description="published training defaults")

    @model_validator(mode="before")
    @classmethod
    def _coerce_strict_values(cls, data: object) -> object:
        # strict mode would refuse YAML strings for enum fields and lists for tuples; accept them here
        if isinstance(data, dict):
            data = dict(data)
            for key, enum in ENUM_FIELDS.items():
                if isinstance(data.get(key), str):
                    allowed = [e.value for e in enum]
                    if data[key] not in allowed:
                        raise ValueError(f"{key} must be one of {allowed}, got {data[key]!r}")
                    data[key] = enum(data[key])
            for key in ("moe_layer_freq", "window_attn_skip_freq"):
                if data.get(key) is not None and not isinstance(data[key], int):
                    try:
                        data[key] = freq_value(data[key])
                    except PatternError as err:
                        raise ValueError(f"{key}: {err}") from None
            if isinstance(data.get("window_size"), (list, str)):
                value = data["window_size"]
                parts = value.strip("()").split(",") if isinstance(value, str) else value
                try:
                    data["window_size"] = tuple(int(x) for x in parts)
                except (TypeError, ValueError):
                    data["window_size"] = ()
                if len(data["window_size"]) != 2:
                    raise ValueError(f"window_size must be two integers (left, right), got {value!r}")
        return data

    @model_validator(mode="after")
    def _own_rules(self) -> Self:
        a, g, L = self.num_attention_heads, self.query_groups, self.num_layers
        if self.kv_channels is None and self.hidden_size % a and not self.multi_latent_attention:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({a}) unless kv_channels is given"
            )
        if a % g:
            raise ValueError(f"num_attention_heads ({a}) must be divisible by num_query_groups ({g})")
        if sum((self.swiglu, self.squared_relu, self.quick_geglu)) > 1:
            raise ValueError("swiglu, quick_geglu and squared_relu are MLP activations; choose one")
        if self.multi_latent_attention and g != a:
            raise ValueError("multi_latent_attention excludes grouped-query attention (num_query_groups)")
        for key in ("moe_layer_freq", "window_attn_skip_freq"):
            value = getattr(self, key)
            if isinstance(value, tuple) and len(value) != L:
                raise ValueError(f"{key} lists {len(value)} layers but num_layers is {L}")
            if isinstance(value, int) and value < 1:
                raise ValueError(f"{key} must be a positive integer or a 0/1 list, got {value}")
        if self.window_size is not None and (
            len(self.window_size) != 2 or min(self.window_size) < 0 or max(self.window_size) >= 2**31
        ):  # 1e308 in a YAML was an OverflowError traceback of the attention FLOPs
            raise ValueError(f"window_size must be two integers 0 ≤ w < 2³¹ (left, right), got {self.window_size}")
        self._position_rules()
        if self.num_experts is None:
            moe_only = ("moe_shared_expert_intermediate_size", "moe_router_num_groups", "moe_router_group_topk")
            given = [k for k in moe_only if getattr(self, k) is not None]
            if given:
                raise ValueError(f"{', '.join(given)} need num_experts (a mixture-of-experts model)")
            return self
        E, k = self.num_experts, self.moe_router_topk
        if k > E:
            raise ValueError(f"moe_router_topk ({k}) must be <= num_experts ({E})")
        groups, group_topk = self.moe_router_num_groups, self.moe_router_group_topk
        if (groups is None) != (group_topk is None):
            raise ValueError("moe_router_num_groups and moe_router_group_topk go together (group-limited routing)")
        if groups is not None:
            if E % groups or group_topk > groups or k > group_topk * (E // groups):
                raise ValueError(
                    f"group-limited routing needs num_experts ({E}) divisible by moe_router_num_groups ({groups}), "
                    f"moe_router_group_topk ({group_topk}) <= the groups and top-k ({k}) within the chosen groups"
                )
        return self

    def _position_rules(self) -> None:
        """MTP's position embedding (Megatron-LM arguments.py:882-886: rope or none), and a partial rotary
        embedding only where RoPE rotates each head's channels (MLA rotates its own d_r channels instead)."""
        kind = self.position_embedding_type
        if self.mtp_num_layers and kind not in (PositionEmbedding.ROPE, PositionEmbedding.NONE):
            raise ValueError(f"mtp_num_layers needs position_embedding_type rope or none, not {kind.value}")
        rotary = kind in (PositionEmbedding.ROPE, PositionEmbedding.YARN) and not self.multi_latent_attention
        if self.rotary_percent != 1.0 and not rotary:
            raise ValueError(
                "rotary_percent below 1 needs position_embedding_type rope or yarn without multi_latent_attention"
            )

    @property
    def query_groups(self) -> int:
        """g: key/value head groups (a without grouped-query attention)."""
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        """d: channels per attention head (for MLA the query/key head d_qk + d_r)."""
        if self.multi_latent_attention:
            return self.qk_head_dim + self.qk_pos_emb_head_dim
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def value_dim(self) -> int:
        """Channels of one value head (d_v for MLA, d otherwise)."""
        return self.v_head_dim if self.multi_latent_attention else self.head_dim

    @property
    def ffn(self) -> int:
        """f: MLP width (4h if not given)."""
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def gated(self) -> bool:
        """A gated MLP (SwiGLU or GPT-OSS's quick GeGLU): fc1 is 2f wide."""
        return self.swiglu or self.quick_geglu

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None

    @property
    def expert_ffn(self) -> int:
        """f_e: width of one expert's MLP (f if not given, as Megatron does)."""
        return self.moe_ffn_hidden_size or self.ffn

    @property
    def shared_ffn(self) -> int:
        """f_s: width of the shared experts together (0 without)."""
        return self.moe_shared_expert_intermediate_size or 0

    @property
    def moe_pattern(self) -> tuple[bool, ...]:
        """Which layers are mixture-of-experts (none for a dense model)."""
        if not self.is_moe:
            return (False,) * self.num_layers
        return moe_layers(self.moe_layer_freq, self.num_layers)

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return sum(self.moe_pattern)

    @property
    def window_pattern(self) -> tuple[bool, ...]:
        """Which layers use sliding-window attention (none without --window-size)."""
        if self.window_size is None:
            return (False,) * self.num_layers
        return window_layers(self.window_attn_skip_freq, self.num_layers)

    @property
    def window(self) -> int | None:
        """Keys a query attends to in a sliding-window layer: left + 1 + right."""
        return None if self.window_size is None else self.window_size[0] + 1 + self.window_size[1]

    @property
    def mtp_layers(self) -> int:
        """Multi-token-prediction layers (0 without)."""
        return self.mtp_num_layers or 0

    @property
    def mtp_is_moe(self) -> bool:
        """An MTP layer is built like the last decoder layer (Megatron-LM training.py:1042-1050)."""
        return self.moe_pattern[-1]

    @property
    def tied_embeddings(self) -> bool:
        return not self.untie_embeddings_and_output_weights
