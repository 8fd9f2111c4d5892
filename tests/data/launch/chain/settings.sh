#!/bin/bash
export PARTITION=<the partition to run in>
export RUN_PARAMS=" \
    --tensor-model-parallel-size ${TP} \
    --pipeline-model-parallel-size ${PP} \
    --num-layers ${LAYERS} \
    --hidden-size ${HIDDEN} \
    --num-attention-heads ${HEADS} \
    --micro-batch-size 2 \
    --global-batch-size 256 \
    --seq-length 2048 \
    --max-position-embeddings 2048 \
    --vocab-file <the GPT-2 vocabulary> \
    --merge-file <the GPT-2 merges> \
    --bf16 "
