#!/usr/bin/env python3
"""Generate planner/bridge/data/recipe_defaults.json: per Megatron-Bridge tag, every ConfigContainer section's
field names, and for each base recipe megaplan knows (planner.bridge.table.RECIPES) the fields it sets
before any override (what an import of ``--bridge-recipe NAME`` assumes) and how it holds its precision
and overlap configs (a preset name, an object, or none: where an export must write them).

Runs Bridge's own recipe code through scripts/bridge_check_batch.py in a Bridge environment:

    python scripts/dump_bridge_fields.py v0.6.0=PYTHON:PYTHONPATH [v0.2.1=PYTHON:PYTHONPATH]

(PYTHONPATH: Bridge's src/ at the tag and its Megatron-Core; BRIDGE_STUBS_DIR: the stubs.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bridge_hf_configs import hf_entries  # noqa: E402

from planner.bridge.table import DATASET_SEQ, RECIPES, ROWS, TAG_MCORE  # noqa: E402

OUT = ROOT / "planner" / "bridge" / "data" / "recipe_defaults.json"


def paths(tag: str) -> list[str]:
    out = {p for row in ROWS for p in row.paths(tag)} | {DATASET_SEQ[tag], "model.num_moe_experts"}
    out |= {"comm_overlap.tp_comm_overlap_cfg", "mixed_precision.first_last_layers_bf16", "model.num_layers"}
    out |= {"model.cuda_graph_scope"}  # v0.6.0 recipes still set the deprecated scope (read as modules)
    out |= {"train.train_iters", "train.train_samples", "train.num_epochs"}  # the run's length (absent: <absent>)
    return sorted(out)


def dump(tag: str, python: str, pythonpath: str) -> dict:
    cases, names = [], []
    for name, (module, preset) in RECIPES[tag].items():
        hf = hf_entries(preset)
        cases.append(
            {
                "recipe": f"{module}:{name}",
                "world_size": 1024,
                "fields": paths(tag),
                "hf": hf,
                "before_runtime": True,
                "sections": not names,
            }
        )
        names.append(name)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(cases, fh)
    env = {**os.environ, "PYTHONPATH": pythonpath, "TORCH_CUDA_ARCH_LIST": "9.0"}
    run = subprocess.run(
        [python, str(ROOT / "scripts" / "bridge_check_batch.py"), fh.name],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    results = json.loads(run.stdout)
    recipes, sections = {}, None
    for name, res in zip(names, results, strict=True):
        if not res["ok"]:
            print(f"{tag} {name}: {res['error']}", file=sys.stderr)
            continue
        sections = sections or res.get("sections")
        kept = {k: v for k, v in res["fields"].items() if v != "<absent>" and k != "data_parallel_size"}
        recipes[name] = {**kept, "_kinds": res["kinds"]}
    return {"recipes": recipes, "sections": sections}


def main() -> int:
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data.setdefault("recipes", {})
    data.setdefault("sections", {})
    data["how"] = (
        "scripts/dump_bridge_fields.py: each recipe function of planner.bridge.table.RECIPES called by Bridge's own "
        "code at the tag (scripts/bridge_check_batch.py, GPU packages stubbed, Hugging Face config.json from "
        "scripts/bridge_hf_configs.py), its fields read before runtime_config_update; sections: "
        "dataclasses.fields of each ConfigContainer section's class"
    )
    data.setdefault("tags", {})
    for arg in sys.argv[1:]:
        tag, _, env = arg.partition("=")
        python, _, pythonpath = env.partition(":")
        got = dump(tag, python, pythonpath)
        data["recipes"][tag] = got["recipes"]
        data["sections"][tag] = got["sections"]
        data["tags"][tag] = f"Megatron-Bridge {tag} with {TAG_MCORE[tag]}"
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
