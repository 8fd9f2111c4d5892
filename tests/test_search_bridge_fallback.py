"""--tp-comm-overlap-cfg bridge: a plan whose shape has no Megatron-Bridge userbuffer preset runs Transformer
Engine's defaults; its row says so (``tpo:TE`` in the label, ``userbuffers`` in its JSON). Llama 3 70B on H100 at
seq 8192: Bridge has the preset userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192 (hidden 8192, t 4) and none for
t 8 or 2 (presets/userbuffers/bridge.yaml), so TP4 rows run the preset and TP8 rows TE's defaults."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from planner.api import make_request
from planner.report.labels import plan_text
from planner.report.search import search_view
from planner.search import search

PRESET = "Megatron-Bridge userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"


@pytest.fixture(scope="module")
def bridge():
    req = make_request(model="llama3-70b", hardware="dgx-h100-superpod", options={"tp_comm_overlap_cfg": "bridge"})
    return req.ctx, search(req.ctx, 64, top=8)


def test_each_row_names_the_config_it_runs(bridge):
    _, result = bridge
    rows = [(pj["parallel"]["tp"], pj["options"]["tp_comm_overlap"], pj.get("userbuffers")) for pj in result.plans]
    tp4 = [ub for t, on, ub in rows if t == 4 and on]
    tp8 = [ub for t, on, ub in rows if t == 8 and on]
    assert tp4 and all(ub == {"config": PRESET, "bridge_fallback": False} for ub in tp4)
    te = {"config": "Transformer Engine's defaults (initialize_ub)", "bridge_fallback": True}
    assert tp8 and all(ub == te for ub in tp8)
    assert all(("tpo:TE" in plan_text(pj).split()) == (pj["parallel"]["tp"] == 8) for pj in result.plans)


def test_the_row_says_it_at_80_columns(bridge):
    ctx, result = bridge
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(search_view(result, ctx, 64))
    lines = out.getvalue().splitlines()
    assert max(map(len, lines)) <= 80
    rows = [line for line in lines if "TP8 PP" in line]
    assert rows and all("· SP DO tpo:TE" in line for line in rows)  # whole, on the row's line
    text = " ".join(" ".join(lines).split())
    assert "tpo:TE: --tp-comm-overlap-cfg bridge, but Megatron-Bridge has no userbuffer preset for this plan's" in text


def test_no_note_without_the_option():
    req = make_request(model="llama3-70b", hardware="dgx-h100-superpod")
    result = search(req.ctx, 64, top=3)
    assert all("userbuffers" not in pj and "tpo:TE" not in plan_text(pj) for pj in result.plans)
