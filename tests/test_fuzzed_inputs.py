"""Bad inputs a fuzz of every command's options and input files found ending in a traceback, a numpy warning
before the error, or an error that named the wrong thing (rate11t-16: /tmp/fuzz_cli.py ran each option with
typos, 0, -1, 1.5, 1e30, nan, empty strings and files of the wrong kind, and mutated every field of a plan JSON,
a model YAML and a Bridge config). Each is now one stderr line naming the field and what is allowed, exit 2."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import PRESETS, REPO, one_line_error, run_cli

LOGS = REPO / "tests" / "data" / "megatron_logs"

LLAMA = ["--model", "llama3-8b", "--gpus", "8", "--tp", "2"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        # a repeat count the layout unrolled in memory: a MemoryError traceback (explain, export, search, sweep)
        (
            ["explain", *LLAMA, "--pipeline-model-parallel-layout", "t*99999999999"],
            "'t*99999999999': t*99999999999 repeats to more than 131,072 layers",
        ),
        (
            ["search", "--model", "llama3-8b", "--gpus", "8", "--pipeline-model-parallel-layout", "(t*99999|)*99999"],
            "(t*99999|)*99999 repeats to more than 131,072 layers",
        ),
        # a bucket of 1e-320 MB: "RuntimeWarning: overflow encountered in divide", then an error about --tokens
        (["explain", *LLAMA, "--dfa-bucket-mb", "1e-320"], "'--dfa-bucket-mb': 1e-320 is not in the range x>=0.001"),
        # a layout of fewer virtual stages than pp: "RuntimeWarning: divide by zero encountered in remainder"
        (
            ["search", "--model", "llama3-8b", "--gpus", "8", "--pipeline-model-parallel-layout", "E|L"],
            "--pipeline-model-parallel-layout E|L: 0 decoder layers t, but the model has 32",
        ),
        # a lone backslash: "not a shell script bashlex can parse: 'str' object has no attribute 'kind'"
        (["explain", "--megatron-args", "\\"], "no Megatron-LM entry point (pretrain_*.py, train*.py) or flags found"),
        # a device was "not found"; a web address had no hint
        (
            ["explain", *LLAMA, "--tp-comm-overlap-cfg", "/dev/zero"],
            "--tp-comm-overlap-cfg '/dev/zero' is not a regular file",
        ),
        (
            ["explain", *LLAMA, "--tp-comm-overlap-cfg", "https://github.com/o/r/blob/main/ub.yaml"],
            "download it first, e.g. curl -LO https://raw.githubusercontent.com/o/r/main/ub.yaml",
        ),
        # a Bridge override past the grid's 32-bit sizes: an OverflowError traceback of the rule table
        (
            ["explain", "--model", "llama3-8b", "--gpus", "8", "--bridge-override", f"train.micro_batch_size={10**30}"],
            f"parallel.micro_batch is {10**30}: Input should be less than 2147483648",
        ),
        # a pinned size near 2³¹ times ep or the node: "OverflowError: Python integer 17179869176 out of bounds for
        # int32" in the expert axes and in the rules judged on a world the pins divide
        (["search", "--model", "deepseek-v3", "--gpus", "16", "--tp", "2147483647"], "--tp 2147483647 does not divide"),
        (
            ["search", "--model", "mixtral-8x7b", "--gpus", "72", "--cp", "2147483647"],
            "--cp 2147483647 does not divide",
        ),
        # numpy "overflow encountered in scalar multiply" before the error (etp·ep in int32)
        (["explain", "--model", "mixtral-8x7b", "--gpus", "100000", "--etp", "2147483647"], "no legal plan"),
        # a layout or explicit first/last stage left pp unbounded: 8,192 GPU counts near 2147483647 each built a
        # candidate grid (minutes)
        (
            ["search", "--model", "llama3-8b", "--gpus", "2147483647", "--decoder-first-pipeline-num-layers", "2"],
            "at most 278,528 GPUs can hold a legal plan",
        ),
        (
            [
                "search",
                "--model",
                "llama3-8b",
                "--gpus",
                "2147483647",
                "--pipeline-model-parallel-layout",
                "Et*16|t*16L",
            ],
            "at most 16,384 GPUs can hold a legal plan (tp ≤ 8 × cp ≤ 2 × pp ≤ 2 × dp ≤ 512",
        ),
        # a module list item not allowed: "options: recompute_modules.1: Input should be 'core_attn', ..." (the plan's
        # field, not the option)
        (
            ["explain", *LLAMA, "--recompute-modules", "core_attn,foo"],
            "Invalid value for '--recompute-modules': 'foo' is not a module; allowed: core_attn, mlp, layernorm",
        ),
        (
            ["explain", *LLAMA, "--cuda-graph-modules", "attn,FOO"],
            "Invalid value for '--cuda-graph-modules': 'FOO' is not a module; allowed: attn, mlp, moe, moe_router",
        ),
        # the busiest expert's share past every token: numpy overflow warnings, then 4.9e300 GiB
        (
            ["search", "--model", "gpt-oss-20b", "--gpus", "64", "--moe-load-imbalance", "1e300"],
            "--moe-load-imbalance 1e+300 is more than gpt-oss-20b's experts allow: the busiest expert takes at most "
            "every token, E/k = 32/4 = 8 × the mean; allowed: 1 ≤ x ≤ 8",
        ),
    ],
)
@pytest.mark.filterwarnings("error")  # a numpy warning printed before the error line (pytest keeps it off stderr)
def test_a_bad_option_is_one_line_naming_it(args, needle):
    line = one_line_error(run_cli(args))
    assert needle in line, line


def test_expert_tp_on_a_dense_model_is_ignored_as_its_note_says():
    # the plan kept etp 16 and Megatron's memory formula divided by its 8 // 16 = 0 expert-data-parallel ranks
    result = run_cli(["export", *LLAMA, "--distributed-optimizer", "--etp", "16", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["parallel"]["etp"] == 2  # Megatron's default, tp
    explained = run_cli(["explain", *LLAMA, "--distributed-optimizer", "--etp", "16"])
    assert explained.exit_code == 0 and "--etp ignored: llama3-8b has no experts" in explained.stderr


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    result = run_cli(["explain", *LLAMA, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _edited(plan: dict, section: str, key: str | None, value) -> dict:
    edited = json.loads(json.dumps(plan))
    if key is None:
        edited[section] = value
    elif value is KeyError:
        del edited[section][key]
    else:
        edited[section][key] = value
    return edited


@pytest.mark.parametrize(
    ("section", "key", "value", "needle"),
    [
        ("training", None, 512, "plan: training is 512; allowed: an object of training fields"),  # a TypeError
        ("parallel", None, None, "plan: parallel is None; allowed: an object of parallel fields"),  # AttributeError
        ("options", None, [1], "plan: options is [1]; allowed: an object of options fields"),  # AttributeError
        ("hardware", None, 8, "plan: hardware is 8; allowed: a hardware preset name or a YAML path"),  # TypeError
        (
            "training",
            "seq_len",
            KeyError,
            "plan: training.seq_len is missing; allowed: a whole number ≥ 1 there, or --seq-len N",
        ),
        ("training", "global_batch", 10**30, "global_batch: Input should be less than 2147483648"),  # OverflowError
        ("parallel", "vpp", 10**30, f"parallel.vpp is {10**30}: Input should be less than 2147483648"),
    ],
)
def test_an_edited_plan_file_is_one_line_naming_the_field(plan, tmp_path, section, key, value, needle):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_edited(plan, section, key, value)))
    line = one_line_error(run_cli(["explain", "--plan", str(path), "--brief"]))
    assert needle in line, line


def test_a_null_size_in_a_plan_file_is_its_default(plan, tmp_path):
    # "cp": null was a TypeError traceback (int * None); null is "not given", as for dp
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_edited(plan, "parallel", "cp", None)))
    result = run_cli(["explain", "--plan", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["parallel"]["cp"] == 1


def test_a_window_beyond_any_sequence_in_a_model_yaml_is_one_line(tmp_path):
    # window_size: [1e308, 0] was an OverflowError traceback of the sliding-window attention FLOPs
    spec = yaml.safe_load((PRESETS / "models" / "gpt-oss-20b.yaml").read_text())
    spec["window_size"] = [1e308, 0]
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(spec))
    line = one_line_error(run_cli(["explain", "--model", str(path), "--gpus", "8", "--tp", "1", "--brief"]))
    assert "window_size must be two integers 0 ≤ w < 2³¹ (left, right)" in line, line


SMALL = "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --max-position-embeddings 512 "
SMALL += "--global-batch-size 8 --vocab-size 1000 "


@pytest.mark.parametrize(
    "flag",
    [
        "--tensor-model-parallel-size 0",  # ZeroDivisionError: integer modulo by zero (importer.megatron_fields)
        "--pipeline-model-parallel-size 0",  # the same
        "--context-parallel-size 0",  # read as 1 without a word (``or 1``)
        "--expert-model-parallel-size 0",  # the same
    ],
)
def test_a_zero_size_in_a_launch_line_is_one_line_naming_the_flag(flag):
    line = one_line_error(run_cli(["explain", "--megatron-args", SMALL + flag, "--gpus", "8", "--brief"]))
    assert line == f"megaplan: error: {flag}; allowed: a whole number ≥ 1"


def test_a_log_number_that_is_not_whole_is_not_read_as_its_first_digit():
    # 'using world size: 1e308' was read as 1 GPU ("--gpus 1 is not divisible by tp·pp·cp = 2"), a batch
    # '1e308' as 1 ("the global batch size changes within the log (1, 64)")
    from planner.fidelity.megatron_log import read_training_log

    lines = (LOGS / "iterations_2024.log").read_text()
    log = read_training_log("using world size: 1e308, data-parallel size: 4\n" + lines, "a.log")
    assert log.world_size is None and log.global_batch == 64
    first, *rest = lines.splitlines(keepends=True)
    log = read_training_log(
        first.replace("global batch size:    64", "global batch size: 1e308") + "".join(rest), "b.log"
    )
    assert log.global_batch == 64


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        # the section left out: ignored without a word, the plan priced at the recipe's tp
        (
            "tensor_model_parallel_size=4",
            "--bridge-override tensor_model_parallel_size: no 'tensor_model_parallel_size' in Bridge v0.6.0's "
            "ConfigContainer; did you mean model.tensor_model_parallel_size?",
        ),
        ("train=1", "--bridge-override train=1: train is a section of Bridge v0.6.0's ConfigContainer, not a field"),
        ("=1", "Bridge override '=1': expected KEY=VALUE"),  # a key '' (ignored)
        ("", "--bridge-override is empty (''): give a value, or leave the option out"),  # skipped as a blank line
    ],
)
def test_a_bridge_override_that_names_no_field_is_one_line(override, needle):
    line = one_line_error(run_cli(["explain", "--model", "llama3-8b", "--gpus", "8", "--bridge-override", override]))
    assert needle in line, line


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("", "plan file '' names no file: give a plan JSON file"),  # was "is not a file (a device or socket)"
        (str(REPO / "tests"), "is a folder: give a plan JSON file"),  # the same
    ],
)
def test_a_compare_argument_that_is_no_file_says_so(plan, tmp_path, name, needle):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    line = one_line_error(run_cli(["compare", str(path), name]))
    assert needle in line, line


def test_an_unknown_bridge_version_is_one_line_before_any_recipe_is_read():
    # `--bridge-recipe llama3_8b_pretrain_config --bridge-version x` ended in KeyError 'x' (bridge/recipes.py resolve);
    # without a Bridge source the tag was accepted and ignored. It is a choice of the tags megaplan reads
    for command in ("explain", "export", "compare", "search"):
        args = [command, "--model", "llama3-8b", "--gpus", "8", "--bridge-version", "x"]
        got = one_line_error(run_cli([*args, "--bridge-recipe", "llama3_8b_pretrain_config"]))
        assert got == "megaplan: error: Invalid value for '--bridge-version': 'x' is not one of 'v0.2.1', 'v0.6.0'."
        assert one_line_error(run_cli(args)) == got


# err16: a launch line whose warnings (a flag given twice, an old flag) came before its error, four lines in all
WARNED = "--use-mcore-models --num-layers 8 " + SMALL + "--pipeline-model-parallel-size 3 --micro-batch-size 1 "


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["explain", "--megatron-args", WARNED, "--gpus", "3"], "4 layers do not split over pp 3"),
        (["export", "--megatron-args", WARNED, "--gpus", "3", "-o", "-"], "4 layers do not split over pp 3"),
        (["compare", "--megatron-args", WARNED, "--gpus", "3", "--a", "--tp 1", "--b", "--tp 1"], "over pp 3"),
        # search and --min-gpus: "search builds no selective recomputation on llama3-8b: ... mla_up_proj needs
        # --multi-latent-attention", then the error
        (
            ["search", "--model", "llama3-8b", "--gpus", "8", "--recompute-modules", "mla_up_proj", "--tp", "3"],
            "--tp 3 does not divide 8 GPUs",
        ),
        (
            ["search", "--model", "gpt3-175b", "--min-gpus", "--recompute-modules", "mla_up_proj", "--pp", "1"]
            + ["--vpp", "2"],
            "no plan fits gpt3-175b on up to 131,072 GPUs",
        ),
    ],
)
def test_an_error_comes_without_the_warnings_before_it(args, needle):
    result = run_cli(args)
    line = one_line_error(result)
    assert needle in line and result.stdout == "", line


def test_the_warnings_are_said_when_the_command_succeeds():
    result = run_cli(["explain", "--megatron-args", WARNED.replace("size 3", "size 2"), "--gpus", "2", "--brief"])
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if line.startswith("megaplan: warning:")]
    assert warned[0] == "megaplan: warning: --num-layers given twice (8, then 4): Megatron-LM keeps the last, 4"
    assert warned[1].startswith("megaplan: warning: --use-mcore-models is an old Megatron-LM flag")
    # said before the output they are about (click's runner keeps stdout and stderr in the order written)
    assert result.output.index("--num-layers given twice") < result.output.index("2 GPUs")


def test_a_calibration_that_cannot_reach_a_run_prints_no_fit_and_no_warnings(tmp_path):
    # the fit's table went to stdout, then the script's warnings and the unreached runs, then the error: a failed
    # run printed a result that looked like one (err16)
    from planner.costs.estimate import evaluate
    from planner.fidelity.megatron_log import iteration_line
    from planner.megatron.importer import import_megatron
    from planner.presets import load_hardware
    from planner.space.grid import PlanGrid

    script = tmp_path / "run.sh"
    script.write_text(
        "torchrun --nproc_per_node 8 pretrain_gpt.py --use-mcore-models --num-layers 32 --hidden-size 4096 "
        "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention --num-query-groups 8 "
        "--seq-length 4096 --max-position-embeddings 4096 --position-embedding-type rope --swiglu "
        "--normalization RMSNorm --untie-embeddings-and-output-weights --vocab-size 128256 "
        "--tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 1 --global-batch-size 64 --bf16\n"
    )
    req = import_megatron(script.read_text(), hardware=load_hardware("dgx-h100-superpod")).request
    ev = evaluate(PlanGrid.from_plans([req.plan]), req.ctx)
    it, flops = float(ev.iteration_s[0]) * 5, float(ev.flops["megatron"][0])  # 5x slower: beyond every band
    logs = []
    for name in ("a.log", "b.log"):
        logs += ["--from-log", str(tmp_path / name)]
        lines = [iteration_line(i, 100, it, flops / it / 8 / 1e12, 64) for i in (10, 20, 30)]
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    out = tmp_path / "mine.yaml"
    result = run_cli(["calibrate", *logs, "--megatron-args-file", str(script), "--gpus", "8", "-o", str(out)])
    line = one_line_error(result)
    assert line.startswith(f"megaplan: error: {tmp_path}/a.log: ") and result.stdout == "" and not out.exists()
    assert line.endswith(f"(and 1 more run it cannot reach); nothing written (--force writes {out} anyway)")


# err16: Python's int() (and argparse's type=int) reads 2_0 as 20 and ٢ (Arabic-Indic two) as 2; a typo or a pasted
# character became a number without a word, in every command. One parser (planner.whole) refuses them everywhere
UNDERSCORE = (
    "(an underscore may only group digits in threes, as in 9_000_000; Python's int() reads 20: write 20 if meant)"
)
ARABIC = "(٢ is ARABIC-INDIC DIGIT TWO; Python's int() reads 2: write 2 if meant)"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["explain", "--model", "llama3-8b", "--gpus", "2_0"],
            f"Invalid value for '--gpus': '2_0' is not written in the digits 0-9 {UNDERSCORE}",
        ),
        (
            ["search", "--model", "llama3-8b", "--gpus", "8", "--tp", "٢"],
            f"Invalid value for '--tp': '٢' is not written in the digits 0-9 {ARABIC}",
        ),
        (
            ["export", *LLAMA, "--micro-batch", "2_0"],
            f"Invalid value for '--micro-batch': '2_0' is not written in the digits 0-9 {UNDERSCORE}",
        ),
        (
            ["search", "--model", "llama3-8b", "--min-gpus", "--max-tp", "٢"],
            f"Invalid value for '--max-tp': '٢' is not written in the digits 0-9 {ARABIC}",
        ),
        (
            ["sweep", "--model", "llama3-8b", "--gpus", "8,2_0"],
            f"--gpus '8,2_0': '2_0' is not written in the digits 0-9 {UNDERSCORE}",
        ),
        (
            ["sweep", "--model", "llama3-8b", "--gpus", "٢:16"],
            f"--gpus '٢:16': '٢' is not written in the digits 0-9 {ARABIC}",
        ),
        (
            ["sweep", "--model", "llama3-8b", "--gpus", "8,4294967296"],
            "--gpus '8,4294967296': 4294967296 is not in the range 1<=x<=2147483647",
        ),
        (
            ["compare", *LLAMA, "--a", "--tp 1", "--b", "--pp ٢"],
            f"--b '--pp ٢': Invalid value for '--pp': '٢' is not written in the digits 0-9 {ARABIC}",
        ),
        # calibrate's --gpus had no bound at all (the other commands' sizes stopped at 2³¹−1)
        (
            ["calibrate", "--gpus", "99999999999"],
            "Invalid value for '--gpus': 99999999999 is not in the range 1<=x<=2147483647.",
        ),
        (
            ["calibrate", "--gpus", "2_0"],
            f"Invalid value for '--gpus': '2_0' is not written in the digits 0-9 {UNDERSCORE}",
        ),
        # a launch line: argparse's int() would run it at TP 20
        (
            ["explain", "--megatron-args", SMALL + "--tensor-model-parallel-size 2_0", "--gpus", "8"],
            f"--tensor-model-parallel-size '2_0' is not written in the digits 0-9 {UNDERSCORE}",
        ),
        (
            ["explain", "--megatron-args", SMALL + "--micro-batch-size ٢", "--gpus", "8"],
            f"--micro-batch-size '٢' is not written in the digits 0-9 {ARABIC}",
        ),
        # a Bridge override: YAML (and Hydra) read 2_0 as 20
        (
            ["explain", *LLAMA, "--bridge-override", "train.micro_batch_size=2_0"],
            "Bridge override 'train.micro_batch_size=2_0': '2_0' is not written in the digits 0-9 (read as 20; "
            "write 20 if you mean it)",
        ),
    ],
)
def test_a_number_not_in_the_digits_0_to_9_is_refused_with_what_int_reads(args, line):
    assert one_line_error(run_cli(args)) == f"megaplan: error: {line}"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        # float() reads them too: --memory-headroom ٠.١ was 0.1, --gpu-hour-price 2_0.5 was 20.5
        (
            ["explain", *LLAMA, "--memory-headroom", "٠.١"],
            "Invalid value for '--memory-headroom': '٠.١' is not written in the digits 0-9 (٠ is ARABIC-INDIC DIGIT "
            "ZERO; Python's float() reads 0.1: write 0.1 if meant)",
        ),
        (
            ["explain", *LLAMA, "--tokens", "3_00B"],
            "Invalid value for '--tokens': '3_00B': '3_00' is not written in the digits 0-9 (an underscore may only "
            "group digits in threes, as in 9_000_000; Python's float() reads 300.0: write 300.0 if meant)",
        ),
        (
            ["explain", "--megatron-args", SMALL + "--moe-aux-loss-coeff 2_0.5", "--gpus", "8"],
            "--moe-aux-loss-coeff '2_0.5' is not written in the digits 0-9 (an underscore may only group digits in "
            "threes, as in 9_000_000; Python's float() reads 20.5: write 20.5 if meant)",
        ),
    ],
)
def test_a_decimal_not_in_the_digits_0_to_9_is_refused_with_what_float_reads(args, line):
    assert one_line_error(run_cli(args)) == f"megaplan: error: {line}"


def test_plain_decimals_still_pass():
    result = run_cli(["explain", *LLAMA, "--tokens", "300_000_000_000", "--memory-headroom", ".05", "--brief"])
    assert result.exit_code == 0 and "days for 300B tokens" in result.stdout, result.output


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("2_0", f"'2_0' is not written in the digits 0-9 {UNDERSCORE}"),  # pydantic's lax mode read 20
        (True, "true is not a number; allowed: a whole number ≥ 1"),  # read as 1
    ],
)
def test_a_plan_file_size_in_text_or_true_is_refused(plan, tmp_path, value, why):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_edited(plan, "parallel", "tp", value)))
    line = one_line_error(run_cli(["explain", "--plan", str(path), "--brief"]))
    assert line == f"megaplan: error: plan: parallel.tp is {value!r}: {why}"


@pytest.mark.parametrize(
    ("section", "key", "value", "why"),
    [
        ("training", "train_tokens", "2_0", f"'2_0' is not written in the digits 0-9 {UNDERSCORE}"),  # read as 20
        (
            "options",
            "moe_load_imbalance",
            "١.٢",  # read as 1.2
            "'١.٢' is not written in the digits 0-9 (١ is ARABIC-INDIC DIGIT ONE; Python's float() reads 1.2: write "
            "1.2 if meant)",
        ),
    ],
)
def test_a_plan_file_number_in_text_is_read_as_every_number(plan, tmp_path, section, key, value, why):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_edited(plan, section, key, value)))
    line = one_line_error(run_cli(["explain", "--plan", str(path), "--brief"]))
    assert line == f"megaplan: error: plan: {section}.{key} is {value!r}: {why}"


def test_thousands_grouped_by_underscores_are_read_as_bigscience_writes_them():
    # bigscience-workshop/bigscience train/tr11-176B-ml: --train-samples 220_000_000, --rampup-batch-size 192 16
    # 9_765_625; Megatron-LM's argparse reads them, and so does megaplan (the digits grouped in threes)
    from planner.megatron.flags import parse_megatron_argv

    args = parse_megatron_argv(["--train-samples", "220_000_000", "--rampup-batch-size", "192", "16", "9_765_625"])
    assert args.values["train_samples"] == 220_000_000
    assert args.values["rampup_batch_size"] == [192, 16, 9_765_625]
    result = run_cli(["explain", "--model", "llama3-8b", "--gpus", "1_024", "--brief"])
    assert result.exit_code == 0 and "on 1,024 GPUs" in result.stdout, result.output


def test_a_log_number_in_another_script_is_not_read():
    # 'using world size: ٨' was read as 8 GPUs (re's \d matches every script's digits)
    from planner.fidelity.megatron_log import read_training_log

    log = read_training_log(
        "using world size: ٨, data-parallel size: 4\n" + (LOGS / "iterations_2024.log").read_text(), "a"
    )
    assert log.world_size is None


# err16: a launch script's flags megaplan did not read were dropped without a word (--nccl-communicator-config-path,
# --train-iters); a script written for these tests in the patterns of Megatron-LM's examples (bash arrays)
LAUNCH = """#!/bin/bash
GPT_ARGS=(
  --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --max-position-embeddings 512
  --vocab-size 1000 --micro-batch-size 1 --global-batch-size 8 --bf16 {extra}
)
TRAINING_ARGS=(
  --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --clip-grad 1.0 --weight-decay 0.1 --adam-beta2 0.95
  --log-interval 10 --log-throughput --tensorboard-dir /tb --save-interval 1000 --save /ckpt --load /ckpt
  --eval-interval 1000 --eval-iters 10 --data-path /data/x --split 99,1,0 --seed 1234 --distributed-backend nccl
  --attention-softmax-in-fp32 --exit-interval 100 --ckpt-format torch_dist --moe-router-load-balancing-type aux_loss
)
torchrun --nproc_per_node 8 pretrain_gpt.py "${{GPT_ARGS[@]}}" "${{TRAINING_ARGS[@]}}"
"""


def _read(extra: str):
    from planner.megatron.importer import import_megatron

    return import_megatron(LAUNCH.format(extra=extra))


def test_flags_that_change_no_iteration_are_read_without_a_word(tmp_path):
    read = _read("")
    assert not any("not priced" in note for note in read.notes), read.notes
    assert read.request.ctx.training.train_tokens == 300e9  # no --train-iters: --tokens' default


def test_flags_megaplan_does_not_price_are_said_in_one_note(tmp_path):
    flags = "--no-gradient-accumulation-fusion --nccl-communicator-config-path /cfg/nccl.yaml --manual-gc"
    read = _read(flags + " --use-tp-pp-dp-mapping --cross-entropy-loss-fusion --distributed-backend nccl")
    said = [note for note in read.notes if "not priced" in note]
    assert said == [
        "read, not priced (what they change is not modelled): --no-gradient-accumulation-fusion, "
        "--nccl-communicator-config-path, --manual-gc, --use-tp-pp-dp-mapping, --cross-entropy-loss-fusion"
    ]  # --distributed-backend nccl is Megatron-LM's default: it changes nothing


@pytest.mark.parametrize(
    ("extra", "tokens", "how"),
    [
        # 1,000 iterations × global batch 8 × seq 512 = 4,096,000 tokens
        ("--train-iters 1000", 4_096_000, "--train-iters 1,000 × global batch 8 × seq 512 = 4.10M tokens"),
        # BigScience writes its samples with underscores: 220,000,000 × 512 = 112,640,000,000 tokens
        ("--train-samples 220_000_000", 112_640_000_000, "--train-samples 220,000,000 × seq 512 = 113B tokens"),
    ],
)
def test_the_run_length_is_the_scripts(tmp_path, extra, tokens, how):
    read = _read(extra)
    assert read.request.ctx.training.train_tokens == tokens
    assert f"the run's length: {how} (days and cost are for it; --tokens sets another)" in read.notes


def test_the_run_length_reaches_explain_and_tokens_overrides_it(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(LAUNCH.format(extra="--train-iters 1000"))
    shown = run_cli(["explain", "--megatron-args-file", str(script), "--brief"])
    assert shown.exit_code == 0 and "days for 4.10M tokens" in shown.stdout, shown.output
    given = run_cli(["explain", "--megatron-args-file", str(script), "--brief", "--tokens", "1T"])
    assert given.exit_code == 0 and "days for 1T tokens" in given.stdout, given.output


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (
            "--train-iters 10 --train-samples 80",
            "--train-iters and --train-samples are both given; Megatron-LM takes one",
        ),
        ("--train-iters 0", "--train-iters 0; allowed: a whole number ≥ 1"),
    ],
)
def test_a_run_length_megatron_refuses_is_one_line(tmp_path, extra, line):
    script = tmp_path / "run.sh"
    script.write_text(LAUNCH.format(extra=extra))
    assert line in one_line_error(run_cli(["explain", "--megatron-args-file", str(script), "--brief"]))


def test_the_flag_sets_name_flags_of_todays_parser_and_do_not_overlap():
    from planner.megatron.flags import argument_specs
    from planner.megatron.script import COST_DESTS
    from planner.megatron.unpriced import IRRELEVANT, READ_ELSEWHERE

    dests = {spec.dest for spec in argument_specs()}
    assert set(IRRELEVANT) <= dests and READ_ELSEWHERE <= dests
    assert not set(IRRELEVANT) & (COST_DESTS | READ_ELSEWHERE)


def test_a_bridge_boolean_is_read_as_omegaconf_reads_it(tmp_path):
    # a quoted '2_0' for ddp.overlap_grad_reduce was taken as true (a non-empty string) without a word
    from planner.bridge.values import bridge_bool

    path = tmp_path / "over.yaml"
    path.write_text("ddp.overlap_grad_reduce: '2_0'\n")
    args = ["explain", "--model", "llama3-8b", "--gpus", "8", "--bridge-config", str(path), "--brief"]
    line = one_line_error(run_cli(args))
    assert line == "megaplan: error: Bridge field ddp.overlap_grad_reduce is '2_0'; allowed: true or false"
    # OmegaConf's BooleanNode: true/false, yes/no, on/off, y/n and whole numbers (0 is false)
    read = [bridge_bool("x", v) for v in (True, "off", "Yes", "n", "0", "2", 0, None)]
    assert read == [True, False, True, False, False, True, False, None]
