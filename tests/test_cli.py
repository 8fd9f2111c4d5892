"""The command line (docs/architecture.md, the CLI contract): help, --json, exit codes, one-line errors."""

from __future__ import annotations

import json

import click
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from planner.cli import cli
from planner.presets import load_hardware

GPT3 = ["--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "16", "--micro-batch", "1"]


def run(args: list[str]):
    return CliRunner().invoke(cli, args)


def _commands(group: click.Group, prefix=()):
    for name, cmd in sorted(group.commands.items()):
        yield (*prefix, name)
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*prefix, name))


ALL_COMMANDS = list(_commands(cli))


def test_root_help():
    result = run(["--help"])
    assert result.exit_code == 0
    assert "explain" in result.stdout and "presets" in result.stdout


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=" ".join)
def test_every_command_has_help(command):
    result = run([*command, "--help"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Usage:")


def test_explain_and_presets_exist():
    assert {("explain",), ("presets",), ("presets", "models"), ("presets", "hardware"), ("presets", "show")} <= set(
        ALL_COMMANDS
    )


# ----------------------------------------------------------------------------- explain --json

ESTIMATE_KEYS = {
    "iteration_s",
    "tokens_per_s",
    "tflops_per_gpu",
    "hw_tflops_per_gpu",
    "mfu",
    "hfu",
    "peak_memory_gib",
    "memory",
    "time",
}
MEMORY_KEYS = {
    "weights",
    "gradients",
    "optimizer",
    "activations",
    "cuda_graphs",
    "workspaces",
    "nccl",
    "cuda_context",
    "fragmentation",
    "total",
}
TIME_KEYS = {"forward", "backward", "recompute", "tp_comm", "pp_comm", "dp_comm", "bubble", "optimizer"}


def explain_json(args: list[str]) -> dict:
    result = run(["explain", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    "args",
    [
        GPT3 + ["--recompute", "full", "--precision", "fp16", "--attention-kernel", "unfused"],
        GPT3 + ["--recompute", "selective", "--sequence-parallel", "--vpp", "2", "--distributed-optimizer"],
        ["--model", "gpt-1.7b", "--gpus", "8"],
        ["--model", "gpt-22b", "--gpus", "8", "--tp", "8", "--recompute", "selective", "--sequence-parallel"],
    ],
    ids=["gpt3-full", "gpt3-interleaved", "1.7b-dp8", "22b-tp8"],
)
def test_explain_json_shape_and_sums(args):
    out = explain_json(args)
    est = out["estimate"]
    assert ESTIMATE_KEYS <= set(est)
    assert MEMORY_KEYS <= set(est["memory"])
    assert TIME_KEYS <= set(est["time"])
    mem = est["memory"]
    parts = sum(mem[k] for k in MEMORY_KEYS - {"total"})
    assert parts == pytest.approx(mem["total"], rel=1e-9)
    assert mem["total"] == pytest.approx(est["peak_memory_gib"], rel=1e-9)
    # every time term, including any beyond the required ones, adds up to the iteration
    assert sum(est["time"].values()) == pytest.approx(est["iteration_s"], rel=1e-9)
    # tokens per second is B·s over the iteration time
    tr = out["training"]
    assert est["tokens_per_s"] == pytest.approx(tr["global_batch"] * tr["seq_len"] / est["iteration_s"], rel=1e-9)
    # MFU and HFU are the TFLOP/s per GPU over the A100's 312 TFLOP/s (Narayanan 2021 §5)
    assert est["mfu"] == pytest.approx(est["tflops_per_gpu"] / 312, rel=1e-9)
    assert est["hfu"] == pytest.approx(est["hw_tflops_per_gpu"] / 312, rel=1e-9)


def test_explain_json_echoes_the_plan():
    out = explain_json(GPT3 + ["--global-batch", "1536"])
    assert (out["model"], out["hardware"], out["gpus"]) == ("gpt3-175b", "dgx-a100-superpod", 1024)
    par = out["parallel"]
    assert (par["tp"], par["pp"], par["dp"], par["micro_batch"]) == (8, 16, 8, 1)
    assert par["stage_layers"] == [6] * 16
    assert out["training"]["global_batch"] == 1536 and out["training"]["seq_len"] == 2048


def test_explain_json_flops_per_gpu():
    # GPT-3 with V = 51200 (50257 padded at t = 8), over the iteration time and 1024 GPUs
    out = explain_json(GPT3 + ["--global-batch", "1536", "--recompute", "selective"])
    B, s, L, h, V = 1536, 2048, 96, 12288, 51200
    est = out["estimate"]
    per_gpu = est["iteration_s"] * 1024 * 1e12
    # model FLOPs: Korthikanti et al. 2022 Eq. 7, 72·B·L·s·h²·(1 + s/(6h) + V/(12hL))
    eq7 = 72 * B * L * s * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
    assert est["tflops_per_gpu"] == pytest.approx(eq7 / per_gpu, rel=1e-3)
    # hardware FLOPs with selective recompute, counted honestly: 72·B·L·s·h²·(1 + 2s/(9h) + V/(12hL))
    honest = 72 * B * L * s * h**2 * (1 + 2 * s / (9 * h) + V / (12 * h * L))
    assert est["hw_tflops_per_gpu"] == pytest.approx(honest / per_gpu, rel=1e-3)
    # Megatron-LM's logged figure halves the attention scores: 72·B·s·L·h²·(1 + s/(12h) + V/(12hL)) (§9)
    logged = 72 * B * L * s * h**2 * (1 + s / (12 * h) + V / (12 * h * L))
    assert est["megatron_tflops_per_gpu"] == pytest.approx(logged / per_gpu, rel=1e-3)


def test_explain_json_peak_is_the_most_loaded_stage():
    out = explain_json(GPT3 + ["--global-batch", "1536", "--recompute", "full"])
    stages = out["stages"]
    assert sorted(stage["stage"] for stage in stages) == list(range(16))
    assert max(stage["total"] for stage in stages) == pytest.approx(out["estimate"]["peak_memory_gib"], rel=1e-12)
    for stage in stages:  # each stage's terms add up too
        assert sum(stage[k] for k in MEMORY_KEYS - {"total"}) == pytest.approx(stage["total"], rel=1e-9)


def test_explain_text_output():
    result = run(["explain", "--model", "gpt-1.7b", "--gpus", "8"])
    assert result.exit_code == 0, result.output
    assert "gpt-1.7b" in result.stdout and "Korthikanti" in result.stdout


# ----------------------------------------------------------------------------- bad input


def assert_bad_input(result, *needles: str):
    """Exit code 2, exactly one line on stderr, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    "args, needles",
    [
        (["explain", "--model", "gpt-9000", "--gpus", "8"], ["gpt-9000", "gpt3-175b"]),
        (["explain", "--model", "gpt3-175b", "--gpus", "1000", "--tp", "8", "--pp", "16"], ["1000", "128"]),
        (["explain", "--model", "gpt3-175b", "--tp", "0"], ["--tp"]),
        (["explain", "--model", "gpt3-175b", "--recompute", "partial"], ["partial", "selective"]),
        (["explain", "--model", "gpt3-175b", "--gpus", "abc"], ["--gpus", "abc"]),
        (["explain", "--model", "gpt3-175b", "--hardware", "dgx-z100"], ["dgx-z100"]),
        pytest.param(
            ["explain", "--model", "gpt3-175b", "--gpus", "64", "--tp", "8", "--pp", "8", "--vpp", "5"], ["vpp 5"]
        ),
        (["explain", "--gpus", "8"], ["--model"]),
        # 126 layers do not split over 16 stages; 126 + embedding + loss = 128 do
        pytest.param(
            ["explain", "--model", "llama3.1-405b", "--gpus", "16384", "--seq-len", "8192", "--tp", "8", "--pp", "16"],
            ["126 layers", "pp 16", "both --account-for-embedding-in-pipeline-split and --account-for-loss"],
        ),
        (["explain", "--model", "gpt3-175b", "--no-such-option"], ["--no-such-option"]),
        (["presets", "show", "gpt-9000"], ["gpt-9000"]),
        (["no-such-command"], ["no-such-command"]),
    ],
    ids=[
        "unknown-model",
        "gpus-not-divisible",
        "tp-0",
        "recompute-partial",
        "gpus-abc",
        "unknown-hardware",
        "vpp-split",
        "missing-model",
        "pp-split-names-accounting-flags",
        "unknown-option",
        "unknown-preset-show",
        "unknown-command",
    ],
)
def test_bad_input_exits_2_with_one_line(args, needles):
    assert_bad_input(run(args), *needles)


MODEL_YAML = {
    "name": "tiny",
    "source": "test",
    "num_layers": 4,
    "hidden_size": 448,
    "num_attention_heads": 7,
    "max_position_embeddings": 2048,
    "vocab_size": 1000,
}


def write_yaml(tmp_path, name, data) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_heads_not_divisible_by_tp_from_a_yaml(tmp_path):
    path = write_yaml(tmp_path, "tiny.yaml", MODEL_YAML)
    ok = run(["explain", "--model", path, "--gpus", "1", "--global-batch", "8", "--seq-len", "1024", "--json"])
    assert ok.exit_code == 0, ok.output
    line = assert_bad_input(
        run(["explain", "--model", path, "--gpus", "2", "--tp", "2", "--global-batch", "8", "--seq-len", "1024"]),
        "7 attention heads",
        "tp 2",
    )
    assert "allowed tp: 1, 7" in line


def test_hidden_not_a_multiple_of_heads_from_a_yaml(tmp_path):
    path = write_yaml(tmp_path, "odd.yaml", {**MODEL_YAML, "hidden_size": 1000})
    assert_bad_input(
        run(["explain", "--model", path, "--gpus", "1", "--global-batch", "8", "--seq-len", "1024"]),
        "hidden_size (1000)",
        "num_attention_heads (7)",
    )


def test_negative_bandwidth_hardware_yaml(tmp_path):
    data = load_hardware("dgx-a100-superpod").model_dump(exclude_unset=True)
    data["network"]["nic_gbits_per_s"] = -200.0
    path = write_yaml(tmp_path, "bad-hw.yaml", data)
    assert_bad_input(run(["explain", *GPT3, "--hardware", path]), "nic_gbits_per_s", "greater than 0")


def test_missing_yaml_file(tmp_path):
    assert_bad_input(run(["explain", "--model", str(tmp_path / "missing.yaml"), "--gpus", "8"]), "not found")


def test_malformed_yaml_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: broken\nnum_layers: [4\n")
    assert_bad_input(run(["explain", "--model", str(path), "--gpus", "8"]), "malformed YAML")


def test_model_without_training_defaults_needs_global_batch(tmp_path):
    path = write_yaml(tmp_path, "tiny.yaml", MODEL_YAML)
    assert_bad_input(run(["explain", "--model", path, "--gpus", "1"]), "--global-batch")


# ----------------------------------------------------------------------------- presets


def test_presets_lists_models_and_hardware():
    result = run(["presets"])
    assert result.exit_code == 0, result.output
    assert "gpt3-175b" in result.stdout and "dgx-a100-superpod" in result.stdout
    assert "174.6B" in result.stdout or "174.6" in result.stdout


def test_presets_models_json():
    result = run(["presets", "models", "--json"])
    assert result.exit_code == 0, result.output
    listing = json.loads(result.stdout)
    assert {"gpt3-175b", "gpt-1t", "gpt-22b"} <= set(listing["models"])
    assert "hardware" not in listing


def test_presets_hardware():
    result = run(["presets", "hardware"])
    assert result.exit_code == 0, result.output
    assert "dgx-a100-superpod" in result.stdout and "gpt3-175b" not in result.stdout


def test_presets_show_json():
    result = run(["presets", "show", "gpt3-175b", "--json"])
    assert result.exit_code == 0, result.output
    spec = json.loads(result.stdout)
    assert (spec["num_layers"], spec["hidden_size"], spec["num_attention_heads"], spec["vocab_size"]) == (
        96,
        12288,
        96,
        50257,
    )


def test_presets_show_json_loads_back_as_a_hardware_file(tmp_path):
    shown = run(["presets", "show", "dgx-a100-superpod", "--json"])
    assert shown.exit_code == 0, shown.output
    path = tmp_path / "hw.yaml"  # JSON is YAML
    path.write_text(shown.stdout)
    result = run(["explain", "--model", "gpt-1.7b", "--gpus", "8", "--hardware", str(path), "--json"])
    assert result.exit_code == 0, result.output


def test_presets_show_yaml_text():
    result = run(["presets", "show", "dgx-a100-superpod"])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout)["name"] == "dgx-a100-superpod"


# ----------------------------------------------------------------------------- fuzzing

EXPLAIN_PARAMS = [p for p in cli.commands["explain"].params if isinstance(p, click.Option)]
EXPLAIN_OPTIONS = sorted({opt for p in EXPLAIN_PARAMS for opt in (*p.opts, *p.secondary_opts)})
TAKES_VALUE = {opt for p in EXPLAIN_PARAMS if not p.is_flag for opt in p.opts}
CHOICES = {opt: list(p.type.choices) for p in EXPLAIN_PARAMS if isinstance(p.type, click.Choice) for opt in p.opts}
PRESET_WORDS = ["models", "hardware", "show", "--json", "gpt3-175b", "gpt-1.7b", "dgx-a100-superpod", "nope"]
VALUES = st.one_of(
    st.sampled_from(
        [
            "gpt3-175b",
            "gpt-1.7b",
            "gpt-22b",
            "dgx-a100-superpod",
            "none",
            "selective",
            "full",
            "flash",
            "unfused",
            "bf16",
            "fp16",
            "fp32",
            "x.yaml",
            "",
            "-1",
            "0",
            "1",
            "2",
            "8",
            "16",
            "1024",
            "1e3",
            "1.5",
            "nan",
            "inf",
            "--",
            "=",
            "A=B",
            "64:128",
        ]
    ),
    st.integers(-5, 5000).map(str),
    st.text(alphabet="abcdefghijk-_=.0123456789 /\\\"'", max_size=12),
)


SMALL_INTS = st.sampled_from(["1", "2", "3", "4", "5", "6", "7", "8", "12", "16", "32", "64", "96", "128", "1536"])


@st.composite
def argument_lists(draw):
    """``explain`` or ``presets`` followed by a mix of option/value pairs and stray tokens."""
    command = draw(st.sampled_from(["explain", "presets"]))
    words = EXPLAIN_OPTIONS if command == "explain" else PRESET_WORDS
    args = [command]
    if command == "explain" and draw(st.integers(0, 3)) > 0:
        args += ["--model", draw(st.sampled_from(["gpt-1.7b", "gpt3-175b", "gpt-22b"]))]
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["pair", "pair", "pair", "word", "value"]))
        if kind == "pair":
            word = draw(st.sampled_from(words))
            value = (
                st.one_of(st.sampled_from(CHOICES[word]), VALUES) if word in CHOICES else st.one_of(SMALL_INTS, VALUES)
            )
            args += [word, draw(value)] if word in TAKES_VALUE else [word]
        else:
            args.append(draw(st.sampled_from(words) if kind == "word" else VALUES))
    return args


def _assert_clean_exit(args: list[str]) -> None:
    """Exit 0, or exit 2 with exactly one error line on stderr (notes aside); never an exception or a traceback."""
    result = CliRunner().invoke(cli, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)
    assert result.exit_code in (0, 2), (args, result.exit_code, result.output)
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        errors = [line for line in result.stderr.strip().splitlines() if not line.startswith("megaplan: note:")]
        assert len(errors) == 1, (args, result.stderr)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=argument_lists())
@example(args=["explain", "--model", "gpt-1.7b", "--pp", "16"])  # breaks a legality rule
@example(args=["explain", "--model", "gpt3-175b", "--megatron-args", "--tp"])
@example(args=["presets", "show"])
def test_random_arguments_never_escape_as_exceptions(args):
    _assert_clean_exit(args)


def _options_of(command: str) -> tuple[list[str], set[str], dict[str, list[str]]]:
    params = [p for p in cli.commands[command].params if isinstance(p, click.Option)]
    names = sorted({opt for p in params for opt in (*p.opts, *p.secondary_opts)})
    takes = {opt for p in params if not p.is_flag for opt in p.opts}
    choices = {opt: list(p.type.choices) for p in params if isinstance(p.type, click.Choice) for opt in p.opts}
    return names, takes, choices


@st.composite
def other_command_lines(draw):
    """``search``, ``export``, ``sweep`` or ``compare`` on a small model with random options and tokens."""
    command = draw(st.sampled_from(["search", "export", "sweep", "compare"]))
    names, takes, choices = _options_of(command)
    args = [command, "--model", "gpt-1.7b"]
    if command == "search":
        args += ["--gpus", draw(st.sampled_from(["8", "16", "32", "64", "abc", "0"]))]
    if command == "sweep":
        args += ["--gpus", draw(st.sampled_from(["8,16", "8:32", "32:8", "x", "16,16", "0:8"]))]
    for _ in range(draw(st.integers(0, 5))):
        word = draw(st.sampled_from(names))
        if word in ("-o", "--output", "--plot", "--schedule-file", "--write"):
            continue  # never write files from a fuzz test
        value = st.one_of(st.sampled_from(choices[word]), VALUES) if word in choices else st.one_of(SMALL_INTS, VALUES)
        args += [word, draw(value)] if word in takes else [word]
    return args


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=other_command_lines())
@example(args=["search", "--model", "gpt-1.7b", "--gpus", "8", "--ep", "2"])
@example(args=["sweep", "--model", "gpt-1.7b", "--gpus", "7,8"])
@example(args=["compare", "--model", "gpt-1.7b", "--a", "--tp 0"])
def test_random_arguments_to_search_export_sweep_compare_never_escape(args):
    _assert_clean_exit(args)
