"""What Megatron-LM's rules read (``RuleInputs``: the letters of every plan of a grid) and the shape of
a rule (``Rule``); the rule table itself is ``planner.space.rules.RULES``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from types import SimpleNamespace

import numpy as np

from planner.hardware.spec import HardwareSpec
from planner.models.pipeline_layout import PipelineLayout
from planner.models.spec import ModelSpec
from planner.plan import (
    DISPATCHER_CODES,
    RECOMPUTE_BY_CODE,
    RECOMPUTE_CODES,
    PlanOptions,
    Recompute,
    TokenDispatcher,
    TrainingSpec,
    num_microbatches,
)
from planner.space.graph_rules import graph_breaches, plan_graph_breach
from planner.space.grid import PlanGrid, StageLayers, stage_layers


# arrays: no ==, hash or repr (generating them costs every process's import; numpy arrays have none to give)
@dataclass(frozen=True, eq=False, repr=False)
class RuleInputs:
    """The letters the rules read, over every plan of a grid."""

    grid: PlanGrid
    model: ModelSpec
    training: TrainingSpec
    options: PlanOptions
    num_gpus: int
    hardware: HardwareSpec | None = None  # the cluster (rules of the GPU or its NVLink domain); None: none bind

    @cached_property
    def layers(self) -> StageLayers:
        g = self.grid
        return stage_layers(self.model.num_layers, g.pp, g.split, g.first_layers, g.last_layers)

    def layout_problems(self, i: int) -> list[str]:
        """What Megatron-LM rejects in plan i's --pipeline-model-parallel-layout (empty: none given or fine)."""
        g, mo = self.grid, self.model
        text = g.layout_text(i)
        return [] if text is None else PipelineLayout.parse(text).problems(int(g.pp[i]), mo.num_layers, mo.mtp_layers)

    @property
    def has_layout(self) -> np.ndarray:
        return self.grid.layout >= 0

    def layout_ok(self) -> np.ndarray:
        """Per plan, whether its layout (if any) passes Megatron-LM's checks: once per distinct (layout, pp)."""
        g, mo = self.grid, self.model
        if not len(g.layouts) or not len(g):
            return np.ones(len(g), dtype=bool)
        span = int(np.max(g.pp)) + 1
        key = (g.layout.astype(np.int64) + 1) * span + g.pp  # below (len(layouts) + 1)·span: a table, no sort
        present = np.zeros((len(g.layouts) + 1) * span, dtype=bool)
        present[key] = True
        ok = np.zeros(len(present), dtype=bool)
        for k in np.flatnonzero(present).tolist():
            ok[k] = k // span == 0 or not PipelineLayout.parse(g.layouts[k // span - 1]).problems(
                k % span, mo.num_layers, mo.mtp_layers
            )
        return ok[key]

    @cached_property
    def m(self) -> np.ndarray:
        g = self.grid
        return num_microbatches(self.training.global_batch, g.micro_batch, g.dp)

    @property
    def explicit(self) -> np.ndarray:
        return (self.grid.first_layers > 0) | (self.grid.last_layers > 0)

    def everywhere(self, value: bool) -> np.ndarray:
        """``value`` for every plan: one read-only array per value, made when first asked (most rules hold
        everywhere unless an option or the model binds them: one array for all of them)."""
        name = "_everywhere_true" if value else "_everywhere_false"
        out = self.__dict__.get(name)
        if out is None:
            out = self.__dict__[name] = np.full(len(self.grid), bool(value))
            out.setflags(write=False)
        return out

    def one(self, i: int = 0) -> SimpleNamespace:
        """Plan i's letters as Python numbers, for a rule's message."""
        g, mo, tr = self.grid, self.model, self.training
        return SimpleNamespace(
            t=int(g.tp[i]),
            p=int(g.pp[i]),
            d=int(g.dp[i]),
            c=int(g.cp[i]),
            v=int(g.vpp[i]),
            b=int(g.micro_batch[i]),
            ep=int(g.ep[i]),
            etp=int(g.etp[i]),
            m=float(self.m[i]),
            G=int(g.mb_group[i] or g.pp[i]),
            R=int(g.do_instances[i]),
            edp=int(g.tp[i]) * int(g.dp[i]) * int(g.cp[i]) // (int(g.etp[i]) * int(g.ep[i])),  # Python ints: no wrap
            N=self.num_gpus,
            s=tr.seq_len,
            B=tr.global_batch,
            a=mo.num_attention_heads,
            g=mo.query_groups,
            f=mo.ffn,
            L=mo.num_layers,
            E=mo.num_experts,
            f_e=mo.expert_ffn,
            explicit=bool(self.explicit[i]),
            split=int(g.split[i]),
            first=int(g.first_layers[i]),
            last=int(g.last_layers[i]),
            middle=int(self.layers.middle[i]),
            max_pos=mo.max_position_embeddings,
            offload=self.options.cpu_offloading_num_layers,
            bf16_ends=self.options.bf16_end_layers,
            recompute=int(g.recompute[i]),
            recompute_name=RECOMPUTE_BY_CODE[int(g.recompute[i])].value,
            layout=self.grid.layout_text(i),
            layout_problems="; ".join(self.layout_problems(i)),
            dispatcher=int(self.grid.dispatcher[i]),
            mtp=mo.mtp_layers,
            hardware=self.hardware,
            flex_backend=self.options.moe_flex_dispatcher_backend.value,
            graph_breach=plan_graph_breach(
                graph_breaches(self.options, mo),
                selective=int(g.recompute[i]) == RECOMPUTE_CODES[Recompute.SELECTIVE],
                a2a=bool(g.a2a_overlap[i]),
                alltoall=int(g.dispatcher[i]) == DISPATCHER_CODES[TokenDispatcher.ALLTOALL],
            ),
        )


@dataclass(frozen=True)
class Rule:
    """A Megatron-LM rule: ``holds`` masks a grid, ``message`` explains plan i's breach."""

    name: str
    holds: Callable[[RuleInputs], np.ndarray]
    message: Callable[[SimpleNamespace], str]
