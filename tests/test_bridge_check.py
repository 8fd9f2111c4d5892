"""The Bridge export checked by Megatron-Bridge's own code, as Megatron-LM's parser checks the flag export.

For each plan of test_bridge_roundtrip, the dotlist written for a tag is applied to the base recipe by Bridge's
own override code, then Bridge's runtime_config_update and validate() run (on CPU, GPU packages stubbed);
the fields Bridge ends with, read back through the mapping table, must give the plan itself.

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

from planner.bridge.export import bridge_export, dotlist
from planner.bridge.importer import request_from_bridge
from planner.bridge.table import RECIPES, ROWS
from tests.test_bridge_roundtrip import PLANS, _request

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from bridge_hf_configs import hf_entries  # noqa: E402  (config.json from the presets: the model cards)


def env_for(tag: str) -> tuple[str, str] | None:
    key = tag.upper().replace(".", "_")
    python, path = os.environ.get(f"MEGAPLAN_BRIDGE_PYTHON_{key}"), os.environ.get(f"MEGAPLAN_BRIDGE_PATH_{key}")
    return (python, path) if python and path else None


CHECKED = sorted(PLANS)
READ_PATHS = sorted({r.read_at(t) for r in ROWS for t in ("v0.2.1", "v0.6.0")} | {"dataset.seq_length"})


@cache
def bridge_results(tag: str) -> dict:
    python, path = env_for(tag)
    cases, names = [], []
    for name in CHECKED:
        req = _request(PLANS[name])
        try:
            exp = bridge_export(req, tag)
        except Exception:
            continue
        module = RECIPES[tag][exp.recipe][0]
        preset = req.ctx.model.name
        hf = hf_entries(preset)
        fields = READ_PATHS + ["model.num_moe_experts", "dataset.sequence_length"]
        cases.append(
            {
                "recipe": f"{module}:{exp.recipe}",
                "world_size": req.gpus,
                "overrides": dotlist(exp),
                "fields": fields,
                "hf": hf,
            }
        )
        names.append(name)
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"megaplan-bridge-{tag}.json"
    work.write_text(json.dumps(cases))
    env = {**os.environ, "PYTHONPATH": path, "TORCH_CUDA_ARCH_LIST": "9.0"}
    run = subprocess.run(
        [python, str(ROOT / "scripts" / "bridge_check_batch.py"), str(work)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
        check=False,
    )
    if run.returncode:
        raise AssertionError(run.stderr[-2000:])
    return dict(zip(names, json.loads(run.stdout), strict=True))


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
    req = _request(PLANS[name])
    fields = {k: v for k, v in result["fields"].items() if v != "<absent>"}
    env = bridge_export(req, tag).env  # what the launch line sets (the allocator), not a Bridge field
    back = request_from_bridge(
        fields, tag=tag, gpus=req.gpus, hardware=req.ctx.hardware.name, model=req.ctx.model.name, env=env
    )
    assert back.request.plan == req.plan
    assert back.request.ctx.options == req.ctx.options
    assert fields["data_parallel_size"] == req.plan.dp
