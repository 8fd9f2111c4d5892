"""Spec validation at the boundary: every validator refuses with a message naming the values."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

from planner.hardware.spec import HardwareSpec, NetworkTier
from planner.models.spec import ModelSpec
from planner.plan import ParallelPlan, PlanOptions, Recompute, StageSplit, TrainingSpec

from conftest import a100

MODEL = dict(
    name="m",
    source="test",
    num_layers=4,
    hidden_size=1024,
    num_attention_heads=16,
    max_position_embeddings=2048,
    vocab_size=50257,
)


def model(**changes) -> ModelSpec:
    return ModelSpec(**{**MODEL, **changes})


def hardware_dict() -> dict:
    return copy.deepcopy(a100().model_dump(exclude_unset=True))


# ----------------------------------------------------------------------------- ModelSpec


def test_valid_model_and_derived_values():
    m = model()
    assert (m.head_dim, m.ffn, m.query_groups, m.tied_embeddings) == (64, 4096, 16, True)
    gqa = model(num_query_groups=4, ffn_hidden_size=2816, kv_channels=128)
    assert (gqa.head_dim, gqa.ffn, gqa.query_groups) == (128, 2816, 4)


def test_hidden_not_a_multiple_of_heads_names_both_values():
    with pytest.raises(ValidationError, match=r"hidden_size \(1000\).*num_attention_heads \(16\)"):
        model(hidden_size=1000)


def test_hidden_not_a_multiple_of_heads_is_fine_with_kv_channels():
    # Megatron allows h ≠ a·d when --kv-channels is given
    assert model(hidden_size=1000, kv_channels=64).head_dim == 64


def test_heads_not_divisible_by_query_groups_names_both_values():
    with pytest.raises(ValidationError, match=r"num_attention_heads \(16\).*num_query_groups \(5\)"):
        model(num_query_groups=5)


def test_moe_topk_above_experts():
    with pytest.raises(ValidationError, match=r"moe_router_topk \(4\).*num_experts \(2\)"):
        model(num_experts=2, moe_router_topk=4)


def test_unknown_model_key_is_rejected():
    with pytest.raises(ValidationError, match=r"num_heads[\s\S]*Extra inputs are not permitted"):
        model(num_heads=16)


@pytest.mark.parametrize("field, value", [("num_layers", 0), ("hidden_size", -1), ("vocab_size", 0)])
def test_non_positive_sizes_are_rejected(field, value):
    with pytest.raises(ValidationError, match=rf"{field}[\s\S]*greater than 0"):
        model(**{field: value})


def test_strict_model_refuses_strings_for_numbers():
    # PyYAML reads 1e9 as a string (STYLE.md §5): strict specs must not coerce it
    with pytest.raises(ValidationError, match="hidden_size"):
        model(hidden_size="1024")


def test_enum_fields_accept_their_values_and_name_the_allowed_ones():
    assert model(normalization="RMSNorm").normalization.value == "RMSNorm"
    with pytest.raises(
        ValidationError, match=r"normalization must be one of \['LayerNorm', 'RMSNorm'\], got 'rmsnorm'"
    ):
        model(normalization="rmsnorm")


def test_dropout_range():
    with pytest.raises(ValidationError, match="hidden_dropout"):
        model(hidden_dropout=1.0)


def test_model_spec_is_frozen():
    m = model()
    with pytest.raises(ValidationError):
        m.num_layers = 8


# ----------------------------------------------------------------------------- HardwareSpec


def test_hardware_preset_dict_validates():
    assert HardwareSpec.model_validate(hardware_dict()) == a100()


def test_negative_bandwidth_is_rejected_naming_the_field():
    data = hardware_dict()
    data["network"]["nic_gbits_per_s"] = -200.0
    with pytest.raises(ValidationError, match=r"network\.nic_gbits_per_s[\s\S]*greater than 0"):
        HardwareSpec.model_validate(data)
    data = hardware_dict()
    data["node"]["nvlink_gbytes_per_s"] = -300.0
    with pytest.raises(ValidationError, match=r"node\.nvlink_gbytes_per_s[\s\S]*greater than 0"):
        HardwareSpec.model_validate(data)


def test_missing_source_for_a_number_names_the_field():
    data = hardware_dict()
    del data["gpu"]["sources"]["hbm_tbytes_per_s"]
    with pytest.raises(
        ValidationError, match=r"sources must name where each number comes from; missing: hbm_tbytes_per_s"
    ):
        HardwareSpec.model_validate(data)


def test_source_for_an_unknown_field_is_rejected():
    data = hardware_dict()
    data["node"]["sources"]["nvlink_gbits"] = "typo"
    with pytest.raises(ValidationError, match=r"sources names unknown fields: nvlink_gbits"):
        HardwareSpec.model_validate(data)


def test_tiers_must_grow():
    data = hardware_dict()
    data["network"]["tiers"][2]["max_nodes"] = 100
    with pytest.raises(ValidationError, match=r"strictly growing max_nodes, got \[20, 140, 100\]"):
        HardwareSpec.model_validate(data)
    data["network"]["tiers"][2]["max_nodes"] = 140
    with pytest.raises(ValidationError, match=r"got \[20, 140, 140\]"):
        HardwareSpec.model_validate(data)


def test_efficiency_above_one_is_rejected():
    data = hardware_dict()
    data["calibration"]["gemm_efficiency"] = 1.2
    with pytest.raises(ValidationError, match=r"calibration\.gemm_efficiency[\s\S]*less than or equal to 1"):
        HardwareSpec.model_validate(data)


def test_unknown_hardware_key_is_rejected():
    data = hardware_dict()
    data["gpu"]["hbm_gb"] = 80
    with pytest.raises(ValidationError, match=r"gpu\.hbm_gb[\s\S]*Extra inputs are not permitted"):
        HardwareSpec.model_validate(data)


def test_hardware_si_properties():
    hw = a100()
    assert hw.gpu.hbm_bytes == 80 * 2**30
    assert hw.gpu.hbm_bytes_per_s == pytest.approx(2.039e12, rel=1e-12)
    assert hw.gpu.peak_flops_per_s("bf16") == 312e12
    assert hw.gpu.peak_flops_per_s("fp32") == 156e12  # TF32 tensor cores
    assert hw.node.nvlink_bytes_per_s == 300e9
    assert hw.network.nic_bytes_per_s == 25e9  # 200 Gb/s
    assert hw.memory.allocatable_bytes == 79.15 * 2**30  # what PyTorch can allocate on an A100-SXM4-80GB
    assert hw.memory.host_link_bytes_per_s == 27.5e9
    assert hw.gpus_per_node == 8


def test_section_specs_directly():
    tier = NetworkTier(name="leaf", max_nodes=20, latency_us=8.0, sources={"max_nodes": "x", "latency_us": "y"})
    assert tier.bandwidth_frac == 1.0  # a default needs no source
    with pytest.raises(ValidationError, match="missing: latency_us"):
        NetworkTier(name="leaf", max_nodes=20, latency_us=8.0, sources={"max_nodes": "x"})


# ----------------------------------------------------------------------------- plan specs


def test_sequence_parallel_with_tp1_is_silently_off():
    # Megatron arguments.py:1430-1439 turns SP off when t = 1
    plan = ParallelPlan(tp=1, sequence_parallel=True)
    assert plan.sequence_parallel is False
    assert plan.model_dump()["sequence_parallel"] is False
    assert ParallelPlan(tp=2, sequence_parallel=True).sequence_parallel is True


def test_plan_refuses_explicit_stages_with_an_accounted_split():
    with pytest.raises(ValidationError, match="either explicit first/last stage layers or an accounted stage_split"):
        ParallelPlan(pp=4, first_stage_layers=3, stage_split=StageSplit.EMBEDDING)


def test_plan_fields():
    with pytest.raises(ValidationError, match=r"tp[\s\S]*greater than 0"):
        ParallelPlan(tp=0)
    with pytest.raises(ValidationError, match="recompute"):
        ParallelPlan(recompute="partial")
    with pytest.raises(ValidationError, match=r"pipeline_parallel[\s\S]*Extra inputs"):
        ParallelPlan(pipeline_parallel=2)
    assert ParallelPlan(recompute="full").recompute is Recompute.FULL


def test_num_microbatches():
    # m = B/(b·d): GPT-3 run of Narayanan 2021, B = 1536, b = 1, d = 8 -> 192
    assert ParallelPlan(tp=8, pp=16, dp=8).num_microbatches(TrainingSpec(global_batch=1536, seq_len=2048)) == 192


def test_training_spec():
    assert TrainingSpec(global_batch=8, seq_len=2048).precision.value == "bf16"
    with pytest.raises(ValidationError, match="precision"):
        TrainingSpec(global_batch=8, seq_len=2048, precision="fp8x")
    with pytest.raises(ValidationError, match="optimizer"):
        TrainingSpec(global_batch=8, seq_len=2048, optimizer="sgd")
    with pytest.raises(ValidationError, match="attention_kernel"):
        PlanOptions(attention_kernel="xformers")
