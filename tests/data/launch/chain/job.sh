#!/bin/bash
#SBATCH -t 1:00:00 --exclusive --ntasks-per-node=8
CMD="python -u pretrain_gpt.py ${RUN_PARAMS}"
srun -l sh -c "${CMD}"
