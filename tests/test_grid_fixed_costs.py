"""What every grid pays once (validate evaluates ~200 grids of one plan each): the userbuffer settings of a grid
whose plans all run one config, and the tensor-parallel collectives the attention and MLP pairs share, each
computed once, with the values the general path gives."""

from __future__ import annotations

import numpy as np

from planner import api
from planner.costs import linears
from planner.costs.letters import Letters
from planner.hardware import userbuffers
from planner.space.grid import PlanGrid


def _bridge_configs(t: np.ndarray, b: np.ndarray):
    user = userbuffers.UbConfig(name=userbuffers.BRIDGE)
    return userbuffers.plan_configs(user, 9.0, False, 12288, 2048, t, b)


def test_one_config_for_every_plan_gives_what_choosing_among_the_configs_gives():
    t, b = np.array([[8], [8], [4]]), np.array([[1], [2], [1]])
    configs, index = _bridge_configs(t, b)
    assert len(configs) > 2 and len(set(index.ravel().tolist())) > 1  # several configs, more than one in use
    mixed = userbuffers.plan_ops(configs, index, t)
    for j in set(index.ravel().tolist()):
        rows = np.flatnonzero(index.ravel() == j)
        alone = userbuffers.plan_ops(configs, index[rows], t[rows])  # every plan on config j: j's own fields
        for name, fields in alone.items():
            for k, v in fields.items():
                assert v.dtype == mixed[name][k].dtype and v.shape == (len(rows), 1)
                assert np.array_equal(v, mixed[name][k][rows]), (name, k)


def test_the_pairs_of_a_grid_share_their_collectives_computed_once():
    req = api.make_request(model="gpt3-175b", gpus=1024, tp=8, pp=16, sequence_parallel=True)
    lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
    first = linears.tp_pair_collectives(lt, req.ctx, lt.h)
    assert linears.tp_pair_collectives(lt, req.ctx, lt.h) is first  # the MLP's pair reads the attention's
    msg, ub_comm, (ag, rs, ar) = first
    assert float(msg[0, 0]) == 2 * 1 * 2048 * 12288  # ε·b·s·h/c: bf16, micro-batch 1, s 2048, h 12288
    assert float(ag[0, 0]) > 0 and float(rs[0, 0]) > 0 and float(ar[0, 0]) > float(rs[0, 0])
    wider = linears.tp_pair_collectives(lt, req.ctx, 2 * lt.h)  # another width: computed for it
    assert float(wider[0][0, 0]) == float(msg[0, 0]) and float(wider[1][0][0, 0]) > float(ub_comm[0][0, 0])
