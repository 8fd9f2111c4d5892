"""The Slurm export of a months-long run checkpoints about hourly at the estimated step time and saves before the
job's time limit (audit17: it wrote --save-interval 1000 whatever the step, about 2 h for a 34B model, and nothing
saved before the limit killed the job)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from planner.api import explain_plan, make_request
from planner.megatron.export import SAVE_MARGIN_MINS, save_interval, slurm_script
from planner.megatron.importer import import_megatron


def test_save_interval_by_hand():
    # round(3,600 s / 158 s) = round(22.78) = 23 iterations; a 0.37 s step: round(9,730) = 9,730; at least 1
    assert save_interval(158.0) == 23
    assert save_interval(0.37) == 9730
    assert save_interval(7200.0) == 1
    assert save_interval(None) == 1000  # Megatron-LM's examples' value without an estimate


def _script():
    req = make_request(
        model="llama3-8b", hardware="dgx-h100-superpod", gpus=16, tp=2, pp=1, micro_batch=1, distributed_optimizer=True
    )
    est = explain_plan(req, None).plan_json["estimate"]
    return req, est["iteration_s"], slurm_script(req, iteration_s=est["iteration_s"])


def test_the_script_spaces_checkpoints_by_the_estimate_and_exits_before_the_limit():
    req, it_s, text = _script()
    assert f"SAVE_INTERVAL=${{SAVE_INTERVAL:-{save_interval(it_s)}}}" in text
    assert '--save-interval "$SAVE_INTERVAL"' in text
    assert f"${{SAVE_MARGIN_MINS:-{SAVE_MARGIN_MINS}}}" in text and "SLURM_JOB_END_TIME" in text
    assert '${EXIT_ARGS[@]+"${EXIT_ARGS[@]}"}' in text  # empty under set -u on bash < 4.4 too
    # read back: the same plan, the new variables neither refused nor priced
    back = import_megatron(text, hardware=req.ctx.hardware, model="llama3-8b")
    assert back.request.plan == req.plan


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_exit_minutes_come_from_slurms_end_time():
    """Two hours left and the 15-minute margin: (7,200 s / 60) − 15 = 105 minutes (bash's integer division)."""
    _, _, text = _script()
    block = text[text.index('if [[ -z "${EXIT_DURATION_MINS') : text.index("MASTER_ADDR=")]
    run = f'set -euo pipefail\nSLURM_JOB_END_TIME=$(( $(date +%s) + 7200 ))\n{block}\necho "${{EXIT_ARGS[@]}}"\n'
    out = subprocess.run(["bash", "-c", run], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "--exit-duration-in-mins" and int(out[1]) in (104, 105)
    # without Slurm's end time and without EXIT_DURATION_MINS: no flag at all
    run = f'set -euo pipefail\n{block}\necho "n=${{#EXIT_ARGS[@]}}"\n'
    assert subprocess.run(["bash", "-c", run], capture_output=True, text=True, check=True).stdout.strip() == "n=0"
