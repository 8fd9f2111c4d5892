"""--moe-router-padding-for-quantization: the router pads each expert's tokens to the quantisation alignment.

Megatron-LM (d98e8a64): the alltoall dispatcher pads the routing map (moe_utils.pad_routing_map: expert e takes the
first (−n_e mod align) tokens not routed to it) and the experts then skip Transformer Engine's Fp8Padding and
Fp8Unpadding copies (moe_utils.skip_routed_expert_padding). The alignment is get_align_size_for_quantization's: 256
with the TE op fuser, else fp8_utils.get_fp8_align_size, 32 for MXFP8 and 16 for the other recipes. The flag was
read and said "priced with the copies" (fp816's note); it is priced now, both ways. The command lines are written
here (a Qwen3-30B-A3B-shaped model)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.api import make_request
from planner.bridge.table import ROWS
from planner.costs import blocks, moe
from planner.costs.letters import Letters
from planner.errors import InfeasibleError, PlannerError
from planner.megatron.export import megatron_argv
from planner.megatron.importer import import_megatron
from planner.presets import load_hardware
from planner.space.grid import PlanGrid

QWEN3_30B = (
    "pretrain_gpt.py --num-layers 48 --hidden-size 2048 --ffn-hidden-size 6144 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 4 --kv-channels 128 --qk-layernorm --num-experts 128 "
    "--moe-router-topk 8 --moe-ffn-hidden-size 768 --moe-grouped-gemm --expert-model-parallel-size 8 "
    "--moe-token-dispatcher-type alltoall --micro-batch-size 2 --global-batch-size 512 --seq-length 4096 "
    "--max-position-embeddings 4096 --bf16 --swiglu --normalization RMSNorm --position-embedding-type rope "
    "--disable-bias-linear --untie-embeddings-and-output-weights --vocab-size 151936 --tokenizer-type NullTokenizer "
    "--use-distributed-optimizer --fp8-format e4m3 --fp8-recipe mxfp8"
)


def test_padding_rows_and_alignment_by_hand():
    """E·(align − 1)/2 in expectation: counts spread evenly modulo align leave 0, 1, …, align − 1 rows to pad,
    (align − 1)/2 on average, for each of the E experts. Qwen3-30B-A3B (E = 128): MXFP8 128 × 31 / 2 = 1,984;
    tensorwise 128 × 15 / 2 = 960; the op fuser's 256 rows 128 × 255 / 2 = 16,320."""
    assert moe.router_padding_align("mxfp8", op_fuser=False) == 32
    assert moe.router_padding_align("tensorwise", op_fuser=False) == 16
    assert moe.router_padding_align("blockwise", op_fuser=False) == 16
    assert moe.router_padding_align("mxfp8", op_fuser=True) == 256
    assert moe.router_padding_rows(128, 32) == 1984
    assert moe.router_padding_rows(128, 16) == 960
    assert moe.router_padding_rows(128, 256) == 16_320
    # the expectation, counted: every residue 0..31 once
    assert moe.router_padding_rows(1, 32) == np.mean([(-n) % 32 for n in range(32)])


def _block(**opts):
    req = make_request(
        model="qwen3-30b-a3b", hardware="dgx-b200-superpod", gpus=8, tp=1, pp=1, ep=8, micro_batch=2,
        global_batch=512, moe_token_dispatcher="alltoall",
        options={"moe_load_imbalance": 1.0, "fp8": "e4m3", "fp8_recipe": "mxfp8", **opts},
    )  # fmt: skip
    lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
    return req.ctx, {k: float(np.ravel(v)[0]) for k, v in blocks.moe_mlp_block(lt, req.ctx).items()}


def test_padded_rows_are_dispatched_and_the_copies_are_gone():
    """Qwen3-30B-A3B on 8 B200, EP 8, b 2, MXFP8, balanced routing: A = 2 × 4,096 × 8 = 65,536 routed pairs a GPU;
    the router adds 1,984, which the all-to-all moves at 2 bytes × h = 2,048 each: (65,536 + 1,984) × 4,096 =
    276,561,920 bytes against 268,435,456. Without the flag TE's padding copies move 8 × 65,536 × 2,048 =
    1,073,741,824 bytes a pass; with it none."""
    ctx, plain = _block()
    _, padded = _block(moe_router_padding_for_quantization=True)
    assert plain["a2a_bytes"] == 268_435_456
    assert padded["a2a_bytes"] == 276_561_920
    copies = moe.fp8_padding_bytes(
        65_536, 2048, moe.DISPATCHER_KINDS["alltoall"], recipe="mxfp8", counts_per_expert=None
    )
    assert float(copies) == 1_073_741_824
    # the expert GEMMs run A + 1,984 rows: 16 local experts of 4,220 rows instead of 4,096, FLOPs × 67,520/65,536
    # (their time a little less: the GEMM law's efficiency rises with M)
    flops = {
        a: sum(g.flops for g in moe.expert_gemms(a, 2048, 768, 128, 8, 1, gated=True).values())
        for a in (65_536, 67_520)
    }
    assert float(flops[67_520] / flops[65_536]) == pytest.approx(67_520 / 65_536, rel=1e-12)
    assert 1.0 < padded["expert_linear"] / plain["expert_linear"] <= 67_520 / 65_536 * 1.01
    assert padded["experts_fwd"] < plain["experts_fwd"]  # on B200 the copies cost more than 3 % more rows


@settings(max_examples=25, deadline=None)
@given(recipe=st.sampled_from(["mxfp8", "tensorwise", "blockwise"]), fuser=st.booleans())
def test_padding_never_shrinks_what_is_dispatched(recipe, fuser):
    hw = load_hardware("dgx-b200-superpod")
    if recipe == "blockwise" and hw.gpu.name.startswith("B"):
        recipe = "mxfp8"
    opts = {"fp8_recipe": recipe, "use_transformer_engine_op_fuser": fuser}
    assert _block(moe_router_padding_for_quantization=True, **opts)[1]["a2a_bytes"] > _block(**opts)[1]["a2a_bytes"]


@pytest.mark.parametrize("flag", ["--moe-router-padding-for-quantization", "--moe-router-padding-for-fp8"])
def test_the_flag_is_read_priced_and_written_back(flag):
    """The deprecated --moe-router-padding-for-fp8 turns the unified option on (transformer_config.py:2642-2647);
    the export writes the unified flag; nothing says 'priced with them' any more."""
    plain = import_megatron(QWEN3_30B, gpus=8, hardware=load_hardware("dgx-b200-superpod"))
    got = import_megatron(f"{QWEN3_30B} {flag}", gpus=8, hardware=load_hardware("dgx-b200-superpod"))
    assert got.request.ctx.options.moe_router_padding_for_quantization
    assert not plain.request.ctx.options.moe_router_padding_for_quantization
    assert not any("priced with them" in w for w in got.warnings)
    assert "--moe-router-padding-for-quantization" in megatron_argv(got.request)
    assert "--moe-router-padding-for-quantization" not in megatron_argv(plain.request)


def test_bridge_field_names_per_tag():
    """Megatron-Core core_v0.15.2 (Bridge v0.2.1) has only moe_router_padding_for_fp8; core_v0.16.0 on (v0.6.0)
    moe_router_padding_for_quantization, the old name an alias."""
    row = next(r for r in ROWS if r.dest == "moe_router_padding_for_quantization")
    assert row.read_at("v0.2.1") == "model.moe_router_padding_for_fp8"
    assert row.read_at("v0.6.0") == "model.moe_router_padding_for_quantization"


def test_without_fp8_or_with_allgather_it_is_refused():
    with pytest.raises((PlannerError, InfeasibleError), match="needs --fp8"):
        req = make_request(
            model="qwen3-30b-a3b", hardware="dgx-b200-superpod", gpus=8, tp=1, pp=1, ep=8, micro_batch=2,
            global_batch=512, moe_token_dispatcher="alltoall", options={"moe_router_padding_for_quantization": True},
        )  # fmt: skip
        from planner.api import explain

        explain(req)
