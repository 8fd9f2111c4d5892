"""megaplan calibrate --from-log: Megatron-LM logs of the user's own runs, read, checked against their
launch scripts, and refitted into a hardware YAML usable wherever a preset is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import cli
from planner.costs.estimate import evaluate
from planner.fidelity.calibrate import with_calibration
from planner.fidelity.megatron_log import LogError, iteration_line, read_training_log
from planner.fidelity.validate import on_hardware
from planner.hardware.spec import HardwareSpec
from planner.megatron.importer import import_megatron
from planner.presets import load_hardware, load_spec
from planner.space.grid import PlanGrid

SCRIPT = """#!/bin/bash
# a Llama-3-8B-shaped run on one DGX H100
torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \\
  --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \\
  --group-query-attention --num-query-groups 8 --seq-length {s} --max-position-embeddings {s} \\
  --position-embedding-type rope --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights \\
  --disable-bias-linear --vocab-size 128256 --hidden-dropout 0 --attention-dropout 0 \\
  --tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 1 --global-batch-size 64 \\
  --bf16 {fp8} --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --train-iters 100
"""
TRUTH = {"gemm_efficiency": 0.81, "fp8_gemm_efficiency": 0.74, "attention_scale": 0.97, "layer_overhead_us": 150.0}

# Lines in the two formats public issues quote, numbers our own: Megatron-LM >= 2024 (a timestamp and
# the throughput, NVIDIA/Megatron-LM issue #756 shows an MoE run's) and older releases (neither,
# learning rate in 3 decimals: epfLLM/Megatron-LLM issue #11).
LOGS = Path(__file__).parent / "data" / "megatron_logs"
NEW_FORMAT = (LOGS / "iterations_2024.log").read_text()
OLD_FORMAT = (LOGS / "iterations_2023.log").read_text()


def test_reads_the_lines_megatron_prints_today():
    log = read_training_log(
        "using world size: 8, data-parallel size: 4, context-parallel size: 1\n" + NEW_FORMAT, "a.log"
    )
    assert log.iterations == (10, 20, 30) and log.global_batch == 64 and log.world_size == 8
    assert log.steady_iteration_s == pytest.approx((6302.7 + 6298.1) / 2 / 1e3)  # the first interval left out
    assert log.steady_tflops_per_gpu == pytest.approx((410.5 + 410.8) / 2)
    assert log.max_allocated_mb == pytest.approx(51234.56) and log.max_reserved_mb == pytest.approx(60000.0)


def test_reads_the_older_lines_without_timestamp_or_throughput():
    log = read_training_log(OLD_FORMAT, "old.log")
    assert log.iterations == (130, 131, 132) and log.global_batch == 1024 and log.tflops_per_gpu == ()
    assert log.steady_iteration_s == pytest.approx((80111.1 + 80555.5) / 2 / 1e3)


def _second_time(log: str, ms: str) -> str:
    """The log with its second iteration line's elapsed time replaced by ``ms``."""
    lines = log.splitlines()
    lines[1] = re.sub(r"(elapsed time per iteration \(ms\):\s*)[\d.]+", lambda m: m.group(1) + ms, lines[1])
    return "\n".join(lines)


@pytest.mark.parametrize(
    "text, message",
    [
        ("training ...\nSome other line\n", "no Megatron-LM iteration lines"),
        (OLD_FORMAT.splitlines()[0], "only one iteration line"),
        (OLD_FORMAT.replace("global batch size:  1024", "global batch size:   512", 1), "changes within the log"),
        # trial 5: a zero time ended in a traceback of the fit (residuals not finite); nan and negative
        # times were skipped unread, so the log was said to have "only one iteration line"
        (_second_time(OLD_FORMAT, "0.0"), r"bad.log, line 2: elapsed time per iteration \(ms\) is '0.0'"),
        (_second_time(OLD_FORMAT, "nan"), r"line 2: elapsed time per iteration \(ms\) is 'nan'; allowed: a positive"),
        (_second_time(OLD_FORMAT, "-4000.0"), r"line 2: elapsed time per iteration \(ms\) is '-4000.0'"),
    ],
)
def test_unusable_logs_say_why(text, message):
    with pytest.raises(LogError, match=message):
        read_training_log(text, "bad.log")


def _write_run(tmp_path: Path, s: int, fp8: bool, hw: HardwareSpec) -> tuple[str, str]:
    """A launch script and the log the planner predicts for it with the TRUTH factors."""
    tag = f"{s}{'-fp8' if fp8 else ''}"
    script = tmp_path / f"run-{tag}.sh"
    script.write_text(SCRIPT.format(s=s, fp8="--fp8-format hybrid --fp8-recipe delayed" if fp8 else ""))
    req = on_hardware(import_megatron(script.read_text(), hardware=hw).request, with_calibration(hw, TRUTH))
    ev = evaluate(PlanGrid.from_plans([req.plan]), req.ctx)
    it = float(ev.iteration_s[0])
    tflops = float(ev.flops["megatron"][0]) / it / req.gpus / 1e12
    lines = [iteration_line(i, 100, it * (1.4 if i == 10 else 1.0), tflops, 64) for i in (10, 20, 30, 40)]
    log = tmp_path / f"train-{tag}.log"
    log.write_text("using world size: 8, data-parallel size: 4\n" + "\n".join(lines) + "\n")
    return str(log), str(script)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("logs")
    hw = load_hardware("dgx-h100-superpod")
    runs = [(2048, False), (2048, True), (8192, False), (8192, True), (16384, False)]  # 5 runs: 4 factors
    return tmp, [_write_run(tmp, s, fp8, hw) for s, fp8 in runs]


def test_recovers_known_factors_from_synthetic_logs_into_a_usable_hardware_file(synthetic, tmp_path):
    _, pairs = synthetic
    out = tmp_path / "my-cluster.yaml"
    args = ["calibrate", "--hardware", "dgx-h100-superpod", "-o", str(out)]
    for log, script in pairs:
        args += ["--from-log", log, "--megatron-args-file", script]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    hw = load_spec(HardwareSpec, str(out))
    assert hw.name == "my-cluster"
    # five runs of 4 % noise each, with the kernel priors (TRUTH agrees with them): the GEMM rates and
    # the per-layer overhead come back within 2 %; attention_scale, which the runs give 16 % of its
    # information, keeps the preset's value and says it is not identifiable
    for name in ("gemm_efficiency", "fp8_gemm_efficiency", "layer_overhead_us"):
        factor = hw.calibration.factors[name]
        assert factor.status == "fitted" and "train-2048.log" in factor.source, (name, factor.source)
        assert getattr(hw.calibration, name) == pytest.approx(TRUTH[name], rel=0.02), name
    assert hw.calibration.factors["attention_scale"].status == "fitted"  # the preset's entry, kept as it was
    assert "train-2048.log" not in hw.calibration.factors["attention_scale"].source
    kept = load_hardware("dgx-h100-superpod").calibration.attention_scale
    assert f"attention_scale: kept at {kept:.4g}: the runs give 16% of its information" in result.output
    base = load_hardware("dgx-h100-superpod").accuracy  # the band: in-sample error, never below the preset's
    assert hw.accuracy.validation_error_frac >= base.validation_error_frac
    # σ from five runs reflects five runs of RUN_NOISE (4 %), never the exact synthetic logs' 0 residual
    assert 0.015 < hw.accuracy.calibration_uncertainty_frac < 0.05 and "from-log" in str(hw.accuracy.sources)
    explained = CliRunner().invoke(cli, ["explain", "--model", "llama3-8b", "--gpus", "8", "--hardware", str(out)])
    assert explained.exit_code == 0, explained.output
    again = CliRunner().invoke(cli, args)  # the file exists now: not overwritten unless asked
    assert again.exit_code == 2 and "--overwrite" in again.output and len(again.output.strip().splitlines()) == 1
    header = out.read_text().split("name:")[0]
    assert "train-2048.log" in header and "README" not in header and "published" not in header


def _bad(args: list[str]) -> str:
    result = CliRunner().invoke(cli, ["calibrate", *args])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    return result.output


def test_bad_logs_and_mismatched_scripts_get_one_line_and_exit_2(synthetic, tmp_path):
    tmp, pairs = synthetic
    log, script = pairs[0]
    empty = tmp_path / "empty.log"
    empty.write_text("nothing to see\n")
    out = str(tmp_path / "x.yaml")
    assert "no Megatron-LM iteration lines" in _bad(
        ["--from-log", str(empty), "--megatron-args-file", script, "-o", out]
    )
    other_batch = tmp_path / "other.sh"
    other_batch.write_text(Path(script).read_text().replace("--global-batch-size 64", "--global-batch-size 128"))
    assert "not the same run" in _bad(["--from-log", log, "--megatron-args-file", str(other_batch), "-o", out])
    bigger = tmp_path / "bigger.sh"
    bigger.write_text(Path(script).read_text().replace("--num-layers 32", "--num-layers 48"))
    assert "not the same model" in _bad(["--from-log", log, "--megatron-args-file", str(bigger), "-o", out])
    assert "--megatron-args-file" in _bad(["--from-log", log, "-o", out])
    assert "-o/--output" in _bad(["--from-log", log, "--megatron-args-file", script])


def _one_run(tmp_path: Path, scale: float, hw_name: str = "dgx-h100-superpod") -> tuple[str, str]:
    """A BF16 run's script and a log ``scale`` times the time the planner predicts on ``hw_name``."""
    script = tmp_path / "run.sh"
    script.write_text(SCRIPT.format(s=4096, fp8=""))
    req = import_megatron(script.read_text(), hardware=load_hardware(hw_name)).request
    ev = evaluate(PlanGrid.from_plans([req.plan]), req.ctx)
    it, flops = float(ev.iteration_s[0]) * scale, float(ev.flops["megatron"][0])
    lines = [iteration_line(i, 100, it, flops / it / 8 / 1e12, 64) for i in (10, 20, 30)]
    log = tmp_path / f"x{scale}-{hw_name}.log"
    log.write_text("using world size: 8, data-parallel size: 4\n" + "\n".join(lines) + "\n")
    return str(log), str(script)


@pytest.mark.parametrize("scale", [0.2, 5.0])
def test_a_log_the_factors_cannot_reach_names_the_likely_assumption_and_writes_nothing(tmp_path, scale):
    log, script = _one_run(tmp_path, scale)
    out = tmp_path / "mine.yaml"
    args = ["calibrate", "--from-log", log, "--megatron-args-file", script, "-o", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    error = result.stderr.strip().splitlines()[-1]
    assert "cannot reach it within their bands" in error and "nothing written (--force" in error
    # 5x slower than an H100 run is nearer an A100's time; 5x faster than any preset: the direction is said
    assert ("hardware (dgx-a100" in error) if scale > 1 else ("faster than any factor in its band allows" in error)
    assert not out.exists()
    forced = CliRunner().invoke(cli, [*args, "--force"])
    assert forced.exit_code == 0 and "warning:" in forced.stderr and out.exists()
    hw = load_spec(HardwareSpec, str(out))  # a usable file even so, its error capped below 1
    assert 0.5 < hw.accuracy.validation_error_frac < 1


def test_a_faster_gpu_than_the_preset_is_named_as_the_likely_cause(tmp_path):
    log, script = _one_run(tmp_path, 1.0, "dgx-b200-superpod")  # a B200 run calibrated from the H100 preset
    result = CliRunner().invoke(
        cli, ["calibrate", "--from-log", log, "--megatron-args-file", script, "-o", str(tmp_path / "m.yaml")]
    )
    assert result.exit_code == 2 and "likely wrong: hardware (dgx-b200-superpod" in result.stderr, result.output


def test_one_run_gives_the_uncertainty_of_one_run_not_of_its_zero_residual(tmp_path):
    log, script = _one_run(tmp_path, 0.97)
    out = tmp_path / "mine.yaml"
    args = ["calibrate", "--json", "--from-log", log, "--megatron-args-file", script, "-o", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    import json

    fit = json.loads(result.stdout)["fit"]
    gemm = fit["factors"]["gemm_efficiency"]
    # one run of RUN_NOISE 4 % against the 5 % kernel prior: σ(ln θ) = 1/√(1/0.04²·f² + 1/0.05²) with f
    # the GEMM share of the time, between 3.1 % (f = 1) and 5 % (f = 0); never the 0.1 % of a zero residual
    assert gemm["status"] == "fitted" and 0.031 < gemm["sigma"] / gemm["value"] < 0.05
    assert gemm["informed"] < 0.7  # and it says how much of it came from the run
    others = [f for n, f in fit["factors"].items() if n != "gemm_efficiency"]
    assert all(f["status"] == "not identifiable" and f["why"] for f in others)
    assert fit["prediction_sigma"] > 0.015


def test_calibrate_help_shows_the_log_lines_it_reads_and_a_true_run_time():
    text = CliRunner().invoke(cli, ["calibrate", "--help"], env={"COLUMNS": "100"}).output
    assert "a few minutes" not in text
    assert "elapsed time per iteration (ms)" in text and "using world size" in text
    assert "--overwrite" in text


def test_env_gives_a_launch_script_its_variables_as_explain_does(tmp_path):
    log, script = _one_run(tmp_path, 0.97)
    templated = tmp_path / "templated.sh"  # the trial's script: its sizes come from the environment
    templated.write_text(Path(script).read_text().replace("--num-layers 32", "--num-layers $NUM_LAYERS"))
    out = tmp_path / "mine.yaml"
    args = ["calibrate", "--from-log", log, "--megatron-args-file", str(templated), "-o", str(out)]
    unset = CliRunner().invoke(cli, args)
    # the error tells the user to pass --env NUM_LAYERS=VALUE, so calibrate must take it
    assert unset.exit_code == 2 and "pass it with --env NUM_LAYERS=VALUE" in unset.stderr, unset.output
    assert not out.exists()
    given = CliRunner().invoke(cli, [*args, "--env", "NUM_LAYERS=32"])
    assert given.exit_code == 0 and out.exists(), given.output
    other = CliRunner().invoke(cli, [*args, "--overwrite", "--env", "NUM_LAYERS=48"])  # the value is used
    assert other.exit_code == 2 and "not the same model" in other.stderr, other.output


def test_calibrate_names_the_donor_of_a_preset_it_does_not_fit():
    # dgx-h200-superpod carries dgx-h100-superpod's factors (calibrate.FAMILIES); its three MLPerf rows (Nebius's v5.0
    # 405B on 512 and 1,024 H200, HPE's v5.1 8B on 64) are validated out of sample, never fitted
    result = CliRunner().invoke(cli, ["calibrate", "--hardware", "dgx-h200-superpod", "--no-loso"])
    assert result.exit_code == 2
    assert "carries dgx-h100-superpod's factors (its 3 published runs validated out of sample)" in result.output
    assert "--hardware dgx-h100-superpod" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["calibrate", "--hardware", "dgx-a100-40gb-superpod", "--no-loso"])
    assert result.exit_code == 2 and "(no run of its own)" in result.output
    result = CliRunner().invoke(cli, ["calibrate", "--hardware", "no-such-preset", "--no-loso"])
    assert result.exit_code == 2 and "has no published runs to fit; fitted presets: dgx-a100-superpod" in result.output
