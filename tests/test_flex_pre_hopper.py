"""sm80ep22: the flex dispatcher before Hopper (A100, compute capability 8.0).

DeepEP's A100 build is intranode only: DISABLE_SM90_FEATURES asserts NVSHMEM off and drops the internode and
low-latency kernels (DeepEP setup.py @ v1.2.1), and without NVSHMEM a buffer whose num_ranks / 8 > 1 is refused
(csrc/deep_ep.cpp @ v1.2.1, ``num_rdma_ranks == 1``; NUM_MAX_NVL_PEERS 8). The flex dispatcher's group is ETP × EP
(Megatron-LM token_dispatcher.py @ d98e8a64, tp_ep_group), so on a DGX A100 (8 GPUs per host) a flex plan runs
DeepEP only with etp·ep ≤ min(8, 8) = 8. HybridEP (cp.async.bulk, sm_90+) and NCCL EP (Transformer Engine: "NCCL
EP requires Hopper or newer") do not run there at all. Hopper and B200 keep every size (DeepEP's internode kernels
over NVSHMEM); GB200/GB300 keep their own rule (DeepEP refused, test_bgb19.py).
"""

from __future__ import annotations

import json

import pytest

from planner.api import make_request
from planner.presets import load_hardware
from planner.space import flex_backend
from planner.space.grid import PlanGrid
from planner.space.rules import rule_messages

from conftest import one_line_error, run_cli

A100 = "dgx-a100-superpod"
QWEN = ["--model", "qwen3-30b-a3b", "--gpus", "64", "--tp", "1", "--pp", "1", "--distributed-optimizer"]


def _broken(hardware: str, backend: str, ep: int, etp: int = 1, dispatcher: str = "flex") -> list[str]:
    req = make_request(
        model="qwen3-30b-a3b", hardware=hardware, gpus=64, ep=ep, etp=etp, micro_batch=1, distributed_optimizer=True,
        moe_token_dispatcher=dispatcher, options={"moe_flex_dispatcher_backend": backend},
    )  # fmt: skip
    c = req.ctx
    grid = PlanGrid.from_plans([req.plan])
    return rule_messages(grid, c.model, c.training, c.options, 64, hardware=c.hardware)


@pytest.mark.parametrize(
    ("hardware", "backend", "limit"),
    [
        (A100, "deepep", 8),  # one host of 8 GPUs, DeepEP's 8 NVLink peers: min(8, 8)
        (A100, "hybridep", 0),  # cp.async.bulk needs sm_90
        (A100, "ncclep", 0),  # Transformer Engine builds NCCL EP for sm_90 and up only
        ("dgx-a100-40gb-superpod", "deepep", 8),
        ("dgx-h100-superpod", "deepep", None),  # internode kernels over NVSHMEM: no limit
        ("dgx-h100-superpod", "hybridep", None),
        ("dgx-b200-superpod", "ncclep", None),
        ("gb200-nvl72", "deepep", 0),  # the multi-node NVLink domain's rule
        ("gb200-nvl72", "hybridep", None),
    ],
)
def test_the_flex_groups_each_library_can_serve(hardware, backend, limit):
    hw = load_hardware(hardware)
    assert flex_backend.flex_group_limit(hw, backend) == limit
    assert flex_backend.pre_hopper(hw) is (hw.gpu.compute_capability < 9.0)


@pytest.mark.parametrize(
    ("ep", "etp", "refused"),
    [
        (8, 1, False),  # 8 ranks: one host
        (4, 2, False),  # 8 ranks: one host
        (16, 1, True),  # 16 ranks: 2 hosts, DeepEP's A100 build has no RDMA ranks
        (8, 2, True),  # 16 ranks: the group is ETP × EP, not EP alone
        (2, 1, False),
    ],
)
def test_deepep_on_a100_only_within_one_host(ep, etp, refused):
    said = _broken(A100, "deepep", ep, etp)
    assert any(m.startswith(flex_backend.RULE) for m in said) is refused
    if refused:
        (line,) = [m for m in said if m.startswith(flex_backend.RULE)]
        assert f"etp·ep = {etp}·{ep} = {etp * ep} ranks, more than one host's 8" in line
        assert "allowed: etp·ep ≤ 8, or --moe-token-dispatcher alltoall" in line
    # the same sizes over the all-to-all dispatcher, and DeepEP's 16 ranks on H100 (2 hosts over RDMA): no breach
    assert not [m for m in _broken(A100, "deepep", ep, etp, "alltoall") if m.startswith(flex_backend.RULE)]
    assert not [m for m in _broken("dgx-h100-superpod", "deepep", ep, etp) if m.startswith(flex_backend.RULE)]


@pytest.mark.parametrize(("backend", "words"), [("hybridep", "cp.async.bulk"), ("ncclep", "NCCL EP requires Hopper")])
def test_hybridep_and_ncclep_never_on_a100(backend, words):
    (line,) = [m for m in _broken(A100, backend, 8) if m.startswith(flex_backend.RULE)]  # even within one host
    assert words in line and "compute capability 8.0" in line
    assert not [m for m in _broken("dgx-h100-superpod", backend, 8) if m.startswith(flex_backend.RULE)]


def test_explain_of_a_cross_host_deepep_plan_on_a100_is_one_line_naming_the_build():
    args = [*QWEN, "--ep", "16", "--moe-token-dispatcher", "flex", "--hardware", A100]
    line = one_line_error(run_cli(["explain", *args]))
    assert line.startswith(f"megaplan: error: this plan would not run: {flex_backend.RULE}: DeepEP on {A100}")
    assert "DISABLE_SM90_FEATURES" in line and "etp·ep ≤ 8" in line
    ok = run_cli(["explain", *QWEN, "--ep", "8", "--moe-token-dispatcher", "flex", "--hardware", A100, "--brief"])
    assert ok.exit_code == 0, ok.output
    assert "EP8 ETP1" in ok.output and "deepep" in ok.output


def test_a_megatron_lm_script_with_flex_across_a100_hosts_is_refused():
    """A launch script giving only --moe-token-dispatcher-type flex runs Megatron-LM's default backend, DeepEP: over
    EP 16 on DGX A100 it would stop at DeepEP's buffer assertion, so explain refuses it with the reason."""
    script = "--num-layers 48 --hidden-size 2048 --num-attention-heads 32 --seq-length 4096 "
    script += "--max-position-embeddings 40960 --micro-batch-size 1 --global-batch-size 1024 --bf16 --num-experts 128 "
    script += "--moe-router-topk 8 --moe-ffn-hidden-size 768 --expert-model-parallel-size 16 --swiglu "
    script += "--moe-token-dispatcher-type flex --vocab-size 151936 --tokenizer-type NullTokenizer "
    script += "--use-distributed-optimizer"
    line = one_line_error(run_cli(["explain", "--hardware", A100, "--gpus", "64", "--megatron-args", script]))
    assert f"{flex_backend.RULE}: DeepEP on {A100}" in line and "1·16 = 16 ranks" in line


def test_search_on_a100_ranks_no_flex_plan_beyond_one_host():
    """Before this rule the fastest estimate on 64 A100 was TP1 PP1 DP64 EP16 with DeepEP and the all-to-all
    overlap, a plan DeepEP's A100 build cannot start."""
    args = ["search", "--model", "qwen3-30b-a3b", "--gpus", "64", "--hardware", A100, "--rank-by", "estimate"]
    result = run_cli([*args, "--moe-token-dispatcher", "flex", "--top", "400", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["plans"]
    assert len(rows) == 400
    assert {row["parallel"]["moe_token_dispatcher"] for row in rows} == {"flex"}
    assert max(row["parallel"]["etp"] * row["parallel"]["ep"] for row in rows) == 8
    assert {row["options"]["moe_flex_dispatcher_backend"] for row in rows} == {"deepep"}


def test_a_backend_that_runs_no_plan_on_the_cluster_is_said_ignored_not_searched_as_well():
    args = ["search", "--model", "qwen3-30b-a3b", "--gpus", "64", "--top", "1", "--json"]
    a100 = run_cli([*args, "--hardware", A100, "--moe-flex-dispatcher-backend", "hybridep"])
    assert a100.exit_code == 0, a100.output
    (note,) = [line for line in a100.stderr.splitlines() if "--moe-flex-dispatcher-backend" in line]
    assert note.startswith("megaplan: note: --moe-flex-dispatcher-backend ignored: no plan can run the flex")
    assert "HybridEP on dgx-a100-superpod" in note and "searched as well" not in note
    gb200 = run_cli([*args, "--hardware", "gb200-nvl72", "--moe-flex-dispatcher-backend", "deepep"])
    assert "--moe-flex-dispatcher-backend ignored: no plan can run the flex dispatcher with it: DeepEP on gb200" in (
        gb200.stderr
    )
    # DeepEP on A100 runs the plans within one host: those plans and the others are searched, as before
    deepep = run_cli([*args, "--hardware", A100, "--moe-flex-dispatcher-backend", "deepep"])
    assert "--moe-flex-dispatcher-backend deepep applies only to plans with --moe-token-dispatcher flex" in (
        deepep.stderr
    )
    # pinned, the search is refused with the reason (not said ignored as well)
    flex = ["--moe-flex-dispatcher-backend", "ncclep", "--moe-token-dispatcher", "flex"]
    pinned = one_line_error(run_cli([*args, "--hardware", A100, *flex]))
    assert f"rejected by: {flex_backend.RULE}" in pinned and "NCCL EP on dgx-a100-superpod" in pinned
