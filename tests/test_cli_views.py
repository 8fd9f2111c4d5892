"""What a new user reads: explain's parts named by the whole they are taken from, the preset listings,
search's fastest plan and validate's table at 80 columns."""

from __future__ import annotations

import io
import json

import pytest
from click.testing import CliRunner
from rich.console import Console

from planner import api
from planner.cli import cli
from planner.errors import PlannerError
from planner.plan_file import read_plan_file
from planner.report.catalog import pack
from planner.report.layout import plan_text
from planner.report.plan import TermsTable, part_label


def render(renderable, width: int) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(renderable)
    return out.getvalue().splitlines()


MIXTRAL = dict(
    model="mixtral-8x7b", hardware="dgx-h100-superpod", gpus=64, tp=2, pp=2, ep=8, micro_batch=1, sequence_parallel=True
)


def _row(lines: list[str], label: str) -> list[str]:
    """The cells of the table row whose term is ``label`` (the label ends where two spaces start)."""
    hits = [line for line in lines if line.startswith(label + "  ")]
    assert len(hits) == 1, (label, lines)
    return hits[0][len(label) :].split()


def test_explain_parts_name_the_whole_they_are_taken_from():
    pj = api.explain(api.make_request(**MIXTRAL))
    est = pj["estimate"]
    memory, time = est["parts"]["memory"], est["parts"]["time"]
    # the experts' weights, gradients and optimizer states: more than the optimizer term they sit under,
    # less than the three terms together, so "states: experts" under "optimizer" read as a part of it
    states = memory["states: experts"]
    assert est["memory"]["optimizer"] < states < sum(est["memory"][k] for k in ("weights", "gradients", "optimizer"))
    # attention and the MLPs forward and backward: together more than the backward term they follow
    assert sum(time.values()) > est["time"]["backward"]
    lines = render(TermsTable(pj, "memory"), 160) + render(TermsTable(pj, "time"), 160)
    experts = _row(lines, "  ↳ of weights+grads+optimizer: routed experts")
    assert float(experts[0]) == round(states, 2)
    routed = memory["activations: routed experts"]
    assert float(_row(lines, "  ↳ of activations: routed experts")[0]) == round(routed, 2)
    assert float(_row(lines, "  ↳ of forward+backward: attention")[0]) == round(time["fwd+bwd: attention"], 3)
    assert not any("↳ states" in line or "↳ fwd+bwd" in line for line in lines)


def test_every_part_label_names_its_whole():
    keys = ["states: attention", "states: experts", "activations: attention", "activations: shared experts"]
    keys += ["fwd+bwd: attention", "fwd+bwd: dense MLPs", "fwd+bwd: routed-expert GEMMs"]
    assert [part_label(k) for k in keys] == [
        "of weights+grads+optimizer: attention",
        "of weights+grads+optimizer: routed experts",
        "of activations: attention",
        "of activations: shared experts",
        "of forward+backward: attention",
        "of forward+backward: dense MLPs",
        "of forward+backward: routed-expert GEMMs",
    ]


# llama2-7b on 16 A100s: 36 plans tie with the fastest, and the safest three of them are not it (#18)
MANY_TIES = ["search", "--model", "llama2-7b", "--gpus", "8", "--top", "3"]


def test_search_shows_the_fastest_plan_when_ties_rank_it_below_the_top(tmp_path):
    result = CliRunner().invoke(cli, [*MANY_TIES, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    ranks = [pj["rank"] for pj in data["plans"]]
    fastest = data["fastest_rank"]
    assert data["tied_with_fastest"] > 3 and fastest > 3  # the case: the fastest is not among the top 3
    assert ranks == [1, 2, 3, fastest]  # ... so it follows them with its own rank
    last = data["plans"][-1]
    assert last["fastest"] and not any(pj["fastest"] for pj in data["plans"][:3])
    assert last["estimate"]["iteration_s"] == min(pj["estimate"]["iteration_s"] for pj in data["plans"])
    # the table: the top 3, a "…" row, the fastest with its rank; the footer says where it is
    text = CliRunner().invoke(cli, MANY_TIES, env={"COLUMNS": "80"}).stdout
    lines = text.splitlines()
    row = next(k for k, line in enumerate(lines) if plan_text(last) in line)
    assert lines[row].split()[0] == str(fastest) and lines[row - 1].strip() == "…"
    assert f"the fastest estimate is #{fastest} (*, shown after the top 3)" in " ".join(text.split())
    # --plan FILE#RANK picks by the rank shown, not by the position in the file
    path = tmp_path / "search.json"
    path.write_text(result.stdout)
    assert read_plan_file(f"{path}#{fastest}") == last
    with pytest.raises(PlannerError, match=f"allowed: 1..3, or {fastest} for the fastest estimate"):
        read_plan_file(f"{path}#4")


def test_pack_breaks_between_fields_only():
    fields = ["1.7B params (1.7B active)", "L 24, h 2304, a 24", "B 512 × s 2048"]
    assert pack(fields, 48) == ["1.7B params (1.7B active), L 24, h 2304, a 24,", "B 512 × s 2048"]
    assert pack(fields, 30) == ["1.7B params (1.7B active),", "L 24, h 2304, a 24,", "B 512 × s 2048"]
    assert pack(["a longer sentence of prose"], 10) == ["a longer", "sentence", "of prose"]


@pytest.mark.parametrize("width", [80, 100, 40])
@pytest.mark.parametrize("kind", ["models", "hardware"])
def test_preset_listings_fit_the_terminal_and_keep_every_fact(kind, width):
    from planner.cli.catalog import _facts
    from planner.presets import preset_names

    result = CliRunner().invoke(cli, ["presets", kind], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= width, "\n".join(line for line in lines if len(line) > width)
    assert lines[0] == kind and all(line.startswith("  ") for line in lines[1:])  # nothing wraps to the margin
    names = preset_names(kind)
    starts = [k for k, line in enumerate(lines) if line.split() and line.split()[0] in names and line[2] != " "]
    assert [lines[k].split()[0] for k in starts] == names  # every preset, in order, its name at the indent
    for k, name in zip(starts, names, strict=True):
        end = next((j for j in starts if j > k), len(lines))
        text = " ".join(" ".join(lines[k:end]).split()[1:])
        facts = _facts(kind, name)
        assert text == ", ".join(facts)  # every fact, nothing dropped or cut
        if kind == "models" and width >= 80:  # each fact on one line: no "B" / "512 × s 2048"
            assert all(any(f in line for line in lines[k:end]) for f in facts), (name, lines[k:end])


def _run(run_id: str, metric: str, published: float, predicted: float) -> dict:
    error = 100 * (predicted / published - 1)
    return dict(id=run_id, metric=metric, published=published, predicted=predicted, error_pct=error, assumptions=[])


VALIDATION = {
    "summary": {},
    "runs": [
        _run("MB-26.04.01-H100-LLAMA31_405B-PRETRAIN-FP8_CS-n1024-gbs1536", "tokens/s per GPU", 328.1, 326.1),
        _run("DGXC-v25.04-H100-GPT3-175B-bf16-n1024", "step time (s)", 8.453, 8.876),
        _run("K22-T5-22B-selSP:mfu", "MFU (Eq. 7)", 0.4183, 0.4320),
    ],
}


@pytest.mark.parametrize("width", [80, 100, 120])
def test_validation_table_shows_a_value_only_with_its_metric_and_every_id_whole(width):
    from planner.report.fidelity import validation_view

    lines = render(validation_view(VALIDATION), width)
    assert max(map(len, lines)) <= width
    header = next(line for line in lines if line.startswith("run "))
    assert "metric" in header and "error" in header  # at 80 columns too (before: hidden, a bare number shown)
    # the values go before their metric as the width shrinks: published first, then predicted
    assert "predicted" in header or "published" not in header
    assert ("published" in header) == (width >= 100) and (width > 80 or "predicted" not in header)
    firsts = [line.split()[0] for line in lines[3:] if line.split()]
    for r in VALIDATION["runs"]:  # an id too long for its column wraps at a hyphen, nothing is cut
        assert r["id"] in "".join(firsts)
    long_id = VALIDATION["runs"][0]["id"]
    k = next(k for k, first in enumerate(firsts) if long_id.startswith(first))
    assert firsts[k] == long_id or (firsts[k].endswith("-") and firsts[k] + firsts[k + 1] == long_id)
    assert (firsts[k] == long_id) == (width >= 120)
    for r in VALIDATION["runs"]:
        assert any(f"{r['error_pct']:+.1f}%" in line and r["metric"] in line for line in lines)


def test_calibration_steps_once_per_fit_and_validation(monkeypatch):
    """The progress bar's total is the number of fits and validations run_calibration reports: the
    fitting and validating are replaced by stand-ins (the real ones take minutes); the runs are real."""
    from planner.fidelity import calibrate as cal
    from planner.fidelity.runs import load_runs

    fake = cal.Fit("x", {}, 0.0, 0, [], 0.0)
    monkeypatch.setattr(cal, "fit", lambda *a, **k: fake)
    monkeypatch.setattr(cal, "fitted_hardware", lambda fits: {})
    monkeypatch.setattr(cal, "validate", lambda runs, hw: {"summary": {}, "runs": []})
    runs = load_runs()
    for loso, only in [(True, None), (False, None), (True, "dgx-h100-superpod"), (True, "gb300-nvl72")]:
        done: list[str] = []
        cal.run_calibration(loso=loso, only=only, step=done.append)
        assert len(done) == cal.calibration_steps(loso=loso, only=only)
        names = [n for n in cal.FITTED if only in (None, n)]
        held = sum(len(cal.held_out_sources(runs, n)) for n in names) if loso else 0
        assert len(done) == len(names) + 1 + held and done[-1] == "every run validated with the fits"
    assert sum(len(cal.held_out_sources(runs, n)) for n in cal.FITTED) > 0  # the loso case was exercised


def test_moe_calibration_steps_once_per_fit_and_validation(monkeypatch):
    from planner.fidelity import moe_fit

    monkeypatch.setattr(moe_fit, "fit", lambda runs, base=None: moe_fit.MoeFit(10.0, 1.0, len(runs), 0.1))
    summary = {"runs": 0, "median_abs_error_pct": 0.0, "max_abs_error_pct": 0.0}
    monkeypatch.setattr(moe_fit, "validate_moe", lambda runs, hw: {"summary": summary})
    from planner.fidelity.calibrate import Fit

    monkeypatch.setattr(moe_fit, "fit_a2a", lambda name, runs, op_us, phi=None, base=None: Fit(name, {}, 0.0, 0))
    monkeypatch.setattr(moe_fit, "solved_phi", lambda a2a, op_us, base=None: {})
    for loso in (True, False):
        done: list[str] = []
        out = moe_fit.run_moe_calibration(loso=loso, step=done.append)
        # the pooling test (every family alone at 10 ± 1, 0 σ from the rest: all pooled), two rounds of the fit (t_op 10
        # written, then 10 again: ux14), the pooling test at the fixed point, the validation, each held-out family
        assert len(done) == moe_fit.moe_calibration_steps(loso=loso) == 5 + len(moe_fit.FIT_MODELS) * loso
        assert list(out["a2a"]) == list(moe_fit.A2A_PRESETS)
        assert out["pooled"] == list(moe_fit.FIT_MODELS) and "predicted, not pooled" not in out["pooling_text"]


def test_plan_file_rank_zero_or_not_a_number_is_refused_not_read_as_rank_1(tmp_path):
    """``--plan FILE#0`` used to explain rank 1 without a word (``rank or 1``); ``FILE#abc`` said the
    file was not found. Both name the rank and what is allowed."""
    plan = {"model": "m", "gpus": 8, "training": {}, "parallel": {}, "options": {}}
    path = tmp_path / "search.json"
    path.write_text(json.dumps({"plans": [{**plan, "rank": 1}, {**plan, "rank": 2}]}))
    assert read_plan_file(f"{path}#2")["rank"] == 2
    with pytest.raises(PlannerError, match=r"--rank 0 is out of range: .* holds 2 plans \(allowed: 1..2\)"):
        read_plan_file(f"{path}#0")
    with pytest.raises(PlannerError, match=r"--rank 0 is out of range"):
        read_plan_file(str(path), rank=0)
    for bad in ("abc", "-1", ""):
        with pytest.raises(PlannerError, match=rf"#{bad}': the rank after # must be a whole number ≥ 1"):
            read_plan_file(f"{path}#{bad}")
