"""ux14: user-facing defects the last stop noticed and left alone."""

from __future__ import annotations

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
