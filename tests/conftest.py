"""Shared fixtures and hypothesis strategies for the core test suite.

The strategies only build valid specs and legal plans (draw the heads, then set
hidden = heads · head_dim; draw the pipeline, then set the layers to a multiple of it), so
hypothesis almost never has to discard an example.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from hypothesis import strategies as st

from planner.hardware.spec import HardwareSpec
from planner.models.spec import ModelSpec
from planner.plan import Context, ParallelPlan, PlanOptions, Recompute, StageSplit, TrainingSpec
from planner.presets import load_hardware, load_model

REPO = Path(__file__).resolve().parents[1]
PRESETS = REPO / "presets"

GIB = 2**30


# ----------------------------------------------------------------------------- presets


@cache
def a100() -> HardwareSpec:
    """The DGX A100 80 GB SuperPOD preset (Narayanan 2021 / Korthikanti 2022 system)."""
    return load_hardware("dgx-a100-superpod")


@cache
def model_preset(name: str) -> ModelSpec:
    return load_model(name)


@pytest.fixture(scope="session")
def dgx_a100() -> HardwareSpec:
    return a100()


@pytest.fixture(scope="session")
def gpt3_175b() -> ModelSpec:
    return model_preset("gpt3-175b")


def gpt_model(L: int, h: int, a: int, *, V: int = 51200, name: str = "test-gpt", **extra) -> ModelSpec:
    """A GPT-3-shaped model (4h GeLU MLP, LayerNorm, biases, tied embeddings, learned positions).

    V defaults to the papers' padded 51200 with make_vocab_size_divisible_by = 128, so Megatron's
    padding leaves it unchanged for t ≤ 8 (51200 = 400·128 = 50·1024).
    """
    return ModelSpec(
        name=name,
        source="test",
        num_layers=L,
        hidden_size=h,
        num_attention_heads=a,
        max_position_embeddings=2048,
        vocab_size=V,
        **extra,
    )


# ----------------------------------------------------------------------------- strategies

HEAD_DIMS = (16, 32, 64, 128)
POWERS_OF_TWO_TO_8 = (1, 2, 4, 8)


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


@st.composite
def model_specs(draw, t: int | None = None) -> ModelSpec:
    """A valid ModelSpec whose heads (and query groups and ffn) split over ``t`` when given."""
    t = t or 1
    k = draw(st.integers(1, 8))
    a = t * k
    head_dim = draw(st.sampled_from(HEAD_DIMS))
    h = a * head_dim
    # query groups: a (no GQA) or t·j with j dividing a/t, so g % t == 0 and a % g == 0
    g = draw(st.sampled_from(sorted({a} | {t * j for j in _divisors(k)})))
    swiglu = draw(st.booleans())
    ffn = draw(st.one_of(st.none(), st.integers(1, 64).map(lambda r: 64 * t * r)))
    return ModelSpec(
        name="hypothesis",
        source="hypothesis strategy",
        num_layers=draw(st.integers(1, 32)),
        hidden_size=h,
        num_attention_heads=a,
        num_query_groups=None if g == a else g,
        ffn_hidden_size=ffn,
        max_position_embeddings=4096,
        vocab_size=draw(st.integers(1000, 60000)),
        swiglu=swiglu,
        normalization=draw(st.sampled_from(["LayerNorm", "RMSNorm"])),
        position_embedding_type=draw(st.sampled_from(["learned_absolute", "rope"])),
        untie_embeddings_and_output_weights=draw(st.booleans()),
        add_bias_linear=draw(st.booleans()),
        hidden_dropout=draw(st.sampled_from([0.0, 0.1])),
        attention_dropout=draw(st.sampled_from([0.0, 0.1])),
    )


@dataclass(frozen=True)
class Setup:
    """One legal configuration: everything ``evaluate`` needs."""

    model: ModelSpec
    training: TrainingSpec
    options: PlanOptions
    plan: ParallelPlan

    @property
    def ctx(self) -> Context:
        return Context(self.model, a100(), self.training, self.options)

    @property
    def gpus(self) -> int:
        return self.plan.world_size


def options_strategy() -> st.SearchStrategy[PlanOptions]:
    return st.builds(
        PlanOptions,
        attention_kernel=st.sampled_from(["flash", "unfused"]),
        overlap_grad_reduce=st.booleans(),
        grad_reduce_in_bf16=st.booleans(),
        pp_scatter_gather=st.booleans(),
        overlap_p2p_comm=st.booleans(),
        distribute_saved_activations=st.booleans(),
    )


@st.composite
def plan_for(
    draw,
    model: ModelSpec,
    t: int,
    p: int,
    vpp: int,
    *,
    split: StageSplit = StageSplit.EVEN,
    micro_batch: int | None = None,
    m: int | None = None,
    d: int | None = None,
) -> tuple[ParallelPlan, int]:
    """A legal ParallelPlan on ``model`` and its global batch B = b·d·m (m a multiple of p when interleaved)."""
    d = d or draw(st.sampled_from(POWERS_OF_TWO_TO_8))
    b = micro_batch or draw(st.sampled_from((1, 2, 4)))
    if m is None:
        m = p * draw(st.integers(1, 4)) if vpp > 1 else draw(st.integers(1, 16))
    plan = ParallelPlan(
        tp=t,
        pp=p,
        dp=d,
        vpp=vpp,
        micro_batch=b,
        sequence_parallel=draw(st.booleans()) if t > 1 else False,
        recompute=draw(st.sampled_from(list(Recompute))),
        distributed_optimizer=draw(st.booleans()),
        stage_split=split,
    )
    return plan, b * d * m


@st.composite
def setups(draw, *, t: int | None = None, p: int | None = None, vpp: int | None = None) -> Setup:
    """A legal configuration: model, training, options and a plan Megatron-LM would accept."""
    t = t or draw(st.sampled_from(POWERS_OF_TWO_TO_8))
    p = p or draw(st.sampled_from(POWERS_OF_TWO_TO_8))
    vpp = vpp or (draw(st.sampled_from((1, 1, 2, 3))) if p > 1 else 1)
    model = draw(model_specs(t=t))
    chunk_layers = draw(st.integers(1, 3))
    split = StageSplit.EVEN
    if vpp == 1 and draw(st.booleans()):
        split = draw(st.sampled_from(list(StageSplit)))
    e, lo = int(split.embedding_counted), int(split.loss_counted)
    # L = p·vpp·k for an even split; L + e + lo = p·(k + 2) for an accounted one, so the end
    # stages keep at least 2 transformer layers
    L = p * vpp * chunk_layers if split is StageSplit.EVEN else p * (chunk_layers + 2) - e - lo
    model = model.model_copy(update={"num_layers": L})
    plan, B = draw(plan_for(model, t, p, vpp, split=split))
    s = draw(st.sampled_from((128, 256, 512, 1024, 2048)))
    training = TrainingSpec(global_batch=B, seq_len=s, precision=draw(st.sampled_from(["bf16", "fp16", "fp32"])))
    options = draw(options_strategy())
    if vpp > 1 and p <= 2:
        # Megatron: the interleaved schedule needs pp > 2 unless it overlaps p2p communication
        options = options.model_copy(update={"overlap_p2p_comm": True})
    if plan.recompute.value != "full" or plan.tp == 1 or plan.sequence_parallel:
        # Megatron: --distribute-saved-activations only with full recomputation, tp > 1 and no SP
        options = options.model_copy(update={"distribute_saved_activations": False})
    return Setup(model=model, training=training, options=options, plan=plan)


def stage_memory_gib(plan, ctx) -> list[dict[str, float]]:
    """Memory of every pipeline stage of one plan, term by term, in GiB, first stage first."""
    return stage_memory_gib_of([plan], ctx)[0]


def stage_memory_gib_of(plans, ctx) -> list[list[dict[str, float]]]:
    """``stage_memory_gib`` of several plans on one context, from one evaluation of the grid of them (each row's
    numbers are those it has alone: test_properties.test_grid_evaluation_equals_one_plan_at_a_time)."""
    from planner.costs.estimate import MEMORY_TERMS, evaluate
    from planner.space.grid import PlanGrid

    st = evaluate(PlanGrid.from_plans(list(plans)), ctx, stages=True).stages
    return [
        [
            {
                "stage": k,
                "layers": int(st.layers[j, k]),
                **{t: float(st.memory[t][j, k]) / GIB for t in (*MEMORY_TERMS, "total")},
            }
            for k in range(plan.pp)
        ]
        for j, plan in enumerate(plans)
    ]


def pipeline_s(time_terms: dict[str, float]) -> float:
    """The closed form's pipeline part: every time term but the tail after the flush (forward +
    backward + recompute + tp_comm + bubble + pp_comm, and CP and MoE communication where present)."""
    from planner.timeline import TAIL_TERMS

    return sum(v for k, v in time_terms.items() if k not in TAIL_TERMS)


def run_cli(args: list[str], **kw):
    """megaplan with ``args`` in-process (click's runner; stderr kept apart)."""
    from click.testing import CliRunner

    from planner.cli import cli

    return CliRunner().invoke(cli, args, **kw)


def one_line_error(result) -> str:
    """The one stderr line of a refused command: exit code 2, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.stderr
    return lines[0]


# A Slurm job whose Megatron launch reads TP and PP from its environment (written for the tests: the
# launch-script import's --export and --export-file tests share it)
SLURM_BODY = """
srun python pretrain_gpt.py \\
    --tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP \\
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 \\
    --seq-length 4096 --max-position-embeddings 4096 \\
    --micro-batch-size 1 --global-batch-size 256 --bf16 \\
    --tokenizer-type NullTokenizer --vocab-size 32000
"""
SLURM_NODES = "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=8\n"


# ----------------------------------------------------------------------------- the cyclic collector


def pytest_configure(config):
    """The collector runs a tenth as often as CPython's default (700, 10, 10) in the test processes. A worker's heap
    holds every collected test module, item and report, hypothesis's caches and the planner's lru caches (300,000
    objects and more by the end), and the default thresholds ran some 40-60 full collections over them per xdist
    worker: 3.5-4.7 s of each worker's ~100 s (gc.callbacks, 2 workers), 0.15 s with these. The tests' numbers do
    not depend on when garbage is collected; the CLI's own collector settings (``_imports_without_gc``) are what
    they were, and test_startup checks them in a process of their own."""
    import gc

    gc.set_threshold(20_000, 20, 20)


def read_bridge_export(text: str):
    """A megaplan Bridge export read back as its header says (``# megaplan-import:`` tag, recipe, GPUs, hardware and
    ``# megaplan-env:``): the importer's result, ``.request`` and ``.notes``."""
    from planner.bridge.importer import header_options, read_bridge_text, request_from_bridge

    head = header_options(text)
    return request_from_bridge(
        read_bridge_text(text),
        tag=head["bridge_version"],
        recipe=head["bridge_recipe"],
        gpus=int(head["gpus"]),
        hardware=head["hardware"],
        env=head["env"],
    )
