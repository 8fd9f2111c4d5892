"""v0.6.0's performance recipes read by megaplan (planner.bridge.perf_reader, never run) against the same recipes
run by Megatron-Bridge's own code (each function called, then runtime_config_update and validate(), on CPU with
GPU packages stubbed): for every recipe of a model, GPU and precision megaplan prices, the fields Bridge ends
with, read back through the mapping table, must give the plan megaplan's reading gives.

Skipped unless MEGAPLAN_BRIDGE_PYTHON_V0_6_0 / MEGAPLAN_BRIDGE_PATH_V0_6_0 name a Bridge v0.6.0 environment (see
tests/test_bridge_check.py) and BRIDGE_STUBS_DIR the stubs. The recipe files are read from that PYTHONPATH."""

import ast
import re
import sys
from pathlib import Path

import pytest

from planner.bridge.importer import LOW_PRECISION_FIELDS, read_bridge_source, request_from_bridge
from planner.bridge.runtime import UB_FIELD, userbuffer_preset
from planner.bridge.table import ROWS
from planner.bridge.workloads import GPUS, V060_DTYPES, V060_MODELS, V060_NAME, read_workload
from planner.hardware.userbuffers import load_config_file
from planner.plan_file import request_from_fields
from tests.test_bridge_check import FP8_ATTENTION, env_for, run_bridge_batch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from bridge_hf_configs import hf_entries  # noqa: E402

TAG = "v0.6.0"
FIELDS = sorted(
    {r.read_at(TAG) for r in ROWS}
    | {"dataset.seq_length", "model.num_moe_experts", UB_FIELD, FP8_ATTENTION}
    | {"train.train_iters"}  # the run's length (bridge17): after TrainingConfig.finalize, whatever the recipe set
    | set(LOW_PRECISION_FIELDS)  # BF16 end layers, NVFP4, FP8 output projection: read beside the table (fbbeb2c)
)


def recipes(src: Path) -> list[tuple[Path, str]]:
    out = []
    for path in sorted(src.glob("megatron/bridge/perf_recipes/*/*/*.py")):
        for name in re.findall(r"^def ([a-z0-9_]+_config)\(", path.read_text(), re.M):
            m = V060_NAME.match(name)
            dev = "_dev_" in name  # development variants (external_cuda_graph, scoped graphs: not read, see docs)
            if m and m["model"] in V060_MODELS and m["gpu"].upper() in GPUS and m["dtype"] in V060_DTYPES and not dev:
                out.append((path, name))
    return out


def bridge_run(python: str, pythonpath: str, cases: list[dict], tmp: Path) -> list[dict]:
    return run_bridge_batch(cases, tmp / "perf-cases.json", python, pythonpath, timeout=1800)


def _ub_ops(cfg) -> tuple | None:
    """What a userbuffer config hands TE (its ops), None for TE's defaults: two presets may hold the same values
    (v0.6.0 userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192 == userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192)."""
    return cfg.ops if cfg is not None else None


def _layout(value):
    """Megatron-Core holds a layout as an object whose text is its list of stages."""
    return ast.literal_eval(value) if isinstance(value, str) and value.startswith("[[") else value


def test_megaplans_reading_of_every_perf_recipe_is_what_bridge_runs(tmp_path):
    if env_for(TAG) is None:
        pytest.skip(f"no Megatron-Bridge {TAG} environment (MEGAPLAN_BRIDGE_PYTHON_/PATH_ unset)")
    python, pythonpath = env_for(TAG)
    src = next(Path(p) for p in pythonpath.split(":") if (Path(p) / "megatron" / "bridge" / "perf_recipes").is_dir())
    found = recipes(src)
    cases = []
    for path, name in found:
        preset = V060_MODELS[V060_NAME.match(name)["model"]]
        module = ".".join(path.relative_to(src).with_suffix("").parts)
        gpus = int(V060_NAME.match(name)["gpus"])
        cases.append({"recipe": f"{module}:{name}", "world_size": gpus, "fields": FIELDS, "hf": hf_entries(preset)})
    results, mismatched, refused = bridge_run(python, pythonpath, cases, tmp_path), [], []
    for (path, name), result in zip(found, results, strict=True):
        if not result["ok"]:
            refused.append(name)
            continue
        w = read_workload(path.read_text(), name, path)
        mine = request_from_fields(read_bridge_source({"bridge_config": f"{path}#{name}"})[0].data)
        fields = {k: _layout(v) for k, v in result["fields"].items() if v != "<absent>"}
        ran_ub = fields.pop(UB_FIELD, None)  # the config CommOverlapConfig.setup hands TE (None: TE's defaults)
        kw = {"tag": TAG, "gpus": w.gpus, "hardware": w.hardware, "model": w.model, "env": w.env}
        theirs = request_from_bridge(fields, **kw).request
        ran = (
            userbuffer_preset({UB_FIELD: ran_ub})[0]
            if ran_ub is not None and fields.get("model.tp_comm_overlap")
            else None
        )
        ran = _ub_ops(load_config_file(ran)) if ran else None
        read = _ub_ops(mine.ctx.options.tp_comm_overlap_cfg) if mine.ctx.options.tp_comm_overlap else None
        options = theirs.ctx.options.model_copy(update={"tp_comm_overlap_cfg": mine.ctx.options.tp_comm_overlap_cfg})
        if (mine.plan, mine.ctx.options, mine.ctx.training) != (
            theirs.plan,
            options,
            theirs.ctx.training,
        ) or ran != read:
            mismatched.append(name)
    assert len(found) >= 100 and not mismatched, (len(found), mismatched)
    # Bridge refuses only what a launch must supply (a data cache path for its fast dataloader cache)
    assert len(refused) <= 2, refused
