"""ux15: what a user trips on (the fix line's price, calibrate's errors, wrapped figures, a newcomer's pass)."""

from __future__ import annotations

import json

from conftest import run_cli

TYPED = ["--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--pp", "1", "--micro-batch", "1"]  # 93.4 GiB: no fit


def _explained(args: list[str]) -> dict:
    result = run_cli(["explain", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_fix_line_prices_the_change_as_the_user_runs_it_after_typing_it():
    # a plan typed as flags runs search's overlaps; adding --distributed-optimizer brings --overlap-param-gather
    # (plan_options.recipe_overlaps). The fix line priced the variant with the base plan's overlaps (gather off):
    # 135.65 s against the 135.63 s the user then gets
    base = _explained(TYPED)
    assert not base["estimate"]["fits"]
    fix = base["fit_suggestions"][0]
    assert fix["change"] == "--distributed-optimizer"
    after = _explained([*TYPED, "--distributed-optimizer"])
    assert after["options"]["overlap_param_gather"] and not base["options"]["overlap_param_gather"]
    assert fix["iteration_s"] == after["estimate"]["iteration_s"]
    assert fix["peak_memory_gib"] == after["estimate"]["peak_memory_gib"]
    assert round(100 * fix["mfu"], 6) == round(100 * after["estimate"]["mfu"], 6)
    # the user's own --no-overlap-param-gather stays off in the variant: priced as typed, slower
    kept = _explained([*TYPED, "--no-overlap-param-gather"])["fit_suggestions"][0]
    off = _explained([*TYPED, "--distributed-optimizer", "--no-overlap-param-gather"])["estimate"]
    assert kept["iteration_s"] == off["iteration_s"] > fix["iteration_s"]


def test_a_weakly_identified_all_to_all_factor_is_kept_with_its_reason():
    # fit's "drop the secondary factor" ranked factors by FIT_FIELDS.index: moe_fit's η_a2a is fitted by name
    # outside them, and two H100 rows that cannot pin it (σ over half its band) raised
    # "ValueError: tuple.index(x): x not in tuple" instead of keeping it at the preset's value
    from planner.fidelity.moe_fit import A2A_FACTOR, fit_a2a
    from planner.fidelity.moe_runs import load_moe_runs
    from planner.presets import load_hardware

    ids = ("MB-25.09-H100-DSV3-1024", "MB-25.09-H100-QWEN3-30B-16")
    runs = [r for r in load_moe_runs() if r.id in ids]
    assert len(runs) == 2
    got = fit_a2a("dgx-h100-superpod", runs).factors[A2A_FACTOR]
    assert got.status == "not identifiable"
    assert got.value == load_hardware("dgx-h100-superpod").calibration.a2a_network_efficiency
    assert got.why.startswith("σ is ")
    assert got.why.endswith("of its band: the runs cannot tell it from the other factors")
