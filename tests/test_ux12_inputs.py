"""ux12: three follow-ups of the launch-script import. A Slurm job's ``--export`` (``#SBATCH --export=ALL,TP=4``)
puts variables in the job's environment, which the script body reads; ``calibrate --from-log -`` reads the log
from standard input; a file the script sources that bash cannot parse is named in the error. Every script here is
written for the test (no third-party file)."""

from __future__ import annotations

import pytest

from planner.errors import PlannerError
from planner.megatron.importer import import_megatron
from planner.megatron.script import read_beside
from planner.megatron.shell import extract_launch
from planner.megatron.shell.follow import export_values

from conftest import SLURM_BODY as BODY
from conftest import SLURM_NODES as NODES
from conftest import one_line_error, run_cli


def _tp_pp(text: str, **kw) -> tuple[int, int]:
    plan = import_megatron(text, **kw).request.plan
    return plan.tp, plan.pp


@pytest.mark.parametrize("defaults", ["", "TP=${TP:-1}\nPP=${PP:-1}\n"])
def test_sbatch_export_values_reach_the_script_body(defaults):
    # sbatch(1) --export=ALL,TP=4,PP=2: the job's environment holds TP=4 and PP=2. Before: without defaults an
    # error "$TP ... leaves unset", with ${TP:-1} the plan silently TP1 PP1
    text = NODES + "#SBATCH --export=ALL,TP=4,PP=2\n" + defaults + BODY
    assert _tp_pp(text) == (4, 2)
    imported = import_megatron(text)
    assert "TP=4, PP=2 from sbatch --export=ALL,TP=4,PP=2 (the job's environment)" in imported.notes
    assert _tp_pp(text, env={"TP": "8"}) == (8, 2)  # --env (the submitting shell) wins, as with ALL


def test_the_sbatch_command_line_export_overrides_the_job_scripts_and_all_lets_the_submitter_win(tmp_path):
    job = tmp_path / "job.sh"
    job.write_text(NODES + "#SBATCH --export=ALL,TP=4,PP=2\nTP=${TP:-1}\nPP=${PP:-1}\n" + BODY)
    read = {"read_file": read_beside(str(tmp_path))}
    # the command line's --export replaces the #SBATCH line's: only PP=1 given, TP falls to the script's default
    assert extract_launch("sbatch --export=PP=1 job.sh\n", **read).argv[:4] == [
        "--tensor-model-parallel-size",
        "1",
        "--pipeline-model-parallel-size",
        "1",
    ]
    # with ALL the submitter's exported TP=2 wins over TP=4 (sbatch(1): "take precedence"); PP=2 is the given one
    argv = extract_launch("export TP=2\nsbatch job.sh\n", **read).argv
    assert argv[1] == "2" and argv[3] == "2"
    # NONE: the submitter's exported variables do not reach the job, the script's defaults apply
    argv = extract_launch("export TP=2 PP=2\nsbatch --export=NONE job.sh\n", **read).argv
    assert argv[1] == "1" and argv[3] == "1"


def test_a_name_alone_in_sbatch_export_is_the_submitters_value_named_never_the_scripts_default():
    # --export=TP passes TP from the shell that runs sbatch, which megaplan cannot see: ${TP:-1} was TP1
    text = NODES + "#SBATCH --export=TP,PP=2\nTP=${TP:-1}\n" + BODY
    with pytest.raises(PlannerError) as err:
        import_megatron(text)
    message = str(err.value)
    assert "--tensor-model-parallel-size is $TP" in message and "--env TP=VALUE" in message
    assert message.endswith(
        "(sbatch --export passes TP from the shell that submits the job, which megaplan cannot see)"
    )
    assert _tp_pp(text, env={"TP": "2"}) == (2, 2)


def test_sbatch_export_values_parse_as_sbatch_reads_them():
    assert export_values("ALL,TP=4,PP=2") == (True, {"TP": "4", "PP": "2"})
    assert export_values("NONE") == (False, {})
    assert export_values("EDITOR,ARG1=test") == (False, {"EDITOR": None, "ARG1": "test"})
    assert export_values("all,GPUS=0,1,2") == (True, {"GPUS": "0,1,2"})  # pieces no name continue the value


def _piped(tmp_path, log_bytes: bytes, script: str, *extra: str):
    args = ["calibrate", "--from-log", "-", "--megatron-args-file", script, "--force", "--json", *extra]
    return run_cli([*args, "-o", str(tmp_path / "piped.yaml")], input=log_bytes)


def test_calibrate_reads_the_log_from_standard_input(tmp_path):
    # `cat train.log | megaplan calibrate --from-log - ...` was "Invalid value for '--from-log': File '-' does not
    # exist", exit 2
    import gzip
    import json

    from test_calibrate_from_log import _one_run

    log, script = _one_run(tmp_path, 1.05)
    from_file = run_cli(
        ["calibrate", "--from-log", log, "--megatron-args-file", script, "--force", "--json"]
        + ["-o", str(tmp_path / "file.yaml")]
    )
    piped = _piped(tmp_path, open(log, "rb").read(), script)
    assert from_file.exit_code == 0 and piped.exit_code == 0, piped.output
    row, file_row = json.loads(piped.stdout)["runs"][0], json.loads(from_file.stdout)["runs"][0]
    assert row["log"] == "<stdin>" and row["measured_s"] == file_row["measured_s"]  # the same steady time
    assert json.loads(piped.stdout)["fit"] == json.loads(from_file.stdout)["fit"]
    assert "on 1 run of your own (<stdin>)" in (tmp_path / "piped.yaml").read_text()
    # a gzip-compressed log piped in (cat train.log.gz | ...) is read as the file is
    zipped = _piped(tmp_path, gzip.compress(open(log, "rb").read()), script, "--overwrite")
    assert zipped.exit_code == 0 and json.loads(zipped.stdout)["fit"] == json.loads(piped.stdout)["fit"]


def test_standard_input_empty_twice_or_a_missing_log_is_one_line(tmp_path):
    from test_calibrate_from_log import _one_run

    log, script = _one_run(tmp_path, 1.05)
    assert one_line_error(_piped(tmp_path, b"", script)) == (
        "megaplan: error: --from-log -: reads the log from standard input, but nothing is piped in "
        "(cat train.log | megaplan calibrate --from-log - ...)"
    )
    twice = run_cli(["calibrate", "--from-log", "-", "--from-log", "-", "--megatron-args-file", script, "-o", "x.y"])
    assert one_line_error(twice).endswith("--from-log -: standard input holds one log; give the others as files")
    missing = run_cli(["calibrate", "--from-log", str(tmp_path / "nope.log"), "--megatron-args-file", script])
    assert "nope.log" in one_line_error(missing) and "does not exist" in one_line_error(missing)
    assert not (tmp_path / "piped.yaml").exists()  # nothing written on a refusal


def test_a_terminal_on_standard_input_is_refused_not_waited_on(monkeypatch):
    import sys

    from planner.fidelity.from_log import LogError, _log_bytes

    class Terminal:
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal())
    with pytest.raises(LogError, match="nothing is piped in"):
        _log_bytes("-")


RUN = """#!/bin/bash
{source}
torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 2 \\
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 \\
    --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 256 --bf16 \\
    --tokenizer-type NullTokenizer --vocab-size 32000
"""


@pytest.mark.parametrize(
    ("line", "name", "body", "said"),
    [  # an if without fi: "unexpected EOF (at the end of the script)", naming neither the file nor the if
        (
            "source config.sh",
            "config.sh",
            'NUM_LAYERS=32\nHIDDEN=4096\nif [ "$HIDDEN" -gt 0 ]; then\n  HEADS=32\n',
            "config.sh (which the script sources): not a shell script bashlex can parse: unexpected EOF (at the end "
            "of the file; what is left open starts at line 3: 'if [ \"$HIDDEN\" -gt 0 ]; then')",
        ),
        (  # an unclosed $(( : "unterminated ( in '...'"
            ". ./env.sh",
            "env.sh",
            "export TP=2\nPP=$((1 +\n",
            "./env.sh (which the script sources): unterminated ( in 'export TP=2\\nPP=$((1 +' (line 2: 'PP=$((1 +')",
        ),
        (  # bashlex's token error kept its line but not the file
            "source tok.sh",
            "tok.sh",
            "A=1\nB=2\nthen\n",
            "tok.sh (which the script sources): not a shell script bashlex can parse: unexpected token 'then' "
            "(line 3: 'then')",
        ),
        (
            "bash quote.sh",
            "quote.sh",
            'X="unclosed\n',
            "quote.sh (which the script runs): unterminated \" quote (line 1: 'X=\"unclosed')",
        ),
    ],
)
def test_a_parse_error_in_a_sourced_file_names_the_file_and_its_line(tmp_path, line, name, body, said):
    (tmp_path / name).write_text(body)
    (tmp_path / "run.sh").write_text(RUN.format(source=line))
    result = run_cli(["explain", "--megatron-args-file", str(tmp_path / "run.sh")])
    assert one_line_error(result) == f"megaplan: error: {said}"


def test_a_parse_error_in_the_script_itself_says_where_the_open_block_starts():
    text = "#!/bin/bash\nA=1\nif true; then\n" + RUN.format(source="")
    with pytest.raises(PlannerError) as err:
        import_megatron(text)
    assert str(err.value) == (
        "not a shell script bashlex can parse: unexpected EOF (at the end of the script; what is left open starts "
        "at line 3: 'if true; then')"
    )


def test_sbatch_export_from_the_environment_variable_sits_between_the_command_line_and_the_sbatch_lines(tmp_path):
    # sbatch(1): SBATCH_EXPORT is --export, over the #SBATCH line and under the command line's option
    job = tmp_path / "job.sh"
    job.write_text(NODES + "#SBATCH --export=ALL,TP=4,PP=2\nTP=${TP:-1}\nPP=${PP:-1}\n" + BODY)
    read = {"read_file": read_beside(str(tmp_path))}
    argv = extract_launch("export SBATCH_EXPORT=ALL,TP=8\nsbatch job.sh\n", **read).argv
    assert argv[1] == "8" and argv[3] == "1"  # PP=2 was the #SBATCH line's, which SBATCH_EXPORT replaces
    argv = extract_launch("export SBATCH_EXPORT=ALL,TP=8\nsbatch --export=ALL,PP=4 job.sh\n", **read).argv
    assert argv[1] == "1" and argv[3] == "4"
    assert _tp_pp(job.read_text(), env={"SBATCH_EXPORT": "ALL,TP=2"}) == (2, 1)  # the user's shell: --env


def test_explain_reads_the_launch_script_from_standard_input(tmp_path, monkeypatch):
    # `cat run.sh | megaplan explain --megatron-args-file -` was "cannot read '-': No such file or directory",
    # exit 2. Piped, the script is the same plan as the file; a file it sources is read from the working
    # directory (a pipe has no directory of its own)
    import json

    (tmp_path / "sizes.sh").write_text("TP=4\nPP=2\n")
    script = NODES + "source ./sizes.sh\n" + BODY
    (tmp_path / "run.sh").write_text(script)
    monkeypatch.chdir(tmp_path)
    from_file = run_cli(["explain", "--megatron-args-file", "run.sh", "--json"])
    piped = run_cli(["explain", "--megatron-args-file", "-", "--json"], input=script)
    assert from_file.exit_code == 0 and piped.exit_code == 0, piped.output
    plan, file_plan = json.loads(piped.stdout), json.loads(from_file.stdout)
    assert (plan["parallel"]["tp"], plan["parallel"]["pp"], plan["gpus"]) == (4, 2, 16)  # TP and PP: sizes.sh's
    assert plan["parallel"] == file_plan["parallel"] and plan["estimate"] == file_plan["estimate"]
    assert one_line_error(run_cli(["explain", "--megatron-args-file", "-"], input="")) == (
        "megaplan: error: --megatron-args-file -: reads the launch script from standard input, but nothing is "
        "piped in (cat run.sh | megaplan explain --megatron-args-file -)"
    )
