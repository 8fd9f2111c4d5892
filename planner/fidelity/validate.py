"""Predicted versus published: the planner's value of each reference run's metric, the errors, and
how much faster the planner's best plan would have been (regret)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from planner import api, parallel
from planner.costs.estimate import evaluate, layer_step_times_s
from planner.costs.flops import korthikanti_eq8_flops
from planner.fidelity.moe_runs import MOE_METRIC, load_moe_runs
from planner.fidelity.runs import K22, MLM, N21, PAPER_VOCAB, Run, load_runs
from planner.hardware.spec import HardwareSpec
from planner.presets import load_hardware
from planner.space.grid import PlanGrid


def prepare(run: Run, hardware: HardwareSpec | None = None) -> api.PlanRequest:
    """The run as a plan request on its hardware (or the given hardware): its published plan, or for a
    run that leaves knobs out (``Run.searched``) the fastest plan consistent with what it publishes."""
    return api.make_request(hardware=hardware or load_hardware(run.hardware), **plan_request(run))


def plan_request(run: Run) -> dict:
    """The request of the plan a run is validated with: ``run.request`` when the source publishes the
    whole plan, else the fastest plan the search finds with every published setting pinned."""
    if not run.searched:
        return run.request
    return _best_published_plan(run.id.split(":")[0], run.hardware, _req_key(run.request))


class _ReqKey:
    """A run's request as a cache key: the same id, preset and request share one search (``_req_key``: one
    key per request dict)."""

    def __init__(self, request: dict):
        self.request, self._repr = request, repr(request)

    def __hash__(self) -> int:
        return hash(self._repr)

    def __eq__(self, other) -> bool:
        return isinstance(other, _ReqKey) and self._repr == other._repr


_KEYS: dict[int, tuple[dict, _ReqKey]] = {}  # id(request) -> (that request, kept alive; its key)


def _req_key(request: dict) -> _ReqKey:
    """``_ReqKey(request)``, made once per request dict (a request's repr names its model spec field by field:
    validate made 766 of them for its 290 rows, 0.07 s)."""
    hit = _KEYS.get(id(request))
    if hit is None or hit[0] is not request:
        hit = _KEYS[id(request)] = (request, _ReqKey(request))
    return hit[1]


def published_pins(request: dict):
    """The search pins of a run whose source leaves knobs out: every setting of ``request`` (the published
    ones and those Megatron's checks imply) fixed; micro-batch (unless the request fixes it), VPP and
    recomputation left free. The
    interleaving's micro-batch group is p: Megatron-Core r0.8.0 (the README rows' release) had no
    --microbatch-group-size-per-virtual-pipeline-stage and refuses an interleaved schedule whose m is not
    a multiple of p (schedules.py forward_backward_pipelining_with_interleaving @ core_r0.8.0: "number of
    microbatches (...) is not divisible by pipeline-model-parallel-size")."""
    from planner.plan import StageSplit
    from planner.space.candidates import Pins

    q, opts = request, request.get("options", {})
    t, p, c = q["tp"], q["pp"], q.get("cp", 1)
    return Pins(
        tp=t,
        pp=p,
        cp=c,
        dp=q["gpus"] // (t * p * c),
        fsdp=False,  # Megatron-Core r0.8.0 had no Megatron FSDP
        sequence_parallel=q["sequence_parallel"],
        distributed_optimizer=q["distributed_optimizer"],
        stage_split=StageSplit(q["stage_split"]),
        microbatch_group_size=p,
        micro_batch=q.get("micro_batch"),  # what the source fixes of the knobs it leaves out (runs.MLM_SERIES_PINS)
        **{k: bool(opts[k]) for k in ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")},
    )


_PUBLISHED: dict[tuple, tuple[dict, ...]] = {}  # (run id, preset, _ReqKey) -> every fitting plan, for the process


def _published_plans(run_id: str, hardware: str, key: _ReqKey) -> tuple[dict, ...]:
    """Every plan that fits on the run's own preset with every published setting pinned: searched once
    per run (the TFLOP/s and MFU rows share it) and kept for a calibration's trial values."""
    if (run_id, hardware, key) not in _PUBLISHED:
        _PUBLISHED[(run_id, hardware, key)] = _search_published(hardware, key)
    return _PUBLISHED[(run_id, hardware, key)]


def _search_published(hardware: str, key: _ReqKey) -> tuple[dict, ...]:
    from planner.search import search

    base = api.make_request(hardware=load_hardware(hardware), **key.request)
    pins = published_pins(key.request)
    return tuple(search(base.ctx, base.gpus, pins, top=10_000, suggest_sizes=False, brief=True).plans)


def search_published(runs: list[Run]) -> None:
    """``_published_plans`` of every run that leaves knobs out, not yet searched, the searches split between
    two processes (``parallel.map_jobs``: the same searches, the same plans)."""
    keys = dict.fromkeys((run.id.split(":")[0], run.hardware, _req_key(run.request)) for run in runs if run.searched)
    todo = [k for k in keys if k not in _PUBLISHED]
    jobs = [functools.partial(_search_published, hardware, key) for _, hardware, key in todo]
    _PUBLISHED.update(zip(todo, parallel.map_jobs(jobs, len(jobs) > 1 and parallel.can_fork()), strict=True))


@functools.lru_cache(maxsize=1024)
def _best_published_plan(run_id: str, hardware: str, key: _ReqKey) -> dict:
    """The fastest plan (least predicted iteration time among those that fit), so a fit evaluates one
    plan per run."""
    best = min(_published_plans(run_id, hardware, key), key=lambda p: (p["estimate"]["iteration_s"], p["rank"]))
    parallel = {k: v for k, v in best["parallel"].items() if k != "stage_layers"}
    return dict(key.request, **parallel, options=best["options"])


def searched_spread(run: Run) -> tuple[float, dict]:
    """How much the settings a run leaves out can move it: the slowest fitting plan without
    recomputation over the fastest (iteration time ratio ≥ 1), and that plan's parallel settings."""
    plans = _published_plans(run.id.split(":")[0], run.hardware, _req_key(run.request))
    best = min(p["estimate"]["iteration_s"] for p in plans)
    plain = [p for p in plans if p["parallel"].get("recompute") == "none"] or list(plans)
    slow = max(plain, key=lambda p: p["estimate"]["iteration_s"])
    return slow["estimate"]["iteration_s"] / best, slow["parallel"]


def on_hardware(req: api.PlanRequest, hardware: HardwareSpec) -> api.PlanRequest:
    """The same request on other hardware (a calibration's trial values): no new validation."""
    return replace(req, ctx=replace(req.ctx, hardware=hardware))


def predict(run: Run, hardware: HardwareSpec | None = None, req: api.PlanRequest | None = None) -> float:
    """The planner's value of the run's metric (``req``: the run already prepared)."""
    req = req or prepare(run, hardware)
    return metric_value(run, req, _evaluation(run.metric, req))


def predictions(runs: list[Run], reqs: list[api.PlanRequest], groups: list[list[int]] | None = None) -> list[float]:
    """``predict(run, req=req)`` of each run and its request, the requests that share a context in one grid
    (``evaluations``; ``groups``: ``shared_contexts`` of requests alike, e.g. the same ones on other hardware)."""
    evs = evaluations(reqs, [_is_layer(run.metric) for run in runs], groups)
    return [metric_value(run, req, ev) for run, req, ev in zip(runs, reqs, evs, strict=True)]


def _is_layer(metric: str) -> bool:
    return metric.startswith("layer")


def _evaluation(metric: str, req: api.PlanRequest):
    """What a metric reads of the plan: one layer's forward and backward step times for the one-layer
    rows, else the plan's whole evaluation."""
    return _grid_evaluation(_is_layer(metric), PlanGrid.from_plans([req.plan]), req.ctx)


def _grid_evaluation(layer: bool, grid: PlanGrid, ctx):
    if layer:
        return layer_step_times_s(grid, ctx)
    with np.errstate(divide="ignore", invalid="ignore"):
        return evaluate(grid, ctx)


def shared_contexts(reqs: list[api.PlanRequest], layers: list[bool]) -> list[list[int]]:
    """The requests' indices in groups one grid evaluates (``evaluations``): the same context (model,
    hardware, training, options: ``Context``) and the same reading (``layers``: one layer's step times, or
    the whole plan), each group in order, the groups by their first request."""
    buckets: dict[tuple, list[tuple[object, list[int]]]] = {}
    for i, (req, layer) in enumerate(zip(reqs, layers, strict=True)):
        c = req.ctx
        bucket = buckets.setdefault((layer, c.hardware.name, c.model.name, c.training), [])
        same = next((idx for ctx, idx in bucket if ctx is c or ctx == c), None)
        if same is None:
            bucket.append((c, [i]))
        else:
            same.append(i)
    return sorted((idx for bucket in buckets.values() for _, idx in bucket), key=lambda idx: idx[0])


def evaluations(reqs: list[api.PlanRequest], layers: list[bool], groups: list[list[int]] | None = None) -> list:
    """``_evaluation`` of each request (``layers``: one layer's step times, else the whole plan), the plans
    of a group of ``shared_contexts`` in one grid: every term is elementwise over a grid's plans, so each plan
    gets the values it has alone (tests/test_validation.py checks every run), and a group pays the
    per-evaluation work once. Many groups are split between two processes (``parallel.map_jobs``: the same
    calls, the same numbers)."""
    groups = groups if groups is not None else shared_contexts(reqs, layers)

    def job(idx: list[int]):
        return lambda: _grid_evaluation(
            layers[idx[0]], PlanGrid.from_plans([reqs[i].plan for i in idx]), reqs[idx[0]].ctx
        )

    fork = len(groups) >= FORK_GROUPS and parallel.can_fork()
    out: list = [None] * len(reqs)
    for idx, ev in zip(groups, parallel.map_jobs([job(idx) for idx in groups], fork), strict=True):
        for j, i in enumerate(idx):
            out[i] = _plan_row(ev, j, len(idx))
    return out


FORK_GROUPS = 32  # from this many grids on, ``evaluations`` splits them between two processes (planner.parallel)


def _plan_row(value, j: int, n: int):
    """Plan ``j`` of an evaluation of ``n`` plans, as an evaluation of that plan alone (arrays of one row)."""
    if isinstance(value, dict):
        return {k: _plan_row(v, j, n) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return value[j : j + 1] if value.ndim and value.shape[0] == n else value
    if dataclasses.is_dataclass(value):
        return replace(value, **{f.name: _plan_row(getattr(value, f.name), j, n) for f in dataclasses.fields(value)})
    return value


_EVALUATED: dict[tuple, tuple[api.PlanRequest, object]] = {}  # (preset, one layer, _ReqKey) -> (request, evaluation)


def evaluated_runs(runs: list[Run], hardware: dict[str, HardwareSpec] | None = None) -> list[tuple]:
    """(the run prepared, what its metric reads: ``_evaluation``) of each run, on ``hardware``'s spec of its
    preset where given, else on its own preset and kept for the process (``preset_evaluations``)."""
    return _evaluated([(run.hardware, _is_layer(run.metric), _req_key(plan_request(run))) for run in runs], hardware)


def evaluated(run: Run, hardware: HardwareSpec | None = None) -> tuple:
    """``evaluated_runs`` of one run (``hardware``: its preset's spec to use instead)."""
    return evaluated_runs([run], None if hardware is None else {run.hardware: hardware})[0]


def preset_evaluations(requests: list[tuple[str, dict]]) -> list[tuple[api.PlanRequest, object]]:
    """(the request, its whole evaluation) of each (hardware preset, request), kept for the process: the runs
    published with several metrics and ``memory.reference_verdicts`` evaluate each plan once."""
    return _evaluated([(hardware, False, _req_key(request)) for hardware, request in requests])


def _evaluated(keys: list[tuple[str, bool, _ReqKey]], hardware: dict[str, HardwareSpec] | None = None) -> list[tuple]:
    """(request, evaluation) of each (preset, one layer, request): each distinct one evaluated once, the
    plans sharing a context in one grid (``evaluations``); on a preset's own spec kept for the process."""
    hardware = hardware or {}
    todo: dict[tuple, api.PlanRequest] = {}
    for key in keys:
        name, _, req_key = key
        if key in todo or (name not in hardware and key in _EVALUATED):
            continue
        hw = hardware.get(name)
        todo[key] = _prepared(name, req_key) if hw is None else api.make_request(hardware=hw, **req_key.request)
    evs = evaluations(list(todo.values()), [key[1] for key in todo])
    fresh = {}
    for (key, req), ev in zip(todo.items(), evs, strict=True):
        (fresh if key[0] in hardware else _EVALUATED)[key] = (req, ev)
    return [fresh[key] if key[0] in hardware else _EVALUATED[key] for key in keys]


def prepared(run: Run) -> api.PlanRequest:
    """``prepare(run)`` on the run's own preset, kept for the process (``evidence.reference_settings``
    reads the same requests validate evaluates)."""
    return _prepared(run.hardware, _req_key(plan_request(run)))


@functools.lru_cache(maxsize=1024)
def _prepared(hardware: str, key: _ReqKey) -> api.PlanRequest:
    return api.make_request(hardware=load_hardware(hardware), **key.request)


def metric_value(run: Run, req: api.PlanRequest, ev) -> float:
    """The run's metric from the plan's evaluation (``_evaluation``)."""
    if run.metric.startswith("layer"):
        return float(ev["forward"][0] + ev["backward"][0]) * 1e3
    ctx = req.ctx
    it, n = float(ev.iteration_s[0]), req.gpus
    m, tr = ctx.model, ctx.training
    B, s, L, h = tr.global_batch, tr.seq_len, m.num_layers, m.hidden_size
    peak = ctx.hardware.gpu.peak_flops_per_s(tr.precision.value)
    if run.metric in ("iteration time (s)", "step time (s)"):
        return it
    if run.metric == "tokens/s per GPU":
        return B * s / it / n
    if run.metric == "TFLOP/s per GPU (Eq. 3)":
        eq3 = 96 * B * s * L * h**2 * (1 + s / (6 * h) + PAPER_VOCAB / (16 * L * h))
        return eq3 / it / n / 1e12
    if run.metric == "MFU (Eq. 7)":
        return 72 * B * L * s * h**2 * (1 + s / (6 * h) + PAPER_VOCAB / (12 * h * L)) / it / n / peak
    if run.metric == "HFU (Eq. 8)":
        return korthikanti_eq8_flops(B, s, L, h, PAPER_VOCAB) / it / n / peak
    if run.metric == "TFLOP/s per GPU (r0.8.0)":
        return float(ev.flops["model"][0]) / it / n / 1e12
    if run.metric == MOE_METRIC:
        return B * s / it / n
    raise ValueError(f"unknown metric {run.metric}")


def validate(
    runs: list[Run] | None = None,
    hardware: dict[str, HardwareSpec] | None = None,
    *,
    moe: bool = True,
    settings: Callable[[], dict] | None = None,
) -> dict:
    """Rows of predicted vs published and the error summary, overall and per source; with ``moe``,
    also the mixture-of-experts runs (``moe``: their rows and summary, apart: the efficiency factors
    were fitted on the dense runs only), and the settings behind each preset's fit (``settings``: gives
    ``evidence.settings_per_preset()``, e.g. computed in another process meanwhile; by default here)."""
    out = _validate(runs if runs is not None else load_runs(), hardware or {})
    if moe and runs is None:
        out["moe"] = validate_moe(hardware=hardware)
        from planner.fidelity.evidence import settings_per_preset

        out["summary"]["settings_by_hardware"] = (settings or settings_per_preset)()  # distinct model × plan
        out["summary"]["factors_by_hardware"] = fitted_factors(
            list(out["summary"]["settings_by_hardware"]), hardware or {}
        )
    return out


def fitted_factors(names: list[str], hardware: dict[str, HardwareSpec] | None = None) -> dict[str, dict]:
    """Per preset, each factor fitted on runs (or carried over from such a fit) as the preset states
    it: value, σ, band and its leave-one-source-out drift - the range of the refits that each leave
    one source family out (``Factor.loso``, written by megaplan calibrate) and the largest relative
    distance of that range from the value, ``drift_pct`` = 100·max(|low − v|, |high − v|)/v (None
    where the calibration that wrote the value held no source out)."""
    out = {}
    for name in names:
        cal = (hardware or {}).get(name, load_hardware(name)).calibration
        rows = {}
        for factor, f in cal.factors.items():
            if f.status not in ("fitted", "carried over"):
                continue
            v, d = float(getattr(cal, factor)), f.loso
            drift = None if d is None or v == 0 else 100 * max(abs(d.low - v), abs(d.high - v)) / abs(v)
            rows[factor] = {
                "value": v,
                "status": f.status,
                "sigma": f.sigma,
                "band": f.band,
                "loso": None if d is None else [d.low, d.high],
                "loso_sources": None if d is None else d.sources,
                "drift_pct": drift,
            }
        out[name] = rows
    return out


def validate_moe(runs: list[Run] | None = None, hardware: dict[str, HardwareSpec] | None = None) -> dict:
    """The MoE rows and their summary, with ``by_model``: each model family's rows in the bar (not
    flagged as superseded or regressed software: the fitted rows and the held-out cards' rows)."""
    runs = runs if runs is not None else load_moe_runs()
    out = _validate(runs, hardware or {})
    model = {run.id: run.request["model"] for run in runs}
    rows = [r for r in out["runs"] if r["in_bar"]]
    models = dict.fromkeys(model[r["id"]] for r in rows)
    out["summary"]["in_bar"] = _stats(rows) if rows else {}
    out["summary"]["by_model"] = {m: _stats([r for r in rows if model[r["id"]] == m]) for m in models}
    return out


def _validate(runs: list[Run], hardware: dict[str, HardwareSpec]) -> dict:
    rows, keys = [], []
    search_published(runs)
    for run, (req, ev) in zip(runs, evaluated_runs(runs, hardware), strict=True):
        pred = metric_value(run, req, ev)
        keys.append(priced_key(run, req))
        rows.append(
            {
                "id": run.id,
                "source": run.source,
                "hardware": run.hardware,
                "in_fit": run.fit,
                "in_bar": run.fit or bool(run.searched) or run.held_out,
                "metric": run.metric,
                "published": run.published,
                "predicted": pred,
                "error_pct": 100 * (pred - run.published) / run.published,
                "assumptions": list(run.assumptions) + _searched_note(run),
            }
        )
    summary = summarize(rows)
    summary["replicates"] = replicate_scatter([r["published"] for r in rows], keys, [r["source"] for r in rows])
    return {"runs": rows, "summary": summary}


# A replicate group's source when its rows are different submitters' systems in one round (one software release);
# any other source's groups are one publisher's later releases of the same configuration
CLUSTER_SOURCES = ("MLPerf Training",)


def priced_key(run: Run, req: api.PlanRequest) -> tuple:
    """What the estimate of a run reads, as a key: two runs with the same key are the same configuration to megaplan
    (model, GPUs, plan, training, options, hardware and the published metric)."""
    ctx = req.ctx
    return (
        run.hardware,
        run.metric,
        req.gpus,
        ctx.model.model_dump_json(),
        req.plan.model_dump_json(),
        ctx.training.model_dump_json(),
        ctx.options.model_dump_json(),
    )


def pooled_log_sigma(values: list[float], keys: list) -> tuple[float | None, int, int]:
    """(σ, degrees of freedom, groups): the pooled standard deviation of ln(value) within the groups of equal key
    that have more than one value, √(Σ_g Σ_i (ln v_gi − mean_g)² / Σ_g (n_g − 1)); σ None without such a group.
    Three values 1.0, 1.1, 0.9 in one group: ln 1.1 = 0.09531, ln 0.9 = −0.10536, mean −0.00335, Σ dev² =
    0.02016, σ = √(0.02016/2) = 0.1004."""
    groups: dict = {}
    for v, k in zip(values, keys, strict=True):
        groups.setdefault(k, []).append(np.log(v))
    sq, dof, n = 0.0, 0, 0
    for logs in groups.values():
        if len(logs) > 1:
            a = np.asarray(logs)
            sq += float(np.sum((a - a.mean()) ** 2))
            dof += len(logs) - 1
            n += 1
    return (float(np.sqrt(sq / dof)) if dof else None), dof, n


def replicate_scatter(published: list[float], keys: list, sources: list[str]) -> dict:
    """How much the same configuration (``priced_key``: everything megaplan reads equal) measured more than once
    scatters, pooled within groups (``pooled_log_sigma``): across MLPerf submitters' systems of one round
    (``CLUSTER_SOURCES``) and across a publisher's later releases. No model of these inputs can come closer than this
    to every row: a floor on its error, beside calibrate.RUN_NOISE (the noise a prior is weighed against)."""
    out = {}
    for kind, keep in (("clusters", True), ("releases", False)):
        pick = [i for i, s in enumerate(sources) if (s in CLUSTER_SOURCES) == keep]
        sigma, dof, groups = pooled_log_sigma([published[i] for i in pick], [keys[i] for i in pick])
        out[kind] = {"sigma_log": sigma, "dof": dof, "groups": groups}
    return out


def _searched_note(run: Run) -> list[str]:
    """The plan a run that leaves knobs out was predicted with, named (empty for a published plan)."""
    if not run.searched:
        return []
    q = plan_request(run)
    knobs = ", ".join(f"{k} {q[k]}" for k in run.searched)
    ratio, slow = searched_spread(run)
    other = ", ".join(f"{k} {slow[k]}" for k in run.searched if k in slow)
    return [
        f"best plan consistent with the published settings (searched: {', '.join(run.searched)}): {knobs}; "
        f"the slowest that fits without recomputation ({other}) takes {ratio - 1:.0%} longer"
    ]


def _stats(rs: list[dict]) -> dict:
    errs = np.array([r["error_pct"] for r in rs])
    return {
        "runs": len(rs),
        "median_abs_error_pct": float(np.median(np.abs(errs))),
        "max_abs_error_pct": float(np.max(np.abs(errs))),
        "max_abs_log_error": float(np.max(np.abs(np.log1p(errs / 100)))),
        "rms_log_error": float(np.sqrt(np.mean(np.log1p(errs / 100) ** 2))),
    }


def summarize(rows: list[dict]) -> dict:
    stats = _stats

    by_source = {
        src: stats([r for r in rows if r["source"] == src]) for src in dict.fromkeys(r["source"] for r in rows)
    }

    def per_hardware(rs):
        return {hw: stats([r for r in rs if r["hardware"] == hw]) for hw in dict.fromkeys(r["hardware"] for r in rs)}

    def in_bar(r: dict) -> bool:  # published plan, or the best plan consistent with the published settings
        return r.get("in_bar", r.get("in_fit", True))

    complete = [r for r in rows if in_bar(r) and "hardware" in r]
    partial = [r for r in rows if not in_bar(r) and "hardware" in r]

    def per_generation(rs):
        gens = {id(r): generation(r["hardware"]) for r in rs}
        return {g: stats([r for r in rs if gens[id(r)] == g]) for g in dict.fromkeys(gens.values())}

    published = [r for r in complete if r.get("in_fit", True)]
    return {
        **stats(rows),
        "by_source": by_source,
        "by_hardware": per_hardware(complete),  # whole configuration published, or the rest searched
        "by_hardware_published": per_hardware(published),  # only the fitted runs (whole plan published)
        "by_generation": per_generation(complete),  # the same runs by GPU generation (compute capability)
        "by_generation_published": per_generation(published),  # only the fitted runs (whole plan published)
        "by_hardware_assumed": per_hardware(partial),  # an unpublished setting assumed, or superseded software
    }


GENERATIONS = {8: "Ampere (A100)", 9: "Hopper (H100, H200)", 10: "Blackwell (B200, B300, GB200, GB300)"}


def generation(hardware: str) -> str:
    """A preset's GPU generation, from its compute capability's major number."""
    major = int(load_hardware(hardware).gpu.compute_capability)
    return GENERATIONS.get(major, f"compute capability {major}")


def _era_pins(run: Run):
    """What the run's Megatron-LM release could do: 2021 had no SP, selective recompute or
    distributed optimizer; 2022 had no distributed optimizer in these runs."""
    from planner.plan import Recompute, RecomputeMethod
    from planner.space.candidates import Pins

    opts = plan_request(run).get("options", {})
    overlaps = {k: bool(opts.get(k, False)) for k in ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")}
    if run.source == N21:
        return Pins(
            sequence_parallel=False,
            distributed_optimizer=False,
            fsdp=False,
            recompute=(Recompute.NONE, Recompute.FULL),
            recompute_method=RecomputeMethod.UNIFORM,
            **overlaps,
        )
    if run.source == K22:
        return Pins(distributed_optimizer=False, fsdp=False, recompute_method=RecomputeMethod.UNIFORM, **overlaps)
    return Pins(fsdp=False, **overlaps)  # Megatron-Core r0.8.0 had no Megatron FSDP


def regret(run: Run) -> dict:
    """How much faster the planner's best plan for the same model, GPUs, batch and hardware is
    predicted to be than the published plan, both with the Megatron-LM behaviour of the run's time."""
    from planner.search import search

    req = prepare(run)
    with np.errstate(divide="ignore", invalid="ignore"):
        published = float(evaluate(PlanGrid.from_plans([req.plan]), req.ctx).iteration_s[0])
    pins = _era_pins(run)
    best = search(req.ctx, req.gpus, pins, top=1).plans[0]
    same = search(
        req.ctx,
        req.gpus,
        replace(pins, recompute=req.plan.recompute, sequence_parallel=req.plan.sequence_parallel),
        top=1,
    ).plans[0]
    keys = (
        "tp",
        "pp",
        "dp",
        "cp",
        "vpp",
        "micro_batch",
        "recompute",
        "sequence_parallel",
        "distributed_optimizer",
        "fsdp",
        "stage_split",
    )
    return {
        "published_plan_s": published,
        "best_plan_s": best["estimate"]["iteration_s"],
        "speedup_pct": 100 * (published / best["estimate"]["iteration_s"] - 1),
        "best_plan": {k: best["parallel"][k] for k in keys},
        "same_recompute_speedup_pct": 100 * (published / same["estimate"]["iteration_s"] - 1),
        "same_recompute_best_plan": {k: same["parallel"][k] for k in keys},
    }


REGRET_SOURCES = (N21, K22, MLM)  # the reference table's runs; today's runs were tuned by NVIDIA's teams


def add_regret(result: dict, runs: list[Run] | None = None, step=None) -> dict:
    """Attach the regret of each whole-model run of the reference table (not the one-layer rows) to
    the validation result - a search per run, so the modern runs (published plans tuned by NVIDIA's
    performance teams) are left out; ``step`` is called after each run (a progress bar). The searches are
    shared between two processes where ``parallel.can_fork`` (``parallel.map_jobs``: the same searches)."""
    by_id = {r.id: r for r in (runs if runs is not None else load_runs())}
    rows = result["runs"]
    searched = [k for k, row in enumerate(rows) if _has_regret(row["id"], by_id[row["id"]])]

    def said(k: int) -> None:
        if step:
            step(f"best plan for {rows[k]['id']}")

    for k in sorted(set(range(len(rows))) - set(searched)):
        said(k)
    jobs = [functools.partial(regret, by_id[rows[k]["id"]]) for k in searched]
    found = parallel.map_jobs(jobs, parallel.can_fork(), lambda j: said(searched[j]))
    for k, row_regret in zip(searched, found, strict=True):
        rows[k]["regret"] = row_regret
    return result


def _has_regret(row_id: str, run: Run) -> bool:
    """A whole-model run of the reference table: its regret is searched."""
    return ":" not in row_id and not run.metric.startswith("layer") and run.source in REGRET_SOURCES
