"""GPU counts answered from arithmetic before any grid: ``WorldAxes`` is a necessary condition for a
legal plan (never says no where the rule table says yes), and a huge or oddly factored count gets one
clear line, exit code 2 (the hang of issue 21 item 5: --gpus 10000000 built a grid for minutes)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.api import make_request
from planner.cli import cli
from planner.errors import InfeasibleError
from planner.search import search
from planner.space.candidates import NO_PINS, Pins
from planner.space.sizes import WorldAxes, has_legal_plan

PRESETS = ("gpt3-175b", "llama3-8b", "mixtral-8x7b", "deepseek-v3")


@pytest.fixture(scope="module")
def contexts():
    return {name: make_request(model=name, gpus=8).ctx for name in PRESETS}


def test_gpt3_axes_by_hand(contexts):
    # 96 heads, 8-GPU NVLink domain: tp ∈ {1, 2, 4, 8}; s = 2048 < 2·4096: cp = 1; L = 96: pp divides
    # 96, 97 or 98; B = 1536 = 2^9·3: dp divides it (20 divisors)
    axes = WorldAxes.of(contexts["gpt3-175b"], NO_PINS)
    assert axes.tp == (1, 2, 4, 8)
    assert axes.cp == (1,)
    assert axes.pp == (1, 2, 3, 4, 6, 7, 8, 12, 14, 16, 24, 32, 48, 49, 96, 97, 98)
    assert len(axes.dp) == 20 and max(axes.dp) == 1536
    assert axes.largest() == 8 * 1 * 98 * 1536  # 1,204,224
    # 10^6 = 2^6·5^6: dp brings no 5 and tp·pp at most 5^2 (pp 25 is not among them: 5 only) -> no plan
    assert not axes.allows(1_000_000)
    assert axes.allows(1024) and axes.allows(896)  # 896 = 8·7·16: tp 8, pp 7, dp 16
    assert not axes.allows(1000)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(PRESETS), n=st.integers(1, 600))
def test_axes_never_reject_a_size_with_a_legal_plan(contexts, name, n):
    ctx = contexts[name]
    if has_legal_plan(ctx, n, NO_PINS):
        assert WorldAxes.of(ctx, NO_PINS).allows(n)


@pytest.mark.parametrize(
    ("pins", "n"),
    [
        (Pins(tp=4), 96),
        (Pins(pp=8, dp=4), 256),
        (Pins(cp=2), 64),
        (Pins(micro_batch=2), 192),
        (Pins(pp=4, first_stage_layers=2), 64),
    ],
)
def test_pinned_axes_keep_legal_sizes(contexts, pins, n):
    ctx = contexts["llama3-8b"]  # 32 heads, 32 layers, s = 8192 (cp 2 searched), B = 512
    assert has_legal_plan(ctx, n, pins)
    assert WorldAxes.of(ctx, pins).allows(n)


def test_pins_narrow_the_axes(contexts):
    ctx = contexts["llama3-8b"]
    assert WorldAxes.of(ctx, Pins(micro_batch=2)).dp[-1] == 256  # dp divides B/b = 512/2
    assert WorldAxes.of(ctx, Pins(tp=3)).tp == ()  # 32 heads do not divide by 3
    assert WorldAxes.of(ctx, Pins(pp=4, first_stage_layers=2)).pp == (4,)
    # explicit stages: the middle stages hold a layer each (Megatron-LM transformer_config.py, "Mismatch: ...
    # middle PP stages"), so pp ≤ L + 2 = 34 (unbounded, a search on 2147483647 GPUs scanned 8,192 sizes near it)
    assert WorldAxes.of(ctx, Pins(first_stage_layers=2)).pp == tuple(range(1, 35))
    assert WorldAxes.of(ctx, Pins(pipeline_layout="Et*8|t*8|t*8|t*8L")).pp == (1, 2, 4)  # pp divides the 4 stages
    assert not WorldAxes.of(ctx, Pins(tp=3)).allows(96)


@pytest.mark.parametrize(
    ("gpus", "needle"),
    [
        ("10000000", "at most 1,204,224 GPUs can hold a legal plan"),
        ("1000000", "1,000,000 is not tp·cp·pp·dp with tp in {1, 2, 4, 8}, cp in {1}"),
    ],
)
def test_huge_gpu_counts_are_one_line(gpus, needle):
    result = CliRunner().invoke(cli, ["search", "--model", "gpt3-175b", "--gpus", gpus])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert needle in lines[0] and f"on {int(gpus):,} GPUs" in lines[0], lines[0]


def test_a_gpu_count_past_32_bits_is_refused_as_every_size_is():
    # every integer option stops at 2³¹−1 (planner.cli.option_spec.IntRange), --gpus of search as of calibrate
    result = CliRunner().invoke(cli, ["search", "--model", "gpt3-175b", "--gpus", "123456789012345"])
    assert result.stderr == (
        "megaplan: error: Invalid value for '--gpus': 123456789012345 is not in the range 1<=x<=2147483647.\n"
    )


def test_sweep_of_an_impossible_size_is_one_line():
    result = CliRunner().invoke(cli, ["sweep", "--model", "gpt3-175b", "--gpus", "1024,10000000"])
    assert result.exit_code == 2, result.output
    assert "at most 1,204,224 GPUs" in result.stderr.strip().splitlines()[-1]


def test_bound_keeps_pinned_reason(contexts):
    with pytest.raises(InfeasibleError, match="--tp 3 and --pp 5 do not divide 1,024 GPUs"):
        search(contexts["gpt3-175b"], 1024, Pins(tp=3, pp=5))
