#!/bin/bash
# Arrays of options, a schedule of batch sizes, and shell the reader must not trip on: a while loop
# with do on the next line, a C-style for, ?: arithmetic, a here-string and an empty optional option
# string. Written for megaplan's tests.
while [ $# -gt 0 ]
do
    case $1 in
        --nodes) NODES=$2; shift 2;;
        *) shift;;
    esac
done
NODES=${NODES:-4}
for (( k = 0; k < NODES; k++ )); do echo "node $k"; done
WIDEST=$(( NODES > 2 ? NODES : 2 ))

NET=(
    --num-layers 24
    --hidden-size 2048
    --num-attention-heads 16
    --seq-length 4096
    --max-position-embeddings 4096
    --tokenizer-type HuggingFaceTokenizer
    --tokenizer-model meta-llama/Meta-Llama-3-8B
)
BATCH=(
    --micro-batch-size 1
    --step-batch-size-schedule "0:32 1B:64 2B:128"
)
PAR=(--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --sequence-parallel)
if grep -q sequence-parallel <<< "${PAR[@]}"; then echo "with SP"; fi
if [ "$USE_OVERLAP" = 1 ]; then OVERLAP="--overlap-grad-reduce"; fi

torchrun --nproc_per_node 8 --nnodes $WIDEST pretrain_gpt.py ${NET[@]} ${PAR[@]} ${OVERLAP} "${BATCH[@]}" --bf16
