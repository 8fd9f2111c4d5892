"""ux15: what a user trips on (the fix line's price, calibrate's errors, wrapped figures, a newcomer's pass)."""

from __future__ import annotations

import io
import json
import re

from conftest import run_cli

TYPED = ["--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--pp", "1", "--micro-batch", "1"]  # 93.4 GiB: no fit


def _explained(args: list[str]) -> dict:
    result = run_cli(["explain", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_fix_line_prices_the_change_as_the_user_runs_it_after_typing_it():
    # a plan typed as flags runs search's overlaps; adding --distributed-optimizer brings --overlap-param-gather
    # (plan_options.recipe_overlaps). The fix line priced the variant with the base plan's overlaps (gather off):
    # 135.65 s against the 135.63 s the user then gets
    base = _explained(TYPED)
    assert not base["estimate"]["fits"]
    fix = base["fit_suggestions"][0]
    assert fix["change"] == "--distributed-optimizer"
    after = _explained([*TYPED, "--distributed-optimizer"])
    assert after["options"]["overlap_param_gather"] and not base["options"]["overlap_param_gather"]
    assert fix["iteration_s"] == after["estimate"]["iteration_s"]
    assert fix["peak_memory_gib"] == after["estimate"]["peak_memory_gib"]
    assert round(100 * fix["mfu"], 6) == round(100 * after["estimate"]["mfu"], 6)
    # the user's own --no-overlap-param-gather stays off in the variant: priced as typed, slower
    kept = _explained([*TYPED, "--no-overlap-param-gather"])["fit_suggestions"][0]
    off = _explained([*TYPED, "--distributed-optimizer", "--no-overlap-param-gather"])["estimate"]
    assert kept["iteration_s"] == off["iteration_s"] > fix["iteration_s"]


def test_a_weakly_identified_all_to_all_factor_is_kept_with_its_reason():
    # fit's "drop the secondary factor" ranked factors by FIT_FIELDS.index: moe_fit's η_a2a is fitted by name
    # outside them, and two H100 rows that cannot pin it (σ over half its band) raised
    # "ValueError: tuple.index(x): x not in tuple" instead of keeping it at the preset's value
    from planner.fidelity.moe_fit import A2A_FACTOR, fit_a2a
    from planner.fidelity.moe_runs import load_moe_runs
    from planner.presets import load_hardware

    ids = ("MB-25.09-H100-DSV3-1024", "MB-25.09-H100-QWEN3-30B-16")
    runs = [r for r in load_moe_runs() if r.id in ids]
    assert len(runs) == 2
    # σ on the two rows depends on the host time per op: over half the band (54 %) at 8.0 µs, 46 % at the 7.61 µs of
    # the MoE refit of 2026-12-03 (then "fitted" at 0.587 ± 0.245): the path under test is the σ rule's, so t_op is set
    got = fit_a2a("dgx-h100-superpod", runs, op_us=8.0).factors[A2A_FACTOR]
    assert got.status == "not identifiable"
    assert got.value == load_hardware("dgx-h100-superpod").calibration.a2a_network_efficiency
    assert got.why.startswith("σ is ")
    assert got.why.endswith("of its band: the runs cannot tell it from the other factors")


def test_the_verdict_continues_each_wrapped_line_under_its_text_at_80_columns():
    # explain's verdict at 80 columns went on at column 0 ("--no-overlap-grad-reduce, ... · off: --tp-comm-overlap",
    # "52.1%) · 165 TFLOP/s per GPU", "band ± 5.5 % ..."); the overlaps' "· off: ..." now starts a line of its own
    args = ["explain", "--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "8", "--brief"]
    shown = run_cli([*args, "--distributed-optimizer", "--sequence-parallel"], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[2:5] == [
        "      overlaps on: --overlap-grad-reduce, --overlap-param-gather (off with",
        "      --no-overlap-grad-reduce, --no-overlap-param-gather)",
        "      · off: --tp-comm-overlap",
    ]
    assert lines[6:8] == [
        "speed 20.07 s/iteration (18.99–21.22) · 156,726 tokens/s · MFU 52.8%",
        "      (causal 52.1%) · 165 TFLOP/s per GPU",
    ]
    assert lines[8:10] == [
        "runs  extrapolated: distributed optimizer, flash attention on Ampere, 0 runs;",
        "      band ± 5.5 % (± 3.6 % each)",
    ]
    assert all(len(line) <= 80 and "\xa0" not in line for line in lines)
    wide = run_cli([*args, "--distributed-optimizer", "--sequence-parallel"], env={"COLUMNS": "200"})
    assert "\xa0" not in wide.stdout and "(causal 52.1%) · 165 TFLOP/s per GPU" in wide.stdout


def test_a_figure_keeps_its_unit_when_a_line_wraps():
    # "those leaving 10 % of the usable memory free" (search's ranking note) could end a line with "10" and start
    # the next with "%"; so "± 2.2 %" and "82.88 s/iteration" (textwrap and rich both break at any space)
    from rich.console import Console
    from rich.text import Text

    from planner.report.wrap import Hanging, wrapped

    note = "those leaving 10 % of the usable memory free; band ± 2.2 % at 82.88 s/iteration"
    for width in range(17, 40):  # 17: "82.88 s/iteration", the longest figure with its unit
        lines = wrapped(note, width).splitlines()
        assert " ".join(lines) == note, width
        assert not any(line.endswith(("10", "±", "2.2", "82.88")) for line in lines), (width, lines)
        out = io.StringIO()
        Console(file=out, width=width + 6, color_system=None).print(Hanging(Text("note  " + note)))
        shown = out.getvalue().splitlines()
        assert " ".join(line.strip() for line in shown) == "note  " + note
        assert not any(line.endswith(("10", "±", "2.2", "82.88")) for line in shown), (width, shown)
        assert all(line.startswith("      ") for line in shown[1:]) and "\xa0" not in out.getvalue()
    assert wrapped("aaaa 10 % of", 7) == "aaaa\n10 % of"  # textwrap alone: "aaaa 10" / "% of"


def test_a_single_setting_is_one_setting():
    # explain's verdict said "validated by 1 settings on Hopper"
    from planner.report.memory import evidence_text

    ev = {"generation": "Hopper", "band_frac": 0.065, "extrapolated": [], "settings": 1}
    ev["features"] = [{"feature": "flex/deepep", "settings": 1}]
    assert (
        evidence_text({"evidence": ev}).plain == "validated by 1 setting on Hopper (fewest: flex/deepep); band ± 6.5 %"
    )


def test_an_override_of_a_switch_says_on_or_off():
    # "note: --overlap-grad-reduce False overrides the script's True"
    script = (
        "--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings "
        "2048 --micro-batch-size 4 --global-batch-size 512 --bf16 --use-distributed-optimizer --overlap-grad-reduce"
    )
    shown = run_cli(["explain", "--megatron-args", script, "--gpus", "8", "--brief", "--no-overlap-grad-reduce"])
    assert shown.exit_code == 0, shown.output
    assert "megaplan: note: --overlap-grad-reduce off overrides the script's on\n" in shown.stderr


def test_the_expert_all_to_all_overlap_launches_with_more_than_one_cuda_connection():
    # Megatron-LM asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with TP > 1 before Blackwell, but with
    # --overlap-moe-expert-parallel-comm it only warns against 1; the estimate prices that plan with more than one
    # connection (communication.connection_limited), as Megatron-Bridge's performance scripts launch it: 32 with
    # DeepEP/HybridEP, else 8 (scripts/performance/utils/overrides.py). The script and the note said 1
    args = ["export", "--model", "qwen3-30b-a3b", "--gpus", "16", "--hardware", "dgx-h100-superpod", "--tp", "2"]
    args += ["--pp", "1", "--ep", "8", "--etp", "1", "--sequence-parallel", "--distributed-optimizer"]
    overlap = [*args, "--overlap-moe-expert-parallel-comm"]
    flex = run_cli([*overlap, "--moe-token-dispatcher", "flex", "--format", "slurm"])
    assert flex.exit_code == 0, flex.output
    assert "\nexport CUDA_DEVICE_MAX_CONNECTIONS=32  # the expert all-to-all overlap" in flex.stdout
    a2a = run_cli([*overlap, "--moe-token-dispatcher", "alltoall"])
    assert "launch with CUDA_DEVICE_MAX_CONNECTIONS=8 in the environment (the expert all-to-all overlap" in a2a.stderr
    bridge = run_cli([*overlap, "--moe-token-dispatcher", "alltoall", "--format", "bridge"])
    assert "# megaplan-env: CUDA_DEVICE_MAX_CONNECTIONS=8" in bridge.stdout
    plain = run_cli([*args, "--moe-token-dispatcher", "alltoall", "--format", "slurm"])  # no overlap: TP's 1
    assert "\nexport CUDA_DEVICE_MAX_CONNECTIONS=1  # TP/CP communication ordering before Blackwell" in plain.stdout


def _pasted(lines: list[str]) -> list[str]:
    """The argv a shell reads from lines continued with " \\"."""
    import shlex

    assert all(line.endswith(" \\") for line in lines[:-1]) and not lines[-1].endswith("\\"), lines
    return shlex.split(" ".join(line.removesuffix(" \\").strip() for line in lines))


def test_a_command_to_paste_is_continued_over_lines_never_broken_at_a_space():
    # at 80 columns "explain the smallest: megaplan explain ..." (search --min-gpus) and explain's fix line
    # "(megaplan search ... --precision bf16), the fastest ..." wrapped at spaces: pasted, each line ran alone
    shown = run_cli(["search", "--model", "gpt-1.7b", "--min-gpus"], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    at = lines.index("explain the smallest:")
    assert all(len(line) <= 80 for line in lines)
    argv = _pasted(lines[at + 1 :])
    assert argv[:6] == ["megaplan", "explain", "--model", "gpt-1.7b", "--hardware", "dgx-a100-superpod"]
    assert argv[-4:] == ["--recompute", "none", "--no-distributed-optimizer", "--overlap-grad-reduce"]
    assert "each search's #1 there (what published runs support first" in " ".join(lines)  # not "fastest"

    args = ["explain", "--model", "llama3-70b", "--gpus", "8", "--tp", "8", "--pp", "1", "--brief"]
    fix = run_cli(args, env={"COLUMNS": "80"}).stdout.splitlines()
    at = next(i for i, line in enumerate(fix) if line.startswith("fix   "))
    assert fix[at : at + 2] == [
        "fix   no single change fits, and no legal plan fits on these 8 GPUs either; the",
        "      smallest cluster that does:",
    ]
    end = next(i for i in range(at + 2, len(fix)) if not fix[i].endswith(" \\")) + 1
    assert _pasted(fix[at + 2 : end]) == [
        *("megaplan", "search", "--model", "llama3-70b", "--hardware", "dgx-a100-superpod", "--min-gpus"),
        *("--global-batch", "1024", "--seq-len", "8192", "--precision", "bf16"),
    ]
    assert all(len(line) <= 80 for line in fix) and fix[end].startswith("speed ")
    from planner.report.wrap import continued

    narrow = continued("megaplan search --model llama3-70b --hardware dgx-a100-superpod --min-gpus", 24).splitlines()
    assert all(len(line) <= 24 for line in narrow)  # an option wider than the line: broken before its value too
    assert _pasted(narrow) == "megaplan search --model llama3-70b --hardware dgx-a100-superpod --min-gpus".split()


def test_sweep_says_its_rows_are_searchs_number_one_not_the_fastest_estimate():
    # "each size is its own search (fastest plan that fits)": the row is search's #1, ranked by what published runs
    # support (at 16 GPUs llama3-8b's #1 runs 72.02 s, its fastest estimate 64.35 s)
    from planner.report.runs import sweep_view

    row = {"gpus": 8, "plan": None, "no_plan": "none"}
    text = sweep_view({"baseline_gpus": 8, "rows": [row], "train_tokens": 3e11}, "t").renderables[1].plain
    said = "each size is its own search, its #1 shown (ranked as search ranks: what published runs support first, "
    assert said + "not the fastest estimate)" in " ".join(text.split()) and "fastest plan that fits" not in text


def test_a_log_named_twice_is_one_run(tmp_path):
    # calibrate --from-log a.log --from-log a.log fitted the one run as two: "2 runs can fit 2 factors", a second
    # factor "fitted" and σ as if the time had been measured twice
    from test_calibrate_from_log import _one_run

    log, script = _one_run(tmp_path, 0.97)
    same = str(tmp_path / "." / log.rsplit("/", 1)[1])  # the same file, spelled otherwise
    args = ["calibrate", "--json", "--megatron-args-file", script]
    twice = run_cli([*args, "--from-log", log, "--from-log", same, "-o", str(tmp_path / "twice.yaml")])
    assert twice.exit_code == 0, twice.output
    assert f"megaplan: note: --from-log names {same} more than once; each log is one run" in twice.stderr
    out = json.loads(twice.stdout)
    assert out["fit"]["runs"] == 1 and [r["log"] for r in out["runs"]] == [log]


def test_compare_leaves_out_rows_that_apply_to_neither_plan():
    # two dense plans listed "ep 1", "etp 8", "moe_token_dispatcher allgather", "fsdp_sharding optim_grads_params",
    # "recompute_method uniform" (no full recomputation) and all-zero terms ("moe_comm (s) 0.000"); --json keeps them
    from rich.console import Console

    from planner import api
    from planner.report.runs import compare_view
    from planner.runs.compare import compare_plans

    base = dict(model="gpt-1.7b", gpus=8, tp=2, pp=1, micro_batch=1)
    a = api.explain(api.make_request(**base, recompute="selective"))
    b = api.explain(api.make_request(**base, sequence_parallel=True, distributed_optimizer=True))
    cmp = compare_plans(a, b)
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(compare_view(cmp))
    lines = [re.sub(r"^(plan|memory|time|throughput) {2,}", "", line.strip()) for line in out.getvalue().splitlines()]
    names = [line.split("  ")[0] for line in lines]
    gone = ["ep", "etp", "moe_token_dispatcher", "overlap_moe_expert_parallel_comm", "fsdp_sharding"]
    gone += ["fsdp_outer_sharding", "recompute_method", "moe_comm (s)", "cuda_graphs (GiB)", "offload (s)"]
    assert not set(gone) & set(names), set(gone) & set(names)
    kept = ["tp", "recompute", "distributed_optimizer", "distributed_optimizer_instances", "overlap_param_gather"]
    kept += ["tp_comm_overlap", "weights (GiB)", "tp_comm (s)", "tokens/s"]  # B has DO and SP; the rest applies
    assert set(kept) <= set(names), set(kept) - set(names)
    assert {r["name"] for r in cmp["rows"]} >= {"ep", "moe_comm", "fsdp_sharding"}  # --json: every row


def test_ranked_by_memory_no_plan_is_marked_the_fastest_estimate():
    # search --rank-by memory marked its least-memory plan "*" (the fastest estimate: "fastest": true in --json) at
    # 48.76 s where 5 s plans fit (qwen3-30b-a3b, 32 H100), and its notes said nothing of the order
    args = ["search", "--model", "gpt-1.7b", "--gpus", "8", "--rank-by", "memory", "--top", "3"]
    found = json.loads(run_cli([*args, "--json"]).stdout)
    assert [(p["rank"], p["fastest"], p["tied_with_fastest"]) for p in found["plans"]] == [
        (1, False, False),
        (2, False, False),
        (3, False, False),
    ]
    fastest = json.loads(
        run_cli(["search", "--model", "gpt-1.7b", "--gpus", "8", "--rank-by", "estimate", "--json"]).stdout
    )
    assert found["plans"][0]["estimate"]["iteration_s"] > fastest["plans"][0]["estimate"]["iteration_s"]
    shown = run_cli(args, env={"COLUMNS": "200"}).stdout
    assert "*" not in "".join(line[:80] for line in shown.splitlines()[3:6])
    assert "Ranked by peak memory, then the point estimate (--rank-by memory); no tie marks." in shown


def test_presets_help_lists_model_presets():
    shown = run_cli(["presets", "--help"], env={"COLUMNS": "120"}).stdout  # it said "List models presets."
    assert "List model presets." in shown and "List hardware presets." in shown


def test_a_recomputed_mlp_on_a_model_without_dense_layers_is_said_to_recompute_nothing():
    # Megatron-LM recomputes the mlp module in dense layers only (transformer_layer.py: `if "mlp" in
    # recompute_modules: if not self.is_moe_layer`); on qwen3-30b-a3b (48 MoE layers) search's rc-mlp rows repeated the
    # rows without it (ranks 1 and 2 on 32 H100: same time, same memory). The search no longer offers them
    # (candidates.selective_is_none); a pinned --recompute selective still gets them, with the note
    said = "--recompute-modules mlp recomputes nothing on qwen3-30b-a3b: every layer is MoE, and Megatron-LM"
    args = ["search", "--model", "qwen3-30b-a3b", "--gpus", "32", "--hardware", "dgx-h100-superpod", "--top", "2"]
    found = json.loads(run_cli([*args, "--json"]).stdout)["plans"]
    assert all(pj["parallel"]["recompute"] != "selective" for pj in found)
    assert found[0]["estimate"]["iteration_s"] != found[1]["estimate"]["iteration_s"]  # no twin of rank 1
    shown = run_cli([*args, "--recompute", "selective"], env={"COLUMNS": "400"})
    assert said in shown.stdout and "warning" not in shown.stderr
    typed = ["explain", "--model", "qwen3-30b-a3b", "--gpus", "16", "--hardware", "dgx-h100-superpod", "--tp", "1"]
    typed += ["--pp", "1", "--ep", "8", "--recompute", "selective", "--recompute-modules", "mlp", "--brief"]
    assert f"megaplan: warning: {said}" in run_cli(typed).stderr
    from planner import api
    from planner.space.warnings import no_dense

    assert no_dense(api.make_request(model="qwen3-30b-a3b").ctx)
    assert not no_dense(api.make_request(model="deepseek-v3").ctx)  # 3 dense layers first: rc-mlp recomputes them
    assert not no_dense(api.make_request(model="llama3-8b").ctx)  # dense
