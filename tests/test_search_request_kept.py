"""A search keeps what it works out from its request alone (the legal grid; the contexts that evaluate its rows,
with the shapes their cost functions keep) for the next search of the same request (``search._Request``): the
second search builds no candidate grid and computes no layer shape again, and answers number for number as a
search that kept nothing; another request (other pins, another global batch) builds its own."""

import copy
import json
from dataclasses import replace

import numpy as np
import pytest

import planner.search as search_module
from planner.api import make_request
from planner.costs import blocks
from planner.search import search
from planner.space.candidates import NO_PINS, Pins


def _counting(monkeypatch, module, name: str) -> list:
    calls, real = [], getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def _answer(result) -> str:
    return json.dumps(result.to_json(), sort_keys=True, default=str)


def test_the_same_request_is_worked_out_once(monkeypatch):
    ctx = make_request(model="llama3-8b", gpus=8, hardware="dgx-h100-superpod").ctx
    monkeypatch.setattr(search_module._Request, "last", None)
    grids = _counting(monkeypatch, search_module, "candidate_grid")
    shapes = _counting(monkeypatch, blocks, "_layer_sums")
    first = _answer(search(ctx, 8))
    assert (len(grids), len(shapes)) == (1, 1)  # one grid, its layer shapes computed in one call
    again = _answer(search(ctx, 8))
    equal = _answer(search(copy.deepcopy(ctx), 8))  # an equal context: the same request
    assert (len(grids), len(shapes)) == (1, 1)  # nothing built or computed again
    monkeypatch.setattr(search_module._Request, "last", None)  # a search that kept nothing
    fresh = _answer(search(ctx, 8))
    assert len(grids) == 2
    assert again == equal == fresh == first


def test_another_request_builds_its_own(monkeypatch):
    ctx = make_request(model="llama3-8b", gpus=8, hardware="dgx-h100-superpod").ctx
    monkeypatch.setattr(search_module._Request, "last", None)
    grids = _counting(monkeypatch, search_module, "candidate_grid")
    whole = search(ctx, 8)
    pinned = search(ctx, 8, Pins(tp=2))  # other pins
    batch = replace(ctx, training=ctx.training.model_copy(update={"global_batch": 2 * ctx.training.global_batch}))
    doubled = search(batch, 8)  # another global batch
    assert len(grids) == 3
    assert pinned.evaluated < whole.evaluated  # tp 2 alone: fewer candidates
    assert all(p["parallel"]["tp"] == 2 for p in pinned.plans)
    assert doubled.plans[0]["estimate"]["iteration_s"] > whole.plans[0]["estimate"]["iteration_s"]
    assert search(ctx, 8, NO_PINS).evaluated == whole.evaluated and len(grids) == 4  # the last request was the batch


def test_the_kept_grid_is_read_only(monkeypatch):
    ctx = make_request(model="llama3-8b", gpus=8, hardware="dgx-h100-superpod").ctx
    monkeypatch.setattr(search_module._Request, "last", None)
    search(ctx, 8)
    grid = search_module._Request.last[3]["legal"][0]
    for name in search_module.FIELDS[:-1]:
        with pytest.raises(ValueError, match="read-only"):
            np.asarray(getattr(grid, name))[0] = 0
