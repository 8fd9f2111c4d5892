#!/bin/bash
# Narayanan et al. (SC21) Table 1 runs, in the style of Megatron-LM's
# examples/academic_paper_scripts/sc21/{run_table_1,CONFIG,SBATCH,SRUN}.sh joined into one file.

# ================================
# Choose the case to run.
# ================================
# model size options = [1.7B, 39B, 76B, 145B, 1T]
MODEL_SIZE=1.7B

if [ ${MODEL_SIZE} == "1.7B" ]; then
    TP=1
    PP=1
    MBS=16
    GBS=512
    NLS=24
    HS=2304
    NAH=24
    DDP=torch
    NNODES=4
    MEGATRON_EXTRA_PARAMS="--activations-checkpoint-method uniform "
elif [ ${MODEL_SIZE} == "39B" ]; then
    TP=8
    PP=2
    MBS=4
    GBS=1536
    NLS=48
    HS=8192
    NAH=64
    DDP=local
    NNODES=64
    MEGATRON_EXTRA_PARAMS="--activations-checkpoint-method uniform "
elif [ ${MODEL_SIZE} == "76B" ]; then
    TP=8
    PP=4
    MBS=2
    GBS=1792
    NLS=60
    HS=10240
    NAH=80
    DDP=local
    NNODES=128
    MEGATRON_EXTRA_PARAMS="--activations-checkpoint-method uniform --num-layers-per-virtual-pipeline-stage 5"
elif [ ${MODEL_SIZE} == "1T" ]; then
    TP=8
    PP=64
    MBS=1
    GBS=3072
    NLS=128
    HS=25600
    NAH=160
    DDP=local
    NNODES=384
    MEGATRON_EXTRA_PARAMS="--activations-checkpoint-method uniform "
else
    echo "Invalid configuration"
    exit 1
fi

export JOB_NAME=results_table_1_model_size_${MODEL_SIZE}

# ---- CONFIG.sh ----
export SLURM_PARTITION=batch
export MEGATRON_CODE_DIR=/opt/megatron
MEGATRON_DATA=/data/my-gpt2_text_document
BPE_VOCAB_FILE=/data/gpt2-vocab.json
BPE_MERGE_FILE=/data/gpt2-merges.txt

export MEGATRON_PARAMS=" ${MEGATRON_EXTRA_PARAMS} \
	--tensor-model-parallel-size ${TP} \
	--pipeline-model-parallel-size ${PP} \
	--micro-batch-size ${MBS} \
	--global-batch-size ${GBS} \
        --num-layers ${NLS} \
        --hidden-size ${HS} \
        --num-attention-heads ${NAH} \
	--DDP-impl ${DDP} \
	--data-path ${MEGATRON_DATA} \
	--vocab-file ${BPE_VOCAB_FILE} \
	--merge-file ${BPE_MERGE_FILE} \
        --seq-length 2048 \
        --max-position-embeddings 2048 \
        --train-iters 500 \
        --lr 0.0001 \
        --lr-warmup-fraction 0.01 \
        --fp16 \
	--loss-scale 8192 "

# ---- SBATCH.sh ----
sbatch -p ${SLURM_PARTITION} \
       --job-name=${JOB_NAME} \
       --nodes=${NNODES} \
       --export=MEGATRON_CODE_DIR,MEGATRON_PARAMS SRUN.sh

# ---- SRUN.sh ----
#SBATCH -t 0:30:00 --exclusive --mem=0 --overcommit --ntasks-per-node=8

THIS_DIR=`pwd`
DATETIME=`date +'date_%y-%m-%d_time_%H-%M-%S'`
mkdir -p ${THIS_DIR}/logs

CMD="python -u ${MEGATRON_CODE_DIR}/pretrain_gpt.py ${MEGATRON_PARAMS}"

srun -l \
     --container-image "nvcr.io#nvidia/pytorch:20.12-py3" \
     --output=${THIS_DIR}/logs/%x_%j_$DATETIME.log sh -c "${CMD}"
