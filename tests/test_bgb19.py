"""bgb19: the flex dispatcher on GB200/GB300 NVL72 (HybridEP, never DeepEP), and the bridge-yaml form over a base
recipe holding its sections as objects.

1. DeepEP on a multi-node NVLink domain: Megatron-Bridge's validate() refuses it on "NVIDIA GB200"/"NVIDIA GB300"
   (training/flex_dispatcher_backend.py, since v0.1.0rc2), DeepEP's normal kernels reach 8 NVLink peers of one host
   (deepseek-ai/DeepEP#392) and no published GB200/GB300 run uses it (planner/space/flex_backend.py has the
   sources). megaplan's flex dispatcher there is HybridEP unless given, a given DeepEP is refused with the reason
   in one line, and no Bridge export writes it.
2. Bridge's YAML overrides are merged into the base's objects (OmegaConf.merge): the GB200 Qwen3-30B-A3B recipe's
   bf16_with_mxfp8_mixed() kept reuse_grad_buf_for_mxfp8_param_ag true ("Reuse grad buffer only when keeping
   params in MXFP8") and its CommOverlapConfig delay_wgrad_compute true. The YAML writes each field of a section
   written whole, as the dotlist's nulled-then-written object holds it.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
import yaml

from planner.api import make_request
from planner.bridge.export import SECTION_DEFAULTS, bridge_export, class_defaults, dotlist, nested
from planner.bridge.recipes import section_fields
from planner.errors import PlannerError
from planner.presets import load_hardware
from planner.space import flex_backend
from planner.space.grid import PlanGrid
from planner.space.rules import rule_messages

from conftest import one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from bridge_hf_configs import hf_entries  # noqa: E402  (config.json from the presets)

QWEN = ["--model", "qwen3-30b-a3b", "--gpus", "8", "--tp", "1", "--pp", "1", "--ep", "8", "--distributed-optimizer"]
FLEX = ["--moe-token-dispatcher", "flex"]


def _req(hardware: str, backend: str | None = None, dispatcher: str = "flex"):
    return make_request(
        model="qwen3-30b-a3b", hardware=hardware, gpus=8, ep=8, micro_batch=2, distributed_optimizer=True,
        moe_token_dispatcher=dispatcher, options={"moe_flex_dispatcher_backend": backend},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("hardware", "mnnvl", "default"),
    [
        ("gb200-nvl72", True, "hybridep"),  # 72 GPUs over trays of 4
        ("gb300-nvl72", True, "hybridep"),
        ("dgx-b200-superpod", False, "deepep"),  # the NVLink domain is the node of 8
        ("dgx-h100-superpod", False, "deepep"),
    ],
)
def test_the_flex_backend_not_given_is_hybridep_on_a_multi_node_nvlink_domain(hardware, mnnvl, default):
    hw = load_hardware(hardware)
    assert hw.multi_node_nvlink is mnnvl
    assert _req(hardware).ctx.options.moe_flex_dispatcher_backend.value == default
    assert _req(hardware, "deepep").ctx.options.moe_flex_dispatcher_backend.value == "deepep"  # given: kept


def test_the_rule_refuses_deepep_on_gb200_and_gb300_only_with_the_flex_dispatcher():
    rule = flex_backend.RULE
    for hardware, refused in (("gb200-nvl72", True), ("gb300-nvl72", True), ("dgx-b200-superpod", False)):
        req = _req(hardware, "deepep")
        c = req.ctx
        said = rule_messages(PlanGrid.from_plans([req.plan]), c.model, c.training, c.options, 8, hardware=c.hardware)
        assert any(m.startswith(f"{rule}: DeepEP on {hardware} (an NVLink domain of 72") for m in said) is refused
        a2a = _req(hardware, "deepep", "alltoall")  # the backend of a plan without the flex dispatcher: no breach
        grid = PlanGrid.from_plans([a2a.plan])
        assert not rule_messages(grid, c.model, c.training, a2a.ctx.options, 8, hardware=c.hardware)
    # with no hardware (a caller that says so: the argument is required) the rule holds: it never binds on a guess
    assert not rule_messages(
        PlanGrid.from_plans([req.plan]),
        c.model,
        c.training,
        _req("gb200-nvl72", "deepep").ctx.options,
        8,
        hardware=None,
    )
    with pytest.raises(TypeError, match="hardware"):  # forgetting it is an error, not a rule silently skipped
        rule_messages(PlanGrid.from_plans([req.plan]), c.model, c.training, c.options, 8)


def test_explain_of_a_gb200_plan_given_deepep_names_the_reason_in_one_line():
    result = run_cli(["explain", *QWEN, *FLEX, "--moe-flex-dispatcher-backend", "deepep", "--hardware", "gb200-nvl72"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    for words in ("DeepEP on gb200-nvl72", "deepseek-ai/DeepEP#392", "flex_dispatcher_backend.py", "hybridep"):
        assert words in lines[0]


def test_a_megatron_lm_script_with_the_flex_dispatcher_on_gb200_runs_deepep_and_is_refused():
    """Megatron-LM's --moe-flex-dispatcher-backend defaults to deepep (arguments.py @ d98e8a64): a launch script that
    gives only --moe-token-dispatcher-type flex runs DeepEP on any cluster, so on GB200 it is refused with the reason
    (not read as the HybridEP megaplan's own flags would default to)."""
    script = "--num-layers 48 --hidden-size 2048 --num-attention-heads 32 --seq-length 4096 "
    script += "--max-position-embeddings 40960 --micro-batch-size 2 --global-batch-size 1024 --bf16 --num-experts 128 "
    script += "--moe-router-topk 8 --moe-ffn-hidden-size 768 --expert-model-parallel-size 8 --swiglu "
    script += "--moe-token-dispatcher-type flex --vocab-size 151936 --tokenizer-type NullTokenizer"
    result = run_cli(["explain", "--hardware", "gb200-nvl72", "--gpus", "8", "--megatron-args", script])
    line = one_line_error(result)
    assert line.startswith(f"megaplan: error: this plan would not run: {flex_backend.RULE}: DeepEP on gb200-nvl72")
    ok = run_cli(
        [
            "explain",
            "--hardware",
            "gb200-nvl72",
            "--gpus",
            "8",
            "--megatron-args",
            script + " --moe-flex-dispatcher-backend hybridep",
        ]
    )
    assert ok.exit_code == 0, ok.output


def test_search_given_deepep_on_gb300_lists_no_flex_plan_and_says_why():
    args = ["search", "--model", "qwen3-30b-a3b", "--gpus", "8", "--hardware", "gb300-nvl72", "--json"]
    result = run_cli([*args, "--moe-flex-dispatcher-backend", "deepep", *FLEX])
    assert result.exit_code == 2  # flex pinned: every plan breaks the rule
    assert f"rejected by: {flex_backend.RULE}" in result.stderr
    assert "deepseek-ai/DeepEP#392" in result.stderr


def test_search_on_gb200_offers_the_flex_dispatcher_as_hybridep():
    args = ["search", "--model", "qwen3-30b-a3b", "--gpus", "8", "--hardware", "gb200-nvl72", "--top", "3", "--json"]
    result = run_cli(args)
    assert result.exit_code == 0, result.output
    plans = json.loads(result.stdout)["plans"]
    flex = [p for p in plans if p["parallel"]["moe_token_dispatcher"] == "flex"]
    assert flex and all(p["options"]["moe_flex_dispatcher_backend"] == "hybridep" for p in flex)
    # the hardware's default is not written into the plans' commands (a command without it gets it again)
    assert all("--moe-flex-dispatcher-backend" not in p["commands"]["explain"] for p in plans)


def test_no_published_gb200_or_gb300_run_uses_deepep():
    """presets/reference/moe_runs.csv: every flex row on GB200 (28) and GB300 (33) runs HybridEP."""
    with open(ROOT / "presets" / "reference" / "moe_runs.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["hardware"] in ("gb200-nvl72", "gb300-nvl72")]
    flex = [r for r in rows if r["dispatcher"] == "flex"]
    assert len(flex) == 61 and {r["flex_backend"] for r in flex} == {"hybridep"}


@pytest.mark.parametrize("hardware", ["gb200-nvl72", "gb300-nvl72"])
def test_no_bridge_export_writes_deepep_on_gb200_or_gb300(hardware):
    """Each Bridge form goes through bridge_export: refused there, named with Bridge's own message."""
    with pytest.raises(PlannerError) as err:
        bridge_export(_req(hardware, "deepep"), "v0.6.0")
    said = str(err.value)
    assert said.startswith(f"--moe-flex-dispatcher-backend deepep on {hardware}: Megatron-Bridge v0.6.0's validate()")
    assert "DeepEP is supported for Ampere, Hopper, and Blackwell (B200/B300) GPUs" in said
    assert bridge_export(_req(hardware), "v0.6.0").fields["model.moe_flex_dispatcher_backend"] == "hybridep"
    # Bridge allows DeepEP on B200 (a device named "NVIDIA B200"): written
    assert bridge_export(_req("dgx-b200-superpod", "deepep"), "v0.6.0").fields["model.moe_flex_dispatcher_backend"] == (
        "deepep"
    )


@pytest.mark.parametrize("fmt", ["bridge", "bridge-yaml", "bridge-python"])
def test_the_cli_refuses_every_bridge_form_of_deepep_on_gb200(fmt):
    args = ["export", *QWEN, *FLEX, "--moe-flex-dispatcher-backend", "deepep", "--hardware", "gb200-nvl72"]
    result = run_cli([*args, "--format", fmt])
    assert result.exit_code == 2 and "DeepEP on gb200-nvl72" in result.stderr and not result.stdout


# --- 2. the YAML form over a base holding objects


def _gb200_export(*extra: str):
    req = make_request(
        model="qwen3-30b-a3b", hardware="gb200-nvl72", gpus=8, ep=8, micro_batch=2, distributed_optimizer=True,
        moe_token_dispatcher="alltoall", overlap_moe_expert_parallel_comm=True,
    )  # fmt: skip
    return bridge_export(req, "v0.6.0")


def test_the_yaml_writes_the_base_object_s_other_fields_off():
    """The GB200 recipe's bf16_with_mxfp8_mixed() sets reuse_grad_buf_for_mxfp8_param_ag and FP8 attention on, its
    CommOverlapConfig delay_wgrad_compute on: a BF16 plan without them writes each off (the class's default)."""
    exp = _gb200_export()
    assert exp.whole == ("comm_overlap", "mixed_precision")  # the base's kinds are not dumped: written whole
    doc = yaml.safe_load(yaml.safe_dump(nested(exp)))
    mp, co = doc["mixed_precision"], doc["comm_overlap"]
    assert mp["reuse_grad_buf_for_mxfp8_param_ag"] is False and mp["fp8_dot_product_attention"] is False
    assert mp["fp8"] is None and mp["bf16"] is True and mp["fp8_recipe"] == "delayed"  # the plan's own values
    assert mp["params_dtype"] == {"_target_": "torch.bfloat16", "_call_": False}
    assert co["delay_wgrad_compute"] is None and co["overlap_moe_expert_parallel_comm"] is True
    assert co["tp_comm_overlap_cfg"] is None and co["tp_comm_bootstrap_backend"] == "nccl"
    # every field of both classes at v0.6.0, besides _target_
    for section in ("mixed_precision", "comm_overlap"):
        assert set(doc[section]) - {"_target_"} == section_fields("v0.6.0")[section]


def test_the_yaml_and_the_dotlist_write_one_object():
    """The dotlist nulls the section and writes a fresh object (the class's defaults for the rest): the YAML's
    fields are the dotlist's, and its extra ones the class's defaults."""
    exp = _gb200_export()
    lines = dotlist(exp)
    assert "mixed_precision=null" in lines and "comm_overlap=null" in lines
    line = next(ln for ln in lines if ln.startswith("mixed_precision={"))
    assert "reuse_grad_buf_for_mxfp8_param_ag" not in line  # the fresh object's default: false
    doc = nested(exp)
    written = {k.split(".", 1)[1]: v for k, v in exp.fields.items() if k.startswith("mixed_precision.")}
    extra = {k: v for k, v in doc["mixed_precision"].items() if k not in written and k != "_target_"}
    assert extra == {k: v for k, v in SECTION_DEFAULTS["mixed_precision"].items() if k not in written}


def test_an_mxfp8_plan_keeps_its_buffer_reuse_in_the_yaml():
    req = make_request(
        model="qwen3-30b-a3b", hardware="gb200-nvl72", gpus=8, ep=8, micro_batch=2, distributed_optimizer=True,
        moe_token_dispatcher="flex",
        options={"fp8": "e4m3", "fp8_recipe": "mxfp8", "fp8_param_gather": True},
    )  # fmt: skip
    mp = nested(bridge_export(req, "v0.6.0"))["mixed_precision"]
    assert (mp["fp8_recipe"], mp["fp8_param_gather"], mp["reuse_grad_buf_for_mxfp8_param_ag"]) == ("mxfp8", True, True)


def test_a_base_holding_a_preset_name_gets_no_defaults():
    """qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config @ v0.6.0 holds mixed_precision as 'bf16_mixed', comm_overlap
    None: OmegaConf replaces a string or null node by the mapping, so the YAML is as before (the plan's fields)."""
    req = make_request(
        model="qwen3-30b-a3b", hardware="dgx-h100-superpod", gpus=8, ep=8, micro_batch=1, distributed_optimizer=True,
        moe_token_dispatcher="alltoall",
    )  # fmt: skip
    doc = nested(bridge_export(req, "v0.6.0"))
    assert (
        "hysteresis" not in doc["mixed_precision"] and "reuse_grad_buf_for_mxfp8_param_ag" not in doc["mixed_precision"]
    )
    assert "delay_wgrad_compute" not in doc["comm_overlap"]


def test_class_defaults_keep_the_tag_s_own_fields():
    """v0.2.1's MixedPrecisionConfig has no fp4_param / fp4_param_gather (training/mixed_precision.py @ 1c43b3928)."""
    old, new = class_defaults("v0.2.1", "mixed_precision"), class_defaults("v0.6.0", "mixed_precision")
    assert set(new) - set(old) == {"fp4_param", "fp4_param_gather"}
    assert old["initial_loss_scale"] == 2**32 and old["fp8_recipe"] == "tensorwise"
    for tag in ("v0.2.1", "v0.6.0"):  # the table covers every field the tags' classes have (tp_comm_overlap: none)
        for section in SECTION_DEFAULTS:
            assert section_fields(tag)[section] - set(class_defaults(tag, section)) <= {"tp_comm_overlap"}


# --- Bridge's own code, where its environment is built (tests/test_bridge_check.py says how)


def test_bridge_validates_both_forms_on_a_gb200_and_refuses_deepep(tmp_path, monkeypatch):
    """Bridge v0.6.0's GB200 Qwen3-30B-A3B library recipe on a stand-in device named "NVIDIA GB200" (the
    bridge_check stubs' BRIDGE_CHECK_GPU): the YAML and the dotlist of the default plan (HybridEP) both pass
    runtime_config_update and validate() with the same fields; DeepEP written by hand is refused."""
    from test_bridge_check import env_for, run_bridge_batch

    env = env_for("v0.6.0")
    if env is None:
        pytest.skip("no Megatron-Bridge v0.6.0 environment (MEGAPLAN_BRIDGE_PYTHON_/PATH_ unset)")
    monkeypatch.setenv("BRIDGE_CHECK_GPU", "NVIDIA GB200,10,0")
    hf = hf_entries("qwen3-30b-a3b")["Qwen/Qwen3-30B-A3B"]
    hf = {"Qwen/Qwen3-30B-A3B": hf, "Qwen/Qwen3-30B-A3B@ad44e777bcd18fa416d9da3bd8f70d33ebb85d39": hf}
    recipe = "megatron.bridge.recipes.qwen.gb200.qwen3_moe:qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_functional_config"
    fields = ["mixed_precision.reuse_grad_buf_for_mxfp8_param_ag", "comm_overlap.delay_wgrad_compute"]
    fields += ["model.moe_flex_dispatcher_backend", "mixed_precision.fp8_dot_product_attention"]
    args = [*QWEN, *FLEX, "--hardware", "gb200-nvl72"]
    text = {}
    for fmt in ("bridge", "bridge-yaml"):
        result = run_cli(["export", *args, "--format", fmt])
        assert result.exit_code == 0, result.output
        text[fmt] = result.stdout
    dot = [ln for ln in text["bridge"].splitlines() if ln and not ln.startswith("#")]
    deepep = [ln.replace("backend=hybridep", "backend=deepep") for ln in dot]
    base = {"recipe": recipe, "world_size": 8, "fields": fields, "hf": hf}
    cases = [{**base, "yaml": text["bridge-yaml"]}, {**base, "overrides": dot}, {**base, "overrides": deepep}]
    yml, dots, deep = run_bridge_batch(cases, tmp_path / "cases.json", *env)
    if "NVIDIA driver" in str(yml.get("error")):
        pytest.skip("the bridge_check stubs have no stand-in device (BRIDGE_CHECK_GPU): bcheck18.md")
    assert yml["ok"], yml["error"]
    assert dots["ok"], dots["error"]
    assert yml["fields"] == dots["fields"]
    assert yml["fields"]["mixed_precision.reuse_grad_buf_for_mxfp8_param_ag"] is False
    assert yml["fields"]["model.moe_flex_dispatcher_backend"] == "hybridep"
    assert not deep["ok"] and "DeepEP is supported for Ampere, Hopper, and Blackwell (B200/B300)" in deep["error"]
