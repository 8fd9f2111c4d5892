"""Audit ux18: user-facing defects.

1. Generated command lines name every file the user gave by its absolute path (search's explain/export
   commands, explain's search hint, sweep's and --min-gpus's commands, the Slurm script's read-back line,
   the Bridge export's ``megaplan-import`` line), so they run from any folder; presets stay names.
2. Token counts print in three significant digits at most (2.10T, not 2.09715T), and a command line writes
   --tokens so that it reads back to the same count.
3. NeMo 2's trainer.max_steps is the run's length on import (iterations × global batch × sequence), as Bridge's
   train.train_iters is; a value megaplan cannot use is said (-1) or refused (0, 2.5), never dropped.
"""

from __future__ import annotations

import json
import shlex

import pytest

from conftest import PRESETS, run_cli

UB = "proj_fprop: {method: pipeline, num_sm: 24, num_splits: 4}\n"


@pytest.fixture
def user_files(tmp_path, monkeypatch):
    """A model, a hardware and a userbuffer YAML of the user's in a folder the commands run in (``cwd``), and
    another folder to paste the generated commands in (``elsewhere``)."""
    cwd, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    cwd.mkdir()
    elsewhere.mkdir()
    model = (PRESETS / "models" / "gpt-1.7b.yaml").read_text().replace("name: gpt-1.7b", "name: my-gpt", 1)
    (cwd / "my.yaml").write_text(model)
    big = (PRESETS / "models" / "llama3-8b.yaml").read_text().replace("name: llama3-8b", "name: my-8b", 1)
    (cwd / "big.yaml").write_text(big)
    hardware = (PRESETS / "hardware" / "dgx-h100-superpod.yaml").read_text()
    (cwd / "hw.yaml").write_text(hardware.replace("name: dgx-h100-superpod", "name: my-cluster", 1))
    (cwd / "ub.yaml").write_text(UB)
    monkeypatch.chdir(cwd)
    return cwd.resolve(), elsewhere


def _ok(result):
    assert result.exit_code == 0, (result.exit_code, result.output)
    return result


def test_search_commands_name_the_users_files_by_absolute_path(user_files, monkeypatch):
    cwd, elsewhere = user_files
    args = ["--model", "./my.yaml", "--hardware", "hw.yaml", "--gpus", "8", "--tp", "2", "--sequence-parallel"]
    args += ["--tp-comm-overlap", "--tp-comm-overlap-cfg", "ub.yaml", "--top", "1", "--json"]
    pj = json.loads(_ok(run_cli(["search", *args])).stdout)["plans"][0]
    for line in pj["commands"].values():
        words = shlex.split(line)
        assert words[words.index("--model") + 1] == str(cwd / "my.yaml")
        assert words[words.index("--hardware") + 1] == str(cwd / "hw.yaml")
        assert words[words.index("--tp-comm-overlap-cfg") + 1] == str(cwd / "ub.yaml")
    monkeypatch.chdir(elsewhere)  # pasted in another folder, the explain command rebuilds the same plan
    again = json.loads(_ok(run_cli([*shlex.split(pj["commands"]["explain"])[1:], "--json"])).stdout)
    assert again["estimate"]["iteration_s"] == pytest.approx(pj["estimate"]["iteration_s"], rel=1e-9)


def test_a_preset_stays_a_name_in_the_commands(user_files):
    args = ["--model", "gpt-1.7b", "--hardware", "dgx-h100-superpod", "--gpus", "8", "--top", "1", "--json"]
    words = shlex.split(json.loads(_ok(run_cli(["search", *args])).stdout)["plans"][0]["commands"]["explain"])
    assert words[words.index("--model") + 1] == "gpt-1.7b"
    assert words[words.index("--hardware") + 1] == "dgx-h100-superpod"


def test_sweep_and_min_gpus_commands_too(user_files):
    cwd, _ = user_files
    sweep = json.loads(_ok(run_cli(["sweep", "--model", "my.yaml", "--gpus", "8", "--json"])).stdout)
    assert f"--model {cwd / 'my.yaml'} " in sweep["rows"][0]["plan"]["commands"]["explain"]
    fit = json.loads(_ok(run_cli(["search", "--model", "./my.yaml", "--min-gpus", "--json"])).stdout)
    assert f"--model {cwd / 'my.yaml'} " in fit["sizes"][0]["plan"]["commands"]["export"]


def test_explains_search_hint_names_the_files_by_absolute_path(user_files):
    cwd, _ = user_files
    """A plan no single change fits (8B on 64 GPUs, TP1 PP1 DDP) points to a search, by a command to paste."""
    args = ["explain", "--model", "./big.yaml", "--hardware", "hw.yaml", "--gpus", "64", "--tp", "1", "--pp", "1"]
    command = json.loads(_ok(run_cli([*args, "--json"])).stdout)["search_hint"]["command"]
    assert command.startswith(f"megaplan search --model {cwd / 'big.yaml'} --hardware {cwd / 'hw.yaml'} --gpus 64 ")


def test_slurm_read_back_line_and_note_name_the_files(user_files, monkeypatch):
    cwd, elsewhere = user_files
    base = ["export", "--model", "./my.yaml", "--hardware", "hw.yaml", "--gpus", "8", "--tp", "2"]
    # --no-async-tp-comm: a setting no flag carries, so export says how to read the script back
    result = _ok(run_cli([*base, "--no-async-tp-comm", "--format", "slurm", "--tokens", "1e12", "-o", "run.sh"]))
    line = next(ln for ln in (cwd / "run.sh").read_text().splitlines() if "THIS_SCRIPT" in ln)
    assert line.endswith(f"--model {cwd / 'my.yaml'} --hardware {cwd / 'hw.yaml'} --no-async-tp-comm --tokens 1e+12")
    # the note on stderr names the script written, by its absolute path too
    assert f"megaplan explain --megatron-args-file {cwd / 'run.sh'} --model {cwd / 'my.yaml'}" in result.stderr
    monkeypatch.chdir(elsewhere)
    read = line.split("megaplan ", 1)[1].replace("THIS_SCRIPT", str(cwd / "run.sh"))
    pj = json.loads(_ok(run_cli([*shlex.split(read), "--json"])).stdout)
    assert (pj["model"], pj["hardware"], pj["parallel"]["tp"]) == ("my-gpt", "my-cluster", 2)
    assert pj["options"]["async_tp_comm"] is False


def test_slurm_read_back_without_a_hardware_file_keeps_the_placeholder(user_files):
    """A plan whose hardware came from a file the export was not given keeps YOUR_HARDWARE.yaml."""
    from planner.megatron.export import readback_args
    from planner.plan_file import request_from_plan

    args = ["explain", "--model", "./my.yaml", "--hardware", "hw.yaml", "--gpus", "8", "--tp", "2", "--json"]
    req = request_from_plan(json.loads(_ok(run_cli(args)).stdout), hardware="hw.yaml")
    assert readback_args(req)[:2] == ["--hardware", "YOUR_HARDWARE.yaml"]  # my-gpt: no preset, not given
    assert readback_args(req, hardware_ref="hw.yaml")[:2] == ["--hardware", str(user_files[0] / "hw.yaml")]


def test_bridge_export_header_names_a_hardware_file_by_absolute_path(user_files, monkeypatch):
    cwd, elsewhere = user_files
    args = ["export", "--model", "llama3-8b", "--hardware", "hw.yaml", "--gpus", "16", "--tp", "2"]
    args += ["--distributed-optimizer", "--format", "bridge", "--bridge-recipe"]
    result = _ok(run_cli([*args, "llama3_8b_pretrain_2gpu_h100_bf16_config", "-o", "over.txt"]))
    head = next(ln for ln in (cwd / "over.txt").read_text().splitlines() if "megaplan-import:" in ln)
    assert head.endswith(f"--gpus 16 --hardware {cwd / 'hw.yaml'}")
    assert f"$(grep -v '^#' {cwd / 'over.txt'})" in result.stderr  # the launch line reads the file written
    monkeypatch.chdir(elsewhere)
    pj = json.loads(_ok(run_cli(["explain", "--bridge-config", str(cwd / "over.txt"), "--json"])).stdout)
    assert (pj["hardware"], pj["gpus"], pj["parallel"]["tp"]) == ("my-cluster", 16, 2)


# ----------------------------------------------------------------------------- 2. token counts


@pytest.mark.parametrize(
    ("tokens", "text"),
    [
        (300e9, "300B"),  # round counts keep their own digits
        (4.9e12, "4.9T"),
        (15e12, "15T"),
        (500e6, "500M"),
        (2**21 * 1e6, "2.10T"),  # 2,097,152,000,000: read "2.09715T"
        (1_168_251 * 512 * 8192, "4.90T"),  # Bridge's and NeMo's llama3 recipes' 1,168,251 iterations: "4.89998T"
        (71_526 * 512 * 8192, "300B"),  # 300e9 in whole iterations of 512 × 8192 (300,002,000,000): "300.002B"
        (999.96e9, "1.00T"),  # rounded before the unit is picked: not "1.00e+03B"
        (1.2549e12, "1.25T"),
        (1e30, "1e+30"),
    ],
)
def test_token_counts_in_three_significant_digits(tokens, text):
    from planner.report.layout import tokens_text

    assert tokens_text(tokens) == text


@pytest.mark.parametrize("value", [300e9, 2**21 * 1e6, 1.4e12, 0.1 + 0.2, 1 / 3, 1e308])
def test_a_command_line_number_reads_back_to_the_same_float(value):
    from planner.whole import number_word

    word = number_word(value)
    assert float(word) == value and len(word) <= 23
    assert number_word(300e9) == "3e+11" and number_word(2**21 * 1e6) == "2.097152e+12"


def test_the_tokens_everywhere_a_run_is_shown():
    """explain's verdict and table, search's footer, the Slurm script's TRAIN_ITERS comment and read-back line,
    the Bridge export's note, and search's commands: 2.10T, and --tokens 2.097152e+12 (it wrote 2.09715e+12,
    another run, in search's commands)."""
    base = ["--model", "llama3-8b", "--hardware", "dgx-h100-superpod", "--gpus", "64", "--tokens", "2.097152T"]
    plan = [*base, "--tp", "1", "--pp", "2", "--distributed-optimizer"]
    brief = _ok(run_cli(["explain", *plan, "--brief"])).stdout
    assert "days for 2.10T tokens" in brief and "2.09715" not in brief
    table = _ok(run_cli(["explain", *plan], env={"COLUMNS": "120"})).stdout
    assert "2.10T tokens ÷ tokens/s (--tokens)" in table
    found = _ok(run_cli(["search", *base, "--top", "1"], env={"COLUMNS": "200"})).stdout
    assert "days to train 2.10T tokens (--tokens)" in found.replace("\n", " ") and "2.09715" not in found
    script = _ok(run_cli(["export", *plan, "--no-async-tp-comm", "--format", "slurm"])).stdout
    assert "TRAIN_ITERS=${TRAIN_ITERS:-500000}  # 2.10T tokens (--tokens)" in script
    assert "--no-async-tp-comm --tokens 2.097152e+12" in script
    bridge = _ok(run_cli(["export", *plan, "--format", "bridge"]))
    assert "train.train_iters=500,000: the plan's 2.10T tokens (--tokens)" in bridge.stderr
    pj = json.loads(_ok(run_cli(["search", *base, "--top", "1", "--json"])).stdout)["plans"][0]
    assert "--tokens 2.097152e+12 " in pj["commands"]["explain"]
    again = json.loads(_ok(run_cli([*shlex.split(pj["commands"]["explain"])[1:], "--json"])).stdout)
    assert again["training"]["train_tokens"] == 2**21 * 1e6


# ----------------------------------------------------------------------------- 3. NeMo 2's trainer.max_steps

# A NeMo 2 launch as `nemo llm pretrain` takes it (written for this test): NeMo-Run's key=value overrides of the
# llama3_8b factory's recipe, its world size from trainer.num_nodes × trainer.devices
NEMO2_LINE = "nemo llm pretrain --factory llama3_8b \\\n    trainer.num_nodes=8 trainer.devices=8 {steps}\n"


def _nemo2(tmp_path, steps: str, *extra: str):
    (tmp_path / "nemo.sh").write_text(NEMO2_LINE.format(steps=steps))
    return run_cli(["explain", "--bridge-config", str(tmp_path / "nemo.sh"), "--hardware", "dgx-h100-superpod", *extra])


def test_nemo2_max_steps_is_the_runs_length(tmp_path):
    """1,000 optimizer steps of the recipe's global batch 512 × seq 8192: 4,194,304,000 tokens."""
    result = _ok(_nemo2(tmp_path, "trainer.max_steps=1000", "--json"))
    assert json.loads(result.stdout)["training"]["train_tokens"] == 1000 * 512 * 8192
    assert "the run's length: trainer.max_steps 1,000 × global batch 512 × seq 8,192 = 4.19B tokens" in result.stderr


def test_nemo2_factorys_own_max_steps_is_read_and_said(tmp_path):
    """NeMo v2.4.0 nemo/collections/llm/recipes/llama3_8b.py, trainer(): ``max_steps: int = 1168251`` (line 69),
    passed to ``run.Config(nl.Trainer, max_steps=max_steps)``; nemotron4_15b.py's is 300000 (line 69)."""
    from planner.bridge.formats import nemo2_defaults

    assert nemo2_defaults("llama3_8b")["trainer.max_steps"] == 1_168_251
    assert nemo2_defaults("nemotron4_15b")["trainer.max_steps"] == 300_000
    result = _ok(_nemo2(tmp_path, "", "--json"))
    assert json.loads(result.stdout)["training"]["train_tokens"] == 1_168_251 * 512 * 8192
    assert "trainer.max_steps (the llama3_8b recipe's) 1,168,251 × global batch 512 × seq 8,192 = 4.90T" in (
        result.stderr
    )
    assert "max_steps=1168251" in result.stderr  # among the recipe's fields assumed
    # --tokens still sets another run
    again = _ok(_nemo2(tmp_path, "trainer.max_steps=1000", "--tokens", "1T", "--json"))
    assert json.loads(again.stdout)["training"]["train_tokens"] == 1e12


def test_nemo2_max_steps_minus_one_is_said_not_dropped(tmp_path):
    """Lightning's -1: no step limit; the run's length is then the epochs', which the line cannot give."""
    result = _ok(_nemo2(tmp_path, "trainer.max_steps=-1", "--json"))
    assert json.loads(result.stdout)["training"]["train_tokens"] == 300e9
    warning = [ln for ln in result.stderr.splitlines() if "trainer.max_steps=-1" in ln]
    assert len(warning) == 1 and warning[0].startswith("megaplan: warning: ") and "--tokens" in warning[0]


@pytest.mark.parametrize("steps", ["0", "2.5", "abc", "true"])
def test_nemo2_max_steps_megaplan_cannot_use_is_one_error_line(tmp_path, steps):
    from conftest import one_line_error

    line = one_line_error(_nemo2(tmp_path, f"trainer.max_steps={steps}"))
    assert line.startswith("megaplan: error: NeMo 2 trainer.max_steps=") and "a whole number ≥ 1" in line


def test_nemo2_export_writes_the_plans_run_as_max_steps(tmp_path):
    """export --format nemo2 writes the plan's --tokens as whole steps (the factory's 1,168,251 is not the plan's),
    and the import reads them back: 300e9 / (512 × 8192) = 71,525.9 → 71,526 steps."""
    args = ["export", "--model", "llama3-8b", "--hardware", "dgx-h100-superpod", "--gpus", "64", "--tp", "1"]
    text = _ok(run_cli([*args, "--pp", "2", "--distributed-optimizer", "--format", "nemo2"])).stdout
    assert "trainer.max_steps=71526" in text.split()
    (tmp_path / "back.sh").write_text(text)
    read = ["explain", "--bridge-config", str(tmp_path / "back.sh"), "--gpus", "64", "--hardware", "dgx-h100-superpod"]
    back = _ok(run_cli([*read, "--json"]))
    assert json.loads(back.stdout)["training"]["train_tokens"] == 71_526 * 512 * 8192


# ----------------------------------------------------------------------------- 4. Blackwell bases of a Bridge export

# Megatron-Bridge v0.6.0's tree (git -C Megatron-Bridge ls-tree -r --name-only v0.6.0 src/megatron/bridge/recipes
# src/megatron/bridge/perf_recipes), the per-GPU folders of the families megaplan has presets for (llama, qwen,
# deepseek, gpt_oss, gpt), with each library file's recipe functions; written out here from the tag
V060_LIBRARY = {  # recipes/<family>/<gpu>/<file>: its pretraining recipes (qwen35: Qwen3.5, no megaplan preset)
    "recipes/deepseek/gb200/deepseek_v4.py": (),
    "recipes/deepseek/gb300/deepseek_v4.py": (),
    "recipes/qwen/gb200/qwen35.py": (
        "qwen35_text_9b_pretrain_8gpu_gb200_bf16_config",
        "qwen35_text_35b_a3b_pretrain_8gpu_gb200_bf16_config",
    ),
    "recipes/qwen/gb200/qwen3_moe.py": ("qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_functional_config",),
}
V060_H100_ONLY = ("llama", "gpt", "gpt_oss")  # recipes/<family>/ holds h100/ and no Blackwell folder
V060_PERF = {
    "perf_recipes/deepseek/b200/deepseek_v3.py",
    "perf_recipes/deepseek/b300/deepseek_v3.py",
    "perf_recipes/deepseek/gb200/deepseek_v3.py",
    "perf_recipes/deepseek/gb300/deepseek_v3.py",
    "perf_recipes/gpt_oss/b200/gpt_oss.py",
    "perf_recipes/gpt_oss/b300/gpt_oss.py",
    "perf_recipes/gpt_oss/gb200/gpt_oss.py",
    "perf_recipes/gpt_oss/gb300/gpt_oss.py",
    "perf_recipes/llama/b200/llama3.py",
    "perf_recipes/llama/b200/llama31.py",
    "perf_recipes/llama/b300/llama3.py",
    "perf_recipes/llama/b300/llama31.py",
    "perf_recipes/llama/gb200/llama3.py",
    "perf_recipes/llama/gb200/llama31.py",
    "perf_recipes/llama/gb300/llama3.py",
    "perf_recipes/llama/gb300/llama31.py",
    "perf_recipes/qwen/b200/qwen3_moe.py",
    "perf_recipes/qwen/b300/qwen3_moe.py",
    "perf_recipes/qwen/gb200/qwen3_moe.py",
    "perf_recipes/qwen/gb300/qwen3_moe.py",
}


def test_the_blackwell_recipes_named_are_the_tags():
    from planner.bridge.table import GPU_LIBRARY_RECIPES, GPU_PERF_FILES, RECIPES

    for (preset, gpu), name in GPU_LIBRARY_RECIPES["v0.6.0"].items():
        module, built = RECIPES["v0.6.0"][name]
        path = "recipes/" + module.removeprefix("megatron.bridge.recipes.").replace(".", "/") + ".py"
        assert name in V060_LIBRARY[path] and f"/{gpu}/" in path and built == preset
    # every library recipe of the tag for a Blackwell GPU and a megaplan model is one the export starts from
    known = {n for names in V060_LIBRARY.values() for n in names if n.startswith(("qwen3_30b", "qwen3_235b"))}
    assert known == set(GPU_LIBRARY_RECIPES["v0.6.0"].values())
    assert set(GPU_PERF_FILES["v0.6.0"].values()) <= V060_PERF
    assert not any(f"/{family}/" in path for path in V060_LIBRARY for family in V060_H100_ONLY)


@pytest.mark.parametrize(
    ("hardware", "gpu"),
    [
        ("dgx-h100-superpod", "h100"),
        ("dgx-b200-superpod", "b200"),
        ("dgx-b300-superpod", "b300"),
        ("gb200-nvl72", "gb200"),
    ],
)
def test_the_gpu_a_recipe_name_says(hardware, gpu):
    from planner.bridge.recipes import bridge_gpu
    from planner.presets import load_hardware

    assert bridge_gpu(load_hardware(hardware)) == gpu
    assert (
        bridge_gpu(load_hardware("gb300-nvl72")) == "gb300" and bridge_gpu(load_hardware("dgx-a100-superpod")) is None
    )


def _bridge(*args: str) -> tuple[list[str], dict, str]:
    result = _ok(run_cli(["export", *args, "--format", "bridge"]))
    head = [ln[2:] for ln in result.stdout.splitlines() if ln.startswith("# ")]
    fields = dict(ln.split("=", 1) for ln in result.stdout.splitlines() if ln and not ln.startswith("#"))
    return head, fields, result.stdout


@pytest.mark.parametrize("hardware", ["dgx-b200-superpod", "dgx-b300-superpod", "gb200-nvl72", "gb300-nvl72"])
def test_a_blackwell_plan_without_a_library_recipe_keeps_the_h100_base_and_says_why(hardware):
    head, fields, _ = _bridge("--model", "llama3-70b", "--hardware", hardware, "--gpus", "64", "--tp", "4", "--pp", "4")
    gpu = {"dgx-b200-superpod": "b200", "dgx-b300-superpod": "b300", "gb200-nvl72": "gb200", "gb300-nvl72": "gb300"}
    gpu = gpu[hardware]
    said = " ".join(line.strip() for line in head)
    assert "base recipe llama3_70b_pretrain_32gpu_h100_bf16_config is an H100 recipe" in said
    assert f"no {gpu.upper()} library recipe for llama3-70b" in said
    assert f"(perf_recipes/llama/{gpu}/llama3.py) are benchmarks, not a base for a run" in said
    # the H100 recipe's own VPP 5 and CP 2 (recipes/llama/h100/llama3.py @ v0.6.0) do not leak into a TP4 PP4 plan
    assert fields["model.virtual_pipeline_model_parallel_size"] == "null"
    assert fields["model.context_parallel_size"] == "1"


def test_an_h100_plan_or_a_named_recipe_has_no_such_line():
    plan = ["--gpus", "64", "--tp", "8", "--pp", "4", "--sequence-parallel", "--distributed-optimizer"]
    head, *_ = _bridge("--model", "llama3-70b", "--hardware", "dgx-h100-superpod", *plan)
    assert not any("H100 recipe" in line for line in head)
    named = ["--bridge-recipe", "llama3_70b_pretrain_32gpu_h100_bf16_config"]
    head, *_ = _bridge("--model", "llama3-70b", "--hardware", "gb200-nvl72", *plan, *named)
    assert not any("H100 recipe" in line for line in head)


def test_a_gb200_qwen3_30b_plan_starts_from_bridges_gb200_recipe_and_writes_what_the_plan_decides(tmp_path):
    """recipes/qwen/gb200/qwen3_moe.py @ v0.6.0 sets MXFP8, EP 8, micro-batch 4, HybridEP with
    moe_hybridep_num_sms 32, the EP A2A overlap with delayed wgrad, TE CUDA graphs of the router and FP8 attention;
    a BF16 plan must write each of them as the plan has it. Its flex dispatcher is HybridEP, GB200's default
    (bgb19: DeepEP does not run on a multi-node NVLink domain, space.flex_backend), with HybridEP's 16 SMs and
    the plan's 108 scan blocks over the recipe's 32 and 32."""
    args = ["--model", "qwen3-30b-a3b", "--hardware", "gb200-nvl72", "--gpus", "8", "--tp", "1", "--pp", "1"]
    args += ["--ep", "8", "--micro-batch", "2", "--moe-token-dispatcher", "flex", "--distributed-optimizer"]
    head, fields, text = _bridge(*args)
    name = "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_functional_config"
    assert head[-1].startswith(f"megaplan-import: --bridge-version v0.6.0 --bridge-recipe {name} --gpus 8")
    said = " ".join(line.strip() for line in head)
    assert "GB200 library recipe for qwen3-30b-a3b; kept from it (no plan setting decides them)" in said
    assert fields["mixed_precision"].startswith("{_target_:megatron.bridge.training.mixed_precision.")
    assert "fp8:null" in fields["mixed_precision"] and "fp8_dot_product_attention" not in fields["mixed_precision"]
    assert fields["comm_overlap"].startswith("{_target_:megatron.bridge.training.comm_overlap.CommOverlapConfig")
    assert (fields["model.moe_flex_dispatcher_backend"], fields["model.moe_flex_dispatcher_num_sms"]) == (
        "hybridep",
        "16",
    )
    assert fields["model.moe_hybridep_num_sms_preprocessing"] == "108"
    assert (fields["model.cuda_graph_impl"], fields["train.micro_batch_size"]) == ("none", "2")
    assert fields["model.use_transformer_engine_op_fuser"] == "false"
    # read back (the header names the recipe, the GPUs and the hardware): the same plan and estimate
    (tmp_path / "over.txt").write_text(text)
    back = json.loads(_ok(run_cli(["explain", "--bridge-config", str(tmp_path / "over.txt"), "--json"])).stdout)
    want = json.loads(_ok(run_cli(["explain", *args, "--json"])).stdout)
    assert back["parallel"] == want["parallel"] and back["hardware"] == "gb200-nvl72"
    assert back["estimate"]["iteration_s"] == want["estimate"]["iteration_s"]


def test_hybridep_sms_are_written_as_priced():
    """HybridEP's 16 SMs (planner.costs.moe.COMM_SMS) or --moe-flex-dispatcher-num-sms, over a base's 32."""
    args = ["--model", "qwen3-30b-a3b", "--hardware", "gb200-nvl72", "--gpus", "8", "--tp", "1", "--pp", "1"]
    args += ["--ep", "8", "--moe-token-dispatcher", "flex", "--moe-flex-dispatcher-backend", "hybridep"]
    _, fields, _ = _bridge(*args, "--distributed-optimizer")
    assert fields["model.moe_flex_dispatcher_num_sms"] == "16"
    _, fields, _ = _bridge(*args, "--distributed-optimizer", "--moe-flex-dispatcher-num-sms", "24")
    assert fields["model.moe_flex_dispatcher_num_sms"] == "24"


def test_a_comment_naming_run_recipe_is_no_launch_line():
    """A dotlist whose comment names run_recipe.py was read as Bridge's launch line and ended in a StopIteration
    traceback (the GB200 export's header said "a torchrun launch ... run_recipe.py" in a first draft)."""
    from planner.bridge.importer import file_kind

    assert (
        file_kind("# launch it with scripts/training/run_recipe.py\nmodel.tensor_model_parallel_size=2\n") == "bridge"
    )
    assert file_kind("torchrun --nproc-per-node 8 scripts/training/run_recipe.py --recipe x\n") == "run_recipe"
