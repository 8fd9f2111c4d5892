"""bcheck18: a section the Bridge export writes whole over a base recipe that holds it as an object.

Bridge v0.6.0's GB200 Qwen3-30B-A3B recipe (recipes/qwen/gb200/qwen3_moe.py) holds mixed_precision
(bf16_with_mxfp8_mixed()) and comm_overlap (CommOverlapConfig(...)) as objects. Run through Bridge's own
create_omegaconf_dict_config / parse_hydra_overrides on CPU (the bridge_check tool, Bridge v0.6.0 with Megatron-LM
d98e8a64), the dotlist line ``mixed_precision={_target_:...,bf16:true,...}`` is refused:

    OverridesError: Failed to parse Hydra overrides: Could not override 'mixed_precision'.

(the object became a structured node without a ``_target_`` key). Nulling the section first, as the export already
does for the userbuffer config, makes Hydra replace the node: with ``mixed_precision=null`` and ``comm_overlap=null``
before the two objects the same export passes runtime_config_update and validate() on an H100 stand-in device.
A base whose section is a preset name or none (the H100 recipes' 'str:bf16_mixed' / null) keeps one line."""

from __future__ import annotations

import pytest

from planner.bridge.export import _may_hold_object

from conftest import run_cli


def _lines(*args: str) -> list[str]:
    result = run_cli(["export", *args, "--format", "bridge"])
    assert result.exit_code == 0, result.output
    return [ln for ln in result.stdout.splitlines() if ln and not ln.startswith("#")]


QWEN = ["--model", "qwen3-30b-a3b", "--gpus", "8", "--tp", "1", "--pp", "1", "--ep", "8", "--distributed-optimizer"]
QWEN += ["--moe-token-dispatcher", "flex", "--moe-flex-dispatcher-backend", "hybridep"]


@pytest.mark.parametrize(("kind", "nulled"), [(None, True), ("MixedPrecisionConfig", True), ("null", False)])
def test_which_base_kinds_are_nulled_first(kind, nulled):
    assert _may_hold_object(kind) is nulled
    assert _may_hold_object("str:bf16_mixed") is False


def test_the_gb200_base_s_objects_are_nulled_before_they_are_written_whole():
    lines = _lines(*QWEN, "--hardware", "gb200-nvl72")
    for section in ("mixed_precision", "comm_overlap"):
        at = lines.index(f"{section}=null")
        assert lines[at + 1].startswith(f"{section}={{_target_:megatron.bridge.training.")
        assert sum(ln.startswith(f"{section}=") for ln in lines) == 2


def test_an_h100_base_holding_a_preset_name_keeps_one_line():
    """qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config @ v0.6.0: mixed_precision 'bf16_mixed', comm_overlap None."""
    lines = _lines(*QWEN, "--hardware", "dgx-h100-superpod", "--force")  # 101 GiB at b 1: written all the same
    assert "mixed_precision=null" not in lines and "comm_overlap=null" not in lines
    assert sum(ln.startswith("mixed_precision={_target_:") for ln in lines) == 1
