#!/bin/bash
# A Megatron-DeepSpeed job in the style of its examples: a DeepSpeed JSON written by the script,
# ZeRO and DeepSpeed flags prepended to an option string, grouped-query attention through
# --num-key-value-heads and a lower-case --normalization. Written for megaplan's tests.
set -ex

MICRO=2
GLOBAL=64
ZERO=1
CFG=./ds_settings.json

cat <<EOT > $CFG
{
  "train_batch_size" : $GLOBAL,
  "train_micro_batch_size_per_gpu": $MICRO,
  "zero_optimization": {
    "stage": $ZERO
  },
  "bf16": {"enabled": true}
}
EOT

extra=""
extra=" --deepspeed ${extra}"
extra=" --deepspeed_config=$CFG ${extra}"
extra=" --zero-stage=$ZERO ${extra}"
extra=" --deepspeed-activation-checkpointing ${extra}"

deepspeed --num_gpus 8 pretrain_gpt.py \
    --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 1 \
    --num-layers 16 \
    --hidden-size 2048 \
    --num-attention-heads 16 \
    --num-key-value-heads 4 \
    --ffn-hidden-size 5504 \
    --seq-length 2048 \
    --max-position-embeddings 2048 \
    --micro-batch-size $MICRO \
    --global-batch-size $GLOBAL \
    --tokenizer-type GPTSentencePieceTokenizer \
    --tokenizer-model /checkpoints/llama-2-7b/tokenizer.model \
    --normalization rmsnorm \
    --swiglu \
    --bf16 \
    --checkpoint-activations \
    --log-batch-size-to-tensorboard \
    $extra
