"""The plan-JSON file: the exchange format between megaplan's commands (explain --json, search
--json, export --format json) and what rebuilds a request from it."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from pydantic import ValidationError

from planner.api import PlanRequest, make_request
from planner.errors import PlannerError
from planner.hardware.spec import HardwareSpec
from planner.models.spec import ModelSpec
from planner.plan import ParallelPlan, PlanOptions, StageSplit, TrainingSpec
from planner.presets import format_validation_error, load_model

PLAN_KEYS = ("model", "gpus", "training", "parallel", "options")


def read_plan_file(ref: str, rank: int | None = None) -> dict:
    """One plan JSON from an ``explain --json`` file, or the rank-th plan of a ``search --json`` file
    (``--rank``, or ``FILE#RANK`` when no file of that exact name exists)."""
    path = ref
    m = re.fullmatch(r"(.+)#(\d+)", ref)
    if m and rank is None and not os.path.exists(ref):
        path, rank = m.group(1), int(m.group(2))
    p = Path(path)
    if not p.is_file():
        raise PlannerError(f"plan file {path!r} not found")
    try:
        data = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PlannerError(f"plan file {path!r} is not JSON: {err}") from err
    if isinstance(data, dict) and isinstance(data.get("plans"), list):
        plans = data["plans"]  # search's top N, then the fastest estimate with its own rank when ties put it lower
        k = rank or 1
        ranked = {p.get("rank", i) if isinstance(p, dict) else i: p for i, p in enumerate(plans, 1)}
        if k not in ranked:
            raise PlannerError(
                f"--rank {k} is out of range: {path!r} holds {len(plans)} plans (allowed: {_ranks(list(ranked))})"
            )
        data = ranked[k]
    elif rank not in (None, 1):
        raise PlannerError(f"--rank {rank} given but {path!r} holds a single plan, not a search result")
    if not isinstance(data, dict) or any(k not in data for k in PLAN_KEYS):
        raise PlannerError(
            f"{path!r} is not a megaplan plan: expected the JSON of `megaplan explain --json` or "
            f"`megaplan search --json` with keys {', '.join(PLAN_KEYS)}"
        )
    return data


def _ranks(ranks: list[int]) -> str:
    """The ranks a search result holds: "1..10" or "1..10, 13" (the fastest estimate after the top 10)."""
    run = next((i for i, r in enumerate(ranks) if r != i + 1), len(ranks))
    head = f"1..{run}" if run > 1 else "1" if run else ""
    return ", ".join([head] * bool(head) + [str(r) for r in ranks[run:]])


def request_from_plan(data: dict, hardware: str | HardwareSpec | None = None) -> PlanRequest:
    """Rebuild the request a plan JSON describes (the model from its embedded spec)."""
    try:
        model = ModelSpec.model_validate(data["model_spec"]) if "model_spec" in data else load_model(data["model"])
        par = {k: v for k, v in data["parallel"].items() if k in ParallelPlan.model_fields}
        if "moe_token_dispatcher" in data["options"]:  # plan files of before it was a searched knob
            par.setdefault("moe_token_dispatcher", data["options"]["moe_token_dispatcher"])
        tr = data["training"]
        return make_request(
            model=model,
            hardware=hardware or data.get("hardware"),
            gpus=data["gpus"],
            global_batch=tr["global_batch"],
            seq_len=tr["seq_len"],
            precision=tr.get("precision"),
            train_tokens=tr.get("train_tokens"),
            gpu_hour_price=tr.get("gpu_hour_price"),
            options={k: v for k, v in data["options"].items() if k in PlanOptions.model_fields},
            **par,
        )
    except ValidationError as err:
        raise PlannerError(f"plan: {format_validation_error(err)}") from err
    except (KeyError, TypeError, AttributeError) as err:
        raise PlannerError(f"plan JSON is missing or mistypes a field: {err}") from err


def request_to_json(req: PlanRequest) -> dict:
    """The plan JSON fields that rebuild a request (``request_from_plan``)."""
    return {
        "model": req.ctx.model.name,
        "model_spec": req.ctx.model.model_dump(mode="json"),
        "gpus": req.gpus,
        "training": req.ctx.training.model_dump(mode="json"),
        "parallel": req.plan.model_dump(mode="json"),
        "options": req.ctx.options.model_dump(mode="json"),
    }


SPLIT_FLAGS = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
LAYER_FLAGS = {
    "decoder_first_pipeline_num_layers": "first_stage_layers",
    "decoder_last_pipeline_num_layers": "last_stage_layers",
}
WORLD_FIELDS = ("tp", "pp", "cp", "gpus")


def override_request(req, overrides: dict):
    """``req`` with some plan options changed (names as the CLI's plan options: tp, recompute,
    attention_kernel, gpus, hardware, model, global_batch, …). dp is derived again when the
    world or the model-parallel sizes change and dp is not given; N = tp·cp·pp·dp when dp is
    given without gpus."""
    overrides = dict(overrides)
    if "tokens" in overrides:
        overrides["train_tokens"] = overrides.pop("tokens")
    data = request_to_json(req)
    hardware = overrides.pop("hardware", None) or req.ctx.hardware
    if "model" in overrides:
        data["model"] = overrides.pop("model")
        data.pop("model_spec")
    par = data["parallel"]
    if any(k in overrides for k in SPLIT_FLAGS):
        old = StageSplit(par["stage_split"])
        emb = overrides.pop(SPLIT_FLAGS[0], old.embedding_counted)
        loss = overrides.pop(SPLIT_FLAGS[1], old.loss_counted)
        par["stage_split"] = StageSplit.from_flags(emb, loss).value
    for flag, field in LAYER_FLAGS.items():
        if flag in overrides:
            par[field] = overrides.pop(flag)
    if "dp" in overrides and "gpus" not in overrides:
        data["gpus"] = None  # N = tp·cp·pp·dp
    elif any(k in overrides for k in WORLD_FIELDS) and "dp" not in overrides:
        par.pop("dp")  # derived again below
    if "gpus" in overrides:
        data["gpus"] = overrides.pop("gpus")
    if overrides.get("fsdp"):
        overrides.setdefault("distributed_optimizer", True)  # Megatron FSDP shards the optimizer too
    for name, value in overrides.items():
        for section, spec in (("parallel", ParallelPlan), ("options", PlanOptions), ("training", TrainingSpec)):
            if name in spec.model_fields:
                data[section][name] = value
                break
        else:
            raise PlannerError(f"--{name.replace('_', '-')} does not describe the plan, so it cannot change one")
    if "dp" not in par:
        mp = par["tp"] * par["pp"] * par.get("cp", 1)
        if data["gpus"] % mp:
            raise PlannerError(
                f"--gpus {data['gpus']} is not divisible by tp·pp·cp = {mp}; allowed: a multiple of {mp}"
            )
        par["dp"] = data["gpus"] // mp
    return request_from_plan(data, hardware=hardware)
