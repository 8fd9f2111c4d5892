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


# A moe-modelzoo tree of our own, reproducing Megatron-LM's pattern (examples/moe-modelzoo @ f13818d695):
# best_practice/<model>/run_*.sh runs `bash ./sbatch_benchmarking.sh ARGS` from the modelzoo folder with the
# parallelism in the command's environment; the launcher finds itself with $(dirname "$(readlink -f "$0")"),
# sources a conf whose associative array holds each model's defaults (read through `local -n` and
# `[[ -v table[$name] ]]`), envsubst's the model's YAML, turns MODEL_ARGS into flags with yq, and submits
# `srun bash -c \${TRAINING_CMD}` in a here-document to sbatch.
LAUNCHER_SH = r"""#!/bin/bash
set -euxo pipefail
export WORKSPACE=$(dirname "$(readlink -f "$0")")
export MODEL=${MODEL:-"your_own_model"}
export MEGATRON_PATH=${MEGATRON_PATH:-"$(cd "${WORKSPACE}/../.." && pwd)"}
source "${WORKSPACE}/runtime_configs/defaults.conf"
export TRAINING_PARAMS_PATH=${TRAINING_PARAMS_PATH:-"${WORKSPACE}/model_configs/${MODEL}.yaml"}
if [[ -f ${TRAINING_PARAMS_PATH} ]]; then
    envsubst < ${TRAINING_PARAMS_PATH} > ${TRAINING_PARAMS_PATH}.tmp
    TRAINING_PARAMS_PATH=${TRAINING_PARAMS_PATH}.tmp
fi
FROM_CONFIG=$(yq '... comments="" | .MODEL_ARGS | to_entries | .[] |
    select(.value != "false") |
    with(select(.value == "true"); .value = "") |
    [.key + " " + .value] | join("")' ${TRAINING_PARAMS_PATH} | tr '\n' ' ')
TRAINING_PARAMS="${FROM_CONFIG} $@"
if [[ ${DISPATCHER:-alltoall} == "alltoall" ]]; then
    TRAINING_PARAMS="${TRAINING_PARAMS} --moe-token-dispatcher-type alltoall"
fi
MAX_POS=$(yq '.MODEL_ARGS."--max-position-embeddings"' ${TRAINING_PARAMS_PATH})
if [[ ${SEQ_LEN} -gt ${MAX_POS} ]]; then
    TRAINING_PARAMS="${TRAINING_PARAMS} --max-position-embeddings ${SEQ_LEN}"
fi
export TRAINING_CMD="python ${MEGATRON_PATH}/pretrain_gpt.py ${TRAINING_PARAMS}"
sbatch <<EOF
#!/bin/bash
#SBATCH --nodes=${NNODES}
#SBATCH --ntasks-per-node=8
srun --mpi=pmix -l bash -c \\\${TRAINING_CMD} 2>&1 | tee ${WORKSPACE}/log.txt
EOF
"""
DEFAULTS_CONF = """\
declare -A MODEL_TABLE=(
    # MODEL:   TP PP EP MBS GBS NNODES
    [Tiny-MoE]="  2  2  4  1  64  2"
    [Other]="     1  1  8  1  256 4"
)
set_model_configs() {
    local -n table=$1
    local name=$2
    if [[ -v table[$name] ]]; then
        local config=(${table[$name]})
    else
        echo "Error: Invalid model $name."
        return 1
    fi
    export TP=${TP:-${config[0]}}
    export PP=${PP:-${config[1]}}
    export EP=${EP:-${config[2]}}
    export MBS=${MBS:-${config[3]}}
    export GBS=${GBS:-${config[4]}}
    export NNODES=${NNODES:-${config[5]}}
    export LAYERS_PER_VP=false
}
set_model_configs MODEL_TABLE ${MODEL}
"""
RUN_SH = """\
export MODEL=Tiny-MoE
export MEGATRON_PATH=
export SEQ_LEN=16384

# EP + DP solution
PP=1 TP=1 EP=8 NNODES=1 bash ./sbatch_benchmarking.sh --moe-router-force-load-balancing

# a second configuration (the first launch is the one read)
PP=2 NNODES=4 bash ./sbatch_benchmarking.sh
"""


def _modelzoo_tree(root):
    zoo = root / "examples" / "moe-modelzoo"
    for rel, text in {
        "sbatch_benchmarking.sh": LAUNCHER_SH,
        "runtime_configs/defaults.conf": DEFAULTS_CONF,
        "model_configs/Tiny-MoE.yaml": CONFIG,
        "best_practice/tiny/run_tiny.sh": RUN_SH,
    }.items():
        (zoo / rel).parent.mkdir(parents=True, exist_ok=True)
        (zoo / rel).write_text(text)
    return zoo


def test_a_best_practice_script_imports_as_bash_runs_it_through_the_modelzoo_launcher(tmp_path):
    # was: "no Megatron-LM entry point ... the script reads ./sbatch_benchmarking.sh, which megaplan could
    # not read" (every best_practice/*.sh of Megatron-LM's moe-modelzoo)
    zoo = _modelzoo_tree(tmp_path)
    out = run_cli(["explain", "--megatron-args-file", str(zoo / "best_practice/tiny/run_tiny.sh"), "--json"])
    assert out.exit_code == 0, out.output
    pj = json.loads(out.stdout)
    par = pj["parallel"]
    # the command's PP=1 TP=1 EP=8 NNODES=1 over the table's defaults; GBS 64 and MBS 1 from the table;
    # 1 node × --ntasks-per-node 8 from the here-document's #SBATCH lines
    assert (pj["gpus"], par["tp"], par["pp"], par["ep"], par["dp"]) == (8, 1, 1, 8, 8)
    assert (pj["training"]["global_batch"], par["micro_batch"], pj["training"]["seq_len"]) == (64, 1, 16384)
    assert par["moe_token_dispatcher"] == "alltoall"  # added by the launcher, not in the YAML
    assert "read ./sbatch_benchmarking.sh from" in out.stderr and "a folder above the script's" in out.stderr
    # the launcher raises the YAML's --max-position-embeddings to SEQ_LEN by appending the flag, as bash runs it
    assert "--max-position-embeddings given twice (8192, then 16384): Megatron-LM keeps the last, 16384" in out.stderr


def test_the_modelzoo_launchers_unknown_model_stops_where_bash_stops(tmp_path):
    zoo = _modelzoo_tree(tmp_path)
    (zoo / "best_practice/tiny/run_tiny.sh").write_text(RUN_SH.replace("Tiny-MoE", "Huge-MoE"))
    line = one_line_error(run_cli(["explain", "--megatron-args-file", str(zoo / "best_practice/tiny/run_tiny.sh")]))
    # the conf's function echoes its error and returns 1; under the launcher's set -e that ends the script
    assert 'before the script\'s exit (it printed "Error: Invalid model Huge-MoE."' in line
