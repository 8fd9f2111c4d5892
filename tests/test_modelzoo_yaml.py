"""Megatron-LM's examples/moe-modelzoo keep each model's flags in a YAML (ENV_VARS, MODEL_ARGS) that
sbatch_benchmarking.sh turns into flags with envsubst and `$(yq ...)`, which megaplan never runs. The
YAML itself is read as that launcher reads it, and a script that needs yq says to pass the YAML. The
files here are written for the test and reproduce the pattern (the real ones stay outside the repo)."""

from __future__ import annotations

import json

from planner.megatron.modelzoo import modelzoo_command

from conftest import one_line_error, run_cli

CONFIG = """\
ENV_VARS:
  CUDA_DEVICE_MAX_CONNECTIONS: 1

MODEL_ARGS:
  # parallelism, from the launcher's table
  --tensor-model-parallel-size: ${TP}
  --pipeline-model-parallel-size: ${PP}
  --num-layers-per-virtual-pipeline-stage: ${LAYERS_PER_VP}
  --expert-model-parallel-size: ${EP}
  --use-distributed-optimizer: true
  --sequence-parallel: true
  --micro-batch-size: ${MBS}
  --global-batch-size: ${GBS}
  --recompute-modules: moe_act layernorm
  --recompute-granularity: selective
  --save: ${OUTPUT_PATH}/checkpoints
  --num-layers: 24
  --hidden-size: 2048
  --ffn-hidden-size: 6144
  --num-attention-heads: 16
  --seq-length: ${SEQ_LEN}
  --max-position-embeddings: 8192
  --position-embedding-type: rope
  --swiglu: true
  --untie-embeddings-and-output-weights: true
  --disable-bias-linear: true
  --normalization: RMSNorm
  --vocab-size: 32000
  --num-experts: 16
  --moe-ffn-hidden-size: 1024
  --moe-router-topk: 2
  --moe-router-pre-softmax: false # not given to Megatron-LM at all
  --moe-grouped-gemm: true
  --bf16: true
"""
ENV = {"TP": "2", "PP": "2", "EP": "4", "MBS": "1", "GBS": "64", "SEQ_LEN": "4096", "LAYERS_PER_VP": "false"}


def test_the_flags_are_what_envsubst_and_yq_give_the_launcher():
    line = modelzoo_command(CONFIG, ENV)
    assert line.startswith('pretrain_gpt.py --tensor-model-parallel-size "2" --pipeline-model-parallel-size "2" ')
    # ${LAYERS_PER_VP} = false after envsubst: yq drops the flag; true: the flag alone; a value with a space:
    # two words, as the unquoted ${TRAINING_PARAMS} splits them; an unset variable stays for the reader
    assert "--num-layers-per-virtual-pipeline-stage" not in line and "--moe-router-pre-softmax" not in line
    assert '--use-distributed-optimizer --sequence-parallel --micro-batch-size "1"' in line
    assert '--recompute-modules "moe_act" "layernorm"' in line
    assert '--save "${OUTPUT_PATH}/checkpoints"' in line and line.endswith("--moe-grouped-gemm --bf16")
    assert modelzoo_command("MODEL_ARGS: [1, 2]\n", {}) is None and modelzoo_command("#!/bin/bash\nls\n", {}) is None


def test_explain_reads_the_yaml_with_env_and_names_each_unset_variable(tmp_path):
    config = tmp_path / "Tiny-MoE.yaml"
    config.write_text(CONFIG)
    line = one_line_error(run_cli(["explain", "--megatron-args-file", str(config), "--gpus", "16"]))
    assert "--tensor-model-parallel-size is ${TP}" in line and "--env TP=VALUE" in line
    env = [f"--env={k}={v}" for k, v in ENV.items()]
    result = run_cli(["explain", "--megatron-args-file", str(config), "--gpus", "16", *env, "--json"])
    assert result.exit_code == 0, result.output
    pj = json.loads(result.stdout)
    par = pj["parallel"]
    assert (par["tp"], par["pp"], par["ep"], par["dp"], par["micro_batch"]) == (2, 2, 4, 4, 1)
    assert par["sequence_parallel"] and par["distributed_optimizer"] and par["recompute"] == "selective"
    assert pj["model_spec"]["num_experts"] == 16 and pj["training"]["seq_len"] == 4096
    assert "read as a Megatron-LM moe-modelzoo model config" in result.stderr


LAUNCHER = """\
#!/bin/bash
source "${WORKSPACE}/runtime_configs/common.conf"
FLAGS=$(yq '.MODEL_ARGS | to_entries | .[] | [.key + " " + .value] | join("")' ${TRAINING_PARAMS_PATH} | tr '\\n' ' ')
python ${TRAINING_SCRIPT_PATH} ${FLAGS}
"""


def test_a_script_whose_flags_come_through_yq_says_to_pass_the_yaml(tmp_path):
    launcher = tmp_path / "launch.sh"
    launcher.write_text(LAUNCHER)
    line = one_line_error(run_cli(["explain", "--megatron-args-file", str(launcher), "--gpus", "8"]))
    assert "its flags come from a YAML through yq, which megaplan does not run: pass the YAML itself" in line


def test_a_best_practice_script_calling_the_modelzoo_launcher_names_the_yaml_to_pass(tmp_path):
    run = tmp_path / "run_tiny.sh"
    run.write_text("export MODEL=Tiny-MoE\nPP=1 TP=1 EP=8 NNODES=2 bash ./sbatch_benchmarking.sh --foo\n")
    line = one_line_error(run_cli(["explain", "--megatron-args-file", str(run)]))
    assert "sbatch_benchmarking.sh (Megatron-LM examples/moe-modelzoo) reads the model's flags from" in line
    assert "pass that YAML as --megatron-args-file" in line and "put it beside" not in line


def test_an_error_about_the_plan_says_the_yaml_lacks_what_its_launcher_adds(tmp_path):
    # 24 layers over pp 5 need the uneven split sbatch_benchmarking.sh adds (--decoder-first/last-...): the
    # one error line says so, though notes are not said beside an error
    config = tmp_path / "Tiny-MoE.yaml"
    config.write_text(CONFIG)
    env = [f"--env={k}={v}" for k, v in {**ENV, "PP": "5", "TP": "1", "EP": "1"}.items()]
    line = one_line_error(run_cli(["explain", "--megatron-args-file", str(config), "--gpus", "10", *env]))
    assert "24 layers do not split over pp 5" in line
    assert "(after: read as a Megatron-LM moe-modelzoo model config" in line
    assert "--decoder-first/last-pipeline-num-layers for uneven stages): give them with --megatron-args)" in line
