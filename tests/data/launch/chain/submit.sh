#!/bin/bash
sbatch -p ${PARTITION} --nodes=${NODES} --export=RUN_PARAMS job.sh
exit 0
