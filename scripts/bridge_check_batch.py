#!/usr/bin/env python3
"""Run Megatron-Bridge's own config code on many exports in one process (Bridge imports once).

Not part of megaplan: run it with a Python environment that has Megatron-Bridge (at a pinned tag) and
Megatron-Core on PYTHONPATH, and GPU-only packages replaced by stand-ins (the bridge_check tool's
``stubs.py``, found through BRIDGE_STUBS_DIR). tests/test_bridge_check.py drives it when the
MEGAPLAN_BRIDGE_* environment variables name such environments, and is skipped otherwise.

    python bridge_check_batch.py cases.json > results.json

``cases.json`` is a list of {"recipe": "module:function", "world_size": N, "overrides": [...] (Hydra-style
dotlist) or "yaml": "..." (an override YAML), "fields": ["model.tensor_model_parallel_size", ...],
"hf": {"repo/id": {...config.json...}}}. Each case goes through Bridge's create_omegaconf_dict_config,
then the YAML (OmegaConf.merge) or parse_hydra_overrides, apply_overrides and runtime_config_update (the
precision preset, the data-parallel size, comm_overlap.setup, validate()), exactly as Bridge's example
pretraining scripts do. Prints one JSON list: {"ok", "error", "fields": {path: value}} per case.
"""

import importlib
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.environ.get("BRIDGE_STUBS_DIR", str(Path(__file__).resolve().parent)))
import stubs  # noqa: F401  (GPU-only packages as stand-ins; must come before Bridge)


def hf_cache(configs: dict) -> Path:
    """A throw-away Hugging Face cache holding the given config.json contents. A key ``repo@commit`` also files the
    config under that commit (a recipe that pins a revision, e.g. v0.6.0's Qwen3-30B-A3B, looks for it there)."""
    root = Path(tempfile.mkdtemp(prefix="bridge-check-hf-"))
    for key, config in configs.items():
        repo, _, commit = key.partition("@")
        d = root / "hub" / ("models--" + repo.replace("/", "--"))
        snap = d / "snapshots" / (commit or "0" * 40)
        snap.mkdir(parents=True, exist_ok=True)
        (d / "refs").mkdir(exist_ok=True)
        if not commit:
            (d / "refs" / "main").write_text("0" * 40)
        (snap / "config.json").write_text(json.dumps(config))
    return root


def plain(v):
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, list | tuple):
        return [plain(x) for x in v]
    if hasattr(v, "name") and type(v).__module__.startswith(("megatron", "enum")):
        return v.name
    return str(v)


def read(cfg, path: str):
    obj = cfg
    for part in path.split("."):
        if obj is None or not hasattr(obj, part):
            return "<absent>"
        obj = getattr(obj, part)
    return plain(obj)


def kind(value) -> str:
    """How a recipe holds a sub-config: null, a preset name (str:NAME) or an object (its class)."""
    if value is None:
        return "null"
    return f"str:{value}" if isinstance(value, str) else type(value).__name__


def sections(cfg) -> dict:
    """Every ConfigContainer section's field names (dataclasses.fields of its class)."""
    import dataclasses

    out = {}
    for f in dataclasses.fields(cfg):
        obj = getattr(cfg, f.name, None)
        if dataclasses.is_dataclass(obj):
            out[f.name] = {
                "class": f"{type(obj).__module__}.{type(obj).__qualname__}",
                "fields": sorted(x.name for x in dataclasses.fields(obj)),
            }
    from megatron.bridge.training.comm_overlap import CommOverlapConfig
    from megatron.bridge.training.mixed_precision import MixedPrecisionConfig

    for name, cls in (("mixed_precision", MixedPrecisionConfig), ("comm_overlap", CommOverlapConfig)):
        out[name] = {
            "class": f"{cls.__module__}.{cls.__qualname__}",
            "fields": sorted(x.name for x in dataclasses.fields(cls)),
        }
    return out


def run_case(case: dict) -> dict:
    from megatron.bridge.training.config import runtime_config_update
    from megatron.bridge.training.utils.omegaconf_utils import (
        apply_overrides,
        create_omegaconf_dict_config,
        parse_hydra_overrides,
    )
    from omegaconf import OmegaConf

    os.environ["WORLD_SIZE"] = str(case["world_size"])
    out, cfg = {"ok": False, "error": None, "stage": "recipe", "fields": {}}, None
    try:
        mod, _, fn = case["recipe"].partition(":")
        cfg = getattr(importlib.import_module(mod), fn)()
        out["stage"] = "overrides"
        omega, excluded = create_omegaconf_dict_config(cfg)
        if case.get("yaml"):
            omega = OmegaConf.merge(omega, OmegaConf.create(case["yaml"]))
        if case.get("overrides"):
            omega = parse_hydra_overrides(omega, case["overrides"])
        apply_overrides(cfg, OmegaConf.to_container(omega, resolve=True), excluded)
        if case.get("before_runtime"):  # the recipe's own fields, as an import assumes them
            out["kinds"] = {s: kind(getattr(cfg, s, None)) for s in ("mixed_precision", "comm_overlap")}
            out["sections"] = sections(cfg) if case.get("sections") else None
            out["fields"] = {p: read(cfg, p) for p in case.get("fields", [])}
            out["ok"], out["stage"] = True, "recipe"
            return out
        out["stage"] = "runtime_config_update"
        runtime_config_update(cfg)
        out["ok"], out["stage"] = True, "done"
    except Exception as e:  # Bridge's own verdict, reported as data
        out["error"] = f"{type(e).__name__}: {str(e).strip()[:600]}"
    if cfg is not None:
        out["fields"] = {p: read(cfg, p) for p in case.get("fields", [])}
        out["fields"]["data_parallel_size"] = plain(getattr(cfg, "data_parallel_size", None))
    return out


def main() -> int:
    cases = json.loads(Path(sys.argv[1]).read_text())
    hf = {}
    for case in cases:
        hf.update(case.get("hf") or {})
    if hf:
        os.environ["HF_HOME"] = str(hf_cache(hf))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    real_stdout, sys.stdout = sys.stdout, sys.stderr  # Bridge logs to stdout; keep stdout for the JSON
    results = [run_case(c) for c in cases]
    sys.stdout = real_stdout
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
