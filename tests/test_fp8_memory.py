"""What Transformer Engine keeps in FP8, by recipe and GPU generation, each against a hand computation:
the weight copies (a transposed copy only where FP8 GEMMs are TN-only, Hopper; MXFP8's row-wise and
column-wise data with their scales) and the block scales of the inputs saved for the backward."""

import pytest

from planner.api import explain, make_request
from planner.costs.memory import fp8_saved_bytes_per_element, fp8_weight_bytes_per_param

GIB = 2**30
# Llama 3 8B (presets/models/llama3-8b.yaml): h, a, g, d_h, f, layers
H, A, G, D, F, L = 4096, 32, 8, 128, 14336, 32
S = 8192
# one layer's parameters (QKV, projection, SwiGLU fc1 and fc2, two RMSNorm weights): FP8 copies are
# counted on every transformer-layer parameter, the norms a rounding error
LAYER = H * (A + 2 * G) * D + A * D * H + 3 * H * F + 2 * H


def test_fp8_weight_bytes_by_recipe_and_generation():
    # delayed and current (tensorwise) scaling: the FP8 data, and on Hopper its transpose
    assert fp8_weight_bytes_per_param("delayed", one_copy_serves_both=False) == 2
    assert fp8_weight_bytes_per_param("tensorwise", one_copy_serves_both=False) == 2
    assert fp8_weight_bytes_per_param("tensorwise", one_copy_serves_both=True) == 1
    # MXFP8: row-wise and column-wise data, each with an E8M0 scale per 32 elements, on any GPU
    assert fp8_weight_bytes_per_param("mxfp8", one_copy_serves_both=True) == 2 + 2 / 32
    # blockwise: row-wise and transposed data, an fp32 scale per 128 x 128 block
    assert fp8_weight_bytes_per_param("blockwise", one_copy_serves_both=False) == 2 + 2 * 4 / 128**2
    # a saved input: one column-wise byte, with MXFP8's E8M0 per 32 or blockwise's fp32 per 1 x 128 tile
    assert fp8_saved_bytes_per_element("delayed") == 1
    assert fp8_saved_bytes_per_element("mxfp8") == fp8_saved_bytes_per_element("blockwise") == 1 + 1 / 32


def _memory(hardware, **options):
    req = make_request(
        model="llama3-8b", hardware=hardware, gpus=8, global_batch=64, distributed_optimizer=True, options=options
    )
    return explain(req, memory_headroom=0.0)["estimate"]["memory"]


def test_blackwell_keeps_one_fp8_copy_of_each_weight_and_hopper_two():
    for hardware, copy_bytes in (("dgx-h100-superpod", 2), ("dgx-b200-superpod", 1)):
        bf16 = _memory(hardware)["weights"] * GIB
        fp8 = _memory(hardware, fp8="hybrid", fp8_recipe="tensorwise")["weights"] * GIB
        gather = _memory(hardware, fp8="hybrid", fp8_recipe="tensorwise", fp8_param_gather=True)["weights"] * GIB
        # the cached FP8 workspace on top of the bf16 weight; with --fp8-param-gather instead of it
        assert fp8 - bf16 == pytest.approx(copy_bytes * L * LAYER, rel=1e-9)
        assert gather - bf16 == pytest.approx((copy_bytes - 2) * L * LAYER, rel=1e-9)


def test_mxfp8_keeps_two_scaled_copies_and_saves_scaled_inputs():
    cs = _memory("dgx-b200-superpod", fp8="e4m3", fp8_recipe="tensorwise", fp8_param_gather=True)
    mx = _memory("dgx-b200-superpod", fp8="e4m3", fp8_recipe="mxfp8", fp8_param_gather=True)
    # weights: 2·(1 + 1/32) bytes instead of one FP8 copy
    assert (mx["weights"] - cs["weights"]) * GIB == pytest.approx((2 + 2 / 32 - 1) * L * LAYER, rel=1e-9)
    # activations (t = 1, p = 1: one micro-batch in flight): the saved FP8 inputs of QKV, the projection,
    # fc1 and fc2 (1 + ad/h + 1 + f/h = 6.5 elements per sbh) carry an E8M0 scale per 32 elements
    extra = 6.5 / 32 * S * H * L
    assert (mx["activations"] - cs["activations"]) * GIB == pytest.approx(extra, rel=1e-9)


def test_parameters_are_gathered_in_fp8_except_mxfp8_through_the_gradient_buffer():
    """--fp8-param-gather gathers 1 byte per parameter with per-tensor scaling; MXFP8 gathers the 16-bit
    values into the gradient buffer and quantises them after (Megatron-LM core_r0.16.0
    param_and_grad_buffer.py:340-350): 2 bytes. The gradients stay as the buffer's dtype."""
    from planner.costs.estimate import dp_element_bytes

    def ctx(**options):
        return make_request(model="llama3-8b", hardware="dgx-b200-superpod", gpus=8, options=options).ctx

    assert dp_element_bytes(ctx()) == (4, 2)  # bf16: fp32 main grads, bf16 weights
    assert dp_element_bytes(ctx(grad_reduce_in_bf16=True)) == (2, 2)
    assert dp_element_bytes(ctx(fp8="e4m3", fp8_recipe="tensorwise", fp8_param_gather=True)) == (4, 1)
    assert dp_element_bytes(ctx(fp8="e4m3", fp8_recipe="mxfp8", fp8_param_gather=True)) == (4, 2)
    assert dp_element_bytes(ctx(fp8="e4m3", fp8_recipe="tensorwise")) == (4, 2)  # FP8 compute, bf16 gather
