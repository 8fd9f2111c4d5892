"""What was published for a user's setup (planner.fidelity.published): the table a search reads, the key a user's
context makes, and what search and explain print."""

import importlib.util
import json
from pathlib import Path

import pytest

from planner import api
from planner.fidelity.choice import setup_key
from planner.fidelity.moe_runs import load_moe_runs
from planner.fidelity.published import context_setup_key, graphs_word, nearby_setups, published_runs, published_text
from planner.fidelity.published_setups import PUBLISHED
from planner.fidelity.runs import load_runs
from planner.fidelity.validate import prepared

from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
GPT_OSS_H100 = ("--model", "gpt-oss-120b", "--hardware", "dgx-h100-superpod", "--gpus", "64")
RECIPE = (*GPT_OSS_H100, "--global-batch", "1280", "--seq-len", "4096")


def _script():
    spec = importlib.util.spec_from_file_location("published_setups_script", ROOT / "scripts" / "published_setups.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_a_search_reads_equals_the_reference_runs():
    assert _script().live_table() == PUBLISHED, "run python scripts/published_setups.py"


def test_a_user_context_makes_the_key_its_runs_were_filed_under():
    # every run in the table: the context validate prices it with gives the same setup key as the run's request, so
    # a user asking for that model, hardware, GPUs, batch, sequence and precision finds it
    runs = {r.id: r for r in [*load_runs(), *load_moe_runs()]}
    for key, rows in PUBLISHED.items():
        for row in rows:
            run = runs[row[1]]
            assert setup_key(run) == key
            assert context_setup_key(prepared(run).ctx, run.request["gpus"]) == key, row[1]


def test_gpt_oss_on_64_h100_by_hand():
    # Megatron-Bridge's GPT-OSS-120B BF16 recipe on 64 H100 (GBS 1280, seq 4096): four tables, 26.02 the fastest
    # (5,993 tokens/s per GPU), all TP1 PP4 EP8 b1 with the alltoall dispatcher
    result = run_cli(["explain", *RECIPE, "--json"])
    assert result.exit_code == 0, result.output
    pj = json.loads(result.stdout)
    pub = pj["published"]
    assert pub["runs"] == 4 and pub["fastest_tokens_per_gpu"] == 5993.0
    assert pub["fastest_id"] == "MB-26.02-H100-GPTOSS120B-64"
    assert pub["fastest_plan"] == "TP1 PP4 DP16 EP8 ETP1 b1 · DO rc-ln+moeact alltoall"
    assert pub["ids"] == [
        "MB-26.02-H100-GPTOSS120B-64",
        "MB-26.02.01-H100-GPTOSS120B-64",
        "MB-26.04.01-H100-GPTOSS120B-64",
        "MB-26.04-H100-GPTOSS120B-64",
    ]
    # the plan's estimate per GPU against the fastest: tokens/s / 64 / 5,993 - 1
    per_gpu = pj["estimate"]["tokens_per_s"] / 64
    assert pub["estimate_tokens_per_gpu"] == pytest.approx(per_gpu)
    assert pub["claim_pct"] == pytest.approx(100 * (per_gpu / 5993 - 1))
    # the tables force-balance MoE routing (imbalance 1.0); the plan is priced at the default busiest expert 1.1
    assert (pub["fastest_load_imbalance"], pub["plan_load_imbalance"]) == (1.0, 1.1)
    balanced = run_cli(["explain", *RECIPE, "--moe-load-imbalance", "1.0", "--json"])
    assert "fastest_load_imbalance" not in json.loads(balanced.stdout)["published"]


def test_another_setup_or_an_edited_model_finds_nothing(tmp_path):
    # FP8 is another setup (no FP8 GPT-OSS run on H100), so is another batch; a copy of the preset under its own
    # name with one layer fewer is another model (the runs priced 116.8 B parameters)
    ask = dict(model="gpt-oss-120b", hardware="dgx-h100-superpod", gpus=64, seq_len=4096)
    assert len(published_runs(api.make_request(**ask, global_batch=1280).ctx, 64)) == 4
    assert published_runs(api.make_request(**ask, global_batch=640).ctx, 64) == ()
    for args in ([*RECIPE, "--fp8", "e4m3"], [*GPT_OSS_H100, "--global-batch", "640", "--seq-len", "4096"]):
        result = run_cli(["explain", *args, "--json"])
        assert result.exit_code == 0, result.output
        assert "published" not in json.loads(result.stdout)
    text = (ROOT / "presets" / "models" / "gpt-oss-120b.yaml").read_text()
    assert "num_layers: 36 " in text
    edited = tmp_path / "gpt-oss-120b.yaml"
    edited.write_text(text.replace("num_layers: 36 ", "num_layers: 35 "))
    result = run_cli(["explain", "--model", str(edited), *RECIPE[2:], "--json"])
    assert result.exit_code == 0, result.output
    pj = json.loads(result.stdout)
    assert pj["model"] == "gpt-oss-120b" and pj["model_spec"]["num_layers"] == 35 and "published" not in pj


def test_search_and_explain_say_it():
    result = run_cli(["search", *RECIPE], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    said = "4 published runs of this setup (model, GPUs, batch, sequence, precision): the fastest 5,993 tokens/s"
    assert said in flat
    assert "(MB-26.02-H100-GPTOSS120B-64: TP1 PP4 DP16 EP8 ETP1 b1 · DO rc-ln+moeact alltoall); #1 is estimated" in flat
    assert "rc-mlp etc.: selective of other modules" in flat  # the legend names its codes (rc-ln+moeact)
    result = run_cli(["explain", *RECIPE, "--brief"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "\nsetup 4 published runs of this setup" in result.output
    assert "routing force-balanced, busiest expert 1 × the mean; this estimate 1.1 ×" in " ".join(result.output.split())
    assert all(len(line) <= 80 for line in result.output.splitlines())
    # no run of the README's setup (GPT-3 175B on 1,024 A100 at batch 1,536): no such line
    result = run_cli(["search", "--model", "gpt3-175b", "--gpus", "1024"], env={"COLUMNS": "120"})
    assert result.exit_code == 0 and "of this setup" not in result.output


def test_the_slurm_script_says_it_to_whoever_submits_it(tmp_path):
    out = tmp_path / "run.sbatch"
    result = run_cli(["export", *RECIPE, "--format", "slurm", "-o", str(out)])
    assert result.exit_code == 0, result.output
    head = " ".join(line.lstrip("# ").strip() for line in out.read_text().splitlines()[1:5])
    assert head.startswith(
        "NOTE: 4 published runs of this setup (model, GPUs, batch, sequence, precision): the fastest"
    )
    assert "(MB-26.02-H100-GPTOSS120B-64: TP1 PP4 DP16 EP8 ETP1 b1 · DO rc-ln+moeact alltoall); this plan is" in head
    # the script still reads back to the plan it was written for
    back = run_cli(["explain", "--megatron-args-file", str(out), *RECIPE[:4], "--json"])
    assert back.exit_code == 0, back.output
    assert json.loads(back.stdout)["published"]["fastest_id"] == "MB-26.02-H100-GPTOSS120B-64"


def test_a_published_plan_names_its_cuda_graphs():
    # the plan label leaves CUDA graphs out, and they can move a host-bound MoE step by tens of percent: Qwen3-30B
    # MXFP8 on 8 B300 ran 40,769 tokens/s per GPU in 26.06 in a full-iteration graph, 30,720 in 26.04.01 with TE's
    # graphs of the router and preprocess alone
    assert graphs_word("none") == ""
    assert graphs_word("full_iteration") == "CUDA graphs: full iteration"
    assert graphs_word("transformer_engine", ("attn", "moe_router")) == "CUDA graphs: TE attn,moe_router"
    assert graphs_word("local") == "CUDA graphs: local"
    rows = {
        row[1]: row for row in PUBLISHED[("qwen3-30b-a3b", "dgx-b300-superpod", 8, 512, 4096, ("fp8", "mxfp8"), None)]
    }
    assert rows["MB-26.06-B300-QWEN3-30B-8"][:3] == (
        40769.0,
        "MB-26.06-B300-QWEN3-30B-8",
        "TP1 PP1 DP8 EP8 ETP1 b8 · DO hybridep+ov · CUDA graphs: full iteration",
    )
    assert rows["MB-26.04.01-B300-QWEN3-30B-8"][2].endswith("hybridep · CUDA graphs: TE moe_router,moe_preprocess")


def test_runs_of_the_model_on_these_gpus_at_other_setups_are_pointed_to():
    # Llama 3.1 405B on 1,024 H100 at the preset's batch (2,048 × 8,192: no run) - four setups were published on
    # those GPUs: DGX Cloud's batch 512 in BF16 and FP8 delayed, Megatron-Bridge's 512 and 1,536 in FP8 tensorwise
    req = api.make_request(model="llama3.1-405b", hardware="dgx-h100-superpod", gpus=1024)
    assert published_runs(req.ctx, 1024) == ()
    assert nearby_setups(req.ctx, 1024) == [
        "batch 512 × 8,192, bf16",
        "batch 512 × 8,192, fp8 delayed",
        "batch 512 × 8,192, fp8 tensorwise",
        "batch 1,536 × 8,192, fp8 tensorwise",
    ]
    assert nearby_setups(api.make_request(model="llama3.1-405b", hardware="dgx-h100-superpod", gpus=512).ctx, 512)
    at_run = api.make_request(model="llama3.1-405b", hardware="dgx-h100-superpod", gpus=1024, global_batch=512)
    assert nearby_setups(at_run.ctx, 1024) == []  # its own setup has runs: nothing to point to
    result = run_cli(["search", "--model", "llama3.1-405b", "--hardware", "dgx-h100-superpod", "--gpus", "1024"])
    flat = " ".join(result.output.split())
    assert "Published runs of llama3.1-405b on 1,024 GPUs of dgx-h100-superpod are of other setups: batch 512" in flat


def test_sweep_marks_the_sizes_with_published_runs():
    # DGX Cloud's Llama 3.1 405B FP8 (delayed) at batch 512 ran on 1,024 H100 (330 tokens/s per GPU at best); the
    # same batch on 512 and 2,048 GPUs has no run
    args = ["--model", "llama3.1-405b", "--hardware", "dgx-h100-superpod", "--global-batch", "512", "--fp8", "hybrid"]
    result = run_cli(["sweep", *args, "--gpus", "512,1024,2048", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["gpus"]: r["plan"].get("published") for r in json.loads(result.stdout)["rows"]}
    assert rows[512] is None and rows[2048] is None
    assert rows[1024]["fastest_tokens_per_gpu"] == max(r[0] for r in PUBLISHED[rows_key(1024)])
    text = run_cli(["sweep", *args, "--gpus", "512,1024,2048"], env={"COLUMNS": "140"}).output
    line = next(t for t in text.splitlines() if t.startswith("1,024"))
    assert line.rstrip().endswith(f"{rows[1024]['fastest_tokens_per_gpu']:,.0f} ({rows[1024]['claim_pct']:+.1f} %)")
    assert "published = the fastest published tokens/s per GPU of that size's setup" in " ".join(text.split())


def rows_key(gpus: int) -> tuple:
    return ("llama3.1-405b", "dgx-h100-superpod", gpus, 512, 8192, ("fp8", "delayed"), None)


def test_a_launch_script_s_model_matches_by_what_it_is(tmp_path):
    # a model read from Megatron-LM flags is named "imported"; it matches the runs by its parameter count: Llama 3.1
    # 405B FP8 (delayed) at batch 512 on 1,024 H100 is DGX Cloud's v25.04 recipe's setup
    flags = run_cli(
        [
            "export",
            "--model",
            "llama3.1-405b",
            "--hardware",
            "dgx-h100-superpod",
            "--gpus",
            "1024",
            "--global-batch",
            "512",
            "--fp8",
            "hybrid",
            "--format",
            "flags",
        ]
    )
    assert flags.exit_code == 0, flags.output
    script = tmp_path / "launch.sh"
    script.write_text("python pretrain_gpt.py \\\n" + flags.stdout)
    result = run_cli(
        ["explain", "--megatron-args-file", str(script), "--hardware", "dgx-h100-superpod", "--gpus", "1024", "--json"]
    )
    assert result.exit_code == 0, result.output
    pj = json.loads(result.stdout)
    assert pj["model"] == "imported"
    assert (
        pj["published"]["fastest_id"] == PUBLISHED[rows_key(1024)][0][1] == "DGXC-v25.04-H100-Llama3.1-405B-fp8-n1024"
    )


def test_the_csv_carries_it():
    import csv
    import io

    result = run_cli(["search", *RECIPE, "--csv"])
    assert result.exit_code == 0, result.output
    first = next(csv.DictReader(io.StringIO(result.stdout)))
    assert first["published_fastest_tokens_per_gpu"] == "5993.0"
    assert first["published_fastest_id"] == "MB-26.02-H100-GPTOSS120B-64"
    per_gpu = float(first["tokens_per_s"]) / 64
    assert float(first["published_claim_pct"]) == pytest.approx(100 * (per_gpu / 5993 - 1))


def test_a_run_validate_sets_apart_is_said_so_and_token_drop_has_no_balance_note():
    # DGX Cloud's 25.05.04 DeepSeek-V3 on 512 GB200 (token drop, capacity factor 1): the setup's only run, which
    # validate reports apart (predicted 61 % fast: that release's software); with a capacity factor every expert is
    # padded to its capacity, so there is no load imbalance to set beside the tables' force-balance
    key = ("deepseek-v3", "gb200-nvl72", 512, 4096, 4096, ("bf16",), 1.0)
    (row,) = PUBLISHED[key]
    assert row[1] == "DGXC-v25.05.04-GB200-DSV3-512" and row[6] is True
    result = run_cli(
        ["explain", "--model", "deepseek-v3", "--hardware", "gb200-nvl72", "--gpus", "512", "--global-batch", "4096"]
        + ["--moe-capacity-factor", "1.0", "--json"]
    )
    assert result.exit_code == 0, result.output
    pub = json.loads(result.stdout)["published"]
    assert pub["fastest_apart"] is True and "fastest_load_imbalance" not in pub
    assert "validate reports that run apart (superseded or regressed software" in published_text(pub)
    # and a run in the bar carries no such flag (GPT-OSS on 64 H100, Megatron-Bridge 26.02)
    assert not any(r[6] for r in PUBLISHED[("gpt-oss-120b", "dgx-h100-superpod", 64, 1280, 4096, ("bf16",), None)])
