"""The terms the cost functions leave out for a model that has none of what they cost are exactly 0 s:
a model without experts holds no expert parameters on any stage (``estimate``'s data-parallel terms skip
their expert half), and each data-parallel collective of 0 bytes takes 0 s; a model without MoE, sliding-window
or MTP layers has none on any stage (``layer_time.stage_terms`` skips those kinds of layer)."""

import functools

import numpy as np
import pytest

from planner.api import make_request
from planner.costs import communication as comm
from planner.costs.estimate import group_links
from planner.costs.letters import Letters
from planner.costs.stage_memory import stage_params
from planner.hardware.collectives import all_gather_time_s, all_reduce_time_s, reduce_scatter_time_s
from planner.space.candidates import Pins, candidate_grid

DENSE = [("gpt3-175b", 64, "dgx-a100-superpod"), ("llama3-70b", 128, "dgx-h100-superpod")]


@functools.cache
def _letters(model: str, gpus: int, hardware: str):
    ctx = make_request(model=model, gpus=gpus, hardware=hardware).ctx
    return ctx, Letters(candidate_grid(ctx, gpus, Pins()), ctx)


@pytest.mark.parametrize("case", DENSE, ids=[c[0] for c in DENSE])
def test_a_model_without_experts_holds_no_expert_parameters_or_moe_window_mtp_layers(case):
    ctx, lt = _letters(*case)
    assert not ctx.model.is_moe and ctx.model.window is None and not ctx.model.mtp_layers
    assert len(lt.t) > 1000  # a real search grid
    st = lt.stage(lt.type_index)
    for kind in ("moe", "window", "mtp"):
        assert not np.any(st[kind]), kind
    assert np.any(st["dense"] > 0)
    params = stage_params(lt, ctx, lt.type_index)
    assert not np.any(params["expert"]) and np.all(params["dense"] > 0)
    assert set(group_links(lt, ctx)) == {"instance", "across"}  # no expert groups' links computed


def test_each_data_parallel_collective_of_no_bytes_takes_no_time():
    ctx, lt = _letters(*DENSE[0])
    link = group_links(lt, ctx)["instance"]
    n, R, zero = lt.N, lt.R + 1, np.zeros_like(lt.N, dtype=float)
    assert np.any(lt.N > 1)  # groups whose nonzero messages would pay latency
    for fn in (all_gather_time_s, all_reduce_time_s, reduce_scatter_time_s):
        assert np.all(fn(n, zero, link) == 0.0), fn.__name__
    for sharp in (False, True):
        kw = dict(grad_bytes=4, in_network=sharp)
        assert np.all(comm.dp_grad_reduce_time_s(zero, n, link, distributed_optimizer=lt.dopt, **kw) == 0.0)
        assert np.all(comm.hierarchical_grad_reduce_time_s(zero, n, R, link, link, **kw) == 0.0)
        assert np.all(comm.dp_param_gather_time_s(zero, n, link, param_bytes=2, in_network=sharp) == 0.0)
    for outer in (False, True):
        g, w = comm.hsdp_outer_layer_s(zero, zero, n, R, link, grads_sharded=True, outer_optim=outer)
        assert np.all(g == 0.0) and np.all(w == 0.0)
