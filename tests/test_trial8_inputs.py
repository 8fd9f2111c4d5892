"""A new user's second day, fresh user trial 8 (issue 21): each test reproduces a mistake that ended in a
traceback, was dropped without a word, or ended in a line that did not say what to do, with files written
here in the pattern of the real ones (the real scripts stay outside the repository)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import one_line_error, run_cli


def _megaplan(args: list[str], **kw) -> subprocess.CompletedProcess:
    """megaplan in its own process, as a shell runs it (its real standard streams)."""
    return subprocess.run(
        [sys.executable, "-m", "planner", *args], text=True, errors="replace", capture_output=True, **kw
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("args", [["presets", "models"], ["presets", "show", "llama3-8b", "--json"]])
def test_output_that_cannot_be_written_is_one_line_not_a_traceback(args):
    """`megaplan search ... --json > /dev/full` (a full disk) ended in an OSError traceback, exit 1."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "planner", *args], stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["megaplan: error: cannot write the output: No space left on device"]


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_an_output_encoding_without_the_tables_characters_prints_not_a_traceback(encoding):
    """PYTHONIOENCODING=ascii (or latin-1) ended in UnicodeEncodeError on the first '×' or '·' of a table."""
    done = _megaplan(
        ["explain", "--model", "llama3-8b", "--gpus", "64", "--tp", "2", "--brief"],
        env={**os.environ, "PYTHONIOENCODING": encoding},
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "llama3-8b on 64 GPUs" in done.stdout


@pytest.mark.parametrize(
    "field, value, needle",
    [
        ("num_layers: 24", "num_layers: 40000", "num_layers: Input should be less than 32768 (got 40000)"),
        (
            "ffn_hidden_size: 8192",
            "ffn_hidden_size: 100000000000",
            "ffn_hidden_size: Input should be less than 2147483648",
        ),
        ("seq_len: 4096", "seq_len: 100000000000", "training.seq_len: Input should be less than 2147483648"),
    ],
)
def test_a_model_size_too_large_for_the_grid_is_refused_by_its_field(tmp_path, field, value, needle):
    """A model YAML with num_layers 1000000000 (or an FFN or sequence length past 2**31) ended in
    'OverflowError: Python integer ... out of bounds for int16' inside the search."""
    model = (
        "name: mine\nsource: my notes\nnum_layers: 24\nhidden_size: 2048\nnum_attention_heads: 16\n"
        "ffn_hidden_size: 8192\nmax_position_embeddings: 4096\nvocab_size: 50304\ntraining:\n"
        "  global_batch: 256\n  seq_len: 4096\n"
    )
    path = tmp_path / "mine.yaml"
    path.write_text(model.replace(field, value))
    assert needle in one_line_error(run_cli(["search", "--model", str(path), "--gpus", "16"]))


@pytest.mark.parametrize("option", ["--seq-len", "--micro-batch", "--vpp", "--dp"])
def test_a_plan_size_past_32_bits_is_refused_not_wrapped(option):
    """--seq-len 3000000000 ended in an OverflowError traceback; --micro-batch 100000000000 was priced as
    micro-batch 1215752192 (the value wrapped at 2**32) and --vpp 100000000000 as 1215752192 chunks."""
    line = one_line_error(run_cli(["explain", "--model", "llama3-8b", "--gpus", "64", option, "100000000000"]))
    assert line == (
        f"megaplan: error: Invalid value for '{option}': 100000000000 is not in the range 1<=x<=2147483647."
    )


LLAMA = ["explain", "--model", "llama3-8b", "--gpus", "64", "--tp", "2", "--brief"]


@pytest.mark.parametrize(
    "extra, note",
    [
        (["--recompute", "none", "--recompute-modules", "mlp"], "--recompute-modules ignored: they are the modules of"),
        (["--cuda-graph-modules", "attn"], "--cuda-graph-modules ignored: no --cuda-graph-impl"),
        (["--fp8-recipe", "tensorwise", "--hardware", "dgx-h100-superpod"], "--fp8-recipe ignored: no --fp8"),
        (["--data-parallel-sharding-strategy", "optim_grads"], "--data-parallel-sharding-strategy ignored: they are"),
        (["--precision", "fp16", "--grad-reduce-in-bf16"], "--grad-reduce-in-bf16 ignored: fp16 training keeps"),
        (["--moe-capacity-factor", "1.0"], "--moe-capacity-factor ignored: llama3-8b has no experts"),
    ],
)
def test_an_option_the_plan_cannot_use_is_noted_not_dropped(extra, note):
    """Each of these ran with exit 0 and no word: the option changed nothing (it is read only beside another
    option the plan does not have), and the user believed it priced."""
    result = run_cli([*LLAMA, *extra])
    assert result.exit_code == 0, result.output
    assert f"megaplan: note: {note}" in result.stderr


@pytest.mark.parametrize(
    "extra",
    [
        ["--recompute", "selective", "--recompute-modules", "mlp"],
        ["--cuda-graph-impl", "local", "--cuda-graph-modules", "attn"],
        ["--fsdp", "--data-parallel-sharding-strategy", "optim_grads"],
        ["--hardware", "dgx-h100-superpod", "--fp8", "hybrid", "--fp8-recipe", "tensorwise"],
    ],
)
def test_an_option_the_plan_uses_gets_no_ignored_note(extra):
    result = run_cli([*LLAMA, *extra])
    assert result.exit_code == 0, result.output
    assert "ignored" not in result.stderr


def test_a_list_option_beside_a_script_is_split_at_commas(tmp_path):
    """--recompute-modules mlp,core_attn beside a launch script ended in "options: recompute_modules: Input
    should be a valid tuple (got 'mlp,core_attn')"; the note named the script's value as "('core_attn',)"."""
    script = tmp_path / "run.sh"
    script.write_text(
        "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
        "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 256 --bf16 "
        "--tokenizer-type GPT2BPETokenizer --tensor-model-parallel-size 2\n"
    )
    args = ["explain", "--megatron-args-file", str(script), "--recompute", "selective"]
    result = run_cli([*args, "--recompute-modules", "mlp,core_attn", "--json"])
    assert result.exit_code == 0, result.output
    assert "megaplan: note: --recompute-modules mlp,core_attn overrides the script's core_attn" in result.stderr
    import json

    assert json.loads(result.stdout)["options"]["recompute_modules"] == ["mlp", "core_attn"]


FLAGS = (
    "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 "
    "--micro-batch-size 1 --global-batch-size 256 --bf16 --tokenizer-type GPT2BPETokenizer"
)


def _explain_script(tmp_path, text: str, name: str = "run.sh", *extra: str):
    path = tmp_path / name
    path.write_bytes(text.encode())
    return run_cli(["explain", "--brief", "--megatron-args-file", str(path), *extra])


def test_a_script_with_windows_line_endings_is_read_with_a_warning(tmp_path):
    """A script saved with CRLF line endings was refused with "stray word '\\r': a backslash followed by a
    space ...", which sent the user looking for a space that is not there."""
    text = (
        "#!/bin/bash\ntorchrun --nproc-per-node 8 pretrain_gpt.py \\\n  "
        + FLAGS
        + " \\\n  --tensor-model-parallel-size 2\n"
    )
    result = _explain_script(tmp_path, text.replace("\n", "\r\n"))
    assert result.exit_code == 0, result.output
    assert "megaplan: warning: run.sh has Windows line endings (CRLF)" in result.stderr
    assert "dos2unix run.sh" in result.stderr
    assert "TP2 PP1 DP4" in result.stdout


@pytest.mark.parametrize("name", ["pretrain_gpt.py", "launch.sh"])
def test_a_python_file_given_as_the_launch_script_says_what_to_give(tmp_path, name):
    """pretrain_gpt.py itself as --megatron-args-file ended in "unexpected token '"${__mp_q0}"' (position 6)",
    an internal stand-in that named nothing the user wrote."""
    line = one_line_error(_explain_script(tmp_path, "import torch\nprint('hello')\n", name))
    assert line.startswith(f"megaplan: error: '{tmp_path / name}' is a Python file, not a launch script")


def test_bash_time_before_the_launch_is_read(tmp_path):
    """`time torchrun ...` (bash's reserved word) was "not a shell script bashlex can parse: type = {time
    command}, token = {time}"."""
    result = _explain_script(
        tmp_path, "time -p torchrun --nproc-per-node 8 pretrain_gpt.py " + FLAGS + " --tensor-model-parallel-size 2\n"
    )
    assert result.exit_code == 0, result.output
    assert "TP2 PP1 DP4" in result.stdout


def test_a_parse_error_names_the_script_s_own_text(tmp_path):
    """bashlex's message named the rewritten text's stand-ins and a character position in it."""
    line = one_line_error(_explain_script(tmp_path, "if [ -f x ]; then\n  echo 'a b' )\nfi\n"))
    assert "__mp_" not in line and "position" not in line
    assert "(line 2: " in line  # the line bash names (test_ux10_inputs: the first that fails alike)


def test_a_bridge_recipe_file_without_a_workload_name_lists_its_workloads(tmp_path):
    """A Bridge perf-recipe .py given without #NAME was read as a dotlist: "Bridge override '\\"\\"\\"GB200
    performance recipes ...\\"\\"\\"': expected KEY=VALUE"."""
    path = tmp_path / "recipes.py"
    path.write_text(
        '"""Performance recipes."""\n\ndef llama3_8b_pretrain_8gpu_h100_bf16_config():\n    return None\n\n'
        "BASE_LLAMA3_8B_CONFIG = dict(tp=1)\n"
    )
    line = one_line_error(run_cli(["explain", "--bridge-config", str(path)]))
    assert f"as --bridge-config {path}#NAME; it defines llama3_8b_pretrain_8gpu_h100_bf16_config, " in line
    assert line.endswith("BASE_LLAMA3_8B_CONFIG")


def test_a_script_that_sources_itself_is_said_to_nest_not_to_be_missing(tmp_path):
    """A script sourcing itself was warned about as "did not read run.sh (not on this machine ...)", though
    the file was right there."""
    result = _explain_script(tmp_path, 'source "$0"\ntorchrun --nproc-per-node 8 pretrain_gpt.py ' + FLAGS + "\n")
    assert result.exit_code == 0, result.output
    assert "not on this machine" not in result.stderr
    assert "after 8 nested levels: files that source or run each other (or themselves)" in result.stderr


@pytest.mark.parametrize(
    "extra, tail",
    [
        (
            ["--pp", "4", "--decoder-first-pipeline-num-layers", "100"],
            "with 100 on the first stage: more than the model has",
        ),
        (
            ["--pp", "2", "--decoder-first-pipeline-num-layers", "10", "--decoder-last-pipeline-num-layers", "10"],
            "with 10 on the first stage and 10 on the last stage: 12 left over",
        ),
        (
            ["--pp", "4", "--decoder-first-pipeline-num-layers", "4"],
            "with 4 on the first stage: the 28 left do not split evenly over the other 3 stages "
            "(transformer_config.py)",
        ),
    ],
)
def test_a_first_or_last_stage_size_that_does_not_split_names_it(extra, tail):
    """--decoder-first-pipeline-num-layers 100 on 32 layers said "32 layers do not split over pp 4 with the even
    split", the split the user had just replaced."""
    line = one_line_error(run_cli(["explain", "--model", "llama3-8b", "--gpus", "64", "--tp", "2", *extra]))
    assert line.endswith(f"32 layers do not split over pp {extra[1]} {tail}")


def test_export_to_dash_writes_standard_output(tmp_path, monkeypatch):
    """`export -o -` wrote a file named '-' in the working directory."""
    monkeypatch.chdir(tmp_path)
    result = run_cli(
        ["export", "--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--distributed-optimizer", "-o", "-"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("--num-layers 32")
    assert not (tmp_path / "-").exists()


def test_a_file_that_only_sets_model_flags_says_how_to_give_them(tmp_path):
    """A config file that sets MODEL_ARGS and launches nothing (Megatron-LM's modelopt conf/*.sh pattern,
    sourced by the script that launches) ended in "no Megatron-LM entry point ... found" alone."""
    text = 'if [ -z ${CKPT} ]; then\n  CKPT=org/model\nfi\nMODEL_ARGS=" \\\n    ' + FLAGS + ' \\\n"\n'
    line = one_line_error(_explain_script(tmp_path, text))
    assert line.endswith(
        "it sets a model's Megatron-LM flags in MODEL_ARGS and launches nothing (the script that sources it "
        'launches): give that script, or the flags with --megatron-args "$(. FILE; echo $MODEL_ARGS)" --gpus N'
    )


def test_a_hugging_face_config_as_model_names_the_renames(tmp_path):
    """A Hugging Face config.json as --model gave eight pydantic errors ('Extra inputs are not permitted')."""
    path = tmp_path / "config.json"
    path.write_text(
        '{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336, '
        '"num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256}'
    )
    line = one_line_error(run_cli(["search", "--model", str(path), "--gpus", "16"]))
    assert "a Hugging Face config.json, not a megaplan model YAML" in line
    assert "num_hidden_layers -> num_layers, intermediate_size -> ffn_hidden_size" in line


def test_a_preset_name_with_yaml_appended_says_the_preset_name(tmp_path, monkeypatch):
    """--model llama3-8b.yaml said only "models file 'llama3-8b.yaml' not found"."""
    monkeypatch.chdir(tmp_path)
    line = one_line_error(run_cli(["search", "--model", "llama3-8b.yaml", "--gpus", "16"]))
    assert (
        line == "megaplan: error: model file 'llama3-8b.yaml' not found; the preset is named llama3-8b, without .yaml"
    )


def test_presets_show_of_a_missing_yaml_says_so_with_either_kinds_hint(tmp_path, monkeypatch):
    """`presets show x.yaml` exited 1 with "presets/preset: No such file or directory" (it looked up the names of a
    kind called 'preset'; hypothesis found it in test_cli's random arguments)."""
    monkeypatch.chdir(tmp_path)
    result = run_cli(["presets", "show", "x.yaml"])
    assert result.exit_code == 2
    assert one_line_error(result) == "megaplan: error: preset file 'x.yaml' not found"
    for name in ("gpt3-175b", "dgx-h100-superpod"):  # a model and a hardware preset
        line = one_line_error(run_cli(["presets", "show", f"{name}.yaml"]))
        hint = f"the preset is named {name}, without .yaml"
        assert line == f"megaplan: error: preset file '{name}.yaml' not found; {hint}"


def test_a_size_given_twice_to_sweep_is_said_not_dropped():
    # fresh user trial 8: sweep --gpus 64,64 swept 64 once without a word
    from planner.runs.sweep import parse_gpu_sizes, repeated_sizes

    assert parse_gpu_sizes("128, 64,128,64,256") == [64, 128, 256]
    assert repeated_sizes("128, 64,128,64,256") == [64, 128]
    assert repeated_sizes("64,128") == [] and repeated_sizes("64:256") == []
    result = run_cli(["sweep", "--model", "llama3-8b", "--hardware", "dgx-h100-superpod", "--gpus", "8,8", "--csv"])
    assert result.exit_code == 0, result.stderr
    assert "megaplan: note: --gpus names 8 more than once; each size is swept once" in result.stderr
    assert result.stdout.count("\n") == 2  # the CSV header and one row for 8 GPUs


def test_a_user_yaml_that_gives_a_key_twice_is_refused_naming_both_lines(tmp_path):
    # fresh user trial 8: a model YAML with num_layers twice kept the last value without a word
    model = tmp_path / "dup.yaml"
    model.write_text(
        "name: my-model\nnum_layers: 32\nhidden_size: 4096\nnum_attention_heads: 32\n"
        "moe:\n  num_experts: 8\n  num_experts: 16\nnum_layers: 40\n"
    )
    line = one_line_error(run_cli(["search", "--model", str(model), "--gpus", "8"]))
    assert line == (  # the top mapping is read before the ones inside it
        f"megaplan: error: {model}: 'num_layers' is given twice (lines 2 and 8); YAML would keep only the last: "
        "remove one"
    )
    model.write_text(model.read_text().replace("num_layers: 40\n", ""))
    line = one_line_error(run_cli(["search", "--model", str(model), "--gpus", "8"]))
    assert "'num_experts' is given twice (lines 6 and 7)" in line
    from planner.presets import repeated_key_check

    repeated_key_check("a: 1\nb: {c: 1, d: 2}\ne: [ {f: 1}, {f: 2} ]\n", "ok.yaml")  # no key twice in one mapping
