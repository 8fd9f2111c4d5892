"""Command line of the whole-run commands: explain --schedule/--schedule-file, sweep, search --min-gpus, compare,
--tokens/--gpu-hour-price; every bad input is one line on stderr and exit code 2."""

from __future__ import annotations

import json
import os
import struct
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import cli

from conftest import pipeline_s

GPT3 = ["--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "16"]
SMALL = ["--model", "gpt-1.7b", "--gpus", "8", "--pp", "4", "--global-batch", "16"]  # m = 16/(1·2) = 8


def run(args: list[str]):
    return CliRunner().invoke(cli, args)


def assert_bad_input(result, *needles: str):
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("megaplan: error: "), result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0]


# ----------------------------------------------------------------------------- explain


def test_explain_schedule_in_terminal():
    result = run(["explain", *SMALL, "--schedule"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Pipeline schedule" in out and "stage 3 │" in out and "blank: bubble" in out
    assert "days to train" in out and "GPU-hours" in out


def test_explain_schedule_json():
    result = run(["explain", *SMALL, "--schedule", "--json", "--tokens", "3e11"])
    assert result.exit_code == 0, result.output
    pj = json.loads(result.stdout)
    sched = pj["schedule"]
    assert (sched["p"], sched["m"], sched["vpp"]) == (4, 8, 1)
    assert len(sched["ops"]) == 2 * 4 * 8
    assert sched["pipeline_s"] == pytest.approx(pipeline_s(pj["estimate"]["time"]), rel=0.02)
    assert pj["estimate"]["train_tokens"] == 3e11


def test_explain_schedule_files(tmp_path):
    pytest.importorskip("matplotlib")
    svg, png = tmp_path / "s.svg", tmp_path / "s.png"
    for path in (svg, png):
        result = run(["explain", *SMALL, "--schedule-file", str(path)])
        assert result.exit_code == 0, result.output
        assert f"wrote {path}" in result.stderr
    texts = ["".join(t.itertext()) for t in ET.parse(svg).getroot().iter("{http://www.w3.org/2000/svg}text")]
    assert {"stage 0", "stage 1", "stage 2", "stage 3", "time (s)"} <= set(texts)
    assert any(t.startswith("gpt-1.7b on 8 GPUs") for t in texts)
    width, height = struct.unpack(">II", png.read_bytes()[16:24])
    assert width > 500 and height > 200


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--schedule-file", "x.pdf"], ["unknown picture format '.pdf'", ".svg, .png"]),
        (["--schedule-file", "/nonexistent-dir/x.svg"], ["does not exist"]),
        (["--gpu-hour-price", "-2"], ["--gpu-hour-price"]),
        (["--gpu-hour-price", "0"], ["--gpu-hour-price"]),
        (["--tokens", "0"], ["--tokens", "positive token count"]),
        (["--tokens", "-300e9"], ["--tokens"]),
        (["--tokens", "lots"], ["--tokens"]),
    ],
)
def test_explain_bad_input(extra, needles):
    assert_bad_input(run(["explain", *GPT3, *extra]), *needles)


def test_unwritable_picture_path(tmp_path):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        target = folder / "x.png"
        if os.access(folder, os.W_OK):  # root ignores permission bits; /proc refuses new files even to root
            target = Path("/proc/megaplan-schedule.png")
        assert_bad_input(run(["explain", *SMALL, "--schedule-file", str(target)]), "cannot write")
    finally:
        folder.chmod(0o700)


@pytest.mark.parametrize("tokens, expected", [("300e9", 300e9), ("3e11", 3e11), ("300B", 300e9), ("1.4T", 1.4e12)])
def test_tokens_syntax(tokens, expected):
    result = run(["explain", *GPT3, "--json", "--tokens", tokens, "--gpu-hour-price", "2.5"])
    est = json.loads(result.stdout)["estimate"]
    assert est["train_tokens"] == expected
    assert est["train_days"] == pytest.approx(expected / est["tokens_per_s"] / 86_400)
    assert est["cost"] == pytest.approx(2.5 * est["gpu_hours"])


# ----------------------------------------------------------------------------- search


def test_search_json_has_time_and_cost():
    result = run(["search", "--model", "gpt3-175b", "--gpus", "1024", "--top", "2", "--json", "--tokens", "1e12"])
    assert result.exit_code == 0, result.output
    for pj in json.loads(result.stdout)["plans"]:
        assert pj["estimate"]["train_tokens"] == 1e12 and pj["estimate"]["cost"] is None
        assert pj["estimate"]["energy_mwh"] > 0


def test_search_min_gpus():
    result = run(["search", "--model", "gpt3-175b", "--hardware", "dgx-a100-40gb-superpod", "--min-gpus"])
    assert result.exit_code == 0, result.output
    assert "smallest: 96 GPUs" in result.stdout
    data = json.loads(run(["search", "--model", "gpt3-175b", "--min-gpus", "--json"]).stdout)
    assert data["min_gpus"] == 48 and data["sizes"][0]["plan"]["estimate"]["fits"]


def test_search_min_gpus_bad_input():
    assert_bad_input(run(["search", "--model", "gpt3-175b"]), "--gpus", "--min-gpus")
    assert_bad_input(run(["search", "--model", "gpt3-175b", "--gpus", "64", "--min-gpus"]), "not both")


# ----------------------------------------------------------------------------- sweep


def test_sweep_table_and_json():
    result = run(["sweep", "--model", "gpt3-175b", "--gpus", "128:1024"])
    assert result.exit_code == 0, result.output
    for n in ("128", "256", "512", "1,024"):
        assert n in result.stdout
    assert "scaling" in result.stdout and "days (300B)" in result.stdout and "100%" in result.stdout
    data = json.loads(
        run(
            [
                "sweep",
                "--model",
                "gpt3-175b",
                "--gpus",
                "128,256",
                "--json",
                "--tokens",
                "1e12",
                "--recompute",
                "selective",
            ]
        ).stdout
    )
    assert [r["gpus"] for r in data["rows"]] == [128, 256] and data["train_tokens"] == 1e12
    assert all(r["plan"]["parallel"]["recompute"] == "selective" for r in data["rows"])  # search pins pass through


def test_sweep_plot(tmp_path):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "scaling.svg"
    result = run(["sweep", "--model", "gpt3-175b", "--gpus", "128:512", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert f"wrote {plot}" in result.stderr
    texts = ["".join(t.itertext()) for t in ET.parse(plot).getroot().iter("{http://www.w3.org/2000/svg}text")]
    assert {"GPUs", "tokens/s", "128", "256", "512"} <= set(texts)
    assert any(t.startswith("gpt3-175b on dgx-a100-superpod") for t in texts)


def test_pictures_without_matplotlib(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the plot extra were not installed
    svg = run(["explain", *SMALL, "--schedule-file", str(tmp_path / "s.svg")])  # written as text
    assert svg.exit_code == 0 and "stage 3" in (tmp_path / "s.svg").read_text()
    assert_bad_input(
        run(["explain", *SMALL, "--schedule-file", str(tmp_path / "s.png")]),
        "--schedule-file needs matplotlib",
        'pip install ".[plot]" from the megaplan checkout',
    )
    assert_bad_input(
        run(["sweep", "--model", "gpt3-175b", "--gpus", "128", "--plot", str(tmp_path / "p.png")]),
        "--plot needs matplotlib",
        'pip install ".[plot]" from the megaplan checkout',
    )
    assert run(["explain", *SMALL, "--schedule"]).exit_code == 0  # the terminal drawing needs no matplotlib


@pytest.mark.parametrize(
    "command", [["explain", *SMALL, "--schedule-file"], ["sweep", "--model", "gpt3-175b", "--gpus", "128", "--plot"]]
)
def test_an_existing_picture_is_refused_before_matplotlib_is_asked_for(monkeypatch, tmp_path, command):
    # trial 3: without matplotlib, `--schedule-file existing.png` said "needs matplotlib"; installing it only led
    # to "exists; pass --overwrite". The file the user has is the first thing to say.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    existing = tmp_path / "existing.png"
    existing.write_bytes(b"mine")
    result = run([*command, str(existing)])
    assert_bad_input(result, f"{command[-1]}: {existing} exists; pass --overwrite to replace it")
    assert "matplotlib" not in result.stderr
    assert existing.read_bytes() == b"mine"
    assert_bad_input(run([*command, str(existing), "--overwrite"]), f"{command[-1]} needs matplotlib")


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--gpus", "8,128"], ["no plan on 8 GPUs", "--skip-infeasible"]),
        (["--gpus", "40"], ["no plan on 40 GPUs", "no legal plan"]),
        (["--gpus", "4096:64"], ["--gpus"]),
        (["--gpus", "lots"], ["--gpus"]),
        (["--gpus", "128", "--plot", "p.gif"], ["unknown picture format"]),
        (["--gpus", "128", "--tokens", "-1"], ["--tokens"]),
        (["--gpus", "128", "--gpu-hour-price", "-1"], ["--gpu-hour-price"]),
    ],
)
def test_sweep_bad_input(args, needles):
    assert_bad_input(run(["sweep", "--model", "gpt3-175b", *args]), *needles)


def test_sweep_skip_infeasible_lists_the_row():
    result = run(["sweep", "--model", "gpt3-175b", "--gpus", "8,128", "--skip-infeasible"])
    assert result.exit_code == 0, result.output
    assert "no plan:" in result.stdout


# ----------------------------------------------------------------------------- compare


def test_compare_prefixed_options():
    result = run(["compare", *GPT3, "--a", "--recompute full", "--b", "--recompute selective --sequence-parallel"])
    assert result.exit_code == 0, result.output
    assert "B is faster" in result.stdout and "activations (GiB)" in result.stdout


def test_compare_plan_files_and_json(tmp_path):
    plans = tmp_path / "plans.json"
    plans.write_text(run(["search", "--model", "gpt3-175b", "--gpus", "1024", "--top", "3", "--json"]).stdout)
    result = run(["compare", f"{plans}#1", f"{plans}#3", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    saved = json.loads(plans.read_text())["plans"]
    assert data["a"]["estimate"]["iteration_s"] == pytest.approx(saved[0]["estimate"]["iteration_s"])
    assert data["b"]["estimate"]["iteration_s"] == pytest.approx(saved[2]["estimate"]["iteration_s"])
    quicker = "a" if saved[0]["estimate"]["iteration_s"] < saved[2]["estimate"]["iteration_s"] else "b"
    assert data["summary"]["faster"] in (quicker, None)  # ties rank by risk and headroom before speed
    one = run(["compare", str(plans), "--b", "--tp 8 --vpp 1 --micro-batch 1", "--json"])
    assert one.exit_code == 0, one.output
    assert json.loads(one.stdout)["b"]["parallel"]["tp"] == 8


@pytest.mark.parametrize(
    "args, needles",
    [
        (GPT3, ["nothing to compare"]),
        ([*GPT3, "--a", "--tp 3"], ["plan A (--a)", "not divisible"]),
        ([*GPT3, "--b", "--bogus 1"], ["--b", "No such option"]),
        ([*GPT3, "--a", "--plan x.json"], ["--a takes plan flags", "--plan"]),
        (["a.json", "b.json", "c.json"], ["two plan files"]),
        (["missing.json", "other.json"], ["not found"]),
    ],
)
def test_compare_bad_input(args, needles):
    assert_bad_input(run(["compare", *args]), *needles)
