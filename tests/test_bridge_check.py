"""The Bridge export checked by Megatron-Bridge's own code, as Megatron-LM's parser checks the flag export.

For each plan of test_bridge_roundtrip, the dotlist written for a tag is applied to the base recipe by Bridge's
own override code, then Bridge's runtime_config_update and validate() run (on CPU, GPU packages stubbed);
the fields Bridge ends with, read back through the mapping table, must give the plan itself, and with TP overlap on
the userbuffer config Bridge hands Transformer Engine (comm_overlap.tp_comm_overlap_cfg after
CommOverlapConfig.setup; None: TE's defaults) must be the one the estimate priced.

Needs two environments outside the project (scripts/bridge_check_batch.py says how); skipped unless
MEGAPLAN_BRIDGE_PYTHON_V0_6_0 / MEGAPLAN_BRIDGE_PATH_V0_6_0 (and _V0_2_1) name an interpreter and a
PYTHONPATH holding Bridge's src/ at that tag and its Megatron-Core, and BRIDGE_STUBS_DIR the stubs.
Recipes that read a model's config.json from the Hugging Face Hub get one written here from the model
preset's published values (the model cards)."""

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from planner.bridge.export import UB_OPS, bridge_export, dotlist, priced_userbuffers, ub_object, yaml_text
from planner.bridge.importer import FLEX_SMS_FIELDS, LOW_PRECISION_FIELDS, request_from_bridge
from planner.bridge.runtime import UB_FIELD, UB_MODULE, userbuffer_preset
from planner.bridge.table import RECIPES, ROWS
from planner.hardware.userbuffers import bridge_presets, load_config_file, ops_from_bridge_repr
from tests.test_bridge_roundtrip import LAYOUT_PLANS, PLANS, _request

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from bridge_hf_configs import hf_entries  # noqa: E402  (config.json from the presets: the model cards)


def env_for(tag: str) -> tuple[str, str] | None:
    key = tag.upper().replace(".", "_")
    python, path = os.environ.get(f"MEGAPLAN_BRIDGE_PYTHON_{key}"), os.environ.get(f"MEGAPLAN_BRIDGE_PATH_{key}")
    return (python, path) if python and path else None


# Plans the Bridge check runs beside test_bridge_roundtrip's: userbuffers priced at the preset the base recipe names
# (kept: no override) and at TE's defaults over it (comm_overlap.tp_comm_overlap_cfg=null)
UB_PRESET = "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"  # v0.2.1's and v0.6.0's Llama 3 70B recipes name it
_TP4 = PLANS["llama3-70b tp4 pp4 vpp5 cp2"]
UB_PLANS = {
    "llama3-70b tp4 cp2 Bridge's preset": {
        **_TP4,
        "options": {**_TP4["options"], "tp_comm_overlap": True, "tp_comm_overlap_cfg": UB_PRESET},
    },
    "llama3-70b tp4 cp2 TE default userbuffers": {**_TP4, "options": {**_TP4["options"], "tp_comm_overlap": True}},
}
# bridge17: plans priced at a preset the base recipe (an H100 one: Bridge has no B200 library recipe megaplan uses)
# does not hold: the B200 preset on B200 and GB200 (same overlap classes as the base's), the FP8 H100 preset (ring
# exchanges where the base pipelines the two reduce-scatters). Each is checked as the dotlist and as the YAML.
_B200_TP2 = dict(model="llama3-70b", gpus=64, tp=2, pp=4, sequence_parallel=True, distributed_optimizer=True)
_BRIDGE_UB = {"tp_comm_overlap": True, "tp_comm_overlap_cfg": "bridge"}
UB_PLANS |= {
    "llama3-70b b200 tp2 Bridge's b200 preset": {**_B200_TP2, "hardware": "dgx-b200-superpod", "options": _BRIDGE_UB},
    "llama3-70b gb200 tp2 Bridge's b200 preset": {**_B200_TP2, "hardware": "gb200-nvl72", "options": _BRIDGE_UB},
    "llama3-70b h100 tp4 fp8-cs Bridge's fp8 preset": {
        **_TP4,
        "options": {**_TP4["options"], **_BRIDGE_UB, "fp8": "hybrid", "fp8_recipe": "tensorwise"},
    },
}
ALL = {**PLANS, **UB_PLANS, **LAYOUT_PLANS}
YAML = " [yaml]"  # the same plan's override YAML (OmegaConf.merge) rather than its dotlist (Hydra overrides)
CHECKED = sorted(ALL) + sorted(name + YAML for name in UB_PLANS)


def _plan(name: str) -> dict:
    return ALL[name.removesuffix(YAML)]


FP8_ATTENTION = "mixed_precision.fp8_dot_product_attention"  # no Megatron-LM flag: not in the table, read beside it
# the table's fields, and the ones read beside it: low precision (BF16 end layers, NVFP4, the FP8 output layer) and
# the flex dispatcher's SMs (bcheck18: without them hyb218's "flex hybridep sms" plan read back 24 -> None, 32 -> 108)
READ_PATHS = sorted(
    {r.read_at(t) for r in ROWS for t in ("v0.2.1", "v0.6.0")}
    | {"dataset.seq_length"}
    | set(LOW_PRECISION_FIELDS)
    | set(FLEX_SMS_FIELDS)
)


@cache
def bridge_results(tag: str) -> dict:
    python, path = env_for(tag)
    cases, names = [], []
    for name in CHECKED:
        req = _request(_plan(name))
        try:
            exp = bridge_export(req, tag)
        except Exception:
            continue
        form = {"yaml": yaml_text(exp)} if name.endswith(YAML) else {"overrides": dotlist(exp)}
        module = RECIPES[tag][exp.recipe][0]
        preset = req.ctx.model.name
        hf = hf_entries(preset)
        fields = READ_PATHS + ["model.num_moe_experts", "dataset.sequence_length", UB_FIELD, FP8_ATTENTION]
        cases.append({"recipe": f"{module}:{exp.recipe}", "world_size": req.gpus, **form, "fields": fields, "hf": hf})
        names.append(name)
    return _run_batch(cases, names, f"megaplan-bridge-{tag}.json", python, path)


@pytest.mark.parametrize("tag", ["v0.2.1", "v0.6.0"])
@pytest.mark.parametrize("name", CHECKED)
def test_bridge_runs_the_export_as_the_plan(name, tag):
    if env_for(tag) is None:
        pytest.skip(f"no Megatron-Bridge {tag} environment (MEGAPLAN_BRIDGE_PYTHON_/PATH_ unset)")
    results = bridge_results(tag)
    if name not in results:
        pytest.skip(f"{name}: the export refuses {tag}")
    result = results[name]
    if result["stage"] == "recipe":  # the base recipe itself cannot be built here (offline, CPU): nothing checked
        pytest.skip(f"Bridge {tag} cannot build the base recipe on this machine: {result['error'][:200]}")
    assert result["ok"], f"Bridge refused the export of {name} at {tag}: {result['error']}"
    req = _request(_plan(name))
    fields = {k: v for k, v in result["fields"].items() if v != "<absent>"}
    ran_ub = fields.pop(UB_FIELD, None)  # after runtime_config_update: checked below, not a field to import
    env = bridge_export(req, tag).env  # what the launch line sets (the allocator), not a Bridge field
    back = request_from_bridge(
        fields, tag=tag, gpus=req.gpus, hardware=req.ctx.hardware.name, model=req.ctx.model.name, env=env
    )
    assert back.request.plan == req.plan
    priced_cfg = {"tp_comm_overlap_cfg": req.ctx.options.tp_comm_overlap_cfg}
    assert back.request.ctx.options.model_copy(update=priced_cfg) == req.ctx.options
    assert fields["data_parallel_size"] == req.plan.dp
    if fields.get("model.tp_comm_overlap"):  # userbuffers run: CommOverlapConfig.setup hands TE this config
        dropped = [n for n in bridge_export(req, tag).notes if n.startswith("the YAML at v0.2.1 runs")]
        if name.endswith(YAML) and dropped:  # the export says the YAML cannot build it here: what it says is so
            ops = ops_from_bridge_repr(ran_ub)
            named = dropped[0].split("defaults for ")[1].split(" (")[0].split(", ")
            assert named and not set(named) & set(ops) and len(ops) == 10 - len(named), (named, sorted(ops))
            return
        ran = userbuffer_preset({UB_FIELD: ran_ub})[0] if ran_ub is not None else None  # None: TE's defaults
        priced = priced_userbuffers(req)
        ops = [load_config_file(n).ops if n else None for n in (ran, priced)]  # two presets may hold the same values
        assert ops[0] == ops[1], f"Bridge runs {ran or 'TE defaults'}, priced {priced or 'TE defaults'}"


# Every Bridge userbuffer preset megaplan knows, written whole as the export's YAML writes it (ub_object: each GEMM's
# class and every field, from presets/userbuffers/bridge.yaml and the classes' defaults), against Bridge's own
# object of that name (built by {_target_: comm_overlap.<preset>, _call_: false}): what TE is handed must be equal.
UB_BASE = {
    "v0.2.1": "llama3_8b_pretrain_config",
    "v0.6.0": "llama3_8b_pretrain_2gpu_h100_bf16_config",
}  # no comm_overlap


@cache
def preset_results(tag: str) -> dict:
    import yaml

    python, path = env_for(tag)
    module, base = RECIPES[tag][UB_BASE[tag]][0], UB_BASE[tag]
    co = {"_target_": "megatron.bridge.training.comm_overlap.CommOverlapConfig", "tp_comm_overlap": True}
    model = {"tensor_model_parallel_size": 2, "sequence_parallel": True}
    cases, names = [], []
    for preset in bridge_presets():
        for form, cfg in (("ref", {"_target_": f"{UB_MODULE}.{preset.name}", "_call_": False}), ("whole", None)):
            text = yaml.safe_dump(
                {"model": model, "comm_overlap": {**co, "tp_comm_overlap_cfg": cfg or ub_object(preset.name)}}
            )
            cases.append(
                {
                    "recipe": f"{module}:{base}",
                    "world_size": 8,
                    "yaml": text,
                    "fields": ["model.tp_comm_overlap_cfg"],
                    "hf": hf_entries("llama3-8b"),
                }
            )
            names.append((preset.name, form))
    return _run_batch(cases, names, f"megaplan-bridge-presets-{tag}.json", python, path)


def _handed(result) -> dict:
    """model.tp_comm_overlap_cfg as TE gets it (printed dict), tuples as lists: Bridge's PipelineOverlapCfg default
    fp8_buf=(False,) becomes [False] through any OmegaConf round trip, the bare recipe's included."""
    import ast

    assert result["ok"], result["error"]
    return json.loads(json.dumps(ast.literal_eval(result["fields"]["model.tp_comm_overlap_cfg"])))


@pytest.mark.parametrize("tag", ["v0.2.1", "v0.6.0"])
def test_every_preset_written_whole_is_bridges_own(tag):
    if env_for(tag) is None:
        pytest.skip(f"no Megatron-Bridge {tag} environment (MEGAPLAN_BRIDGE_PYTHON_/PATH_ unset)")
    results = preset_results(tag)
    for preset in bridge_presets():
        theirs, mine = _handed(results[preset.name, "ref"]), _handed(results[preset.name, "whole"])
        assert mine == theirs, preset.name
        assert set(theirs) == set(UB_OPS), preset.name


def run_bridge_batch(cases: list, work: Path, python: str, path: str, timeout: int = 1200) -> list:
    """Run scripts/bridge_check_batch.py on ``cases`` (written to ``work``) in the Bridge environment; its answers,
    in order (the one runner of tests/test_bridge_check.py and tests/test_bridge_perf_check.py)."""
    work.write_text(json.dumps(cases))
    env = {**os.environ, "PYTHONPATH": path, "TORCH_CUDA_ARCH_LIST": "9.0"}
    run = subprocess.run(
        [python, str(ROOT / "scripts" / "bridge_check_batch.py"), str(work)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    if run.returncode:
        raise AssertionError(run.stderr[-2000:])
    return json.loads(run.stdout)


def _run_batch(cases: list, names: list, file_name: str, python: str, path: str) -> dict:
    """``run_bridge_batch`` in $TMPDIR; its answers by name."""
    work = Path(os.environ.get("TMPDIR", "/tmp")) / file_name
    return dict(zip(names, run_bridge_batch(cases, work, python, path), strict=True))
