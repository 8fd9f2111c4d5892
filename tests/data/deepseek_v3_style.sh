#!/bin/bash
# DeepSeek-V3 in the style of Megatron-LM's examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh:
# ${VAR:-default} sizes, one long argument array with the MoE pattern unquoted, multi-latent
# attention, shared expert, group-limited sigmoid routing, MTP, and an FSDP block appended to the array.

TP=${TP:-1}
EP=${EP:-64}
PP=${PP:-16}
MBS=${MBS:-1}
GBS=${GBS:-4096}
USE_MEGATRON_FSDP=${USE_MEGATRON_FSDP:-0}

PRETRAIN_ARGS=(
    --tensor-model-parallel-size ${TP}
    --pipeline-model-parallel-size ${PP}
    --pipeline-model-parallel-layout "Et*4|(t*4|)*14tmL"
    --expert-model-parallel-size ${EP}
    --expert-tensor-parallel-size 1
    --use-distributed-optimizer
    --overlap-grad-reduce
    --disable-bias-linear
    --micro-batch-size ${MBS}
    --global-batch-size ${GBS}
    --recompute-granularity full
    --recompute-method uniform
    --recompute-num-layers 1
    --seq-length 4096
    --num-layers 61
    --hidden-size 7168
    --ffn-hidden-size 18432
    --num-attention-heads 128
    --kv-channels 128
    --max-position-embeddings 4096
    --position-embedding-type rope
    --rotary-base 10000
    --normalization RMSNorm
    --swiglu
    --untie-embeddings-and-output-weights
    --multi-latent-attention
    --qk-layernorm
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --num-experts 256
    --moe-layer-freq [0]*3+[1]*58
    --moe-ffn-hidden-size 2048
    --moe-shared-expert-intermediate-size 2048
    --moe-router-load-balancing-type seq_aux_loss
    --moe-router-topk 8
    --moe-token-dispatcher-type flex
    --moe-flex-dispatcher-backend deepep
    --moe-router-pre-softmax
    --moe-grouped-gemm
    --moe-router-group-topk 4
    --moe-router-num-groups 8
    --moe-router-topk-scaling-factor 2.5
    --moe-router-score-function sigmoid
    --moe-router-enable-expert-bias
    --moe-router-dtype fp32
    --q-lora-rank 1536
    --kv-lora-rank 512
    --qk-head-dim 128
    --qk-pos-emb-head-dim 64
    --v-head-dim 128
    --mtp-num-layers 1
    --mtp-loss-scaling-factor 0.1
    --tokenizer-type NullTokenizer
    --vocab-size 129280
    --bf16
)

if [ "${USE_MEGATRON_FSDP}" = 1 ]; then
    PRETRAIN_ARGS=(
        "${PRETRAIN_ARGS[@]}"
        --use-megatron-fsdp
        --data-parallel-sharding-strategy optim_grads_params
    )
fi

torchrun --nproc-per-node 8 --nnodes 128 pretrain_gpt.py "${PRETRAIN_ARGS[@]}"
