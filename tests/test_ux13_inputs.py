"""ux13: user-facing loose ends. sbatch ``--export-file`` (a file of NUL-separated NAME=value entries) sets a
job's environment, as Slurm's sbatch does. Every script and file here is written for the test."""

from __future__ import annotations

import pytest

from planner.megatron.importer import import_megatron
from planner.megatron.script import read_beside
from planner.megatron.shell import extract_launch

from conftest import SLURM_BODY as BODY
from conftest import SLURM_NODES as NODES
from conftest import one_line_error, run_cli

DEFAULTS = "TP=${TP:-1}\nPP=${PP:-1}\n"


def _job(tmp_path, directive: str = "#SBATCH --export-file=env.list\n", env: bytes = b"TP=4\0PP=2\0") -> str:
    (tmp_path / "env.list").write_bytes(env)
    job = tmp_path / "job.sh"
    job.write_text(NODES + directive + DEFAULTS + BODY)
    return str(job)


def _tp_pp(argv: list[str]) -> tuple[str, str]:
    return argv[argv.index("--tensor-model-parallel-size") + 1], argv[argv.index("--pipeline-model-parallel-size") + 1]


def test_sbatch_export_file_sets_the_jobs_environment(tmp_path):
    # `#SBATCH --export-file=env.list` with TP=4\0PP=2\0: before, the file was not read and ${TP:-1} gave TP1 PP1
    job = _job(tmp_path)
    imported = import_megatron(open(job).read(), base_dir=str(tmp_path))
    assert (imported.request.plan.tp, imported.request.plan.pp) == (4, 2)
    assert "TP=4, PP=2 from sbatch --export-file=env.list (the job's environment)" in imported.notes
    # --env (what the user says) wins over the file
    assert import_megatron(open(job).read(), env={"TP": "2"}, base_dir=str(tmp_path)).request.plan.tp == 2


def test_export_file_with_export_and_the_submitters_variables_as_sbatch_combines_them(tmp_path):
    _job(tmp_path, directive="")
    read = {"read_file": read_beside(str(tmp_path))}
    # sbatch unsets its own environment when the job's comes from a file: the submitter's TP=8 never reaches the
    # job (not even with ALL); --export's NAME=value pieces go over the file's (PP=1 over PP=2)
    argv = extract_launch("export TP=8\nsbatch --export=ALL,PP=1 --export-file=env.list job.sh\n", **read).argv
    assert _tp_pp(argv) == ("4", "1")
    # SBATCH_EXPORT is the --export when the command line gives none
    argv = extract_launch("export SBATCH_EXPORT=PP=8\nsbatch --export-file=env.list job.sh\n", **read).argv
    assert _tp_pp(argv) == ("4", "8")
    # --export=NONE exactly: sbatch drops the file's variables too, the script's defaults apply
    argv = extract_launch("export TP=8\nsbatch --export=NONE --export-file=env.list job.sh\n", **read).argv
    assert _tp_pp(argv) == ("1", "1")
    # the command line's --export-file replaces the #SBATCH line's
    (tmp_path / "other.list").write_bytes(b"TP=2\0")
    _job(tmp_path)
    argv = extract_launch("sbatch --export-file other.list job.sh\n", **read).argv
    assert _tp_pp(argv) == ("2", "1")


def test_export_file_entries_read_as_slurms_env_array_from_file_reads_them():
    from planner.megatron.shell.follow import export_file_values

    # NUL-separated; a value may hold a newline; an empty entry ends the list; DISPLAY/HOSTNAME/ENVIRONMENT are
    # never passed; an entry without '=' is skipped
    assert export_file_values("TP=4\0ARGS=a\nb\0JUNK\0DISPLAY=:0\0\0PP=2\0", "f") == {"TP": "4", "ARGS": "a\nb"}
    assert export_file_values("TP=4", "f") == {"TP": "4"}  # the last entry needs no NUL
    assert export_file_values("TP=4\n", "f") == {"TP": "4"}  # one line: bash's word splitting drops the newline
    assert export_file_values("", "f") == {}


@pytest.mark.parametrize(
    ("value", "env", "message"),
    [
        (
            "env.list",
            b"TP=4\nPP=2\n",
            "sbatch --export-file=env.list: its NAME=value lines are separated by newlines, but sbatch separates "
            "the entries by NUL characters only (sbatch(1)) and would pass the whole file as one variable (TP); "
            "write it with NULs (printf 'TP=4\\0PP=2\\0' > env.list, or env -0)",
        ),
        (
            "nope.list",
            b"",
            "sbatch --export-file=nope.list: no such file where the job is submitted ({dir}); --export-file takes "
            "a file of NUL-separated NAME=value entries (or pass the variables with --env NAME=VALUE)",
        ),
        (
            "3",
            b"",
            "sbatch --export-file=3: a file descriptor of the shell that runs sbatch, which megaplan cannot read; "
            "--export-file takes a file of NUL-separated NAME=value entries (or pass the variables with --env "
            "NAME=VALUE)",
        ),
    ],
)
def test_an_export_file_megaplan_cannot_read_as_sbatch_would_is_one_line(tmp_path, value, env, message):
    job = _job(tmp_path, directive=f"#SBATCH --export-file={value}\n", env=env)
    result = run_cli(["explain", "--megatron-args-file", job])
    assert one_line_error(result) == "megaplan: error: " + message.format(dir=tmp_path)


def test_calibrate_reads_the_launch_script_from_standard_input_as_explain_does(tmp_path):
    # `cat run.sh | megaplan calibrate --from-log x.log --megatron-args-file - ...` was "Invalid value for
    # '--megatron-args-file': File '-' does not exist", exit 2; explain --megatron-args-file - read it
    import json

    from test_calibrate_from_log import _one_run

    log, script = _one_run(tmp_path, 1.05)
    args = ["calibrate", "--from-log", log, "--force", "--json", "--megatron-args-file"]
    from_file = run_cli([*args, script, "-o", str(tmp_path / "file.yaml")])
    piped = run_cli([*args, "-", "-o", str(tmp_path / "piped.yaml")], input=open(script, "rb").read())
    assert from_file.exit_code == 0 and piped.exit_code == 0, piped.output
    assert json.loads(piped.stdout)["fit"] == json.loads(from_file.stdout)["fit"]
    assert json.loads(piped.stdout)["runs"][0]["script"] == "<stdin>"


def test_calibrates_piped_script_errors_are_explains(tmp_path):
    from test_calibrate_from_log import _one_run

    log, script = _one_run(tmp_path, 1.05)
    args = ["calibrate", "--from-log", log, "--megatron-args-file", "-", "-o", str(tmp_path / "x.yaml")]
    assert one_line_error(run_cli(args, input=b"")) == (
        "megaplan: error: --megatron-args-file -: reads the launch script from standard input, but nothing is "
        "piped in (cat run.sh | megaplan calibrate --from-log train.log --megatron-args-file - ...)"
    )
    assert one_line_error(run_cli(args, input=b"\0\1\2")) == (
        "megaplan: error: --megatron-args-file -: standard input is not text; pipe a launch script into it"
    )
    both = ["calibrate", "--from-log", "-", "--megatron-args-file", "-", "-o", str(tmp_path / "x.yaml")]
    assert one_line_error(run_cli(both, input=open(log, "rb").read())) == (
        "megaplan: error: --from-log - and --megatron-args-file -: standard input holds one file; give the log or "
        "the script as a file"
    )
    # the same reader as explain's: a Python file is refused in explain's words (it was read as a script)
    (tmp_path / "pretrain_gpt.py").write_text("import torch\n\ndef main():\n    pass\n")
    python = ["calibrate", "--from-log", log, "--megatron-args-file", str(tmp_path / "pretrain_gpt.py"), "-o", "x"]
    assert "is a Python file, not a launch script" in one_line_error(run_cli(python))
    explained = run_cli(["explain", "--megatron-args-file", str(tmp_path / "pretrain_gpt.py")])
    assert one_line_error(run_cli(python)) == one_line_error(explained)


def _table_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "moe_runs_table.py"
    spec = importlib.util.spec_from_file_location("moe_runs_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_moe_per_run_table_is_written_by_its_generator_and_lists_every_moe_row():
    # docs §13.7's per-run table listed 60 of the 89 MoE rows (none of GB300's) at an old fit; it is now written by
    # scripts/moe_runs_table.py --write (tests/test_ux14.py compares the values)
    from planner.fidelity.validate import load_moe_runs

    gen = _table_script()
    doc = gen.DOC.read_text()
    after = doc[doc.index("\n" + gen.LEAD) :]
    block = after[after.index("\n| run |") + 1 :].split("\n\n")[0].splitlines()
    assert block[:2] == gen.HEADER
    assert [line.split(" | ")[0].removeprefix("| ") for line in block[2:]] == [run.id for run in load_moe_runs()]
    assert "scripts/moe_runs_table.py --write" in after.split("\n\n")[0]


def test_the_moe_table_generator_formats_and_replaces_only_its_table():
    gen = _table_script()
    rows = [
        {"id": "A", "published": 1000.0, "predicted": 1049.6, "error_pct": 4.96, "in_fit": True},
        {"id": "B", "published": 2000.0, "predicted": 1500.4, "error_pct": -24.98, "in_fit": False},
    ]
    text = gen.table(rows)
    assert text.splitlines()[2:] == ["| A | 1000 | 1050 | +5.0 % |  |", "| B | 2000 | 1500 | -25.0 % | apart |"]
    doc = f"intro\n\n{gen.LEAD}; old):\n\n| run | x |\n|---|\n| old | 1 |\n\nnext paragraph\n"
    assert gen.replaced(doc, text) == f"intro\n\n{gen.LEAD}; old):\n\n{text}\nnext paragraph\n"
    # median / max |error| of the rows in the bar (A only: 4.96 %), the rows apart counted
    rows = [{**r, "id": f"MB-26.08-GB200-{r['id']}"} for r in rows]
    model = {r["id"]: "m" for r in rows}
    assert "| m | GB200 | 2 | 5.0 / 5.0 % (1) | 1 |" in gen.summary(rows, model)


def test_the_export_header_explains_only_the_codes_its_plan_uses():
    # the slurm script's header carried the whole search legend as one ~1,000-character comment line (FSDP, MoE
    # dispatchers, layouts for a dense plan with none of them); now the pieces its label uses, wrapped
    from planner.plan import PLAN_LABEL_LEGEND, plan_label_legend

    args = ["export", "--format", "slurm", "--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "16"]
    result = run_cli([*args, "--vpp", "6", "--micro-batch", "3", "--sequence-parallel"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[2] == "# TP8 PP16 DP8 b3 V6 · SP no-tpo"  # no-ogr before ux14 (the recipes' overlap is on)
    header = " ".join(line[2:] for line in lines[3:6])
    assert header == "(" + plan_label_legend(lines[2][2:]) + ")" and lines[6].startswith("# Read it back")
    assert (
        lines[7]
        == "#   megaplan explain --megatron-args-file THIS_SCRIPT --model gpt3-175b --hardware dgx-a100-superpod"
    )
    assert lines[8].startswith("# Replace every")
    assert header.startswith("(b micro-batch · V interleaved chunks per stage") and "SP sequence parallel" in header
    assert "Megatron FSDP" not in header and "MoE token dispatcher" not in header and "rc-sel" not in header
    assert max(len(line) for line in lines[:7]) <= 100
    # every piece of the search footer's legend is one a label can call for, in the same order
    label = "b1 V2 · SP DO HFSDP×2 rc-sel no-ogr tpo:TE acc-emb first2/last- alltoall+ov layout Et|tL"
    every = plan_label_legend(label)
    assert every == PLAN_LABEL_LEGEND


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # click's IntRange / FloatRange called one bad number "not a valid integer range" / "float range"
        (
            ["search", "--model", "gpt3-175b", "--gpus", "abc"],
            "Invalid value for '--gpus': 'abc' is not a valid integer.",
        ),
        (
            ["search", "--model", "gpt3-175b", "--gpus", "8", "--top", "x"],
            "Invalid value for '--top': 'x' is not a valid integer.",
        ),
        (
            ["search", "--model", "gpt3-175b", "--gpus", "8", "--memory-headroom", "lots"],
            "Invalid value for '--memory-headroom': 'lots' is not a valid number.",
        ),
        (["calibrate", "--gpus", "eight"], "Invalid value for '--gpus': 'eight' is not a valid integer."),
        # a count copied from megaplan's own output ("1,024 GPUs")
        (
            ["search", "--model", "gpt3-175b", "--gpus", "1,024"],
            "Invalid value for '--gpus': '1,024' is not a valid integer: write it without separators (1024)",
        ),
    ],
)
def test_a_word_for_a_number_is_said_without_click_s_range_jargon(args, message):
    assert one_line_error(run_cli(args)) == "megaplan: error: " + message


@pytest.mark.parametrize(
    ("kind", "typed", "hint"),
    [
        # a part of a preset's name (what a newcomer types: the GPU, the model family) had no suggestion: the list
        ("--hardware", "h100", "did you mean dgx-h100-superpod? known: "),
        ("--hardware", "B200", "did you mean one of dgx-b200-superpod, gb200-nvl72? known: "),
        ("--model", "qwen3", "did you mean one of qwen3-235b-a22b, qwen3-30b-a3b? known: "),
        ("--model", "gpt3-175", "did you mean gpt3-175b? known: "),  # the close match, as before
    ],
)
def test_part_of_a_preset_name_suggests_the_presets_holding_it(kind, typed, hint):
    args = ["search", "--gpus", "8", kind, typed, *(["--model", "llama3-8b"] if kind == "--hardware" else [])]
    line = one_line_error(run_cli(args))
    what = "hardware" if kind == "--hardware" else "model"  # it read "unknown models preset"
    assert line.startswith(f"megaplan: error: unknown {what} preset '{typed}'; {hint}")


def test_a_hidden_column_points_to_an_output_option_the_command_has():
    # explain and validate --choice have no --csv (explain --csv: "No such option"), yet a narrow table said
    # "(hidden at this width: ...; see --json or --csv)"; search, sweep and compare keep "or --csv"
    args = ["explain", "--model", "llama3-8b", "--gpus", "8", "--tp", "1", "--pp", "1"]
    result = run_cli(args, env={"COLUMNS": "60"})
    hidden = [line for line in result.stdout.splitlines() if line.startswith("(hidden at this width")]
    assert result.exit_code == 0 and hidden, result.output
    assert all(line.endswith("; see --json)") for line in hidden), hidden
    assert run_cli(["explain", "--model", "llama3-8b", "--gpus", "8", "--csv"]).exit_code == 2
    from rich.console import Console

    from planner.report.layout import CSV_TOO, Column, FittedTable

    console = Console(width=20, record=True)
    columns = [Column("a", lambda r: r * 10, 1), Column("b", lambda r: r * 10, 2)]
    console.print(FittedTable(columns, ["x"], elsewhere=CSV_TOO))
    assert "(hidden at this width: b; see --json or --csv)" in console.export_text().replace("\n", " ")
    console.print(FittedTable(columns, ["x"]))  # the default: every command has --json
    assert "(hidden at this width: b; see --json)" in console.export_text().replace("\n", " ")


def test_search_explains_the_codes_of_the_plans_it_shows_not_every_code():
    # search's footer carried the whole legend: MoE dispatchers, layouts, interleaving under a dense search none of
    # whose plans used them
    import json

    from planner.plan import plan_label_legend
    from planner.report.labels import plan_text

    result = run_cli(["search", "--model", "gpt-1.7b", "--gpus", "8", "--top", "3", "--json"])
    labels = " ".join(plan_text(pj) for pj in json.loads(result.stdout)["plans"])
    shown = run_cli(["search", "--model", "gpt-1.7b", "--gpus", "8", "--top", "3"], env={"COLUMNS": "400"})
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.stdout.splitlines())
    assert "MoE token dispatcher" not in text and "layout: --pipeline-model-parallel-layout" not in text
    assert "\nb micro-batch · SP sequence parallel · FSDP Megatron FSDP" in shown.stdout  # b8, SP, FSDP: shown
    assert plan_label_legend(labels) + ". TFLOP/s and MFU count model FLOPs" in text


def test_validate_shows_a_large_published_value_whole_not_in_scientific_notation():
    # the MoE rows' tokens/s per GPU read "2.17e+04" and "3.174e+04" (f"{x:.4g}"); step times keep 4 digits
    from rich.console import Console

    from planner.report.fidelity import _runs_table, measured_text

    assert [measured_text(x) for x in (21700.4, 31744.0, 1204.0, 8.686, 0.5188)] == [
        "21,700",
        "31,744",
        "1,204",
        "8.686",
        "0.5188",
    ]
    row = {"id": "MB-X", "metric": "tokens/s per GPU", "published": 19360.0, "predicted": 21700.4, "error_pct": 12.1}
    console = Console(width=120, record=True)
    console.print(_runs_table({"runs": [row]}, "t"))
    text = console.export_text()
    assert "19,360" in text and "21,700" in text
