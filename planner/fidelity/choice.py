"""What the search would choose against what NVIDIA published: for each tuned recipe (DGX Cloud
benchmarking recipes, MLPerf, the NeMo and Megatron-Bridge performance pages of the reference
tables), search the recipe's model on its GPUs, global batch, sequence and precision (its software
options: FP8 recipe, CUDA graphs, fused MLP), and compare rank 1's predicted throughput with the
recipe's published one. A planner that claims much more than NVIDIA's own tuned recipe, on features
no published run exercises, is extrapolating; the claim and its evidence are printed side by side
(docs/cost-model.md §10.7).
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from planner import parallel
from planner.fidelity.runs import Run
from planner.fidelity.validate import predict, prepare
from planner.report.labels import plan_text

# The tuned recipes in presets/reference, dense and MoE, on H100, B200, GB200 and GB300: for every (model, preset)
# a tuned run in the bar ran on, at least one recipe (its latest release), and the latest NVFP4 run of each (model,
# preset, GPUs) where NVFP4 ran; never a row its own software fact sets apart, nor a verification card (the cards are
# the "best published" column). The first 18 are the set of 2026-12-02 (a sample); the other 26 (stop 34) complete
# it: GPT-OSS-120B, GB300, NVFP4, Nemotron-4, NeMo 2's GPT-3, the B200 rows of NeMo 25.02, more GPU counts of Llama
# 3.1 405B and Qwen3-235B; then 2, Grok-1 of the DGX Cloud recipes (held out), on GB200 and H100 in BF16; the last 3,
# Mixtral 8x7B and 8x22B of the NeMo docs' performance summary (held out), on B200 (25.02) and GB200 (25.04), FP8 -
# but for 8x22B on B200, apart as superseded software since 2026-12-04 (moe_runs.csv's flag); the last 4, Megatron-
# Bridge's B300 MoE rows (held out since 2026-12-05), each model's latest.
# ``CHOICE_TEST``: a slim subset for the test suite.
CHOICE_RECIPES = (
    "DGXC-v25.04-H100-Llama3-8B-fp8-n8",
    "DGXC-v25.04-H100-Llama3-70B-bf16-n64",
    "DGXC-v25.04-H100-GPT3-175B-bf16-n128",
    "DGXC-v25.05.05-H100-Llama3.1-405B-bf16-n512",
    "MB-26.04.01-H100-LLAMA3_70B-PRETRAIN-FP8_CS-n64-gbs256",
    "MB-25.09-B200-LLAMA3_8B-PRETRAIN-FP8_CS-n8-gbs128",
    "MB-25.09-B200-LLAMA31_405B-PRETRAIN-FP8_CS-n128-gbs64",
    "NEMODOC-25.04-GB200-Nemotron4-15B-n64",
    "MB-26.04-GB200-LLAMA3_70B-PRETRAIN-FP8_MX-n64-gbs256",
    "DGXC-v25.05.05-GB200-Llama3.1-405B-bf16-n128",
    "MB-26.06-H100-QWEN3-30B-16",
    "MB-26.04.01-H100-QWEN3-235B-256",
    "MB-25.09-H100-DSV3-1024",
    "MB-26.04.01-B200-QWEN3-30B-8",
    "MB-26.04.01-B200-DSV3-256",
    "MB-26.08-GB200-QWEN3-30B-8",
    "MB-26.08-GB200-QWEN3-235B-256",
    "MB-26.08-GB200-DSV3-256",
    "MB-25.09-B200-QWEN3-235B-64",
    "MB-25.09-GB200-LLAMA3_8B-PRETRAIN-FP8_CS-n8-gbs128",
    "MB-26.04.01-B200-GPTOSS120B-64",
    "MB-26.04.01-B200-QWEN3-235B-256",
    "MB-26.04.01-GB200-LLAMA3_70B-PRETRAIN-NVFP4-n64-gbs256",
    "MB-26.04.01-GB300-LLAMA3_70B-PRETRAIN-FP8_MX-n64-gbs256",
    "MB-26.04.01-GB300-LLAMA3_70B-PRETRAIN-NVFP4-n64-gbs256",
    "MB-26.04.01-H100-GPTOSS120B-64",
    "MB-26.06-GB200-LLAMA31_405B-PRETRAIN-FP8_CS-n256-gbs1536",
    "MB-26.06-GB200-LLAMA31_405B-PRETRAIN-NVFP4-n256-gbs1536",
    "MB-26.06-GB300-LLAMA31_405B-PRETRAIN-FP8_CS-n256-gbs1536",
    "MB-26.06-GB300-LLAMA31_405B-PRETRAIN-NVFP4-n256-gbs1536",
    "MB-26.06-H100-LLAMA31_405B-PRETRAIN-FP8_CS-n1024-gbs1536",
    "MB-26.08-GB200-GPTOSS120B-64",
    "MB-26.08-GB300-DSV3-256",
    "MB-26.08-GB300-GPTOSS120B-64",
    "MB-26.08-GB300-QWEN3-235B-256",
    "MB-26.08-GB300-QWEN3-30B-8",
    "DGXC-v25.05.05-H100-Nemotron4-15B-fp8-n16",
    "DGXC-v25.05.05-H100-Nemotron4-340B-fp8-n256",
    "DGXC-v25.05.05-GB200-Nemotron4-340B-fp8-n256",
    "NEMODOC-25.02-H100-GPT3-175B-n512",
    "NEMODOC-25.02-B200-GPT3-175B-n512",
    "NEMODOC-25.02-B200-Llama3-70B-n64",
    "NEMODOC-25.02-B200-Nemotron4-340B-n128",
    "NEMODOC-25.04-GB200-GPT3-175B-n128",
    "DGXC-v25.05.05-GB200-GROK1-BF16-128",
    "DGXC-v25.05.05-H100-GROK1-BF16-512",
    "NEMODOC-25.02-B200-MIXTRAL8X7B-64",
    "NEMODOC-25.04-GB200-MIXTRAL8X7B-64",
    "NEMODOC-25.04-GB200-MIXTRAL8X22B-256",
    "MB-26.06-B300-DSV3-256",
    "MB-26.06-B300-GPTOSS120B-64",
    "MB-26.06-B300-QWEN3-30B-8",
    "MB-26.04.01-B300-QWEN3-235B-256",
)
CHOICE_TEST = ("DGXC-v25.04-H100-Llama3-8B-fp8-n8", "MB-26.08-GB200-QWEN3-30B-8")
MEDIAN_TARGET, MAX_TARGET = 0.05, 0.10  # rank 1's claimed gain over the recipe, unless all its features are validated


def recipe_runs(ids: tuple[str, ...] = CHOICE_RECIPES) -> list[Run]:
    """The recipes' reference runs (dense and MoE), in the order of ``ids``."""
    from planner.fidelity.moe_runs import load_moe_runs
    from planner.fidelity.runs import load_runs

    by_id = {r.id: r for r in [*load_runs(), *load_moe_runs()]}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ValueError(f"no reference run {', '.join(missing)}")
    return [by_id[i] for i in ids]


def published_tokens_per_gpu(run: Run) -> float:
    """The recipe's published throughput in tokens/s per GPU (a step time converted: B·s/t/n)."""
    q = run.request
    if run.metric == "tokens/s per GPU":
        return run.published
    if run.metric in ("step time (s)", "iteration time (s)"):
        return q["global_batch"] * q["seq_len"] / run.published / q["gpus"]
    raise ValueError(f"{run.id}: metric {run.metric!r} is not a throughput")


def setup_key(run: Run) -> tuple:
    """The setup a published throughput compares within (``planner.fidelity.published.setup_key``): the model, the
    hardware preset, the GPU count, the global batch, the sequence and the precision (BF16, or FP8 / FP4 with its
    recipe), and token drop's capacity factor (a dropping run does other work) - everything a user asks for, nothing
    of the plan."""
    from planner.fidelity.published import setup_key as key

    q = run.request
    o = q.get("options", {})
    model = q["model"] if isinstance(q["model"], str) else q["model"].name
    return key(
        model,
        run.hardware,
        q["gpus"],
        q["global_batch"],
        q["seq_len"],
        str(q.get("precision", "bf16")),
        bool(o.get("fp8")),
        o.get("fp8_recipe", "delayed"),
        bool(o.get("fp4")),
        o.get("fp4_recipe", "nvfp4"),
        o.get("moe_capacity_factor"),
    )


@functools.lru_cache(maxsize=1)
def published_by_setup() -> dict[tuple, tuple[tuple[float, str], ...]]:
    """Every reference run's published throughput in tokens/s per GPU (the tables of every release, the DGX Cloud
    and NeMo pages, the Megatron-Bridge verification cards' held-out rows), by ``setup_key``; a run whose metric is
    no throughput (MFU, memory) is left out."""
    from planner.fidelity.moe_runs import load_moe_runs
    from planner.fidelity.runs import load_runs

    out: dict[tuple, list] = {}
    for run in [*load_runs(), *load_moe_runs()]:
        try:
            value = published_tokens_per_gpu(run)
        except (ValueError, KeyError, TypeError):
            continue
        out.setdefault(setup_key(run), []).append((value, run.id))
    return {k: tuple(v) for k, v in out.items()}


def best_published(run: Run) -> tuple[float, str]:
    """The fastest published throughput of the recipe's setup (``setup_key``) and the run that measured it: the
    recipe itself unless a later release or a verification card ran the same setup faster."""
    own = (published_tokens_per_gpu(run), run.id)
    return max((own, *published_by_setup().get(setup_key(run), ())), key=lambda p: (p[0], p[1] == run.id))


def choice_row(run: Run) -> dict:
    """Search the recipe's model, GPUs, batch, sequence and precision; rank 1 against the recipe."""
    from planner.search import search

    req = prepare(run)
    published = published_tokens_per_gpu(run)
    tokens = req.ctx.training.global_batch * req.ctx.training.seq_len
    recipe_pred = tokens / predict(replace(run, metric="step time (s)"), req=req) / req.gpus
    with np.errstate(divide="ignore", invalid="ignore"):
        result = search(req.ctx, req.gpus, top=1)
    first = result.plans[0]
    rank1 = first["estimate"]["tokens_per_s"] / req.gpus
    ev = first["evidence"]
    best, best_id = best_published(run)
    return {
        "id": run.id,
        "hardware": run.hardware,
        "model": req.ctx.model.name,
        "moe": req.ctx.model.is_moe,
        "gpus": req.gpus,
        "published_tokens_per_gpu": published,
        "recipe_predicted_tokens_per_gpu": recipe_pred,
        "recipe_error_pct": 100 * (recipe_pred / published - 1),
        # search's own label (its overlaps and notes too: ``no-tpo`` where rank 1 turns off an overlap the recipe runs)
        "rank1_plan": plan_text(first),
        "rank1_tokens_per_gpu": rank1,
        "claimed_gain_pct": 100 * (rank1 / published - 1),
        # the claim without the model's error on the recipe: rank 1 over the recipe, both priced by the model
        "model_gain_pct": model_gain_pct(rank1, recipe_pred),
        # the same setup's fastest published run (a later release or a verification card), and the claim against it
        "best_published_tokens_per_gpu": best,
        "best_published_id": best_id,
        "claimed_gain_vs_best_pct": 100 * (rank1 / best - 1),
        "rank1_band_frac": ev["band_frac"],
        "rank1_validated": not ev["extrapolated"] and not ev.get("disputed"),
        "rank1_settings": ev["settings"],
        "rank1_extrapolated": ev["extrapolated"],
        "rank1_features": ev["features"],
        "moved_down_for_evidence": result.moved_down,
    }


def model_gain_pct(rank1_tokens_per_gpu: float, recipe_predicted_tokens_per_gpu: float) -> float:
    """What the search believes it found over the recipe, in per cent: rank 1 over the recipe's own plan, both
    priced by the model, g = 100·(r₁/r̂ − 1). The claim c = 100·(r₁/r − 1) against the published r splits as
    1 + c/100 = (1 + e/100)·(1 + g/100), e = 100·(r̂/r − 1) the model's error on the recipe ('recipe pred.'): a
    claim that is mostly e is the model mispricing the recipe, one that is mostly g a plan the model ranks
    faster (docs/cost-model.md §10.7)."""
    return 100 * (rank1_tokens_per_gpu / recipe_predicted_tokens_per_gpu - 1)


def choice_summary(rows: list[dict]) -> dict:
    """Median and largest claimed gain, over every recipe and over those whose rank 1 extrapolates (the
    targets: median ≤ 5 %, max ≤ 10 %, unless every feature of rank 1 is validated)."""
    gains = np.array([r["claimed_gain_pct"] for r in rows])
    bound = [r["claimed_gain_pct"] for r in rows if not r["rank1_validated"]]
    median, worst = float(np.median(gains)), float(np.max(gains))
    bound_max = max(bound) if bound else None
    model = np.array([r["model_gain_pct"] for r in rows if "model_gain_pct" in r])
    return {
        "recipes": len(rows),
        "median_gain_pct": median,
        "max_gain_pct": worst,
        # the same net of the model's error on each recipe (``model_gain_pct``); None when no row carries it
        "median_model_gain_pct": float(np.median(model)) if len(model) else None,
        "max_model_gain_pct": float(np.max(model)) if len(model) else None,
        "max_gain_extrapolated_pct": bound_max,
        "validated_rank1": [r["id"] for r in rows if r["rank1_validated"]],
        "over_target": [r["id"] for r in rows if r["claimed_gain_pct"] > 100 * MAX_TARGET and not r["rank1_validated"]],
        "meets_target": median <= 100 * MEDIAN_TARGET and (bound_max is None or bound_max <= 100 * MAX_TARGET),
    }


def validate_choice(ids: tuple[str, ...] = CHOICE_RECIPES, step=None) -> dict:
    """Every recipe's row and the summary; ``step(description)`` as each search ends (a progress bar). The
    searches are shared between two processes where ``parallel.can_fork`` (``parallel.map_jobs``: the same
    searches, the same rows), the largest first (``recipe_cost``)."""
    runs = recipe_runs(ids)
    said = (lambda i: step(f"searched {runs[i].id}")) if step else None
    jobs = [functools.partial(choice_row, run) for run in runs]
    rows = parallel.map_jobs(jobs, parallel.can_fork(), said, [recipe_cost(run) for run in runs])
    return {"recipes": rows, "summary": choice_summary(rows)}


def recipe_cost(run: Run) -> float:
    """How long a recipe's search takes, roughly, to start the longest first: 1 for a mixture-of-experts model
    (its expert-parallel axes make its space several times a dense model's: 0.25-0.6 s of CPU against
    0.06-0.15 s for the dense recipes, measured one by one), 0 for a dense one."""
    from planner.presets import load_model

    model = run.request["model"]
    model = load_model(model) if isinstance(model, str) else model
    return 1.0 if model.num_experts else 0.0
