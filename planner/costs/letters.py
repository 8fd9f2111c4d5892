"""The adapter: a plan grid and its context unpacked into the papers' letters.

Every array is shaped (N, 1) so it broadcasts against a (N, S) array of pipeline-stage indices.
"""

from __future__ import annotations

import numpy as np

from planner.costs import memory
from planner.models.params import padded_vocab
from planner.plan import AttentionKernel, Context, num_microbatches
from planner.space.grid import PlanGrid, stage_layers


def _col(x: np.ndarray) -> np.ndarray:
    return np.asarray(x)[:, None]


class Letters:
    """t, p, d, c, b, s, h, a, g, d_h, f, L, V, m ... of every plan of a grid."""

    def __init__(self, grid: PlanGrid, ctx: Context):
        mo, tr = ctx.model, ctx.training
        self.t, self.p, self.d, self.c = _col(grid.tp), _col(grid.pp), _col(grid.dp), _col(grid.cp)
        self.ep, self.etp, self.fsdp = _col(grid.ep), _col(grid.etp), _col(grid.fsdp)
        self.vpp, self.b = _col(grid.vpp), _col(grid.micro_batch)
        self.sp, self.rc, self.dopt = (
            _col(grid.sequence_parallel),
            _col(grid.recompute),
            _col(grid.distributed_optimizer),
        )
        self.rblock, self.rlayers = _col(grid.recompute_block), _col(grid.recompute_layers)
        self.s, self.B = tr.seq_len, tr.global_batch
        self.h, self.a, self.g, self.dh, self.f = (
            mo.hidden_size,
            mo.num_attention_heads,
            mo.query_groups,
            mo.head_dim,
            mo.ffn,
        )
        self.L = mo.num_layers
        self.V = padded_vocab(mo.vocab_size, mo.make_vocab_size_divisible_by, self.t)
        self.m = num_microbatches(self.B, self.b, self.d)
        self.world = self.t * self.c * self.p * self.d
        self.edp = self.world / (self.etp * self.ep * self.p)  # expert data-parallel size
        self.layers = stage_layers(self.L, self.p, _col(grid.split), _col(grid.first_layers), _col(grid.last_layers))
        self.gated, self.dropout, self.attn_dropout = mo.swiglu, mo.hidden_dropout > 0, mo.attention_dropout > 0
        self.unfused = ctx.options.attention_kernel is AttentionKernel.UNFUSED
        self.fp8 = ctx.options.fp8 is not None
        self.act_bytes = memory.ACTIVATION_BYTES[ctx.precision]
        self.moe_frac = mo.num_moe_layers / mo.num_layers  # share of each stage's layers that are MoE
        self.E, self.k, self.f_e = mo.num_experts or 0, mo.moe_router_topk, mo.expert_ffn

    def stage_info(self, i: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(layers on stage i, is first stage, is last stage)."""
        first, last = i == 0, i == self.p - 1
        n = np.where(first, self.layers.first, np.where(last, self.layers.last, self.layers.middle))
        return n, first, last

    def recomputed_layers(self, n: np.ndarray) -> np.ndarray:
        """Layers of a stage of n layers that full recomputation re-runs: all of them with
        --recompute-method uniform, the first --recompute-num-layers of each of its vpp model chunks
        with block (megatron/core/recompute.py; each chunk is its own TransformerBlock)."""
        chunk = n / self.vpp
        block = self.vpp * np.minimum(self.rlayers, chunk)
        return np.where(self.rc == 2, np.where(self.rblock, block, n), 0.0)

    def tokens_per_gpu(self) -> np.ndarray:
        """T: tokens of one micro-batch on one GPU after the sequence is split over c (and t with SP)."""
        return self.b * self.s / (self.c * np.where(self.sp, self.t, 1))
