"""What was measured for the setup a user asks about: the reference runs of the same model, hardware preset, GPU count,
global batch, sequence, precision (with its FP8/FP4 recipe) and token-drop capacity factor - everything a user
chooses, nothing of the plan (``setup_key``; validate --choice's "best published" compares within the same setup).
A search or an explain of such a setup says how many runs were published for it, the fastest and its plan, and what
the plan at hand is estimated at against that fastest: a claim the model makes beside a number somebody measured
(docs/cost-model.md §10.7).

A search reads the table scripts/published_setups.py wrote (``planner.fidelity.published_setups``), not the
reference runs (building them takes half a second); tests/test_published_setups.py checks it equals the live set.
A model matches by what it is, the parameter count the runs priced (a launch script's "imported" model or a renamed
copy of a preset matches; an edited copy under the preset's name does not), and the hardware preset by its name and
its GPU."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from planner.plan import Context


def setup_key(
    model: str,
    hardware: str,
    gpus: int,
    global_batch: int,
    seq_len: int,
    precision: str,
    fp8: bool,
    fp8_recipe: str | None,
    fp4: bool,
    fp4_recipe: str | None,
    capacity_factor: float | None,
) -> tuple:
    """The setup a published throughput compares within: (model, hardware preset, GPUs, global batch, sequence,
    precision, capacity factor), the precision ("bf16",), ("fp8", recipe) or ("fp4", recipe)."""
    if fp8:
        prec = ("fp8", str(fp8_recipe or "delayed"))
    elif fp4:
        prec = ("fp4", str(fp4_recipe or "nvfp4"))
    else:
        prec = (str(precision),)
    return (model, hardware, int(gpus), int(global_batch), int(seq_len), prec, capacity_factor)


def context_setup_key(ctx: Context, gpus: int) -> tuple:
    """``setup_key`` of a search's or an explain's context on ``gpus`` GPUs."""
    o, tr = ctx.options, ctx.training
    return setup_key(
        ctx.model.name,
        ctx.hardware.name,
        gpus,
        tr.global_batch,
        tr.seq_len,
        tr.precision.value,
        o.fp8 is not None,
        o.fp8_recipe.value,
        o.fp4 is not None,
        o.fp4_recipe.value,
        o.moe_capacity_factor,
    )


def graphs_word(impl: str, modules: tuple[str, ...] = ()) -> str:
    """The CUDA graphs a published run captured, which its plan label does not show and which can move a run by tens
    of percent (a host-bound MoE step): "" without, else "CUDA graphs: full iteration", "CUDA graphs: TE attn,
    moe_router" (--cuda-graph-impl transformer_engine with its --cuda-graph-modules) or "CUDA graphs: local"."""
    if impl == "none":
        return ""
    if impl == "full_iteration":
        return "CUDA graphs: full iteration"
    name = {"transformer_engine": "TE", "local": "local"}.get(impl, impl)
    return f"CUDA graphs: {name}" + (f" {','.join(modules)}" if modules else "")


@dataclass(frozen=True)
class PublishedRun:
    """One published run of a setup: its throughput in tokens/s per GPU, its id in presets/reference, its plan as
    search labels plans (with its CUDA graphs, ``graphs_word``), the model's total parameters it priced, the GPU
    it ran on, and a MoE run's expert load imbalance (Megatron-Bridge's and NeMo's MoE benchmarks force-balance the
    routing, their tables' footnote: 1.0)."""

    tokens_per_gpu: float
    run_id: str
    plan: str
    model_params: int
    gpu: str
    load_imbalance: float | None = None  # a MoE run's busiest expert / the mean: 1.0 where its table force-balanced
    apart: bool = False  # megaplan validate reports it apart from its bar (superseded or regressed software, an assumed
    # setting): its throughput is what was published, not what the setup runs at today


@functools.cache
def _by_setup_without_model() -> dict[tuple, tuple[PublishedRun, ...]]:
    """The written table keyed by the setup without its model name, each run carrying its model's parameters: a model
    is matched by what it is (its parameter count, to the parameter), not by its name - a launch script's model is
    "imported", a user's copy of a preset may be renamed."""
    from planner.fidelity.published_setups import PUBLISHED

    out: dict[tuple, list] = {}
    for key, rows in PUBLISHED.items():
        out.setdefault(key[1:], []).extend(PublishedRun(*row) for row in rows)
    return {k: tuple(sorted(v, key=lambda r: (-r.tokens_per_gpu, r.run_id))) for k, v in out.items()}


def published_runs(ctx: Context, gpus: int) -> tuple[PublishedRun, ...]:
    """The published runs of the context's setup, fastest first: the same hardware preset (and its GPU), GPUs, batch,
    sequence, precision and capacity factor, and a model with the parameters the runs priced, whatever its name."""
    from planner.result import model_params

    rows = _by_setup_without_model().get(context_setup_key(ctx, gpus)[1:], ())
    if not rows:
        return ()
    total = model_params(ctx.model)["total"]
    return tuple(r for r in rows if r.model_params == total and r.gpu == ctx.hardware.gpu.name)


def plan_load_imbalance(ctx: Context) -> float | None:
    """The busiest expert's load the plan is priced with where the routing is dropless (--moe-load-imbalance); None
    for a dense model or with a capacity factor (every expert padded to its capacity: no imbalance to compare)."""
    if not ctx.model.is_moe or ctx.options.moe_capacity_factor is not None:
        return None
    return ctx.options.moe_load_imbalance


def published_json(
    runs: tuple[PublishedRun, ...], tokens_per_gpu: float, load_imbalance: float | None = None
) -> dict | None:
    """The plan JSON's ``published``: the setup's published runs (how many, the fastest, its plan) and the plan's
    estimate against the fastest, claim = estimate / fastest − 1 (None without a run); with a MoE plan's
    ``load_imbalance``, the fastest run's beside it where they differ (a force-balanced benchmark against a plan
    priced with real routing's busiest expert)."""
    if not runs:
        return None
    best = runs[0]
    balance = {}
    if load_imbalance is not None and best.load_imbalance is not None and best.load_imbalance != load_imbalance:
        balance = {"fastest_load_imbalance": best.load_imbalance, "plan_load_imbalance": load_imbalance}
    return {
        "runs": len(runs),
        "fastest_tokens_per_gpu": best.tokens_per_gpu,
        "fastest_id": best.run_id,
        "fastest_plan": best.plan,
        "estimate_tokens_per_gpu": tokens_per_gpu,
        "claim_pct": 100.0 * (tokens_per_gpu / best.tokens_per_gpu - 1.0),
        "ids": [r.run_id for r in runs],
        **balance,
        **({"fastest_apart": True} if best.apart else {}),
    }


def published_text(pub: dict, who: str = "this plan") -> str:
    """One sentence: what was published for the setup and ``who`` against its fastest."""
    runs = "1 published run" if pub["runs"] == 1 else f"{pub['runs']} published runs"
    fastest = "" if pub["runs"] == 1 else "the fastest "
    best = f"{pub['fastest_tokens_per_gpu']:,.0f} tokens/s per GPU ({pub['fastest_id']}: {pub['fastest_plan']})"
    balance = ""
    if "fastest_load_imbalance" in pub:
        balance = (
            f" (that run's routing force-balanced, busiest expert {pub['fastest_load_imbalance']:g} × the mean; "
            f"this estimate {pub['plan_load_imbalance']:g} ×, --moe-load-imbalance)"
        )
    apart = (
        "; megaplan validate reports that run apart (superseded or regressed software, or a setting it assumes)"
        if pub.get("fastest_apart")
        else ""
    )
    return (
        f"{runs} of this setup (model, GPUs, batch, sequence, precision): {fastest}{best}; {who} is estimated at "
        f"{pub['estimate_tokens_per_gpu']:,.0f} ({pub['claim_pct']:+.1f} %){balance}{apart}"
    )


def nearby_setups(ctx: Context, gpus: int) -> list[str]:
    """Where the context's own setup has no published run: the other setups of the same model (its parameters) on
    the same GPU count of the same hardware preset that have one, each as "batch B × s, precision" (the batches,
    sequences and precisions to ask for to see them), fewest words first; [] when the setup has runs or none is
    near."""
    from planner.result import model_params

    if published_runs(ctx, gpus):
        return []
    own = context_setup_key(ctx, gpus)
    total, gpu = model_params(ctx.model)["total"], ctx.hardware.gpu.name
    out = []
    for key, rows in _by_setup_without_model().items():
        if key[:2] != own[1:3] or not any(r.model_params == total and r.gpu == gpu for r in rows):
            continue
        precision = " ".join(key[4]) + (f", capacity factor {key[5]:g}" if key[5] is not None else "")
        out.append(f"batch {key[2]:,} × {key[3]:,}, {precision}")
    return sorted(out, key=lambda text: (len(text), text))
