#!/bin/bash
#SBATCH <your cluster's options> --nodes=16 --exclusive --ntasks-per-node=8
# A 2021-style job: the options in a quoted string with <...> placeholders inside, forwarded "$@",
# and the command run through srun ... sh -c. Written for megaplan's tests.

HERE=`pwd`
opts=" --num-layers 48 \
    --hidden-size 6144 \
    --num-attention-heads 48 \
    --seq-length 2048 \
    --max-position-embeddings 2048 \
    --micro-batch-size 1 \
    --global-batch-size 512 \
    --tensor-model-parallel-size 8 \
    --pipeline-model-parallel-size 4 \
    --save <CHECKPOINT FOLDER> \
    --data-path <THE CORPUS PREFIX> \
    --vocab-file <GPT-2 VOCABULARY> \
    --merge-file <GPT-2 MERGES> \
    --activations-checkpoint-method uniform \
    --fp16"

launch="python -u ${HERE}/pretrain_gpt.py $@ ${opts}"
srun -l --container-image "some/image:tag" sh -c "${launch}"
set +x
