"""A Bridge config prices the userbuffer config Bridge runs, and the Bridge export runs the one it priced.

Megatron-Bridge's recipes name a TransformerLayerTPOverlapCfg preset (comm_overlap.py); CommOverlapConfig.setup
hands it to Transformer Engine as a dict without its None entries, and with the field None runs TE's defaults
("No overlap config provided", comm_overlap.py @ v0.6.0). The estimate of a Bridge recipe read back is the
estimate of that preset; an export whose estimate priced TE's defaults nulls the base recipe's preset (an
override can null the object, not build one), and the Python recipe sets the preset it priced."""

import pytest
import yaml

from planner.api import PlanRequest, explain, make_request
from planner.bridge.export import bridge_export, dotlist, dotlist_text, priced_userbuffers, python_text, yaml_text
from planner.bridge.importer import read_bridge_source, request_from_bridge
from planner.bridge.runtime import userbuffer_preset
from planner.hardware.userbuffers import bridge_preset_named, load_config_file, ops_from_bridge_repr, preset_like
from planner.megatron.export import megatron_argv, unwritten_settings
from planner.plan_file import request_from_fields
from tests.test_bridge_roundtrip import _read_back_dotlist

from conftest import read_bridge_export

PRESET = "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"
RECIPE = "llama3_70b_pretrain_32gpu_h100_bf16_config"  # v0.6.0: comm_overlap names PRESET

# Bridge's TransformerLayerTPOverlapCfg printed as its dataclass repr (the pattern a dumped recipe holds), written
# here with the values comm_overlap.py gives PRESET: bulk dgrad/wgrad on 4/24/2/4 SMs, ring exchanges, and the
# two reduce-scatters pipelined on 24 and 16 SMs with the margin.
REPR = (
    "TransformerLayerTPOverlapCfg("
    "qkv_dgrad=BulkOverlapCfg(num_sm=4, cga_size=2, set_sm_margin=False, method='bulk'), "
    "qkv_wgrad=BulkOverlapCfg(num_sm=24, cga_size=2, set_sm_margin=False, method='bulk'), "
    "fc1_dgrad=BulkOverlapCfg(num_sm=2, cga_size=2, set_sm_margin=False, method='bulk'), "
    "fc1_wgrad=BulkOverlapCfg(num_sm=4, cga_size=2, set_sm_margin=False, method='bulk'), "
    "qkv_fprop=RingExchangeOverlapCfg(aggregate=False, method='ring_exchange', num_sm=1, cga_size=1, "
    "set_sm_margin=False, fp8_buf=False, atomic_gemm=False), "
    "proj_dgrad=RingExchangeOverlapCfg(aggregate=False, method='ring_exchange', num_sm=1), "
    "fc1_fprop=RingExchangeOverlapCfg(), fc2_dgrad=RingExchangeOverlapCfg(), "
    "proj_fprop=PipelineOverlapCfg(num_sm=24, cga_size=2, num_splits=4, set_sm_margin=True, fp8_buf=[False], "
    "atomic_gemm=False, method='pipeline'), "
    "fc2_fprop=PipelineOverlapCfg(num_sm=16, cga_size=2, num_splits=4, set_sm_margin=True, method='pipeline'), "
    "proj_wgrad=None)"
)


def test_a_printed_preset_is_read_as_that_preset_and_a_changed_one_is_not():
    ops = ops_from_bridge_repr(REPR)
    assert ops["proj_fprop"] == {
        "num_sm": 24,
        "cga_size": 2,
        "num_splits": 4,
        "set_sm_margin": True,
        "fp8_buf": [False],
        "atomic_gemm": False,
        "method": "pipeline",
    }
    assert "proj_wgrad" not in ops and ops["fc1_fprop"] == {}  # None left out; a default RingExchangeOverlapCfg()
    assert preset_like(load_config_file(PRESET).model_copy(update={"name": "x"})).name == PRESET
    assert userbuffer_preset({"comm_overlap.tp_comm_overlap_cfg": REPR})[0] == PRESET
    changed = REPR.replace("num_sm=16, cga_size=2, num_splits=4", "num_sm=8, cga_size=2, num_splits=4")
    name, notes = userbuffer_preset({"comm_overlap.tp_comm_overlap_cfg": changed})
    assert name is None and "none of Megatron-Bridge's userbuffer presets" in notes[0]
    nested = {f"comm_overlap.tp_comm_overlap_cfg.{op}.{k}": v for op, kv in ops.items() for k, v in kv.items()}
    assert userbuffer_preset(nested)[0] == PRESET  # a saved ConfigContainer YAML nests the fields
    with pytest.raises(ValueError, match="not a TransformerLayerTPOverlapCfg"):
        ops_from_bridge_repr("userbuffers(")


def test_the_recipe_is_priced_with_its_own_preset_as_the_flag_names_it():
    """explain --bridge-recipe of the v0.6.0 Llama 3 70B recipe prices PRESET, exactly as --tp-comm-overlap-cfg
    PRESET does on the same plan; TE's defaults (the SM margin on all six pipelined and bulk overlaps, 16 SMs
    each) take longer."""
    read = request_from_bridge({}, tag="v0.6.0", recipe=RECIPE)
    req = read.request
    assert req.ctx.options.tp_comm_overlap and req.ctx.options.tp_comm_overlap_cfg.name == "Megatron-Bridge " + PRESET
    assert any(PRESET in n for n in read.notes)
    by_name = req.ctx.options.model_copy(update={"tp_comm_overlap_cfg": load_config_file(PRESET)})
    te = req.ctx.options.model_copy(update={"tp_comm_overlap_cfg": None})
    t_recipe = _seconds(req)
    t_named = _seconds(_with(req, by_name))
    t_te = _seconds(_with(req, te))
    assert t_recipe == t_named and t_recipe < t_te
    assert bridge_preset_named(PRESET).tp == 4 and req.plan.tp == 4


def _seconds(req: PlanRequest) -> float:
    return explain(req, suggest=False)["estimate"]["iteration_s"]


def _with(req: PlanRequest, options) -> PlanRequest:
    c = req.ctx
    return PlanRequest(c.__class__(c.model, c.hardware, c.training, options), req.plan, req.gpus)


def test_an_export_priced_at_te_defaults_nulls_the_base_preset_and_reads_back_the_same():
    req = request_from_bridge({}, tag="v0.6.0", recipe=RECIPE).request
    te = _with(req, req.ctx.options.model_copy(update={"tp_comm_overlap_cfg": None}))
    exp = bridge_export(te, "v0.6.0", RECIPE)
    assert "comm_overlap.tp_comm_overlap_cfg=null" in dotlist(exp)
    assert any(f"Bridge's {PRESET} fits this plan" in n for n in exp.notes)
    assert "tp_comm_overlap_cfg=None" in python_text(exp)
    back = _read_back_dotlist(dotlist_text(exp))
    assert back.ctx.options.tp_comm_overlap_cfg is None
    assert _seconds(back) == _seconds(te)


def test_an_export_priced_at_the_preset_keeps_it_and_the_python_recipe_sets_it():
    req = request_from_bridge({}, tag="v0.6.0", recipe=RECIPE).request
    exp = bridge_export(req, "v0.6.0", RECIPE)
    assert not any("tp_comm_overlap_cfg" in line for line in dotlist(exp))  # the base recipe's preset stays
    assert f"tp_comm_overlap_cfg={PRESET})" in python_text(exp)
    assert f"from megatron.bridge.training.comm_overlap import {PRESET}" in python_text(exp)
    assert _seconds(_read_back_dotlist(dotlist_text(exp))) == _seconds(req)
    # Megatron-LM reads userbuffers only from a file: no flag, and the option that restores it is named
    assert "--tp-comm-overlap-cfg" not in megatron_argv(req)
    unwritten = [(opts, "YAML file" in why) for opts, why in unwritten_settings(req)]
    assert (["--tp-comm-overlap-cfg", PRESET], True) in unwritten


PERF = f"""
from megatron.bridge.perf_recipes.llama.common import llama3_70b_pretrain_config, {PRESET}
from megatron.bridge.training.comm_overlap import userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192


def llama3_70b_pretrain_64gpu_h100_bf16_config():
    cfg = llama3_70b_pretrain_config()
    cfg.model.tensor_model_parallel_size = 4
    cfg.model.pipeline_model_parallel_size = 4
    cfg.model.context_parallel_size = 2
    cfg.model.virtual_pipeline_model_parallel_size = 5
    cfg.model.sequence_parallel = True
    cfg.comm_overlap.tp_comm_overlap_cfg = {PRESET}
    return cfg


def llama3_70b_pretrain_64gpu_h100_fp8cs_config():
    cfg = llama3_70b_pretrain_64gpu_h100_bf16_config()
    cfg.comm_overlap.tp_comm_overlap_cfg = userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192
    return cfg
"""


def test_a_performance_recipe_that_names_a_preset_is_priced_with_it(tmp_path):
    """The pattern of Bridge's perf_recipes/llama/h100/llama3.py (written here): the preset imported through the
    family module and assigned to cfg.comm_overlap.tp_comm_overlap_cfg; a later assignment wins."""
    root = tmp_path / "src" / "megatron" / "bridge" / "perf_recipes" / "llama" / "h100"
    root.mkdir(parents=True)
    path = root / "llama3.py"
    path.write_text(PERF)
    for name, preset in (
        ("llama3_70b_pretrain_64gpu_h100_bf16_config", PRESET),
        ("llama3_70b_pretrain_64gpu_h100_fp8cs_config", "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192"),
    ):
        read, _ = read_bridge_source({"bridge_config": f"{path}#{name}"})
        req = request_from_fields(read.data)
        assert req.ctx.options.tp_comm_overlap_cfg.name == "Megatron-Bridge " + preset


def test_an_unknown_preset_name_is_one_line_naming_what_is_allowed():
    with pytest.raises(ValueError, match="allowed: a YAML file, 'bridge', or a Megatron-Bridge preset name"):
        load_config_file("userbuffers_bf16_h100_h8192_tp4_mbs1")


B200_PRESET = "userbuffers_bf16_b200_h8192_tp2_mbs1_seqlen8192"
UB_REF = "{_target_:megatron.bridge.training.comm_overlap.%s,_call_:false}"


@pytest.mark.parametrize("hardware", ["dgx-b200-superpod", "gb200-nvl72"])
def test_a_b200_export_builds_the_b200_preset_it_priced_in_every_form(hardware):
    """bridge17: Bridge has no B200 library recipe, so a B200/GB200 export starts from the H100 recipe, whose
    comm_overlap holds PRESET (H100, TP4); the estimate of a TP2 plan with --tp-comm-overlap-cfg bridge prices
    B200_PRESET. The dotlist and YAML used to keep the base's PRESET (priced 56.04 s against 54.30 s on B200). The
    dotlist nulls it and builds B200_PRESET by its _target_; the YAML writes it whole (OmegaConf.merge would keep the
    base's keys); both read back as B200_PRESET at the estimate's time. Checked with Bridge's own code:
    tests/test_bridge_check.py (both tags)."""
    req = make_request(
        model="llama3-70b", hardware=hardware, gpus=64, tp=2, pp=4, sequence_parallel=True,
        distributed_optimizer=True, options={"tp_comm_overlap": True, "tp_comm_overlap_cfg": "bridge"},
    )  # fmt: skip
    exp = bridge_export(req, "v0.6.0")
    assert exp.recipe == RECIPE and exp.userbuffer == B200_PRESET
    lines = dotlist(exp)
    at = lines.index("comm_overlap.tp_comm_overlap_cfg=null")
    assert lines[at + 1] == "comm_overlap.tp_comm_overlap_cfg=" + UB_REF % B200_PRESET
    cfg = yaml.safe_load(yaml_text(exp))["comm_overlap"]["tp_comm_overlap_cfg"]
    # Bridge's comm_overlap.py: proj_fprop=PipelineOverlapCfg(num_sm=32, cga_size=2, num_splits=4, set_sm_margin=True)
    # (fp8_buf (False,), atomic_gemm False, method 'pipeline': the class's defaults) and qkv_dgrad=BulkOverlapCfg(
    # num_sm=16, cga_size=2, set_sm_margin=False); qkv_fprop=RingExchangeOverlapCfg(aggregate=False), defaults else
    assert cfg["proj_fprop"] == {
        "_target_": "megatron.bridge.training.comm_overlap.PipelineOverlapCfg",
        **{"num_sm": 32, "cga_size": 2, "num_splits": 4, "set_sm_margin": True, "fp8_buf": [False]},
        **{"atomic_gemm": False, "method": "pipeline"},
    }
    assert cfg["qkv_dgrad"] == {
        "_target_": "megatron.bridge.training.comm_overlap.BulkOverlapCfg",
        **{"num_sm": 16, "cga_size": 2, "set_sm_margin": False, "method": "bulk"},
    }
    assert cfg["qkv_fprop"]["cga_size"] == 1 and cfg["qkv_fprop"]["aggregate"] is False
    assert f"tp_comm_overlap_cfg={B200_PRESET})" in python_text(exp)
    for text in (dotlist_text(exp), yaml_text(exp)):
        back = _read_back(text)
        assert back.ctx.options.tp_comm_overlap_cfg.name == "Megatron-Bridge " + B200_PRESET
        assert _seconds(back) == _seconds(req)


def test_a_preset_over_a_recipe_without_comm_overlap_is_built_inside_the_whole_section():
    """The Llama 3 8B recipe has no comm_overlap object: the section is written whole, the preset inside it."""
    req = make_request(
        model="llama3-8b", hardware="dgx-h100-superpod", gpus=16, tp=2, sequence_parallel=True,
        options={"tp_comm_overlap": True, "tp_comm_overlap_cfg": PRESET},
    )  # fmt: skip
    exp = bridge_export(req, "v0.6.0")
    whole = next(line for line in dotlist(exp) if line.startswith("comm_overlap="))
    assert "tp_comm_overlap_cfg:" + UB_REF % PRESET in whole and exp.ub_object is None
    for text in (dotlist_text(exp), yaml_text(exp)):
        assert _read_back(text).ctx.options.tp_comm_overlap_cfg.name == "Megatron-Bridge " + PRESET


def test_the_yaml_says_where_bridge_v021_cannot_merge_another_overlap_class():
    """FP8 on H100 prices userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192, whose two reduce-scatters are ring exchanges
    where the base's PRESET pipelines them: OmegaConf.merge keeps PipelineOverlapCfg's num_splits, which v0.2.1's
    instantiate cannot give a RingExchangeOverlapCfg, and drops the GEMM's config (Bridge's own code, both tags:
    tests/test_bridge_check.py); v0.6.0 drops the key and builds it."""
    options = {"tp_comm_overlap": True, "tp_comm_overlap_cfg": "bridge", "fp8": "hybrid", "fp8_recipe": "tensorwise"}
    req = make_request(
        model="llama3-70b", hardware="dgx-h100-superpod", gpus=64, tp=4, pp=4, vpp=5, cp=2, sequence_parallel=True,
        distributed_optimizer=True, options=options,
    )  # fmt: skip
    assert priced_userbuffers(req) == "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192"
    said = [n for n in bridge_export(req, "v0.2.1").notes if n.startswith("the YAML at v0.2.1")]
    assert said and "for proj_fprop, fc2_fprop" in said[0]
    assert not [n for n in bridge_export(req, "v0.6.0").notes if n.startswith("the YAML at v0.2.1")]


def _read_back(text: str) -> PlanRequest:
    return read_bridge_export(text).request
