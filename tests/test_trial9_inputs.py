"""A new user's second day, fresh user trial 9 (issue 21): each test reproduces a mistake that was
ignored without a word, took seconds to answer, or ended in a line that did not say what to do, with
files written here in the pattern of the real ones (the real scripts stay outside the repository)."""

from __future__ import annotations

from pathlib import Path

import yaml

from planner.presets import load_hardware

from conftest import one_line_error, run_cli

PRESETS = Path(__file__).resolve().parents[1] / "presets"


def _hardware_copy(tmp_path, **gpu_or_memory) -> str:
    """A user's copy of a shipped preset with some fields edited, as README's "copy one and edit it" says."""
    data = yaml.safe_load((PRESETS / "hardware" / "dgx-h100-superpod.yaml").read_text())
    data["name"] = "my-cluster"
    for key, value in gpu_or_memory.items():
        section, field = key.split("__")
        data[section][field] = value
    path = tmp_path / "my-cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_a_hardware_copy_whose_hbm_alone_was_edited_is_refused(tmp_path):
    """hbm_gib: 141 on a copy of the 80 GB H100 preset searched against the old 72.8 GiB without a word:
    a plan fills memory.allocatable_gib, which the user had not changed."""
    path = _hardware_copy(tmp_path, gpu__hbm_gib=141.0)
    line = one_line_error(run_cli(["search", "--model", "llama3-8b", "--gpus", "64", "--hardware", path]))
    assert "gpu.hbm_gib (141) and memory.allocatable_gib (79.18) disagree" in line
    assert "set both" in line


def test_a_hardware_copy_whose_two_capacities_were_edited_together_is_read(tmp_path):
    path = _hardware_copy(tmp_path, gpu__hbm_gib=131.3, memory__allocatable_gib=139.8)
    assert load_hardware(path).memory.allocatable_gib == 139.8
    result = run_cli(["search", "--model", "llama3-8b", "--gpus", "64", "--hardware", path])
    assert result.exit_code == 0, result.output
    assert "GiB/128.6" in result.stdout  # 139.8 less the 8 % headroom


def test_calibrate_options_of_your_own_runs_without_a_log_are_refused():
    """`calibrate --gpus 8` ran the 30-second fit on the published runs, --gpus dropped without a word."""
    line = one_line_error(run_cli(["calibrate", "--gpus", "8"]))
    assert line == (
        "megaplan: error: --gpus goes with --from-log: give the Megatron-LM log of at least one run of your own, "
        "or drop it to fit the published runs"
    )
    assert "--gpus, --force go with --from-log" in one_line_error(run_cli(["calibrate", "--force", "--gpus", "2"]))


def test_calibrate_write_beside_a_log_is_refused(tmp_path):
    """--write (the shipped presets' folder) beside --from-log was dropped: the log's fit goes to -o."""
    log, script = tmp_path / "train.log", tmp_path / "run.sh"
    log.write_text("")
    script.write_text("")
    line = one_line_error(
        run_cli(["calibrate", "--from-log", str(log), "--megatron-args-file", str(script), "--write", str(tmp_path)])
    )
    assert "--write refits the shipped presets on the published runs" in line


def test_a_sweep_past_every_legal_size_stops_before_searching_the_sizes_below(monkeypatch):
    """`sweep --model llama3-8b --gpus 8:100000000` searched the 17 sizes up to 262,144 GPUs (2 s of CPU on a
    shared core, 4.4 s wall) before it stopped at 524,288, which no tp·cp·pp·dp of the model reaches
    (tp ≤ 8 × cp ≤ 2 × pp ≤ 34 × dp ≤ 512 = 278,528)."""
    import pytest

    import planner.runs.sweep as sweep_module
    from planner import api
    from planner.errors import InfeasibleError

    searched: list[int] = []
    real_search = sweep_module.search

    def counting(ctx, n, *args, **kw):
        searched.append(n)
        return real_search(ctx, n, *args, **kw)

    monkeypatch.setattr(sweep_module, "search", counting)
    ctx = api.make_request(model="llama3-8b").ctx
    with pytest.raises(InfeasibleError, match="no plan on 524288 GPUs: .*at most 278,528 GPUs can hold a legal plan"):
        sweep_module.sweep(ctx, sweep_module.parse_gpu_sizes("8:100000000"))
    assert searched == [524288]


def test_a_pinned_tp_above_max_tp_names_both_options():
    """`search --tp 2 --max-tp 1` said "the pinned tp is not legal for this model", though tp 2 is."""
    line = one_line_error(run_cli(["search", "--model", "llama3-8b", "--gpus", "64", "--tp", "2", "--max-tp", "1"]))
    assert line == "megaplan: error: --tp 2 is above --max-tp 1: give one of them"


def test_an_option_pasted_with_a_typographic_dash_says_to_type_two_hyphens():
    """`search --model llama3-8b —gpus 64` (an em dash from a document) was "Got unexpected extra arguments
    (—gpus 64)"; inside --megatron-args it was blamed on an unquoted bash expansion."""
    line = one_line_error(run_cli(["search", "--model", "llama3-8b", "\u2014gpus", "64"]))
    assert line == "megaplan: error: '\u2014gpus' begins with a typographic dash (\u2014), not two hyphens: type --gpus"
    line = one_line_error(run_cli(["explain", "--megatron-args", "--num-layers 2 \u2013hidden-size 8", "--gpus", "8"]))
    assert line.endswith("(\u2013), not two hyphens: type --hidden-size")


def test_an_option_pasted_with_a_no_break_space_is_named():
    """`--gpus\\u00a064` (copied from a web page) was "No such option '--gpus\\xa064'"."""
    line = one_line_error(run_cli(["search", "--model", "llama3-8b", "--gpus\u00a064"]))
    assert "'--gpus\u242364' holds a no-break space" in line


def test_a_long_option_typed_with_one_hyphen_names_the_option():
    """`explain ... -tp 2` was "No such option '-t'" (click reads -tp as -t p)."""
    line = one_line_error(run_cli(["explain", "--model", "llama3-8b", "--gpus", "64", "-tp", "2"]))
    assert line == "megaplan: error: no option -tp: long options take two hyphens, --tp"


def _saved_search(tmp_path):
    import json

    result = run_cli(["search", "--model", "llama3-8b", "--gpus", "64", "--top", "2", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _written(tmp_path, data, name="edited.json") -> str:
    import json

    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_a_plan_file_field_megaplan_does_not_read_is_refused_naming_the_one_meant(tmp_path):
    """A plan file edited by hand, "micro_batch_size": 4 written for micro_batch, was explained as if
    the edit had not been made (exit 0, micro-batch 1)."""
    data = _saved_search(tmp_path)
    data["plans"][0]["parallel"]["micro_batch_size"] = 4
    line = one_line_error(run_cli(["explain", "--plan", _written(tmp_path, data), "--brief"]))
    assert line.startswith(
        "megaplan: error: plan: parallel.micro_batch_size is not a field megaplan reads "
        "(did you mean parallel.micro_batch?); the parallel fields: "
    )
    data = _saved_search(tmp_path)
    data["plans"][0]["training"]["seq_length"] = 4096
    line = one_line_error(run_cli(["explain", "--plan", _written(tmp_path, data)]))
    assert "training.seq_length is not a field megaplan reads (did you mean training.seq_len?)" in line


def test_a_plan_file_whose_model_name_alone_was_edited_is_refused(tmp_path):
    """ "model": "llama3-70b" typed over llama3-8b in a saved plan explained llama3-8b (its model_spec) without
    a word; --model beside --plan is the way to change it."""
    data = _saved_search(tmp_path)
    data["plans"][0]["model"] = "llama3-70b"
    path = _written(tmp_path, data)
    line = one_line_error(run_cli(["explain", "--plan", path, "--brief"]))
    assert "model is 'llama3-70b' but the file's model_spec describes llama3-8b" in line
    assert "give --model llama3-70b beside --plan" in line
    given = run_cli(["explain", "--plan", path, "--model", "llama3-70b", "--brief"])
    assert given.exit_code == 0 and given.stdout.startswith("llama3-70b on 64 GPUs"), given.output


def test_a_search_file_with_no_plans_and_a_gzipped_plan_file_say_so(tmp_path):
    """An emptied "plans" list said "holds 0 plans (allowed: )"; plans.json.gz said "'utf-8' codec can't decode
    byte 0x8b in position 1"."""
    import gzip
    import json

    data = _saved_search(tmp_path)
    data["plans"] = []
    line = one_line_error(run_cli(["explain", "--plan", _written(tmp_path, data)]))
    assert line.endswith('edited.json\' holds no plans (its "plans" list is empty): search again with --json')
    gz = tmp_path / "plans.json.gz"
    gz.write_bytes(gzip.compress(json.dumps(_saved_search(tmp_path)).encode()))
    line = one_line_error(run_cli(["explain", "--plan", str(gz)]))
    assert "plans.json.gz' is gzip-compressed: gunzip it first" in line


def test_a_gzipped_training_log_is_read(tmp_path):
    """calibrate --from-log train.log.gz said "no Megatron-LM iteration lines"; the same log uncompressed fits."""
    import gzip

    from test_calibrate_from_log import _one_run

    log, script = _one_run(tmp_path, 1.0)
    gz = tmp_path / "train.log.gz"
    gz.write_bytes(gzip.compress(open(log, "rb").read()))
    out = tmp_path / "mine.yaml"
    result = run_cli(["calibrate", "--from-log", str(gz), "--megatron-args-file", script, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "refitted: 1 run" in result.stdout and out.exists()


def test_a_log_of_another_model_gives_both_figures_in_pflop(tmp_path):
    """ "its throughput implies 326.4 PFLOP per iteration, the model in script.sh 45.21" left the unit off."""
    import re

    from test_calibrate_from_log import _one_run

    log, script = _one_run(tmp_path, 1.0)
    text = open(log).read()
    text = re.sub(r"(TFLOP/s/GPU\): )([\d.]+)", lambda m: m.group(1) + str(float(m.group(2)) * 7), text)
    open(log, "w").write(text)
    line = one_line_error(run_cli(["calibrate", "--from-log", log, "--megatron-args-file", script, "-o", "x.yaml"]))
    assert re.search(r"implies [\d.]+ PFLOP per iteration, the model in .*run.sh [\d.]+ PFLOP: not the same", line)


def test_two_variables_in_one_env_option_are_refused_naming_both(tmp_path):
    """--env 'TP=4 PP=2' set TP to "4 PP=2" and left PP unset, with only a note that TP went unused; a value
    with spaces that is not a list of VAR=VALUE words is still one value (lead, fresh user trial 9)."""
    from planner.plan_sources import env_values

    script = tmp_path / "run.sh"
    script.write_text(
        "TP=${TP:-1}\nPP=${PP:-1}\ntorchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $TP "
        "--pipeline-model-parallel-size $PP --num-layers 4 --hidden-size 256 --num-attention-heads 4 "
        "--seq-length 512 --max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8\n"
    )
    result = run_cli(["explain", "--megatron-args-file", str(script), "--env", "TP=4 PP=2"])
    assert result.exit_code == 2
    assert (
        one_line_error(result)
        == "megaplan: error: --env 'TP=4 PP=2': one VAR=VALUE per --env; allowed: --env TP=4 --env PP=2"
    )
    assert env_values(["ARGS=--foo 1 --bar", "TP=4"]) == {"ARGS": "--foo 1 --bar", "TP": "4"}


def test_a_value_computed_from_a_variable_a_command_sets_names_the_variables_it_reads(tmp_path):
    """Megatron-DeepSpeed's --micro-batch-size $(( ${global_batch_size} / ${dp_size} )), dp_size from a command,
    said "pass it with --env NAME=VALUE" without naming dp_size (fresh user trial 9, noticed; --env dp_size=8
    imports it)."""
    script = tmp_path / "run.sh"
    script.write_text(
        "global_batch_size=256\ndp_size=$(nvidia-smi -L | wc -l)\n"
        "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 256 --num-attention-heads 4 "
        "--seq-length 512 --max-position-embeddings 512 --micro-batch-size $(( ${global_batch_size} / ${dp_size} )) "
        "--global-batch-size ${global_batch_size}\n"
    )
    line = one_line_error(run_cli(["explain", "--megatron-args-file", str(script)]))
    assert line.endswith("pass it with --env NAME=VALUE (NAME: the one of global_batch_size, dp_size set by a command)")
    result = run_cli(["explain", "--megatron-args-file", str(script), "--env", "dp_size=8", "--brief"])
    assert result.exit_code == 0, result.output


def test_full_recomputation_without_a_layer_count_says_the_count_taken():
    """--recompute full --recompute-method block without --recompute-num-layers took 1 without a word, where
    Megatron-LM stops (its TransformerConfig requires the number with full recomputation); given, no note."""
    pinned = ["explain", "--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "16", "--recompute", "full"]
    result = run_cli([*pinned, "--recompute-method", "block"])
    assert result.exit_code == 0, result.output
    assert "note: --recompute-num-layers not given: 1 layer per model chunk (Megatron-LM needs" in result.stderr
    assert "rc-blk:1" in result.stdout
    given = run_cli([*pinned, "--recompute-method", "block", "--recompute-num-layers", "2"])
    assert given.exit_code == 0 and "--recompute-num-layers not given" not in given.stderr


def test_help_as_a_command_prints_the_help_as_git_reads_it():
    """`megaplan help` was "No such command 'help'"; `megaplan help search` is `megaplan search --help`."""
    top, search = run_cli(["help"]), run_cli(["help", "search"])
    assert top.exit_code == 0 and top.stdout == run_cli(["--help"]).stdout
    assert search.exit_code == 0 and search.stdout == run_cli(["search", "--help"]).stdout
    assert "search [OPTIONS]" in search.stdout and "Rank every legal" in search.stdout
