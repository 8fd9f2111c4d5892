"""One iteration's pipeline schedule, simulated operation by operation: what each stage does when.

Megatron-LM's two training schedules (megatron/core/pipeline_parallel/schedules.py):

- **1F1B** (``forward_backward_pipelining_without_interleaving``): rank i runs min(p − i − 1, m)
  warm-up forwards, then alternates one forward and one backward, then drains the remaining
  backwards (Narayanan et al. 2021 §2.2.1, Figure 3).
- **Interleaved** (``forward_backward_pipelining_with_interleaving``): each rank holds vpp model
  chunks; virtual stage v = chunk·p + stage. Forwards walk the m·vpp (micro-batch, chunk) pairs in
  groups of p micro-batches (the default ``microbatch_group_size_per_vp_stage`` = p): the k-th
  forward runs chunk (k mod p·vpp) // p on micro-batch (k // (p·vpp))·p + k mod p, backwards the
  chunks in reverse. Rank i runs 2(p − i − 1) + (vpp − 1)·p warm-up forwards, then the 1F1B
  steady state, then the cool-down (Narayanan et al. 2021 §2.2.2, Figure 4).

Each operation starts when its stage is free and its input has arrived: the forward of virtual
stage v after the forward of v − 1 plus one p2p transfer, the backward of v after the backward of
v + 1 plus one transfer (the last virtual stage's backward right after its own forward). A chunk
takes 1/vpp of its stage's per-micro-batch time (``planner.costs.estimate.evaluate(..., stages=True)``).
Transfers block the sender for their duration under 1F1B and under the interleaved schedule
without ``--overlap-p2p-comm`` (Megatron waits on the batched isend/irecv before computing on); with
the overlap they only delay the receiver.

How the makespan relates to the estimate's closed form (forward + backward + recompute + tp_comm +
bubble + pp_comm): with equal stages of t_f + t_b per micro-batch and no transfer time both give
(m + p − 1)(t_f + t_b) for 1F1B and m(t_f + t_b) + (p − 1)(t_f + t_b)/vpp interleaved (Narayanan
et al. 2021 §2.2). With blocking transfers of c the closed form charges 2(m + p − 1)·c, a cycle of
t_f + c + t_b + c on every stage; the simulation lands between (m + p − 1)(t_f + t_b) and that,
close to the top, because the first and the last stage send only one way per cycle, which takes
a few transfers off the critical path. With the overlap, the interleaved fill and drain wait p
transfers at each wrap from the last stage back to the first, less the other stages' slack; the closed
form charges exactly that (``pipeline.interleaved_wrap_wait_s``, tests/test_pipeline_wraps.py). With
real plans they differ by under 2 %: besides that,
the last stage's logits make it slower than the others, and the simulation lets the faster stages
run ahead where the closed form charges every stage the slowest one's pace in the steady state;
the interleaved fill and drain also differ a little from (p − 1)(t_f + t_b)/vpp when stages
differ, because the warm-up of rank i is 2(p − i − 1) + (vpp − 1)p chunks. Data-parallel
gradient reduction, the tied-embedding all-reduce and the optimizer step follow the pipeline flush;
the timeline appends them (from the estimate) as a tail common to all stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from planner.costs.estimate import Evaluation
from planner.plan import ParallelPlan, PlanOptions

FWD, BWD = "fwd", "bwd"


@dataclass(frozen=True)
class Op:
    """One forward or backward of one micro-batch (one chunk of it under interleaving) on one stage."""

    stage: int
    microbatch: int  # 0-based
    chunk: int  # model chunk on this stage, 0..vpp−1
    kind: str  # "fwd" | "bwd"
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Transfer:
    """A p2p send from ``src`` to ``dst`` (activations forward, gradients backward)."""

    src: int
    dst: int
    microbatch: int
    kind: str  # direction: "fwd" (activation) | "bwd" (gradient)
    start_s: float
    end_s: float
    blocking: bool  # the sender waits for it (on the sender's critical path)


@dataclass(frozen=True)
class Timeline:
    p: int
    m: int
    vpp: int
    forward_s: tuple[float, ...]  # per stage, per micro-batch (whole stage: all chunks)
    backward_s: tuple[float, ...]
    p2p_s: float
    ops: tuple[Op, ...]
    transfers: tuple[Transfer, ...]
    pipeline_s: float  # last operation's end
    tail_s: dict[str, float] = field(default_factory=dict)  # after the flush: dp sync, optimizer

    @property
    def iteration_s(self) -> float:
        return self.pipeline_s + sum(self.tail_s.values())

    @cached_property
    def _by_stage(self) -> dict[int, list[Op]]:
        out: dict[int, list[Op]] = {i: [] for i in range(self.p)}
        for op in self.ops:  # sorted by stage, then start
            out[op.stage].append(op)
        return out

    @cached_property
    def _sends(self) -> dict[int, list[Transfer]]:
        out: dict[int, list[Transfer]] = {i: [] for i in range(self.p)}
        for t in sorted(self.transfers, key=lambda t: t.start_s):
            out[t.src].append(t)
        return out

    def stage_sends(self, stage: int) -> list[Transfer]:
        """The transfers a stage sends, in time order."""
        return self._sends[stage]

    def stage_ops(self, stage: int) -> list[Op]:
        """The operations of one stage in time order."""
        return self._by_stage[stage]

    def busy_s(self, stage: int) -> float:
        return sum(op.duration_s for op in self._by_stage[stage])

    def to_json(self, events: bool = True) -> dict:
        out = {
            "p": self.p,
            "m": self.m,
            "vpp": self.vpp,
            "pipeline_s": self.pipeline_s,
            "tail_s": dict(self.tail_s),
            "iteration_s": self.iteration_s,
            "p2p_s": self.p2p_s,
            "stage_forward_s": list(self.forward_s),
            "stage_backward_s": list(self.backward_s),
            "stage_idle_frac": [1 - self.busy_s(i) / self.pipeline_s for i in range(self.p)],
        }
        if events:
            out["ops"] = [
                {
                    "stage": o.stage,
                    "microbatch": o.microbatch,
                    "chunk": o.chunk,
                    "kind": o.kind,
                    "start_s": o.start_s,
                    "end_s": o.end_s,
                }
                for o in self.ops
            ]
            out["transfers"] = [
                {
                    "src": t.src,
                    "dst": t.dst,
                    "microbatch": t.microbatch,
                    "kind": t.kind,
                    "start_s": t.start_s,
                    "end_s": t.end_s,
                    "blocking": t.blocking,
                }
                for t in self.transfers
            ]
        return out


def schedule_table(m: int, vpp: int, G: int) -> list[tuple[int, int]]:
    """The (micro-batch, chunk) pairs in the order the interleaved schedule walks them: groups of G
    micro-batches (the last takes the rest), each through every chunk in turn (schedules.py
    get_schedule_table @ d98e8a64)."""
    return [(j, c) for lo in range(0, m, G) for c in range(vpp) for j in range(lo, min(lo + G, m))]


def op_order(p: int, m: int, vpp: int, rank: int, G: int | None = None) -> list[tuple[str, int, int]]:
    """The (kind, micro-batch, chunk) sequence rank ``rank`` runs, in Megatron-LM's order; ``G``: the
    interleaved schedule's micro-batch group (default p)."""
    if vpp == 1:
        warm = min(p - rank - 1, m)
        fwd = [(FWD, j, 0) for j in range(m)]
        bwd = [(BWD, j, 0) for j in range(m)]
        steady = [op for i in range(m - warm) for op in (fwd[warm + i], bwd[i])]
        return fwd[:warm] + steady + bwd[m - warm :]
    G = G or p
    total = m * vpp
    warm = min(2 * (p - rank - 1) + (vpp - 1) * G, total)
    table = schedule_table(m, vpp, G)

    def virtual(k: int, kind: str) -> tuple[str, int, int]:
        microbatch, chunk = table[k]
        return kind, microbatch, chunk if kind == FWD else vpp - 1 - chunk

    steady = [op for i in range(total - warm) for op in (virtual(warm + i, FWD), virtual(i, BWD))]
    return [virtual(k, FWD) for k in range(warm)] + steady + [virtual(k, BWD) for k in range(total - warm, total)]


@dataclass
class _Run:
    """The schedule as it runs: when each stage is free, which (kind, micro-batch, virtual stage) are done and
    when, and the operations and transfers placed so far (``simulate``)."""

    fwd: list[float]
    bwd: list[float]
    p2p_s: float
    vpp: int
    blocking_p2p: bool
    done: dict = field(default_factory=dict)  # (kind, micro-batch, virtual stage) -> end
    ops: list = field(default_factory=list)
    transfers: list = field(default_factory=list)
    free: dict = field(default_factory=dict)  # stage -> when it is free

    @property
    def last_v(self) -> int:
        return len(self.fwd) * self.vpp - 1

    def ready(self, kind: str, j: int, v: int) -> float | None:
        """When the input of (kind, j, v) is available on its stage; None if not yet produced."""
        if kind == FWD:
            if v == 0:
                return 0.0
            prev = self.done.get((FWD, j, v - 1))
            return None if prev is None else prev + self.p2p_s
        if v == self.last_v:
            return self.done.get((FWD, j, v))
        nxt = self.done.get((BWD, j, v + 1))
        return None if nxt is None else nxt + self.p2p_s

    def place(self, i: int, kind: str, j: int, chunk: int) -> bool:
        """Run stage i's next operation if its input is ready (and its send, blocking the stage if
        ``blocking_p2p``); False if it must wait."""
        p = len(self.fwd)
        v = chunk * p + i
        t_in = self.ready(kind, j, v)
        if t_in is None:
            return False
        start = max(self.free.get(i, 0.0), t_in)
        end = start + (self.fwd[i] if kind == FWD else self.bwd[i]) / self.vpp
        self.done[(kind, j, v)] = end
        self.ops.append(Op(i, j, chunk, kind, start, end))
        self.free[i] = end
        if ((kind == FWD and v < self.last_v) or (kind == BWD and v > 0)) and self.p2p_s > 0:
            dst = (v + 1) % p if kind == FWD else (v - 1) % p
            self.transfers.append(Transfer(i, dst, j, kind, end, end + self.p2p_s, self.blocking_p2p))
            if self.blocking_p2p:
                self.free[i] = end + self.p2p_s
        return True


def simulate(
    forward_s,
    backward_s,
    p2p_s: float,
    m: int,
    vpp: int = 1,
    *,
    G: int | None = None,
    blocking_p2p: bool = True,
    tail_s: dict[str, float] | None = None,
) -> Timeline:
    """Run the schedule: per-stage, per-micro-batch forward and backward seconds (whole stage) and
    one p2p transfer's seconds; returns every operation and transfer with its start and end."""
    fwd = [float(x) for x in np.atleast_1d(forward_s)]
    bwd = [float(x) for x in np.atleast_1d(backward_s)]
    p = len(fwd)
    if len(bwd) != p or m < 1 or vpp < 1 or (vpp > 1 and p == 1):
        raise ValueError(
            f"need one forward and backward time per stage, m ≥ 1, and p > 1 with vpp > 1 (p {p}, m {m}, vpp {vpp})"
        )
    orders = [op_order(p, m, vpp, i, G) for i in range(p)]
    run = _Run(fwd, bwd, p2p_s, vpp, blocking_p2p)
    pos = [0] * p
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for i in range(p):
            while pos[i] < len(orders[i]) and run.place(i, *orders[i][pos[i]]):
                pos[i] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # Megatron's order never deadlocks; this guards the simulation itself
            raise RuntimeError(f"pipeline schedule deadlocked (p {p}, m {m}, vpp {vpp})")
    ops, transfers = run.ops, run.transfers
    ops.sort(key=lambda o: (o.stage, o.start_s))
    makespan = max(o.end_s for o in ops)
    return Timeline(
        p=p,
        m=m,
        vpp=vpp,
        forward_s=tuple(fwd),
        backward_s=tuple(bwd),
        p2p_s=p2p_s,
        ops=tuple(ops),
        transfers=tuple(transfers),
        pipeline_s=makespan,
        tail_s=dict(tail_s or {}),
    )


# after the flush (stragglers: the wait at the step's synchronisation for the slowest GPU); every other
# time term is the pipeline's
TAIL_TERMS = ("dp_comm", "embedding_comm", "optimizer", "stragglers")


def plan_timeline(ev: Evaluation, plan: ParallelPlan, options: PlanOptions, i: int = 0) -> Timeline:
    """The schedule of plan i of an evaluation made with ``stages=True``: its stage times, and the
    tail after the flush (DP and embedding gradient sync, the wait for the slowest GPU, optimizer step) from its
    time terms."""
    if ev.stages is None:
        raise ValueError("plan_timeline needs an evaluation with every stage (evaluate(..., stages=True))")
    m = float(ev.m[i])
    if m != int(m):
        raise ValueError(f"m = B/(b·d) = {m} is not a whole number")
    st, p = ev.stages, plan.pp
    blocking = not (plan.vpp > 1 and options.overlap_p2p_comm)
    tail = {  # drawn apart: the wait for the slowest GPU was drawn as DP sync, four times the sync (audit17)
        "dp_comm": float(ev.time["dp_comm"][i]) + float(ev.time["embedding_comm"][i]),  # DP and embedding sync
        "stragglers": float(ev.time["stragglers"][i]),
        "optimizer": float(ev.time["optimizer"][i]),
    }
    return simulate(
        st.forward_s[i, :p],
        st.backward_s[i, :p],
        float(st.p2p_s[i]) if p > 1 else 0.0,
        int(m),
        plan.vpp,
        G=plan.microbatch_group_size,
        blocking_p2p=blocking,
        tail_s=tail,
    )
