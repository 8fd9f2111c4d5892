#!/bin/bash
# Chooses a size, then reads the shared settings and submits the job: the three-file layout of the
# SC21 paper scripts (sizes here, flags in settings.sh, submission in submit.sh, launch in job.sh).
SIZE=small

if [ ${SIZE} == "small" ]; then
    TP=2
    PP=2
    LAYERS=16
    HIDDEN=2048
    HEADS=16
    NODES=2
elif [ ${SIZE} == "large" ]; then
    TP=8
    PP=4
    LAYERS=64
    HIDDEN=8192
    HEADS=64
    NODES=16
else
    echo "unknown size ${SIZE}"
    exit 1
fi

. `pwd`/settings.sh
. `pwd`/submit.sh
exit 0
