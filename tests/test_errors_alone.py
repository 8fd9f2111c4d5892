"""An error comes alone and makes sense by itself; what is accepted with a change is noted. Found by the
new-user trial: `export --plan plans.json -o /nonexistent/x.sh` said a CUDA_DEVICE_MAX_CONNECTIONS note
before its error; `explain --model gpt3-175b --plan plans.json` said an override note, then an error about
a sequence length the user never typed; `--recompute-num-layers 500` on 6 layers per stage was labelled
rc-blk:500 without a word."""

from __future__ import annotations

import json

import pytest

from conftest import one_line_error, run_cli

GPT3 = ["--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "16"]


@pytest.fixture(scope="module")
def llama_plan(tmp_path_factory):
    """A plan file of Llama 3 8B at its 8192-token sequence (TP2 on 8 GPUs)."""
    path = tmp_path_factory.mktemp("plans") / "plans.json"
    result = run_cli(["explain", "--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--json"])
    assert result.exit_code == 0, result.output
    path.write_text(result.stdout)
    return str(path)


def test_an_output_folder_that_does_not_exist_is_refused_alone_before_any_work(llama_plan, tmp_path):
    missing = tmp_path / "nonexistent"  # not /nonexistent: a process whose HOME is /nonexistent may create it
    line = one_line_error(run_cli(["export", "--plan", llama_plan, "-o", f"{missing}/x.sh"]))
    assert line == f"megaplan: error: -o/--output '{missing}/x.sh': folder '{missing}' does not exist"


def test_an_output_that_is_a_folder_is_refused(tmp_path, llama_plan):
    line = one_line_error(run_cli(["export", "--plan", llama_plan, "-o", str(tmp_path)]))
    assert line.endswith(f"File '{tmp_path}' is a directory.")


@pytest.mark.parametrize("command", ["explain", "export"])
def test_an_error_after_an_override_names_the_override_and_comes_alone(command, llama_plan):
    line = one_line_error(run_cli([command, "--model", "gpt3-175b", "--plan", llama_plan]))
    # the 8192 comes from the plan file and the 2048 from --model: the line says both
    assert "seq_len 8192 exceeds max_position_embeddings 2048" in line
    assert line.endswith("(after: --model gpt3-175b overrides the plan file's llama3-8b)")


def test_a_note_before_an_error_is_dropped_and_said_when_the_command_succeeds():
    noted = [*GPT3, "--recompute", "full", "--recompute-num-layers", "500"]
    ok = run_cli(["explain", *noted, "--brief"])
    assert ok.exit_code == 0 and ok.stderr.count("megaplan: note:") == 1, ok.output
    line = one_line_error(run_cli(["explain", *noted, "--vpp", "5"]))  # 6 layers per stage in 5 chunks
    assert "6 layers per stage do not divide into vpp 5 chunks" in line


def test_a_held_note_is_said_before_the_output_it_is_about():
    result = run_cli(["explain", *GPT3, "--recompute", "full", "--recompute-num-layers", "9", "--brief"])
    assert result.exit_code == 0, result.output
    # click's runner keeps what a terminal shows, stdout and stderr in the order written
    assert 0 <= result.output.index("megaplan: note:") < result.output.index("gpt3-175b on 1,024 GPUs")


def _explained(*extra):
    result = run_cli(["explain", *GPT3, "--recompute", "full", *extra, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


@pytest.mark.parametrize(
    ("given", "chunk", "extra"),
    [
        (500, 6, ["--recompute-method", "block"]),  # 96 layers / pp 16 = 6 layers per stage
        (7, 6, []),  # uniform: one group of the whole stage
        (5, 2, ["--vpp", "3", "--recompute-method", "block"]),  # 6 per stage in 3 chunks of 2
    ],
)
def test_recompute_num_layers_beyond_a_chunk_is_read_as_megatron_runs_it_with_a_note(given, chunk, extra):
    # megatron/core/recompute.py: block checkpoints layer_idx < recompute_num_layers of the chunk's layers;
    # uniform groups end at min(layer_idx + n, layers): n beyond the chunk recomputes all of its layers
    big, said = _explained("--recompute-num-layers", str(given), *extra)
    same, quiet = _explained("--recompute-num-layers", str(chunk), *extra)
    assert big["parallel"]["recompute_num_layers"] == same["parallel"]["recompute_num_layers"]
    assert big["estimate"] == same["estimate"] and "note:" not in quiet
    assert said.strip() == (
        f"megaplan: note: --recompute-num-layers {given} is more than the {chunk} layers of a model chunk "
        f"(6 per stage{' in 3 chunks' if '--vpp' in extra else ''}); Megatron-LM accepts it and recomputes all "
        f"{chunk}, so the plan is read as --recompute-num-layers {chunk}"
    )
    brief = run_cli(["explain", *GPT3, "--recompute", "full", "--recompute-num-layers", str(given), *extra, "--brief"])
    assert ("rc-blk:" if "block" in extra else "rc-full:u") + str(chunk) in brief.stdout
    assert f":{given}" not in brief.stdout and f":u{given}" not in brief.stdout


def test_search_labels_the_recomputed_layers_that_run_and_says_why():
    args = ["search", "--model", "gpt3-175b", "--gpus", "1024", "--recompute", "full", "--recompute-method", "block"]
    result = run_cli([*args, "--recompute-num-layers", "500", "--top", "3", "--json"])
    assert result.exit_code == 0, result.output
    plans = json.loads(result.stdout)["plans"]
    for pj in plans:  # every chunk of these plans holds fewer than 500 layers: the whole chunk is recomputed
        layers = pj["parallel"]["stage_layers"]  # (a chunk of an accounted split may hold one layer of 48/49)
        assert pj["parallel"]["recompute_num_layers"] == -(-max(layers) // pj["parallel"]["vpp"]) < 500
    assert "megaplan: note: --recompute-num-layers 500 is more than the layers of a model chunk" in result.stderr


BRIEF_PLAN = [
    "--model",
    "gpt3-175b",
    "--gpus",
    "64",
    "--global-batch",
    "64",
    "--tp",
    "8",
    "--pp",
    "4",
    "--micro-batch",
    "1",
]


def test_explain_refuses_json_with_brief_instead_of_dropping_brief():
    """--json printed the whole plan and dropped --brief without a word (trial 3)."""
    line = one_line_error(run_cli(["explain", *BRIEF_PLAN, "--json", "--brief"]))
    assert line == "megaplan: error: --json and --brief: choose one output format"


def test_explain_brief_still_draws_the_schedule_it_was_asked_for():
    """--schedule --brief printed the verdict and no schedule, without saying why (trial 3)."""
    out = run_cli(["explain", *BRIEF_PLAN, "--brief", "--schedule"], env={"COLUMNS": "100"})
    assert out.exit_code == 0, out.output
    assert "Pipeline schedule: TP8 PP4 DP2 b1" in out.stdout and "stage 3 │" in out.stdout
    assert "speed" in out.stdout and "formula" not in out.stdout  # the verdict, not the whole breakdown
