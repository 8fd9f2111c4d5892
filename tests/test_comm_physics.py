"""Communication and FP8 physics of today's Megatron-LM, each term by hand: the synchronous SP
backward all-gather (--tp-comm-overlap: test_tp_overlap.py), gradient buckets under
interleaving, interleaved sends, the context-parallel ring against its attention steps, FP8 casts."""

from __future__ import annotations

import numpy as np
import pytest

from planner import api
from planner.costs import compute
from planner.costs.blocks import attention_core_s
from planner.costs.communication import ddp_bucket_params, dp_exposed_s, pp_interleaved_exposed_s, tp_pair_exposed_s
from planner.costs.estimate import evaluate
from planner.costs.letters import Letters
from planner.fidelity.validate import on_hardware
from planner.presets import load_hardware
from planner.space.grid import PlanGrid

AG, RS, AR = 3e-3, 3e-3, 6e-3  # seconds: a collective's time, made up for the hand computations
G_IN, G_OUT = 2e-3, 1e-3


def pair(sp, *, async_backward=True):
    g = {"in": np.array(G_IN), "out": np.array(G_OUT)}
    f, b = tp_pair_exposed_s(
        AG, RS, AR, g, sequence_parallel=np.array(sp), async_backward=async_backward, overlap=False
    )
    return float(f), float(b)


def test_without_sp_the_forward_all_reduce_is_exposed_and_the_backward_hides_behind_wgrad():
    # forward: AR after the row-parallel GEMM; backward: the column-parallel dgrad's AR beyond its wgrad
    assert pair(False) == pytest.approx((AR, AR - G_IN))
    assert pair(False, async_backward=False) == pytest.approx((AR, AR))  # the 2021 code


def test_sp_backward_all_gather_of_the_output_gradient_is_charged_in_full():
    # Megatron mappings.py _ReduceScatterToSequenceParallelRegion.backward: a synchronous all-gather;
    # the input all-gather overlaps dgrad (2 ms), the dgrad reduce-scatter overlaps wgrad (2 ms)
    fwd, bwd = pair(True)
    assert fwd == pytest.approx(AG + RS)
    assert bwd == pytest.approx(AG + (AG - G_IN) + (RS - G_IN))


def test_megatron_default_bucket_size():
    # training.py resolve_ddp_bucket_size: max(40M, 1M × dp·cp) parameters
    np.testing.assert_array_equal(ddp_bucket_params(np.array([8, 40, 64, 512])), [40e6, 40e6, 64e6, 512e6])


def test_last_bucket_of_stage_zero_is_never_hidden():
    # v = 1, stage 0: buckets leave during the last backward (1 s); 4 buckets of 0.1 s: only the last shows
    assert float(dp_exposed_s(0.4, 0.1, 0, 4, 1, 1.0, overlap=True)) == pytest.approx(0.1)
    # a reduction longer than the backward: everything beyond (K − 1)/K of the backward is exposed
    assert float(dp_exposed_s(4.0, 1.0, 0, 4, 1, 1.0, overlap=True)) == pytest.approx(4.0 - 0.75)
    # stage 2 of 4: one bucket, launched after its own last backward, 2 steps before stage 0 ends
    assert float(dp_exposed_s(4.0, 4.0, 2, 4, 1, 1.0, overlap=True)) == pytest.approx(4.0 - 2.0)
    # without --overlap-grad-reduce stage 0 waits for all of it
    assert float(dp_exposed_s(0.4, 0.1, 0, 4, 1, 1.0, overlap=False)) == pytest.approx(0.4)


def test_interleaved_chunks_reduce_as_their_last_backward_ends():
    # p = 4, v = 3, chunk-step 0.1 s, stage 1, 3 s of reduction (1 s per chunk): chunk 2 is ready
    # 2·4 steps before the end, chunk 1 4 steps before, chunk 0 (this stage's) 1 step before
    sync, tau, p, v, i = 3.0, 0.1, 4, 3, 1
    expected = max(1.0 - i * tau, 2 * 1.0 - p * tau, 3.0 - (v - 1) * p * tau)
    assert float(dp_exposed_s(sync, sync / v, i, p, v, tau, overlap=True)) == pytest.approx(expected)
    # reductions far shorter than a chunk-step hide, but for stage 0's last bucket
    assert float(dp_exposed_s(0.03, 0.001, 0, p, v, tau, overlap=True)) == pytest.approx(0.001)


def test_interleaved_sends_show_beyond_a_chunk_step():
    # m = 8, v = 2: 16 forward and 16 backward chunk-steps of 2 and 4 ms; a 3 ms send shows 1 ms each forward
    assert float(pp_interleaved_exposed_s(3e-3, 8, 2, 2e-3, 4e-3)) == pytest.approx(16 * 1e-3)
    assert float(pp_interleaved_exposed_s(1e-3, 8, 2, 2e-3, 4e-3)) == 0.0


def _letters(**kw):
    req = api.make_request(model="llama3-8b", hardware="dgx-h100-superpod", **kw)
    return Letters(PlanGrid.from_plans([req.plan]), req.ctx), req


def test_context_parallel_steps_add_up_to_the_causal_attention():
    # c = 4: one causal step over the rank's own s/c, and 3 unmasked steps of s/c × s/(2c): s²/(2c) pairs
    s, c = 32768, 4
    own = compute.flash_attention_flops(1, s / c, s / c, 128, 128, causal=True)[0]
    step = compute.flash_attention_flops(1, s / c, s / (2 * c), 128, 128, causal=False)[0]
    whole = compute.flash_attention_flops(1, s, s, 128, 128, causal=True)[0]
    assert float(own + (c - 1) * step) == pytest.approx(float(whole) / c)
    lt, req = _letters(gpus=8, tp=2, cp=c, sequence_parallel=True, seq_len=s, global_batch=8)
    core = attention_core_s(lt, req.ctx, {}, np.zeros((1, 1)), 128, 128)
    assert core["fwd"].item() > 3 * core["step_fwd"].item()  # the causal step plus three unmasked ones


def test_context_parallel_ring_shows_only_beyond_the_attention_step():
    # across two nodes the ring hop runs at one 400 Gb/s NIC; at 8k each step's attention is too short to hide it
    # (a preset that charges no SMs to hidden collectives: tests/test_fabric.py prices those)
    kw = dict(tp=8, sequence_parallel=True, global_batch=8)
    hw = load_hardware("dgx-h100-superpod")
    hw = hw.model_copy(update={"network": hw.network.model_copy(update={"nccl_sms": None, "nccl_p2p_sms": None})})
    near = _letters(gpus=16, cp=2, seq_len=131072, **kw)[1]
    short = _letters(gpus=16, cp=2, seq_len=8192, **kw)[1]
    near, short = on_hardware(near, hw), on_hardware(short, hw)
    cp_long = evaluate(PlanGrid.from_plans([near.plan]), near.ctx).time["cp_comm"][0]
    cp_short = evaluate(PlanGrid.from_plans([short.plan]), short.ctx).time["cp_comm"][0]
    assert float(cp_long) == 0.0 and float(cp_short) > 0.0


@pytest.mark.parametrize(
    "recipe, hopper, blackwell",
    [("delayed", 4.0, 3.0), ("tensorwise", 6.0, 5.0), ("mxfp8", 4.0625, 4.0625), ("blockwise", 4.0625, 4.0625)],
)
def test_fp8_cast_bytes_per_element_by_recipe(recipe, hopper, blackwell):
    # read 16 bits; write the row-wise FP8 copy and (Hopper) its transpose; current scaling reads twice
    assert compute.fp8_cast_bytes_per_element(recipe, one_copy_serves_both=False) == pytest.approx(hopper)
    assert compute.fp8_cast_bytes_per_element(recipe, one_copy_serves_both=True) == pytest.approx(blackwell)
    assert compute.fp8_cast_bytes_per_element(recipe, one_copy_serves_both=True, fused=True) == pytest.approx(
        blackwell - 2
    )


def test_mxfp8_needs_blackwell():
    from planner.errors import PlannerError

    with pytest.raises(PlannerError, match="mxfp8 needs Blackwell"):
        api.make_request(
            model="llama3-8b", hardware="dgx-h100-superpod", gpus=8, options={"fp8": "hybrid", "fp8_recipe": "mxfp8"}
        )
    api.make_request(
        model="llama3-8b", hardware="gb200-nvl72", gpus=8, options={"fp8": "hybrid", "fp8_recipe": "mxfp8"}
    )


def _iteration(**options):
    req = api.make_request(
        model="llama3-8b", hardware="dgx-h100-superpod", gpus=8, tp=2, sequence_parallel=True, options=options
    )
    return float(evaluate(PlanGrid.from_plans([req.plan]), req.ctx).iteration_s[0])


def test_current_scaling_costs_more_than_delayed_and_cuda_graphs_remove_launch_gaps():
    delayed = _iteration(fp8="hybrid", fp8_recipe="delayed")
    current = _iteration(fp8="hybrid", fp8_recipe="tensorwise")
    assert current > delayed  # one more read of every cast tensor
    assert _iteration(cuda_graph_impl="transformer_engine") < _iteration()
