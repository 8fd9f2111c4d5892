"""Pipeline schedule simulation (Narayanan et al. 2021 §2.2, Megatron-LM schedules.py) and its drawings."""

from __future__ import annotations

import os
import struct
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from planner import api
from planner.errors import PlannerError
from planner.report.schedule import ScheduleView
from planner.timeline import BWD, FWD, op_order, plan_timeline, simulate

from conftest import pipeline_s

SNAPSHOTS = Path(__file__).parent / "snapshots"
N21_OPTIONS = dict(attention_kernel="unfused", pp_scatter_gather=True, overlap_p2p_comm=False, async_tp_comm=False)


# ----------------------------------------------------------------------------- Megatron's order


def test_1f1b_order_first_and_last_rank():
    # schedules.py forward_backward_pipelining_without_interleaving: rank i warms up with
    # min(p − i − 1, m) forwards, then one forward, one backward, then drains the backwards
    F = lambda j: (FWD, j, 0)
    B = lambda j: (BWD, j, 0)
    assert op_order(4, 6, 1, 0) == [F(0), F(1), F(2), F(3), B(0), F(4), B(1), F(5), B(2), B(3), B(4), B(5)]
    assert op_order(4, 6, 1, 3) == [F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3), F(4), B(4), F(5), B(5)]
    assert op_order(4, 2, 1, 0) == [F(0), F(1), B(0), B(1)]  # m < p: all warm-up


def test_interleaved_order_megatron_chunks():
    # p 2, vpp 2, m 4; rank 0 warms up with 2(p − 0 − 1) + (vpp − 1)·p = 4 chunk forwards. The k-th
    # forward runs chunk (k mod p·vpp) // p on micro-batch (k // (p·vpp))·p + k mod p; backwards the
    # chunks in reverse order (schedules.py get_model_chunk_id, microbatch group size p)
    F = lambda j, c: (FWD, j, c)
    B = lambda j, c: (BWD, j, c)
    assert op_order(2, 4, 2, 0) == [
        F(0, 0),
        F(1, 0),
        F(0, 1),
        F(1, 1),
        F(2, 0),
        B(0, 1),
        F(3, 0),
        B(1, 1),
        F(2, 1),
        B(0, 0),
        F(3, 1),
        B(1, 0),
        B(2, 1),
        B(3, 1),
        B(2, 0),
        B(3, 0),
    ]
    # rank 1 warms up with 2·0 + 1·2 = 2
    assert op_order(2, 4, 2, 1)[:4] == [F(0, 0), F(1, 0), F(0, 1), B(0, 1)]


# ----------------------------------------------------------------------------- makespans by hand


@pytest.mark.parametrize("p, m", [(4, 8), (4, 2), (8, 16), (1, 5)])
def test_1f1b_equal_stages_makespan(p, m):
    # t_f = 1, t_b = 2, no transfer time: (m + p − 1)(t_f + t_b) (Narayanan 2021 §2.2.1)
    tl = simulate([1.0] * p, [2.0] * p, 0.0, m)
    assert tl.pipeline_s == pytest.approx((m + p - 1) * 3.0)
    assert len(tl.ops) == 2 * p * m


@pytest.mark.parametrize("p, m, v", [(4, 8, 2), (4, 4, 2), (2, 8, 4), (8, 16, 3)])
def test_interleaved_equal_stages_makespan(p, m, v):
    # bubble (p − 1)(t_f + t_b)/v (Narayanan 2021 §2.2.2): m·3 + (p − 1)·3/v
    tl = simulate([1.0] * p, [2.0] * p, 0.0, m, v)
    assert tl.pipeline_s == pytest.approx(m * 3.0 + (p - 1) * 3.0 / v)
    assert len(tl.ops) == 2 * p * m * v


@pytest.mark.parametrize("p, m", [(2, 5), (4, 8), (8, 16)])
def test_blocking_transfers_between_bounds(p, m):
    # c = 0.1 per transfer: at least (m + p − 1)(t_f + t_b) = no communication, at most the closed
    # form's 2(m + p − 1)·c more (the end stages send one way only, so it can be less)
    c = 0.1
    tl = simulate([1.0] * p, [2.0] * p, c, m)
    low, high = (m + p - 1) * 3.0, (m + p - 1) * (3.0 + 2 * c)
    assert low < tl.pipeline_s <= high + 1e-9
    # p = 4, m = 8 by hand: m(t_f + t_b + 2c) + (p − 1)(t_f + t_b + c) = 25.6 + 9.3
    if (p, m) == (4, 8):
        assert tl.pipeline_s == pytest.approx(34.9)


def test_dependencies_hold():
    p, m, v, c = 4, 8, 2, 0.05
    tl = simulate([1.0, 1.1, 0.9, 1.3], [2.0, 2.1, 1.9, 2.5], c, m, v, blocking_p2p=False)
    end = {(o.kind, o.microbatch, o.chunk * p + o.stage): o for o in tl.ops}
    last = p * v - 1
    for o in tl.ops:
        vs = o.chunk * p + o.stage
        if o.kind == FWD and vs > 0:
            assert o.start_s >= end[(FWD, o.microbatch, vs - 1)].end_s + c - 1e-12
        if o.kind == BWD:
            prev = end[(FWD, o.microbatch, vs)] if vs == last else end[(BWD, o.microbatch, vs + 1)]
            assert o.start_s >= prev.end_s + (0 if vs == last else c) - 1e-12
    for i in range(p):  # a stage runs one operation at a time
        ops = tl.stage_ops(i)
        assert all(a.end_s <= b.start_s + 1e-12 for a, b in zip(ops, ops[1:], strict=False))


def test_bad_simulation_input():
    with pytest.raises(ValueError):
        simulate([1.0], [2.0], 0.0, 4, 2)  # interleaving needs p > 1


# ----------------------------------------------------------------------------- against the estimate

PLANS = {
    "175B Narayanan 2021 (1F1B, full recompute, fp16, unfused)": dict(
        model="gpt3-175b",
        gpus=1024,
        tp=8,
        pp=16,
        micro_batch=1,
        recompute="full",
        precision="fp16",
        options=N21_OPTIONS,
    ),
    "175B today (selective + SP)": dict(
        model="gpt3-175b", gpus=1024, tp=8, pp=16, recompute="selective", sequence_parallel=True
    ),
    "175B on 64 GPUs, m = 64": dict(model="gpt3-175b", gpus=64, tp=8, pp=8, recompute="full", global_batch=64),
    "1.7B, b 4, PP 4": dict(model="gpt-1.7b", gpus=32, tp=1, pp=4, micro_batch=4, global_batch=128),
    "39B, PP 2, b 2, m 8": dict(model="gpt-39b", gpus=64, tp=8, pp=2, micro_batch=2, global_batch=64, recompute="full"),
    "Llama 3 70B, CP 2, s 16k (H100)": dict(
        model="llama3-70b",
        hardware="dgx-h100-superpod",
        gpus=512,
        tp=8,
        pp=4,
        cp=2,
        seq_len=16384,
        global_batch=256,
        sequence_parallel=True,
        recompute="selective",
        distributed_optimizer=True,
    ),
    "Mixtral 8x7B, EP 8 (H100)": dict(
        model="mixtral-8x7b",
        hardware="dgx-h100-superpod",
        gpus=64,
        tp=2,
        pp=4,
        ep=8,
        sequence_parallel=True,
        recompute="selective",
        distributed_optimizer=True,
        global_batch=256,
    ),
}


@pytest.mark.parametrize("name", PLANS)
def test_1f1b_makespan_matches_estimate(name):
    req = api.make_request(**PLANS[name])
    explained = api.explain_plan(req)
    pj = explained.plan_json
    tl = plan_timeline(explained.evaluation, req.plan, req.ctx.options)
    est = pipeline_s(pj["estimate"]["time"])
    assert tl.pipeline_s == pytest.approx(est, rel=0.02)
    # the tail after the flush is the estimate's remaining terms, so the iterations agree as well
    assert tl.iteration_s == pytest.approx(pj["estimate"]["iteration_s"], rel=0.02)


@pytest.mark.parametrize("vpp, overlap", [(2, True), (3, False)])
def test_interleaved_makespan_matches_estimate(vpp, overlap):
    req = api.make_request(
        model="gpt3-175b",
        gpus=1024,
        tp=8,
        pp=16,
        vpp=vpp,
        recompute="selective",
        sequence_parallel=True,
        options=dict(overlap_p2p_comm=overlap),
    )
    explained = api.explain_plan(req)
    pj = explained.plan_json
    tl = plan_timeline(explained.evaluation, req.plan, req.ctx.options)
    assert tl.pipeline_s == pytest.approx(pipeline_s(pj["estimate"]["time"]), rel=0.03)
    assert all(t.blocking is (not overlap) for t in tl.transfers)


# ----------------------------------------------------------------------------- terminal drawing


def _render(renderable, width: int) -> str:
    console = Console(width=width, record=True, color_system=None, file=open(os.devnull, "w"))
    console.print(renderable)
    return console.export_text()


def _toy(**kw):
    # 4 stages, the last one slower (logits), t_f = 1 s, t_b = 2 s, p2p 0.1 s, DP sync 1 s, optimizer 0.3 s
    return simulate(
        [1.0, 1.0, 1.0, 1.05],
        [2.0, 2.0, 2.0, 2.1],
        0.1,
        kw.pop("m", 6),
        tail_s={"dp_comm": 1.0, "optimizer": 0.3},
        **kw,
    )


def test_terminal_snapshot():
    text = _render(ScheduleView(_toy(), "toy 1F1B"), 100)
    path = SNAPSHOTS / "schedule_1f1b.txt"
    if os.environ.get("UPDATE_SNAPSHOTS"):
        path.write_text(text)
    assert text == path.read_text()


def test_terminal_rows_legend_and_scale():
    text = _render(ScheduleView(_toy()), 100)
    lines = text.splitlines()
    assert [ln.split("│")[0].strip() for ln in lines[:4]] == ["stage 0", "stage 1", "stage 2", "stage 3"]
    assert all(len(ln) <= 100 for ln in lines)
    assert ">1>" in lines[0] and "<<1<<" in lines[3] and "~" in lines[0] and "=" in lines[0] and "#" in lines[0]
    # stage 3 starts after 3 forwards and 3 transfers (3.3 s); the columns are to scale
    per_col = float(text.split("1 column = ")[1].split("s")[0])
    row3 = lines[3].split("│")[1]
    assert (len(row3) - len(row3.lstrip())) == pytest.approx(3.3 / per_col, abs=1)
    assert "forward (micro-batch 1)" in text and "blank: bubble" in text


def test_terminal_large_m_shows_fill_and_drain_only():
    req = api.make_request(**PLANS["175B Narayanan 2021 (1F1B, full recompute, fp16, unfused)"])
    explained = api.explain_plan(req)
    text = _render(ScheduleView(plan_timeline(explained.evaluation, req.plan, req.ctx.options)), 120)
    assert "steady state in between (┆) is not drawn" in " ".join(text.split())
    assert text.count("stage ") >= 16 and "stage 15 │" in text
    assert all(len(ln) <= 120 for ln in text.splitlines())
    assert "one p2p send = " in text


def test_terminal_many_stages_elided():
    tl = simulate([1.0] * 40, [2.0] * 40, 0.0, 80)
    text = " ".join(_render(ScheduleView(tl), 100).split())
    assert "stages 8–31 not shown" in text and "16 of 40 stages drawn" in text


def test_interleaved_labels_carry_chunk_letters():
    text = _render(ScheduleView(simulate([1.0] * 2, [2.0] * 2, 0.0, 2, 2)), 100)
    assert "1a" in text and "1b" in text


# ----------------------------------------------------------------------------- pictures


def test_svg_has_stages_blocks_and_labels(tmp_path):
    plots = pytest.importorskip("planner.report.figures")
    pytest.importorskip("matplotlib")
    tl = _toy(m=4)
    path = tmp_path / "schedule.svg"
    plots.schedule_picture(tl, "toy 1F1B schedule").save(str(path), "--schedule-file")
    root = ET.parse(path).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    texts = ["".join(t.itertext()) for t in root.iter(f"{ns}text")]
    for i in range(4):
        assert f"stage {i}" in texts
    assert "toy 1F1B schedule" in texts and "time (s)" in texts
    assert {"1", "2", "3", "4"} <= set(texts)  # micro-batch numbers on the blocks
    groups = {g.get("id"): g for g in root.iter(f"{ns}g") if g.get("id")}
    for i in range(4):  # one bar per forward and per backward of each of the 4 micro-batches
        assert len(list(groups[f"stage{i}-fwd-chunk0"].iter(f"{ns}rect"))) == 4
        assert len(list(groups[f"stage{i}-bwd-chunk0"].iter(f"{ns}rect"))) == 4
    assert "stage0-p2p" in groups and "stage0-dp_comm" in groups and "stage0-optimizer" in groups


def _svg_boxes(root, gid):
    ns = "{http://www.w3.org/2000/svg}"
    group = next(g for g in root.iter(f"{ns}g") if g.get("id") == gid)
    return [tuple(float(r.get(k)) for k in ("x", "y", "width", "height")) for r in group.iter(f"{ns}rect")]


def test_svg_blocks_are_the_simulated_operations(tmp_path, monkeypatch):
    # GPT-3 175B on 1,024 GPUs, TP8 PP16: 16 stages × 384 operations. The SVG is written as text, without
    # matplotlib (matplotlib took 2.3 s for these ~12,000 shapes), one <rect> per operation, where it ran
    from planner.report import figures as plots

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # the SVG needs no matplotlib
    req = api.make_request(model="gpt3-175b", gpus=1024, tp=8, pp=16)
    tl = plan_timeline(api.explain_plan(req).evaluation, req.plan, req.ctx.options)
    assert (tl.p, len(tl.ops)) == (16, 6144)
    path = tmp_path / "gpt3.svg"
    pic = plots.schedule_picture(tl, "gpt3-175b")
    pic.save(str(path), "--schedule-file")
    root = ET.parse(path).getroot()
    assert int(root.get("width")) == 2304  # 0.06 inch per block: 384 blocks a stage → 23 inches at 100 dpi
    sx = [g for g in pic.texts if g[2] == "0"][0][0], [g for g in pic.texts if g[2] == "20"][0][0]
    px_per_s = (sx[1] - sx[0]) / 20  # from the tick labels 0 and 20 s
    for i in (0, 15):
        fwd = [o for o in tl.stage_ops(i) if o.kind == FWD]
        boxes = _svg_boxes(root, f"stage{i}-fwd-chunk0")
        assert len(boxes) == len(fwd) == 192
        for o, (x, _, w, _) in zip(fwd, boxes, strict=True):
            assert x == pytest.approx(sx[0] + o.start_s * px_per_s, abs=0.01)
            assert w == pytest.approx(o.duration_s * px_per_s, abs=0.01)
    tail = _svg_boxes(root, "stage0-dp_comm")[0]
    assert tail[0] == pytest.approx(sx[0] + tl.pipeline_s * px_per_s, abs=0.01)


def test_png_draws_the_same_picture(tmp_path, monkeypatch):
    # the PNG is matplotlib drawing the Picture's own rectangles, lines and texts, one pixel per unit
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_rgba
    from matplotlib.figure import Figure

    from planner.report import figures as plots

    drawn = {}
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: drawn.update(fig=fig))
    pic = plots.schedule_picture(_toy(m=4), "toy")
    pic.save(str(tmp_path / "s.png"), "--schedule-file")
    ax = drawn["fig"].axes[0]
    # one compound path per group: a closed rectangle (5 vertices) per box
    assert [len(p.get_path().vertices) for p in ax.patches] == [5 * len(g.boxes) for g in pic.groups]
    assert [p.get_facecolor() for p in ax.patches] == [to_rgba(g.fill) for g in pic.groups]
    assert [t.get_text() for t in ax.texts] == [t[2] for t in pic.texts]
    assert drawn["fig"].get_size_inches() * plots.DPI == pytest.approx((pic.width_px, pic.height_px))


def test_png_size_from_header(tmp_path):
    plots = pytest.importorskip("planner.report.figures")
    pytest.importorskip("matplotlib")
    path = tmp_path / "schedule.png"
    plots.schedule_picture(_toy(), "toy").save(str(path), "--schedule-file")
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    width, height = struct.unpack(">II", head[16:24])
    # 8 x (1.5 + 0.45·4) inches at 100 dpi, trimmed to the drawing by bbox_inches="tight"
    assert 600 <= width <= 900 and 200 <= height <= 400


def test_picture_path_checks(tmp_path):
    from planner.report import figures as plots

    with pytest.raises(PlannerError, match="unknown picture format '.pdf'; allowed: .svg, .png"):
        plots.check_picture_path(str(tmp_path / "x.pdf"), "--schedule-file")
    with pytest.raises(PlannerError, match="does not exist"):
        plots.check_picture_path(str(tmp_path / "missing" / "x.svg"), "--schedule-file")


def test_missing_matplotlib_says_how_to_install(monkeypatch, tmp_path):
    from planner.report import figures as plots

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(PlannerError, match=r'needs matplotlib.*pip install "\.\[plot\]" from the megaplan checkout'):
        plots.check_picture_path(str(tmp_path / "x.svg"), "--schedule-file")


def test_the_legend_names_every_chunk_colour():
    # vpp 3 drew chunk c in a third colour the legend did not name (it listed chunks a and b only)
    from planner.report import figures as plots

    def labels(vpp):
        return [t[2] for t in plots.schedule_picture(simulate([1.0] * 2, [2.0] * 2, 0.0, 4, vpp), "x").texts]

    assert {"forward, chunk a", "chunk b", "chunk c", "backward, chunk a"} <= set(labels(3))
    assert "chunk d" not in labels(3)
    assert {"forward, chunk a, e", "chunk b, f", "chunk d"} <= set(labels(6))  # 4 colours, then again
