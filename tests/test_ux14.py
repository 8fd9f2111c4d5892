"""ux14: user-facing defects the last stop noticed and left alone."""

from __future__ import annotations

import json

from conftest import run_cli


def test_the_legend_explains_the_stage_split_codes_the_plans_shown_use():
    # search's footer and the export header explained every code of their plans' labels but acc-emb/acc-loss
    # (--account-for-embedding/loss-in-pipeline-split) and firstN/lastM (--decoder-first/last-pipeline-num-layers)
    from planner.plan import plan_label_legend

    args = ["search", "--model", "gpt-1.7b", "--gpus", "8", "--pp", "2", "--top", "3"]
    args += ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
    shown = run_cli(args, env={"COLUMNS": "400"})
    assert shown.exit_code == 0, shown.output
    assert "TP1 PP2 DP4 b8 V13 · acc-emb+loss" in shown.stdout
    text = " ".join(shown.stdout.splitlines())
    assert (
        "acc-emb/acc-loss/acc-emb+loss: the embedding/the loss/both counted as a layer when the pipeline stages are "
        "split (--account-for-embedding/loss-in-pipeline-split)"
    ) in text
    assert "firstN/lastM" not in text  # no plan shown has explicit end stages
    assert plan_label_legend("TP1 PP2 DP4 b1 · acc-loss").endswith("(--account-for-embedding/loss-in-pipeline-split)")
    args = ["export", "--format", "slurm", "--model", "gpt-1.7b", "--gpus", "8", "--pp", "2"]
    script = run_cli([*args, "--decoder-first-pipeline-num-layers", "10"])
    assert script.exit_code == 0, script.output
    lines = script.stdout.splitlines()
    assert lines[2].endswith(" first10/last-")
    header = " ".join(line[2:] for line in lines[3:7])
    assert (
        "firstN/lastM: N layers on the first stage, M on the last (--decoder-first/last-pipeline-num-layers; -: "
        "not set))"
    ) in header


def _estimate(args: list[str]) -> dict:
    result = run_cli([*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_layout_typed_by_hand_runs_the_overlaps_of_searchs_plan_of_it():
    # search's plans run --overlap-grad-reduce (and --overlap-param-gather with a sharded optimizer), as today's
    # recipes do; the same layout typed as flags had both off (Megatron-LM's store_true default) and was slower
    import shlex

    found = _estimate(["search", "--model", "gpt-1.7b", "--gpus", "8", "--distributed-optimizer", "--top", "1"])
    best = found["plans"][0]
    assert best["options"]["overlap_grad_reduce"] and best["options"]["overlap_param_gather"]
    typed = shlex.split(best["commands"]["explain"])[1:]
    assert typed[-2:] == ["--overlap-grad-reduce", "--overlap-param-gather"]
    mine = _estimate(typed[:-2])  # the layout alone, as a user types it
    assert (mine["options"]["overlap_grad_reduce"], mine["options"]["overlap_param_gather"]) == (True, True)
    assert mine["estimate"]["iteration_s"] == best["estimate"]["iteration_s"]
    off = _estimate([*typed[:-2], "--no-overlap-grad-reduce"])  # the gather needs the gradient overlap: off too
    assert (off["options"]["overlap_grad_reduce"], off["options"]["overlap_param_gather"]) == (False, False)
    gather_off = _estimate([*typed[:-2], "--no-overlap-param-gather"])["options"]
    assert (gather_off["overlap_grad_reduce"], gather_off["overlap_param_gather"]) == (True, False)
    plain = _estimate(["explain", "--model", "gpt-1.7b", "--gpus", "8", "--tp", "2"])["options"]
    assert (plain["overlap_grad_reduce"], plain["overlap_param_gather"]) == (True, False)  # nothing to gather


def test_explain_says_which_overlaps_run_and_how_to_turn_them_off():
    args = ["explain", "--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "8", "--brief"]
    shown = run_cli([*args, "--distributed-optimizer", "--sequence-parallel"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[1] == "plan  TP8 PP8 DP16 b1 · SP DO no-tpo · bf16 · flash attention"
    assert lines[2] == (
        "      overlaps on: --overlap-grad-reduce, --overlap-param-gather (off with --no-overlap-grad-reduce, "
        "--no-overlap-param-gather) · off: --tp-comm-overlap"
    )
    off = run_cli([*args, "--no-overlap-grad-reduce"]).stdout.splitlines()
    assert off[1:3] == [
        "plan  TP8 PP8 DP16 b1 · no-ogr · bf16 · flash attention",
        "      overlaps off: --overlap-grad-reduce",
    ]
    helped = " ".join(run_cli(["explain", "--help"], env={"COLUMNS": "400"}).stdout.split())
    assert (
        "--overlap-grad-reduce / --no-overlap-grad-reduce Overlap the gradient reduction with the backward. " in helped
    )
    assert "[default: on, as in search's plans and today's recipes (Megatron-LM's own default is off" in helped


def test_a_launch_script_keeps_its_own_overlap_flags():
    # a script's flags decide for a script: without --overlap-grad-reduce it runs Megatron-LM's default, off
    script = (
        "--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings "
        "2048 --micro-batch-size 4 --global-batch-size 512 --bf16 --use-distributed-optimizer "
        "--tensor-model-parallel-size 2"
    )
    read = _estimate(["explain", "--megatron-args", script, "--gpus", "8"])["options"]
    assert (read["overlap_grad_reduce"], read["overlap_param_gather"]) == (False, False)
    given = _estimate(["explain", "--megatron-args", script + " --overlap-grad-reduce", "--gpus", "8"])["options"]
    assert (given["overlap_grad_reduce"], given["overlap_param_gather"]) == (True, False)


def test_compare_sides_over_a_typed_plan_take_the_overlaps_each_layout_gets():
    # --a adds the distributed optimizer: its parameter all-gather overlaps, as search's plan of it; --b turns the
    # gradient overlap off, and the gather (which needs it) with it, rather than a plan Megatron-LM refuses
    args = ["compare", "--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "8", "--sequence-parallel"]
    out = _estimate(
        [*args, "--a", "--distributed-optimizer", "--b", "--distributed-optimizer --no-overlap-grad-reduce"]
    )
    sides = [(out[k]["options"]["overlap_grad_reduce"], out[k]["options"]["overlap_param_gather"]) for k in "ab"]
    assert sides == [(True, True), (False, False)]
    # and the table says so on rows of their own (the labels' no-ogr/no-opg were all it showed)
    rows = {r["name"]: (r["a"], r["b"], r["differs"]) for r in out["rows"]}
    assert rows["overlap_grad_reduce"] == (True, False, True) and rows["overlap_param_gather"] == (True, False, True)
    assert rows["tp_comm_overlap"] == (False, False, False)


def _table_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "moe_runs_table.py"
    spec = importlib.util.spec_from_file_location("moe_runs_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_moe_tables_of_the_docs_are_what_the_generator_writes_now():
    # §13.7's by-model summary tables were hand-written and carried an older fit's figures (GPT-OSS GB200 25.8 / 37.0 %
    # where validate gave 15.4 / 25.1 %); both tables and the summary's factors are now written by the generator
    from planner.fidelity.validate import load_moe_runs, validate_moe

    gen = _table_script()
    doc = gen.DOC.read_text()
    model = {run.id: run.request["model"] for run in load_moe_runs()}
    now = gen.written(doc, validate_moe()["runs"], model, gen.shipped_factors())
    assert now == doc, "docs/cost-model.md §13.7 is stale: run `python scripts/moe_runs_table.py --write`"
    # 8 GPT-OSS GB200 rows and 128 in all since the verification cards' 14 (cards18), the DGX Cloud recipes' 21 (6
    # of them its 2024 Grok-1's) and the NeMo docs' 4 Mixtral rows; 147 with Megatron-Bridge's 19 B300 rows
    assert "| gpt-oss-120b | GB200 | 8 |" in doc and "| **all** | all | 147 |" in doc


def test_the_summary_writer_replaces_its_lead_and_table_only():
    gen = _table_script()
    rows = [
        {"id": "MB-26.08-GB200-A", "published": 1000.0, "predicted": 1049.6, "error_pct": 4.96, "in_fit": True},
        {"id": "MB-26.08-H100-B", "published": 2000.0, "predicted": 1500.4, "error_pct": -24.98, "in_fit": False},
        {"id": "MB-26.08-H100-C", "published": 100.0, "predicted": 101.0, "error_pct": 1.0, "in_fit": True},
    ]
    model = {"MB-26.08-GB200-A": "m", "MB-26.08-H100-B": "m", "MB-26.08-H100-C": "gpt-oss-120b"}
    lead = gen.summary_lead({"t_op": 8.3, "eta_a2a": 0.8336, "phi": 0.659})
    assert "at the shipped presets: t_op 8.30 µs, H100's η_a2a 0.834, φ 0.659)" in lead
    doc = f"intro\n\n{gen.SUMMARY_LEAD}; old lead\nsecond line.\n\n| model | x |\n|---|\n| old | 1 |\n\nnext\n"
    table = gen.summary(rows, model)
    assert gen.replaced_summary(doc, lead, table) == f"intro\n\n{lead}\n{table}\nnext\n"
    # the bar of m: A (4.96 %); B apart. All but GPT-OSS: m's rows. All: A and C in the bar, median (1.0 + 4.96) / 2
    assert "| m | all | 2 | 5.0 / 5.0 % (1) | 1 |" in table
    assert "| all but gpt-oss-120b | all | 2 | 5.0 / 5.0 % (1) | 1 |" in table
    assert table.endswith("| **all** | all | 3 | 3.0 / 5.0 % (2) | 1 |\n")


def test_the_moe_calibration_writes_what_a_second_run_writes_again():
    # calibrate --moe --write fitted t_op at the presets' η_a2a and φ, then η_a2a and φ at that t_op: one round of a
    # fit whose parts move each other, so a second run took the next round and changed the presets (8.30 -> 8.29 µs
    # -> 8.28 on main at 14c9e22). It now rounds until a round writes what it started from. Here on the 15 H100 rows
    # (t_op and η_a2a pull hard on each other there, ~0.3 of the gap left a round), from a start near their fixed point
    from planner.fidelity import moe_fit
    from planner.fidelity.calibrate import with_calibration
    from planner.fidelity.moe_runs import load_moe_runs
    from planner.presets import load_hardware, preset_names

    runs = [r for r in load_moe_runs() if r.hardware == "dgx-h100-superpod"]
    start = {name: load_hardware(name) for name in preset_names("hardware")}
    # (11.45 µs, 0.8883, 0.631 since HybridEP's metadata is priced, hybridep18: the H100 HybridEP row slower; was 11.94)
    near = {"moe_host_op_us": 11.40, "a2a_network_efficiency": 0.8883, "persistent_gemm_comm_share": 0.631}
    start["dgx-h100-superpod"] = with_calibration(start["dgx-h100-superpod"], near)
    f, _, _, first, rounds, pooling = moe_fit.calibrated(runs, start)
    assert rounds is not None and rounds >= 2  # one round from the start (a run before) was not where they meet
    again = moe_fit.calibrated(runs, first)
    assert again[4] == 1 and again[0].value == f.value and again[5].pooled == pooling.pooled
    assert all(again[3][name].calibration == first[name].calibration for name in first)
    h100 = first["dgx-h100-superpod"].calibration
    assert h100.moe_host_op_us == round(f.value, 2) and 11.0 < h100.moe_host_op_us < 12.0


def _commands(group, prefix=()):
    yield prefix
    for name, cmd in sorted(getattr(group, "commands", {}).items()):
        yield from _commands(cmd, (*prefix, name))


def test_every_help_fits_80_columns_and_shows_sizes_as_a_user_gives_them():
    # at 80 columns the examples of search, sweep, explain, export and megaplan's own help ran past the edge and
    # wrapped mid-flag ("--min-\ngpus"); every size option said "[1<=x<=2147483647]", the int32 guard
    from click.testing import CliRunner

    from planner.cli import cli

    for command in _commands(cli):
        shown = CliRunner().invoke(cli, [*command, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
        assert shown.exit_code == 0, (command, shown.output)
        long = [line for line in shown.stdout.splitlines() if len(line) > 80]
        assert not long and "2147483647" not in shown.stdout, (command, long)
    helped = " ".join(run_cli(["search", "--help"], env={"COLUMNS": "80"}).stdout.split())
    assert "--seq-len INTEGER Sequence length s (default: the model preset's). [x>=1]" in helped


def test_output_piped_from_a_terminal_fits_that_terminal():
    # `megaplan explain ... | less` in an 80-column terminal rendered at 160 columns (no COLUMNS exported by bash), so
    # every line wrapped; now the terminal stderr (or stdin) shows gives the width, COLUMNS still first, 160 without
    from planner.report.layout import console_width

    assert console_width(False, {}, 80) == 80
    assert console_width(False, {"COLUMNS": "120"}, 80) == 120
    assert console_width(False, {}, None) == 160
    assert console_width(True, {}, 80) is None  # a terminal: rich asks it


def test_a_fix_names_the_option_megaplan_takes():
    # the fix said "--use-distributed-optimizer makes it fit", and typing it back gave "--use-distributed-optimizer is
    # Megatron-LM's spelling; megaplan's option is --distributed-optimizer"; a stage split read "stage split embedding"
    from planner.api import SPLIT_CHANGE, fit_suggestions, make_request

    from conftest import one_line_error

    args = ["export", "--model", "llama3-8b", "--gpus", "64", "--tp", "2"]
    line = one_line_error(run_cli(args))
    assert "; --distributed-optimizer makes it fit (49.9 GiB); nothing written" in line
    assert run_cli([*args, "--distributed-optimizer"]).exit_code == 0
    req = make_request(model="gpt3-175b", gpus=1024, tp=8, pp=8)
    assert {"--distributed-optimizer", "--sequence-parallel"} <= {s["change"] for s in fit_suggestions(req, limit=20)}
    assert SPLIT_CHANGE["embedding+loss"].split() == [
        "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split",
    ]


def test_a_write_into_other_presets_than_the_fits_read_says_so(tmp_path, capsys):
    # every fit starts from the presets megaplan reads: --write into a copy replaced the copy's calibration sections
    # with values fitted from the read ones, so --moe --write undid a dense --write there (eager23 found its own
    # fixed-point check passing for that reason). The CLI says so once; into the read folder, nothing.
    from planner.cli.catalog import _note_other_write_dir
    from planner.presets import presets_root

    _note_other_write_dir(str(tmp_path))
    err = capsys.readouterr().err
    assert err.startswith("megaplan: note: the fits start from the presets in ") and str(tmp_path) in err
    assert err.count("\n") == 1
    _note_other_write_dir(str(presets_root() / "hardware"))
    assert capsys.readouterr().err == ""
