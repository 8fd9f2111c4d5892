"""audit17: what a new user trips on in their first two days (their own model YAML, their own launch script and
sbatch, export, compare, calibrate, bad input)."""

from __future__ import annotations

import io
import re

import pytest

from planner.api import make_request
from planner.megatron.importer import import_megatron

from conftest import run_cli


def _compare_names(a: dict, b: dict) -> list[str]:
    from rich.console import Console

    from planner.report.runs import compare_view
    from planner.runs.compare import compare_plans

    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(compare_view(compare_plans(a, b)))
    lines = [re.sub(r"^(plan|memory|time|throughput) {2,}", "", line.strip()) for line in out.getvalue().splitlines()]
    return [line.split("  ")[0] for line in lines]


def test_compare_leaves_out_a_dense_plans_etp_even_when_it_differs():
    # etp follows tp when not given, so two dense plans at tp 2 and tp 4 listed "etp 2 4 +2 ×2.000" in yellow (a
    # plan field that differs) though no dense layer has an expert; ux15 left out only rows equal on both sides
    from planner import api

    base = dict(model="gpt-1.7b", gpus=8, pp=1, micro_batch=1)
    a = api.explain(api.make_request(**base, tp=2))
    b = api.explain(api.make_request(**base, tp=4))
    assert (a["parallel"]["etp"], b["parallel"]["etp"]) == (2, 4)
    names = _compare_names(a, b)
    assert "tp" in names and "etp" not in names, names


def _own_model(tmp_path, edit: tuple[str, str]):
    """A user's model YAML written from `megaplan presets show llama3-70b`, with one line edited."""
    from planner.presets import presets_root

    text = (presets_root() / "models" / "llama3-70b.yaml").read_text()
    assert edit[0] in text
    path = tmp_path / "ours.yaml"
    path.write_text(text.replace(edit[0], edit[1]))
    return path


def _one_error(args: list[str]) -> str:
    out = run_cli(args)
    assert out.exit_code == 2 and out.stdout == "", out.output
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def test_a_misnamed_field_in_a_users_model_yaml_names_the_field_meant(tmp_path):
    # "num_kv_heads: Extra inputs are not permitted (got 8)" said neither what is allowed nor what was meant; and
    # training.seq_length (Megatron-LM's flag is --seq-length) also listed "training.seq_len: Field required"
    cases = [
        (
            ("num_query_groups: 8", "num_kv_heads: 8"),
            "ours.yaml: num_kv_heads: not a field here; did you mean num_query_groups?",
        ),
        (
            ("  seq_len: 8192", "  seq_length: 8192"),
            "ours.yaml: training.seq_length: not a field here; did you mean seq_len?",
        ),
        (
            ("rotary_base: 500000", "rotary_bse: 500000"),
            "ours.yaml: rotary_bse: not a field here; did you mean rotary_base?",
        ),
    ]
    for edit, said in cases:
        line = _one_error(["search", "--model", str(_own_model(tmp_path, edit)), "--gpus", "64"])
        assert line.startswith("megaplan: error: ") and line.endswith(f"/{said}"), line


def test_a_field_nothing_resembles_lists_the_fields_allowed_at_its_level(tmp_path):
    line = _one_error(["search", "--model", str(_own_model(tmp_path, ("swiglu: true", "zzz: true"))), "--gpus", "8"])
    assert "zzz: not a field here; allowed: name, source, num_layers, hidden_size," in line
    assert line.endswith("not_in_megatron, training"), line


def test_calibrate_reads_the_vocabulary_from_the_logs_padded_vocab_line(tmp_path):
    # a script with --tokenizer-type HuggingFaceTokenizer --tokenizer-model PATH (Megatron-LM's Llama examples) gave
    # "the tokenizer's vocabulary is unknown (...): give --model PRESET ... or --megatron-args '--vocab-size N'":
    # calibrate has neither option; the log itself says the size (vocab_utils.py @ d98e8a64, on rank 0:
    # " > padded vocab (size: {}) with {} dummy tokens (new size: {})")
    import json

    from test_calibrate_from_log import _one_run

    log, script = _one_run(tmp_path, 0.97)
    text = open(script).read()
    assert "--vocab-size 128256 " in text
    open(script, "w").write(
        text.replace("--vocab-size 128256 ", "--tokenizer-type HuggingFaceTokenizer --tokenizer-model /tok ")
    )
    args = ["calibrate", "--json", "--from-log", log, "--megatron-args-file", script, "-o", str(tmp_path / "m.yaml")]
    line = _one_error(args)  # the log without the line: the error names what calibrate can take
    assert (
        "the tokenizer's vocabulary is unknown (--tokenizer-type HuggingFaceTokenizer --tokenizer-model /tok)" in line
    )
    assert "--model" not in line and "--megatron-args '" not in line, line
    assert "give --vocab-size N in the script, or keep Megatron-LM's ' > padded vocab (size: N)" in line, line
    lines = open(log).read().splitlines()
    lines.insert(1, " > padded vocab (size: 128256) with 0 dummy tokens (new size: 128256)")
    open(log, "w").write("\n".join(lines) + "\n")
    fitted = run_cli(args)
    assert fitted.exit_code == 0, fitted.output
    assert json.loads(fitted.stdout)["fit"]["runs"] == 1
    assert "vocabulary 128256 from the log's padded vocab line" in fitted.stderr, fitted.stderr


def test_the_schedule_draws_the_wait_for_stragglers_apart_from_the_dp_sync(tmp_path):
    # GPT-3 175B on 1,024 A100s, TP8 PP16 selective: explain's table has dp_comm 0.45 s and stragglers 1.43 s, but the
    # schedule drew all 1.9 s after the flush as "DP grad sync" (= in the terminal), so the picture said the DP sync
    # costs four times what the estimate charges it
    import xml.etree.ElementTree as ET

    from planner import api
    from planner.report import figures
    from planner.timeline import plan_timeline

    req = api.make_request(model="gpt3-175b", gpus=1024, tp=8, pp=16, recompute="selective", sequence_parallel=True)
    explained = api.explain_plan(req)
    time = explained.evaluation.time
    tl = plan_timeline(explained.evaluation, req.plan, req.ctx.options)
    dp = float(time["dp_comm"][0]) + float(time["embedding_comm"][0])
    assert tl.tail_s["dp_comm"] == dp and tl.tail_s["stragglers"] == float(time["stragglers"][0]) > 2 * dp
    tail = dp + float(time["stragglers"][0]) + float(time["optimizer"][0])
    assert tl.iteration_s == pytest.approx(tl.pipeline_s + tail, rel=1e-12)
    path = tmp_path / "s.svg"
    figures.schedule_picture(tl, "gpt3").save(str(path), "--schedule-file")
    root = ET.parse(path).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    texts = ["".join(t.itertext()) for t in root.iter(f"{ns}text")]
    assert "wait for the slowest GPU" in texts and "DP grad sync" in texts
    widths = {
        g.get("id"): float(next(g.iter(f"{ns}rect")).get("width"))
        for g in root.iter(f"{ns}g")
        if g.get("id") in ("stage0-dp_comm", "stage0-stragglers")
    }
    ratio = widths["stage0-stragglers"] / widths["stage0-dp_comm"]  # the SVG writes 2 decimals of a pixel
    assert ratio == pytest.approx(tl.tail_s["stragglers"] / dp, rel=1e-3)
    out = run_cli(["explain", "--model", "gpt3-175b", "--gpus", "1024", "--tp", "8", "--pp", "16", "--schedule"])
    legend = " ".join(out.stdout.split())  # the legend wraps at the terminal's width
    assert "= DP sync · . wait for the slowest GPU · # optimizer" in legend, legend


def test_a_slurm_script_for_an_nvl72_rack_keeps_the_job_in_one_nvlink_domain():
    # gb200-nvl72: the estimate prices 64 GPUs (16 trays of 4) as one 72-GPU NVLink domain, but the script asked
    # Slurm for any 16 nodes, which it may spread over racks (DP then on InfiniBand). Slurm's topology/block keeps a
    # job's nodes in blocks with --segment; Megatron-Bridge's scripts/performance/utils/executors.py @ 067f987 adds
    # it for 4-GPU nodes: the node count up to 18 (one rack), else its largest divisor up to 18
    from planner.megatron.export import slurm_script

    def segment(gpus: int, hardware: str = "gb200-nvl72") -> list[str]:
        req = make_request(model="llama3-8b", hardware=hardware, gpus=gpus, tp=2, pp=1, distributed_optimizer=True)
        return [line for line in slurm_script(req).splitlines() if "--segment" in line]

    assert segment(64) == ["#SBATCH --segment=16"]  # 16 trays in one rack
    assert segment(72) == ["#SBATCH --segment=18"]
    assert segment(128) == ["#SBATCH --segment=16"]  # 32 trays: 2 segments of 16
    assert segment(4 * 38) == ["#SBATCH --segment=2"]  # 38 trays: 19 segments of 2 (19 is prime, above 18)
    assert segment(64, "gb300-nvl72") == ["#SBATCH --segment=16"]
    assert segment(64, "dgx-h100-superpod") == []  # an NVLink domain is one node: nothing to keep together


def test_an_nvl72_slurm_script_reads_back_as_the_same_plan():
    from planner.megatron.export import slurm_script

    req = make_request(model="llama3-8b", hardware="gb200-nvl72", gpus=64, tp=2, pp=1, distributed_optimizer=True)
    back = import_megatron(slurm_script(req), hardware="gb200-nvl72", model="llama3-8b").request
    assert (back.gpus, back.plan.tp, back.plan.dp) == (64, 2, 32)


def test_a_preset_given_beside_a_script_that_defines_its_model_names_the_megatron_defaults_it_replaces(tmp_path):
    # a script that defines its model but names its tokenizer by path needs --model for the vocabulary (the error
    # says so); the preset then silently filled what the script leaves to Megatron-LM's defaults: hidden and attention
    # dropout 0.0 where Megatron-LM runs 0.1 (the activations' dropout masks: 0.8 GiB of 22.8 here)
    script = tmp_path / "pretrain.sh"
    script.write_text(
        "torchrun --nproc_per_node 8 --nnodes 64 pretrain_gpt.py --num-layers 48 --hidden-size 8192 "
        "--ffn-hidden-size 22016 --num-attention-heads 64 --group-query-attention --num-query-groups 8 "
        "--seq-length 8192 --max-position-embeddings 8192 --position-embedding-type rope --rotary-base 500000 "
        "--swiglu --normalization RMSNorm --disable-bias-linear --untie-embeddings-and-output-weights "
        "--micro-batch-size 1 --global-batch-size 1024 --bf16 --tensor-model-parallel-size 8 "
        "--pipeline-model-parallel-size 4 --sequence-parallel --use-distributed-optimizer "
        "--tokenizer-type HuggingFaceTokenizer --tokenizer-model /tok\n"
    )
    out = run_cli(["explain", "--brief", "--megatron-args-file", str(script), "--model", "llama3-70b"])
    assert out.exit_code == 0, out.output
    said = (
        "megaplan: note: the preset llama3-70b (--model) gives what the script leaves to Megatron-LM's defaults: "
        "vocab_size 128256, hidden_dropout 0.0 (Megatron-LM: 0.1), attention_dropout 0.0 (Megatron-LM: 0.1)"
    )
    assert said in out.stderr and "the script's architecture flags apply over the preset" not in out.stderr, out.stderr
    bare = run_cli(
        ["explain", "--brief", "--megatron-args-file", str(script), "--model", "llama3-70b"]
        + ["--megatron-args", "--hidden-dropout 0.1 --attention-dropout 0.1"]
    )
    assert (
        "gives what the script leaves" in bare.stderr and "dropout" not in bare.stderr.split("leaves")[1].split("\n")[0]
    )


def test_compare_at_80_columns_keeps_the_difference_column():
    # at 80 columns compare hid "B − A" and "B / A": the A and B columns were as wide as "dgx-h100-superpod", a row
    # equal on both sides; the model and the hardware the two plans share are now said in the heading instead
    from rich.console import Console

    from planner import api
    from planner.report.runs import compare_view
    from planner.runs.compare import compare_plans

    base = dict(model="llama3-8b", hardware="dgx-h100-superpod", gpus=64, pp=1, micro_batch=1)
    a = api.explain(api.make_request(**base, tp=2))
    b = api.explain(api.make_request(**base, tp=4, sequence_parallel=True))
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(compare_view(compare_plans(a, b)))
    text = out.getvalue()
    assert "B − A" in text and "hidden at this width" in text and "B − A" not in text.split("hidden at this width")[1]
    assert re.search(r"A: TP2 PP1 DP32 b1.* \(llama3-8b, 64 GPUs of dgx-h100-superpod\)", text), text
    names = [line.split("  ")[0].strip() for line in text.splitlines()]
    assert "hardware" not in names and "model" not in names


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("--tensor-parallel", "--tp"),
        ("--pipeline-parallel-size", "--pp"),
        ("--num-gpus", "--gpus"),
        ("--nodes", "--gpus N (the nodes × GPUs per node)"),
        ("--sequence-length", "--seq-len"),
        ("--gbs", "--global-batch"),
    ],
)
def test_an_option_spelt_as_other_tools_spell_it_names_megaplans(typed, meant):
    # `search --tensor-parallel 8` said "Did you mean one of: '--no-sequence-parallel', '--sequence-parallel'?",
    # `--nodes 8` "Did you mean one of: '--model', '--no-fsdp', '--tokens'?" (click's spelling distance)
    line = _one_error(["search", "--model", "gpt3-175b", "--gpus", "64", typed, "8"])
    assert line == f"megaplan: error: no option {typed}; megaplan's option is {meant}", line


@pytest.mark.parametrize(("kind", "name"), [("models", "llama3-8b"), ("hardware", "dgx-h100-superpod")])
def test_a_preset_copied_with_presets_show_json_loads_back(tmp_path, kind, name):
    # the README: "copy one from presets/ (or `megaplan presets show NAME --json`) and edit it"; the JSON copy of
    # llama3-8b was refused, "norm_epsilon: Input should be a valid number (got '1e-05')": YAML 1.1 (PyYAML) reads
    # JSON's 1e-05 as a string (its floats need a dot)
    import json

    from planner.presets import load_hardware, load_model

    shown = run_cli(["presets", "show", name, "--json"])
    assert shown.exit_code == 0, shown.output
    path = tmp_path / f"mine-{name}.json"
    path.write_text(shown.stdout)
    load = load_model if kind == "models" else load_hardware
    assert load(str(path)) == load(name)
    if kind == "models":
        assert json.loads(shown.stdout)["norm_epsilon"] == 1e-05
        out = run_cli(["search", "--model", str(path), "--gpus", "8", "--top", "1"])
        assert out.exit_code == 0, out.output


@pytest.mark.parametrize("written", ["1e-5", "1E-5", "10e-6", "+1e-05", "1_0e-6"])
def test_a_float_written_with_an_exponent_and_no_dot_is_a_number(tmp_path, written):
    # `norm_epsilon: 1e-5` in a user's model YAML (as Megatron-LM's flag --norm-epsilon 1e-5 is written) was refused,
    # "norm_epsilon: Input should be a valid number (got '1e-5')": YAML 1.1's floats need a dot and a signed exponent
    # (PyYAML); YAML 1.2, JSON, Python and OmegaConf (Megatron-Bridge's configs) read it as a number
    from planner.presets import load_model

    path = _own_model(tmp_path, ("hidden_dropout: 0.0", f"hidden_dropout: 0.0\nnorm_epsilon: {written}"))
    assert load_model(str(path)).norm_epsilon == float(written.replace("_", ""))


def test_every_shipped_yaml_reads_as_before_with_the_exponent_rule():
    import yaml

    from planner.presets import presets_root, safe_load

    root = presets_root()
    files = [*root.rglob("*.yaml"), *root.rglob("*.yml")]
    assert len(files) > 30
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert safe_load(text) == yaml.safe_load(text), path


def test_a_tp_that_does_not_divide_the_gpus_names_the_tp_values_that_do():
    # `explain --gpus 8 --tp 3` named only GPU counts ("allowed: a multiple of 3, e.g. 6 or 9"), though the user's
    # typo is the tp; the nearest tp values that divide 8 / (pp·cp) are named too
    line = _one_error(["explain", "--model", "gpt3-175b", "--gpus", "8", "--tp", "3", "--pp", "1"])
    assert line.endswith("allowed: a multiple of 3, e.g. 6 or 9; or --tp 2 or 4 on 8 GPUs"), line
    line = _one_error(["explain", "--model", "gpt3-175b", "--gpus", "64", "--tp", "8", "--pp", "3"])
    assert line.endswith("allowed: a multiple of 24, e.g. 48 or 72; or --pp 2 or 4 on 64 GPUs"), line


def test_compare_heading_keeps_a_figure_with_its_unit_at_80_columns():
    # "   DOES NOT FIT needs 119.4 GiB per GPU, 46.5 GiB more than 72.8 · 7.87" then "s/iteration" alone at column 0
    out = run_cli(
        [
            "compare",
            "--model",
            "gpt3-175b",
            "--gpus",
            "64",
            "--tp",
            "8",
            "--pp",
            "8",
            "--a",
            "--vpp 2",
            "--b",
            "--vpp 3",
        ],
        env={"COLUMNS": "80"},
    )
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert not any(line.startswith("s/iteration") for line in lines), out.stdout
    assert all(len(line) <= 80 for line in lines)


def test_the_fastest_estimates_unbacked_features_are_not_said_twice():
    # search's note on our 34B on 512 H100s: "uses Megatron FSDP and Megatron FSDP HFSDP, which no published run on
    # Hopper exercises": one feature's label is the start of the other's
    from planner.report.memory import unbacked_features

    assert unbacked_features(["Megatron FSDP", "Megatron FSDP HFSDP"]) == ["Megatron FSDP HFSDP"]
    assert unbacked_features(["CP 2", "interleaved pipeline"]) == ["CP 2", "interleaved pipeline"]
    assert unbacked_features(["PP 2", "PP 2"]) == ["PP 2"]
