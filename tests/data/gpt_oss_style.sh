#!/bin/bash
# GPT-OSS-20B in the style of Megatron-LM's examples/post_training/modelopt/conf/openai/gpt-oss-20b.sh and
# examples/gptoss/02_train.sh: separate MODEL_ARGS / MOE_ARGS arrays, biases on, quick GeGLU with a linear
# offset and a clamp, learnable softmax (attention sinks), sliding windows on every other layer, YaRN.

NUM_LAYERS=24
MODEL_ARGS=(
    --num-layers ${NUM_LAYERS}
    --hidden-size 2880
    --ffn-hidden-size 2880
    --num-attention-heads 64
    --group-query-attention
    --num-query-groups 8
    --kv-channels 64
    --normalization RMSNorm
    --untie-embeddings-and-output-weights
    --quick-geglu
    --glu-linear-offset 1.0
    --activation-func-clamp-value 7.0
    --softmax-type learnable
    --window-size 127,0
    --window-attn-skip-freq 2
    --position-embedding-type yarn
    --rotary-base 150000
    --rotary-scaling-factor 32
    --seq-length 4096
    --max-position-embeddings 131072
    --tokenizer-type NullTokenizer
    --vocab-size 201088
)
MOE_ARGS=(
    --num-experts 32
    --moe-ffn-hidden-size 2880
    --moe-router-topk 4
    --moe-router-score-function softmax
    --moe-router-dtype fp32
    --moe-router-load-balancing-type aux_loss
    --moe-aux-loss-coeff 0.0
    --moe-grouped-gemm
    --moe-permute-fusion
    --moe-token-dispatcher-type alltoall
)
PARALLEL_ARGS=(
    --tensor-model-parallel-size 2
    --sequence-parallel
    --expert-model-parallel-size 8
    --expert-tensor-parallel-size 1
    --micro-batch-size 1
    --global-batch-size 512
    --use-distributed-optimizer
    --bf16
)

torchrun --nproc_per_node 8 --nnodes 8 pretrain_gpt.py ${MODEL_ARGS[@]} ${MOE_ARGS[@]} ${PARALLEL_ARGS[@]}
