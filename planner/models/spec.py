"""The transformer being trained, in Megatron-LM's own argument names."""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator


class Normalization(StrEnum):
    LAYERNORM = "LayerNorm"
    RMSNORM = "RMSNorm"


class PositionEmbedding(StrEnum):
    LEARNED = "learned_absolute"
    ROPE = "rope"
    NONE = "none"


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
    num_layers: PositiveInt = Field(description="L")
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
    normalization: Normalization = Normalization.LAYERNORM
    position_embedding_type: PositionEmbedding = PositionEmbedding.LEARNED
    untie_embeddings_and_output_weights: bool = False
    add_bias_linear: bool = True
    hidden_dropout: float = Field(0.1, ge=0, lt=1, description="dropout after attention and MLP")
    attention_dropout: float = Field(0.1, ge=0, lt=1, description="dropout on attention probabilities")
    num_experts: PositiveInt | None = Field(None, description="routed experts; dense if omitted")
    moe_router_topk: PositiveInt = Field(2, description="experts per token")
    moe_ffn_hidden_size: PositiveInt | None = Field(None, description="expert MLP width; f if omitted")
    moe_layer_freq: PositiveInt = Field(1, description="every k-th layer is a mixture-of-experts layer")
    training: TrainingDefaults | None = Field(None, description="published training defaults")

    @model_validator(mode="before")
    @classmethod
    def _coerce_strict_enums(cls, data: object) -> object:
        # strict mode would refuse YAML strings for enum fields; accept their values here
        if isinstance(data, dict):
            data = dict(data)
            for key, enum in (("normalization", Normalization), ("position_embedding_type", PositionEmbedding)):
                if isinstance(data.get(key), str):
                    allowed = [e.value for e in enum]
                    if data[key] not in allowed:
                        raise ValueError(f"{key} must be one of {allowed}, got {data[key]!r}")
                    data[key] = enum(data[key])
        return data

    @model_validator(mode="after")
    def _own_rules(self) -> Self:
        a, g = self.num_attention_heads, self.query_groups
        if self.kv_channels is None and self.hidden_size % a:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({a}) unless kv_channels is given"
            )
        if a % g:
            raise ValueError(f"num_attention_heads ({a}) must be divisible by num_query_groups ({g})")
        if self.swiglu and self.squared_relu:
            raise ValueError("swiglu and squared_relu are two MLP activations; choose one")
        if self.num_experts is not None and self.moe_router_topk > self.num_experts:
            raise ValueError(f"moe_router_topk ({self.moe_router_topk}) must be <= num_experts ({self.num_experts})")
        return self

    @property
    def query_groups(self) -> int:
        """g: key/value head groups (a without grouped-query attention)."""
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        """d: channels per attention head."""
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def ffn(self) -> int:
        """f: MLP width (4h if not given)."""
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None

    @property
    def expert_ffn(self) -> int:
        """f_e: width of one expert's MLP (f if not given, as Megatron does)."""
        return self.moe_ffn_hidden_size or self.ffn

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (--moe-layer-freq k: layers 0, k, 2k, ...)."""
        return 0 if self.num_experts is None else -(-self.num_layers // self.moe_layer_freq)

    @property
    def tied_embeddings(self) -> bool:
        return not self.untie_embeddings_and_output_weights
