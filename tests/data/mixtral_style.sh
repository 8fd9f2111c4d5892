#!/bin/bash
# Mixtral 8x7B in the style of Megatron-LM's examples/mixtral/train_mixtral_8x7b_distributed.sh:
# positional paths, a world size from SLURM_NNODES, the alltoall dispatcher, --no-position-embedding
# with RoPE, and a Llama-2 tokenizer whose size the flags do not give.

GPUS_PER_NODE=8
NNODES=${SLURM_NNODES:-"4"}
CHECKPOINT_PATH=$1
TOKENIZER_MODEL=$2

DISTRIBUTED_ARGS=(--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES)
MODEL_ARGS=(
    --use-mcore-models
    --disable-bias-linear
    --seq-length 4096
    --max-position-embeddings 32768
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --normalization RMSNorm
    --position-embedding-type rope
    --swiglu
    --untie-embeddings-and-output-weights
    --group-query-attention
    --num-query-groups 8
    --no-position-embedding
    --rotary-base 1000000
)
MOE_ARGS=(
    --num-experts 8
    --moe-router-topk 2
    --moe-router-load-balancing-type aux_loss
    --moe-aux-loss-coeff 1e-2
    --moe-grouped-gemm
    --moe-token-dispatcher-type alltoall
    --overlap-param-gather
    --overlap-grad-reduce
)
DATA_ARGS=(--tokenizer-type Llama2Tokenizer --tokenizer-model ${TOKENIZER_MODEL})
TRAINING_ARGS=(--micro-batch-size 1 --global-batch-size 256 --bf16)
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 4
    --expert-model-parallel-size 8
    --use-distributed-optimizer
    --sequence-parallel
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${MODEL_ARGS[@]} ${MOE_ARGS[@]} ${DATA_ARGS[@]} \
    ${TRAINING_ARGS[@]} ${MODEL_PARALLEL_ARGS[@]} --save $CHECKPOINT_PATH --load $CHECKPOINT_PATH
