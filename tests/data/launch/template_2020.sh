#! /bin/bash
# A fill-in template in the style of Megatron-LM's 2020 examples: <...> placeholders left for the user,
# the 2020 flags (--batch-size, --model-parallel-size, --checkpoint-activations) and launcher options
# kept in an unquoted string. Written for megaplan's tests.

GPUS_PER_NODE=4
NNODES=2
WORLD_SIZE=$(($GPUS_PER_NODE*$NNODES))
LAUNCH_OPTS="--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES --node_rank 0"

DATA=<path to the tokenized corpus>
SAVE_TO=<where checkpoints go>

python -m torch.distributed.launch $LAUNCH_OPTS \
       pretrain_gpt2.py \
       --model-parallel-size 2 \
       --num-layers 12 \
       --hidden-size 768 \
       --num-attention-heads 12 \
       --batch-size 4 \
       --seq-length 1024 \
       --max-position-embeddings 1024 \
       --train-iters 1000 \
       --save $SAVE_TO \
       --data-path $DATA \
       --vocab-file gpt2-vocab.json \
       --merge-file gpt2-merges.txt \
       --checkpoint-activations \
       --fp16
set +x
