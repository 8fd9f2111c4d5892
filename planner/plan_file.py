"""The plan-JSON file: the exchange format between megaplan's commands (explain --json, search
--json, export --format json) and what rebuilds a request from it."""

from __future__ import annotations

import json
import os
import re
import sys
import weakref
from pathlib import Path
from typing import Annotated

from pydantic import TypeAdapter, ValidationError

from planner.api import PlanRequest, make_request
from planner.errors import PlannerError, counted, url_hint
from planner.hardware.spec import HardwareSpec
from planner.models.spec import ModelSpec
from planner.plan import ParallelPlan, PlanOptions, TrainingSpec
from planner.presets import format_validation_error, load_model

PLAN_KEYS = ("model", "gpus", "training", "parallel", "options")


def read_plan_file(ref: str, rank: int | None = None, model_given: bool = False) -> dict:
    """One plan JSON from an ``explain --json`` file, or the rank-th plan of a ``search --json`` file
    (``--rank``, or ``FILE#RANK`` when no file of that exact name exists). A field edited by hand that megaplan
    would not read is refused (``model_given``: --model replaces the file's model)."""
    data = _plan_of(ref, rank)
    _check_fields(data)
    spec = data.get("model_spec")
    named = spec.get("name") if isinstance(spec, dict) else None
    if not model_given and isinstance(data["model"], str) and named and data["model"] != named:
        raise PlannerError(  # the name edited, the spec left: the spec is what is priced
            f"plan: model is {data['model']!r} but the file's model_spec describes {named} (the spec is what is "
            f"priced): to plan {data['model']}, give --model {data['model']} beside --plan, or undo the edit"
        )
    return data


def _plan_of(ref: str, rank: int | None) -> dict:
    """The plan JSON ``ref`` names, its keys checked."""
    path = ref
    m = re.fullmatch(r"(.+)#([0-9]+)", ref)
    if m and rank is not None and not os.path.exists(ref) and int(m.group(2)) != rank:
        raise PlannerError(f"--plan {ref!r} and --rank {rank}: give the rank once, after # or with --rank")
    if m and not os.path.exists(ref):
        path, rank = m.group(1), int(m.group(2))
    elif "#" in ref and not os.path.exists(ref) and os.path.isfile(ref.rpartition("#")[0]):
        raise PlannerError(f"--plan {ref!r}: the rank after # must be a whole number ≥ 1 (FILE#RANK: plans.json#2)")
    text = _plan_text(path)
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PlannerError(f"plan file {path!r} is not JSON: {err}{_other_file_hint(text)}") from err
    if isinstance(data, dict) and isinstance(data.get("plans"), list):
        plans = data["plans"]  # search's top N, then the fastest estimate with its own rank when ties put it lower
        k = 1 if rank is None else rank
        if not plans:  # was "holds 0 plans (allowed: )"
            raise PlannerError(f'{path!r} holds no plans (its "plans" list is empty): search again with --json')
        ranked = {p.get("rank", i) if isinstance(p, dict) else i: p for i, p in enumerate(plans, 1)}
        if k not in ranked:
            raise PlannerError(
                f"--rank {k} is out of range: {path!r} holds {counted(len(plans), 'plan')} "
                f"(allowed: {_ranks(list(ranked))})"
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


def _other_file_hint(text: str) -> str:
    """What a file given as --plan that is not JSON looks like, and the option that reads it: megaplan's own Slurm
    or flags export fed back as --plan said only "Expecting value: line 1 column 1" (qa21)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if any(re.match(r"--[a-z][a-z0-9-]+", line) or "pretrain_gpt" in line for line in lines[:400]) or (
        lines and lines[0].startswith("#!")
    ):
        return "; it reads as a Megatron-LM command line or launch script: give it with --megatron-args-file"
    if any(re.match(r"(model|train|ddp|optimizer|mixed_precision|comm_overlap)[.:]", line) for line in lines[:400]):
        return "; it reads as Megatron-Bridge overrides or a config: give it with --bridge-config"
    return ""


def _plan_text(path: str) -> str:
    """The plan file's text: ``-`` is standard input (``megaplan search ... --json | megaplan explain --plan -``),
    refused when it is a terminal (reading would wait for typing); a pipe is read (``--plan <(...)``)."""
    if path in ("-", "<stdin>"):  # <stdin>: compare's -#N (planner.cli._stdin_ranks_last)
        if sys.stdin is None or sys.stdin.isatty():
            raise PlannerError(
                "--plan -: reads the plan from standard input, but nothing is piped in "
                "(megaplan search ... --json | megaplan explain --plan -)"
            )
        return _stdin_text()
    p = Path(path)
    if not path.strip() or p.is_dir():  # compare's '' (Path('') is '.') and a folder were "a device or socket"
        what = "names no file" if not path.strip() else "is a folder"
        raise PlannerError(f"plan file {path!r} {what}: give a plan JSON file (megaplan explain/search --json)")
    if p.exists() and not (p.is_file() or p.is_fifo()):  # a pipe is read (--plan <(megaplan search ... --json))
        raise PlannerError(f"plan file {path!r} is not a file (a device or socket): give a JSON file or a pipe")
    if not (p.is_file() or p.is_fifo()):
        raise PlannerError(f"plan file {path!r} not found{url_hint(path)}")
    data = p.read_bytes()
    if data[:2] == b"\x1f\x8b":  # was "'utf-8' codec can't decode byte 0x8b in position 1"
        raise PlannerError(f"plan file {path!r} is gzip-compressed: gunzip it first (or --plan <(zcat {path}))")
    return data.decode()


_READ_STDIN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _stdin_text() -> str:
    """Standard input, read once and kept: `... --json | megaplan compare -#1 -#2` takes both plans from the one
    pipe (fresh user trial 10: the second '-' read nothing, "plan file '-' is not JSON: Expecting value"); empty
    input is said as such."""
    if sys.stdin not in _READ_STDIN:
        _READ_STDIN[sys.stdin] = sys.stdin.read()
    text = _READ_STDIN[sys.stdin]
    if not text.strip():
        raise PlannerError(
            "--plan -: standard input is empty; pipe a plan into it (megaplan search ... --json | megaplan "
            "explain --plan -)"
        )
    return text


def _ranks(ranks: list[int]) -> str:
    """The ranks a search result holds: "1..10" or "1..10, or 13 for the fastest estimate": a search keeps its
    fastest plan after the top N when the ranking put it lower."""
    run = next((i for i, r in enumerate(ranks) if r != i + 1), len(ranks))
    head = f"1..{run}" if run > 1 else "1" if run else ""
    rest = [str(r) for r in ranks[run:]]
    if not rest:
        return head
    tail = f"{', '.join(rest)} for the fastest estimate"
    return f"{head}, or {tail}" if head else tail


def request_from_plan(data: dict, hardware: str | HardwareSpec | None = None) -> PlanRequest:
    """Rebuild the request a plan JSON describes (the model from its embedded spec)."""
    try:
        return request_from_fields(data, hardware)
    except ValidationError as err:
        raise PlannerError(f"plan: {format_validation_error(err)}") from err
    except (KeyError, TypeError, AttributeError) as err:
        raise PlannerError(f"plan JSON is missing or mistypes a field: {err}") from err


def request_from_fields(data: dict, hardware: str | HardwareSpec | None = None) -> PlanRequest:
    """The request of a plan's fields (the plan JSON's shape: model or model_spec, hardware, gpus,
    training, parallel, options); dp is derived when absent."""
    spec = data.get("model_spec")
    model = load_model(data["model"]) if spec is None else spec if isinstance(spec, ModelSpec) else None
    if model is None:
        try:
            model = ModelSpec.model_validate(spec)
        except ValidationError as err:
            raise PlannerError(f"plan: {format_validation_error(err)}") from err
    par = _typed({k: v for k, v in data["parallel"].items() if k in ParallelPlan.model_fields})
    if data["gpus"] is not None and not (type(data["gpus"]) is int and data["gpus"] >= 1):
        raise PlannerError(f"plan: gpus is {data['gpus']!r}; allowed: a whole number ≥ 1")
    if "moe_token_dispatcher" in data["options"]:  # plan files of before it was a searched knob
        par.setdefault("moe_token_dispatcher", data["options"]["moe_token_dispatcher"])
    tr = data["training"]
    for key, flag in (("global_batch", "--global-batch"), ("seq_len", "--seq-len")):
        if key not in tr:  # deleted from a plan file: was a KeyError traceback
            raise PlannerError(f"plan: training.{key} is missing; allowed: a whole number ≥ 1 there, or {flag} N")
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


WRITTEN_NOT_READ = {  # fields megaplan writes into a plan file that are not inputs (or are of older files)
    "parallel": {"stage_layers"},  # the layers of each stage, derived from the split
    "options": {"moe_token_dispatcher"},  # plan files of before it was a searched knob (read above)
}


def _check_fields(data: dict) -> None:
    """A field megaplan does not read, in a section of a hand-edited plan file (``"micro_batch_size": 4``
    for micro_batch, ``seq_length`` for seq_len) is refused, naming the one meant: it was dropped without
    a word and the plan explained as if the edit had not been made (fresh user trial 9)."""
    import difflib

    _check_shape(data)
    for section, kind in SECTIONS.items():
        fields = data[section]
        known = set(kind.model_fields) | WRITTEN_NOT_READ.get(section, set())
        for key in fields:
            if key not in known:
                close = difflib.get_close_matches(str(key), sorted(kind.model_fields), n=1, cutoff=0.6)
                meant = f" (did you mean {section}.{close[0]}?)" if close else ""
                raise PlannerError(
                    f"plan: {section}.{key} is not a field megaplan reads{meant}; the {section} fields: "
                    f"{', '.join(sorted(kind.model_fields))}"
                )


SECTIONS = {"training": TrainingSpec, "parallel": ParallelPlan, "options": PlanOptions}


def _check_shape(data: dict) -> None:
    """The plan file's sections are objects and hardware names a preset or a YAML: an edited file's
    ``"training": 512`` or ``"hardware": 8`` ended in a TypeError traceback."""
    for section in SECTIONS:
        if not isinstance(data[section], dict):
            raise PlannerError(
                f"plan: {section} is {data[section]!r}; allowed: an object of {section} fields, as `megaplan "
                "explain --json` writes it"
            )
    hardware = data.get("hardware")
    if hardware is not None and not isinstance(hardware, str):
        raise PlannerError(f"plan: hardware is {hardware!r}; allowed: a hardware preset name or a YAML path")
    _plain_numbers(data)


def _plain_numbers(data: dict) -> None:
    """A number written as text in a plan file's sections is read as megaplan reads every number (planner.whole):
    pydantic's lax mode took ``"train_tokens": "2_0"`` for 20 and ``"moe_load_imbalance": "١.٢"`` for 1.2 (err16)."""
    from planner.whole import DECIMAL, WORDS, not_whole, python_number

    for section in SECTIONS:
        for key, value in data[section].items():
            if not isinstance(value, str) or DECIMAL.fullmatch(value) or WORDS.fullmatch(value):
                continue
            read, reader = python_number(value), "int()"
            if read is None:
                read, reader = python_number(value, float), "float()"
            if read is not None:
                raise PlannerError(f"plan: {section}.{key} is {value!r}: {not_whole(value, read, reader)}")


def _typed(par: dict) -> dict:
    """A plan file's parallel fields checked against ParallelPlan's types before any arithmetic on them:
    an edited file's ``"tp": "eight"`` or ``NaN`` is one line naming the field, not a traceback."""
    out = {}
    for k, v in par.items():
        field = ParallelPlan.model_fields[k]
        if v is None:  # not given: derived (dp) or Megatron-LM's default
            out[k] = v
            continue
        try:
            kind = Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
            out[k] = TypeAdapter(kind).validate_python(v)
        except ValidationError as err:
            why = err.errors()[0]["msg"].removeprefix("Value error, ")  # a validator's own sentence (planner.whole)
            raise PlannerError(f"plan: parallel.{k} is {v!r}: {why}") from err
    return out


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
