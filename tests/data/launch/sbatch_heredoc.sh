#!/bin/bash
# The job script is a here-document fed to sbatch, its launch run through bash -x -c. Written for
# megaplan's tests.
NUM_NODES=${NUM_NODES:-"<how many nodes>"}
TRAIN="cd /work; python pretrain_gpt.py --num-layers 8 --hidden-size 1024 --num-attention-heads 8 \
  --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 256 --bf16 \
  --use-distributed-optimizer"
sbatch <<EOF
#!/bin/bash
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
srun bash -x -c "${TRAIN}"
EOF
