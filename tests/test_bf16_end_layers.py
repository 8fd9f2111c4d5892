"""--first-last-layers-bf16 (with --num-layers-at-start/end-in-bf16) and --fp8-output-proj priced as Megatron-Core runs
them (commit d98e8a64): fp8_utils.py is_first_last_bf16_layer gives the first N and last M decoder layers, by global
layer number, a nullcontext instead of fp8_autocast (transformer_block.py:354 at init, :689 in the forward), so their
linear GEMMs run in 16 bits without casts and Transformer Engine keeps no FP8 weight copy for them; gpt_model.py:272-276
builds the output layer as TELMHeadColumnParallelLinear under the MXFP8 recipe with --fp8-output-proj."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import api
from planner.errors import PlannerError
from planner.models.pipeline_layout import bf16_pattern, stage_contents, stage_counts
from planner.presets import load_hardware, load_model
from tests.conftest import one_line_error, run_cli

H100 = "dgx-h100-superpod"
B200 = "dgx-b200-superpod"
T, h, f = 8192, 4096, 14336  # one micro-batch of Llama 3 8B's shape: b = 1, s = 8192 tokens; width, MLP width
QKV_N = (32 + 2 * 8) * 128  # (a + 2g)·d_h = 6144
# the four linear GEMMs of a layer at t = 1 (M, N, K): QKV, projection, fc1 (SwiGLU: 2f wide), fc2
GEMMS = ((T, QKV_N, h), (T, h, h), (T, 2 * f, h), (T, h, f))


def _model(layers: int):
    return load_model("llama3-8b").model_copy(update={"num_layers": layers})


def _explained(layers=4, hardware=H100, gpus=2, batch=4, recipe="tensorwise", **kw):
    options = {"fp8": "hybrid" if recipe != "mxfp8" else "e4m3", "fp8_recipe": recipe}
    options |= {k: kw.pop(k) for k in list(kw) if k in api.PlanOptions.model_fields}
    req = api.make_request(
        model=_model(layers), hardware=hardware, gpus=gpus, global_batch=batch, seq_len=8192, options=options, **kw
    )
    return api.explain_plan(req, suggest=False)


def _stage_times(ex) -> tuple[list[float], list[float]]:
    stages = ex.evaluation.stages
    p = ex.plan_json["parallel"]["pp"]
    return [float(stages.forward_s[0, k]) for k in range(p)], [float(stages.backward_s[0, k]) for k in range(p)]


def _law(M, N, K, eta_max, half):
    """The GEMM law written out: η = η_max · M/(M + x½) · N/(N + x½) · K/(K + x½)."""
    return eta_max * M / (M + half) * N / (N + half) * K / (K + half)


def test_a_bf16_end_layer_on_each_stage_by_hand():
    """Llama 3 8B's layer shape, 4 layers, pp 2 on 2 H100 (t = 1: no TP collectives), FP8 tensorwise, b = 1,
    s = 8192, m = 4. With --first-last-layers-bf16 (N = M = 1) stage 0 holds layer 0 in BF16 and layer 1 in FP8,
    stage 1 layer 2 in FP8 and layer 3 in BF16. Per stage the forward grows by one layer's
      Σ_GEMM 2MNK·[1/(P_bf16·η(M,N,K)) − 1/(P_fp8·η_fp8(M,N,K))]            (the law at η_max and at η_fp8)
      − the tensorwise casts it no longer runs: 6 bytes per element (4 where TE's LayerNorm already read it)
        at fp8_cast_hbm_frac of HBM: 4·(2·T·h) norm-fed inputs + 6·(T·h + T·f) projection and fc2 inputs
        + 6·(QKV, projection, fc1, fc2 weights)/m
    and the backward by 2 × the GEMM difference less 6·(T·(a+2g)d_h + T·2f + 2·T·h) output-gradient casts."""
    hw = load_hardware(H100)
    cal, gpu = hw.calibration, hw.gpu
    p16, p8 = gpu.peak_bf16_tflops * 1e12, gpu.peak_fp8_tflops * 1e12
    gemm = sum(
        2 * M * N * K * (1 / (p16 * _law(M, N, K, cal.gemm_efficiency, cal.gemm_half_dim))
                         - 1 / (p8 * _law(M, N, K, cal.fp8_gemm_efficiency, cal.gemm_half_dim)))
        for M, N, K in GEMMS
    )  # fmt: skip
    cast_rate = gpu.hbm_tbytes_per_s * 1e12 * gpu.fp8_cast_hbm_frac["tensorwise"]
    weights = QKV_N * h + h * h + 2 * f * h + h * f
    m = 4
    casts_fwd = (4 * 2 * T * h + 6 * (T * h + T * f) + 6 * weights / m) / cast_rate
    casts_bwd = 6 * (T * QKV_N + T * 2 * f + 2 * T * h) / cast_rate
    fp8 = _stage_times(_explained(pp=2))
    ends = _stage_times(_explained(pp=2, first_last_layers_bf16=True))
    for k in (0, 1):
        assert ends[0][k] - fp8[0][k] == pytest.approx(gemm - casts_fwd, rel=1e-9)
        assert ends[1][k] - fp8[1][k] == pytest.approx(2 * gemm - casts_bwd, rel=1e-9)
    assert gemm - casts_fwd > 0  # H100: BF16 GEMMs at half the FP8 peak cost more than the casts save


def test_the_layers_sit_where_their_global_numbers_put_them():
    """8 layers, pp 2, vpp 2 (chunks of 2): rank 0 holds layers 0, 1 and 4, 5, rank 1 layers 2, 3 and 6, 7
    (Megatron-LM's interleaved numbering). N = 3 BF16 start layers are 0, 1 (rank 0's first chunk) and 2 (rank 1's
    first chunk); M = 1 end layer is 7, rank 1's last chunk. The stage times follow: rank 0 two BF16 layers, rank 1
    two (layers 2 and 7), each the same one-layer difference."""
    contents = stage_contents(8, 0, 2, 2, 0, 0, 0, None)
    counts = stage_counts(contents, (False,) * 8, (False,) * 8, bf16_pattern(8, 3, 1))
    assert counts[:, 6].tolist() == [2, 2]
    assert stage_counts(contents, (False,) * 8, (False,) * 8, bf16_pattern(8, 1, 1))[:, 6].tolist() == [1, 1]
    one = _stage_times(_explained(8, pp=2, vpp=2, first_last_layers_bf16=True, num_layers_at_end_in_bf16=0))
    base = _stage_times(_explained(8, pp=2, vpp=2))
    three = _stage_times(_explained(8, pp=2, vpp=2, first_last_layers_bf16=True, num_layers_at_start_in_bf16=3))
    layer = one[0][0] - base[0][0]  # layer 0 alone, on rank 0
    assert one[0][1] == base[0][1] and layer > 0
    assert three[0][0] - base[0][0] == pytest.approx(2 * layer, rel=1e-9)
    assert three[0][1] - base[0][1] == pytest.approx(2 * layer, rel=1e-9)


@settings(max_examples=12, deadline=None)
@given(
    pp=st.sampled_from([1, 2, 4]), tp=st.sampled_from([1, 2]), ends=st.tuples(*(st.integers(0, 2) for _ in range(4)))
)
def test_more_bf16_layers_are_never_faster(pp, tp, ends):
    """On H100, a layer out of FP8 runs its GEMMs at half the FP8 peak: keeping more layers in BF16 (N ≤ N',
    M ≤ M') never shortens the step, whatever the split."""
    n1, n2 = sorted(ends[:2])
    m1, m2 = sorted(ends[2:])

    def step(n, m):
        ex = _explained(
            8, gpus=pp * tp, pp=pp, tp=tp, sequence_parallel=tp > 1, first_last_layers_bf16=True,
            num_layers_at_start_in_bf16=n, num_layers_at_end_in_bf16=m,
        )  # fmt: skip
        return ex.plan_json["estimate"]["iteration_s"]

    assert step(n2, m2) >= step(n1, m1)


def test_memory_without_the_fp8_copies_of_the_bf16_layers():
    """Transformer Engine keeps no FP8 copy of a BF16 layer's weights (built and run outside the FP8 contexts): on
    Hopper tensorwise holds 2 bytes (the copy and its transpose) per weight, so stage 0 of the 4-layer plan drops
    2 × 218,112,000 bytes: one Llama 3 8B layer, 4096·6144 + 4096² + 3·4096·14336 + 2·4096 (RMSNorms). Its
    activations grow by what FP8 saved (docs/cost-model.md §5.4, e = 1 byte for tensorwise): the fc2 input
    (2 − e)·sb·f, the QKV and fc1 inputs (2 − e)·sbh each, less the projection input's FP8 copy e·sb·a·d_h that flash
    attention adds beside its 16-bit output: sbh·(f/h + 2 − 1) = 8192·4096·4.5 = 150,994,944 bytes a micro-batch,
    × min(p − i, m) in flight: 2 on stage 0, 1 on stage 1. Under full recomputation nothing changes: every layer
    keeps its 16-bit input alone."""
    fp8, ends = (_explained(pp=2, first_last_layers_bf16=flag).plan_json for flag in (False, True))
    row = {pj is fp8: {r["stage"]: r for r in pj["stages"]} for pj in (fp8, ends)}
    layer = 4096 * 6144 + 4096**2 + 3 * 4096 * 14336 + 2 * 4096
    assert layer == 218_112_000
    for k in (0, 1):
        assert (row[True][k]["weights"] - row[False][k]["weights"]) * 2**30 == pytest.approx(2 * layer, rel=1e-9)
        in_flight = 2 - k
        assert (row[False][k]["activations"] - row[True][k]["activations"]) * 2**30 == pytest.approx(
            in_flight * 8192 * 4096 * (14336 / 4096 + 2 - 1), rel=1e-12
        )
    full = [
        {r["stage"]: r["activations"] for r in _explained(pp=2, recompute="full", first_last_layers_bf16=x)
         .plan_json["stages"]} for x in (False, True)
    ]  # fmt: skip
    assert full[0] == full[1]


def test_userbuffers_a_second_set_in_16_bits():
    """Megatron-LM initialize.py:228-245 (Transformer Engine >= 2.7): FP8 with BF16 end layers registers the
    userbuffers for UserBufferQuantizationMode.FP8 and NONE: 10 more buffers of s·b/c × h in 16 bits,
    10 × 2 × 8192 × 4096 = 671,088,640 bytes per GPU."""
    kw = dict(tp=2, gpus=2, sequence_parallel=True, tp_comm_overlap=True)
    fp8, ends = (
        max(r["workspaces"] for r in _explained(first_last_layers_bf16=x, **kw).plan_json["stages"])
        for x in (False, True)
    )
    assert (ends - fp8) * 2**30 == pytest.approx(10 * 2 * 8192 * 4096, rel=1e-12)


def test_the_mxfp8_output_layer_by_hand():
    """--fp8-output-proj on B200: the logits GEMM T × V × h (V = 128,256, t = 1) at the MXFP8 rate, P_fp8 · η_fp8 ·
    mxfp8_gemm_ratio · η(M,N,K), instead of P_bf16 · η(M,N,K); its input (T·h) cast on its own, the weight (V·h)
    once per iteration (÷ m), the logits' gradient (T·V) in the backward, each 4.0625 bytes per element (MXFP8
    row- and column-wise data with E8M0 scales) at fp8_cast_hbm_frac of HBM. Only the last stage changes."""
    hw = load_hardware(B200)
    cal, gpu = hw.calibration, hw.gpu
    V, m = 128256, 4
    F = 2 * T * V * h
    bf16 = F / (gpu.peak_bf16_tflops * 1e12 * _law(T, V, h, cal.gemm_efficiency, cal.gemm_half_dim))
    mx = F / (gpu.peak_fp8_tflops * 1e12 * _law(T, V, h, cal.fp8_gemm_efficiency * cal.mxfp8_gemm_ratio,
                                                   cal.gemm_half_dim))  # fmt: skip
    rate = gpu.hbm_tbytes_per_s * 1e12 * gpu.fp8_cast_hbm_frac["mxfp8"]
    casts_fwd, casts_bwd = 4.0625 * (T * h + V * h / m) / rate, 4.0625 * T * V / rate
    base = _stage_times(_explained(hardware=B200, pp=2, recipe="mxfp8"))
    proj = _stage_times(_explained(hardware=B200, pp=2, recipe="mxfp8", fp8_output_proj=True))
    assert proj[0][0] == base[0][0] and proj[1][0] == base[1][0]
    assert proj[0][1] - base[0][1] == pytest.approx(mx - bf16 + casts_fwd, rel=1e-9)
    assert proj[1][1] - base[1][1] == pytest.approx(2 * (mx - bf16) + casts_bwd, rel=1e-9)


def test_explain_names_the_bf16_layers_and_what_they_cost():
    """The plan line names the layers, the time parts carry what they cost beyond FP8 on the slowest stage
    (m × its BF16 layers' extra forward and backward), the formulas say which layers and why."""
    ex = _explained(pp=2, first_last_layers_bf16=True)
    base = _explained(pp=2)
    est = ex.plan_json["estimate"]
    extra = est["parts"]["time"]["fwd+bwd: BF16 end layers beyond FP8"]
    f, b = _stage_times(ex)
    f0, b0 = _stage_times(base)
    assert extra == pytest.approx(4 * (f[0] - f0[0] + b[0] - b0[0]), rel=1e-9)
    assert "first 1 and last 1 of the 4 decoder layers" in est["formulas"]["time"]["forward"]["formula"]
    args = ["explain", "--model", "llama3-8b", "--hardware", H100, "--gpus", "8", "--tp", "2", "--pp", "4",
            "--sequence-parallel", "--fp8", "hybrid", "--fp8-recipe", "tensorwise", "--first-last-layers-bf16",
            "--num-layers-at-end-in-bf16", "2"]  # fmt: skip
    out = run_cli(args)
    assert out.exit_code == 0, out.output
    text = " ".join(out.stdout.split())  # whatever width the terminal wraps it at
    assert "FP8-hybrid (BF16 first 1, last 2 layers)" in text
    assert "BF16 end layers beyond FP8" in text
    searched = run_cli(["search", *args[1:7], *args[12:]])  # the same options, every layout of 8 GPUs
    assert "bf16, FP8 (BF16 first 1, last 2 layers), flash attention" in " ".join(searched.stdout.split())


@pytest.mark.parametrize(
    "extra, message",
    [
        (["delayed"], "--first-last-layers-bf16 with --fp8-recipe delayed: Megatron-LM refuses it"),
        (["tensorwise", "--num-layers-at-start-in-bf16", "9"], "--num-layers-at-start-in-bf16 9: allowed 0 to 8"),
        (["tensorwise", "--num-layers-at-end-in-bf16", "-1"], "-1 is not in the range x>=0"),
    ],
)
def test_bad_bf16_end_layers_are_one_line(extra, message):
    args = ["explain", "--model", "llama3-8b", "--hardware", H100, "--gpus", "8", "--pp", "4", "--fp8", "hybrid",
            "--first-last-layers-bf16", "--fp8-recipe", *extra]  # fmt: skip
    assert message in one_line_error(run_cli(args))


def test_the_mxfp8_output_layer_refuses_a_tied_word_embedding_on_one_stage():
    """extensions/transformer_engine.py:1825: TELMHeadColumnParallelLinear raises on skip_weight_param_allocation,
    which gpt_model.py sets where the output layer shares the embedding's weight on its stage (pp 1, tied)."""
    tied = load_model("llama3-8b").model_copy(update={"untie_embeddings_and_output_weights": False})
    opts = {"fp8": "e4m3", "fp8_recipe": "mxfp8", "fp8_output_proj": True}
    with pytest.raises(PlannerError, match="--fp8-output-proj with tied embeddings and pp 1"):
        api.explain(api.make_request(model=tied, hardware=B200, gpus=8, tp=2, options=opts))
    assert api.explain(api.make_request(model=tied, hardware=B200, gpus=8, tp=2, pp=2, options=opts))["legal"]


def test_the_flags_round_trip_through_export_and_import():
    """export writes the flags, the importer carries them into the plan's options (no warning left), and the Bridge
    export writes MixedPrecisionConfig's fields and model.fp8_output_proj, read back the same."""
    args = ["--model", "llama3-8b", "--hardware", B200, "--gpus", "8", "--tp", "2", "--pp", "2", "--fp8", "e4m3",
            "--fp8-recipe", "mxfp8", "--distributed-optimizer", "--first-last-layers-bf16",
            "--num-layers-at-start-in-bf16", "2", "--fp8-output-proj"]  # fmt: skip
    flags = run_cli(["export", *args])
    assert flags.exit_code == 0, flags.output
    line = " ".join(x.rstrip("\\").strip() for x in flags.stdout.splitlines() if not x.startswith("#"))
    assert "--first-last-layers-bf16 --num-layers-at-start-in-bf16 2 --num-layers-at-end-in-bf16 1" in line
    back = run_cli(["explain", "--megatron-args", line, "--gpus", "8", "--hardware", B200, "--json"])
    assert back.exit_code == 0, back.output
    import json

    options = json.loads(back.stdout)["options"]
    assert (options["first_last_layers_bf16"], options["num_layers_at_start_in_bf16"]) == (True, 2)
    assert options["fp8_output_proj"] and "BF16" not in back.stderr
    bridge = run_cli(["export", *args, "--format", "bridge"])
    assert "first_last_layers_bf16:true,num_layers_at_start_in_bf16:2" in bridge.stdout
    assert "model.fp8_output_proj=true" in bridge.stdout


def test_search_prices_the_bf16_layers_as_explain_does():
    """One implementation for the grid and the single plan: GPT-OSS-20B (MoE layers, sliding-window layers) on 64
    B200 with BF16 end layers and the MXFP8 output layer: search's best plan, explained alone, costs the same to the
    last bit, and more than the same plan in FP8 everywhere."""
    from planner.plan import ParallelPlan
    from planner.search import search

    opts = {"fp8": "e4m3", "fp8_recipe": "mxfp8", "first_last_layers_bf16": True, "fp8_output_proj": True}
    req = api.make_request(model="gpt-oss-20b", hardware=B200, gpus=64, options=opts)
    best = search(req.ctx, 64).plans[0]
    fields = {k: v for k, v in best["parallel"].items() if k in ParallelPlan.model_fields and k != "dp"}
    alone = api.make_request(model="gpt-oss-20b", hardware=B200, gpus=64, options=best["options"], **fields)
    assert api.explain(alone, suggest=False)["estimate"]["iteration_s"] == best["estimate"]["iteration_s"]
    fp8 = {**best["options"], "first_last_layers_bf16": False}
    plain = api.make_request(model="gpt-oss-20b", hardware=B200, gpus=64, options=fp8, **fields)
    assert api.explain(plain, suggest=False)["estimate"]["iteration_s"] < best["estimate"]["iteration_s"]


def test_a_count_without_the_switch_keeps_the_defaults():
    """Megatron-Core reads the end-layer counts only under --first-last-layers-bf16; Bridge's config writes 0 and 0
    beside it switched off, which read back as options 0 and 0 made the round trip differ from the plan exported
    (tests/test_bridge_check.py failed on 71 cases with the low-precision fields fetched)."""
    from planner.megatron.importer import _bf16_ends

    off = _bf16_ends({"num_layers_at_start_in_bf16": 0, "num_layers_at_end_in_bf16": 0})
    assert (off["num_layers_at_start_in_bf16"], off["num_layers_at_end_in_bf16"]) == (1, 1)
    on = _bf16_ends({"first_last_layers_bf16": True, "num_layers_at_start_in_bf16": 2, "num_layers_at_end_in_bf16": 0})
    assert (on["num_layers_at_start_in_bf16"], on["num_layers_at_end_in_bf16"]) == (2, 0)
