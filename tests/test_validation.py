"""The fidelity bar: predictions against every published Megatron-LM run, with the
calibration the presets ship; memory against Korthikanti Figure 7 and Megatron-LM's own formula."""

import numpy as np
import pytest

from planner import api
from planner.costs.letters import Letters
from planner.costs.memory import activation_bytes_per_layer
from planner.costs.pipeline import in_flight_microbatches
from planner.costs.stage_memory import stage_memory_bytes
from planner.fidelity.runs import DGXC_2024, K22, MLM, N21, load_runs
from planner.fidelity.validate import generation, validate
from planner.models.params import padded_vocab
from planner.space.grid import PlanGrid

B300 = "dgx-b300-superpod"

# MLPerf v5.1's single-node NVFP4 runs of NVIDIA's B200 Llama 3.1 8B config (mlcommons/training_results_v5.1 @441d65f4)
NVFP4_B200_ONE_NODE = {
    "MLPERF-v5.1-Oracle-1xBM.GPU.B200.8-llama31_8b",
    "MLPERF-v5.1-Nebius-nebius_b200_n1-llama31_8b",
    "MLPERF-v5.1-Supermicro-AS-4126GS-NBR-LCC-llama31_8b",
    "MLPERF-v5.1-Supermicro-SYS-422GS-NBRT-LCC-llama31_8b",
    "MLPERF-v5.1-Lenovo-SR780aV3-8xB200_SXM_180GB-llama31_8b",
    "MLPERF-v5.1-Lenovo-SR680aV3-8xB200_SXM_180GB-llama31_8b",
    "MLPERF-v5.1-Dell-1xXE9680Lx8B200-SXM-180GB-llama31_8b",
}


@pytest.fixture(scope="module")
def result():
    return validate()


def test_every_complete_published_run_is_validated(result):
    ids = {r["id"].split(":")[0] for r in result["runs"]}
    # Narayanan 2021 Table 1 (10 rows) + §5.1 (1); Korthikanti 2022 Table 5 (8) + Table 4 (5); README H100 (9)
    assert sum(i.startswith("N21-") for i in ids) == 11
    assert sum(i.startswith("K22-T5") for i in ids) == 8
    assert sum(i.startswith("K22-T4") for i in ids) == 5
    assert sum(i.startswith("MLM-README-H100") for i in ids) == 9
    assert {N21, K22, MLM} <= {r["source"] for r in result["runs"]}


def test_modern_runs_beyond_the_readme_cover_hopper_and_blackwell(result):
    modern = [r for r in result["runs"] if r["source"] not in (N21, K22, MLM) and r["in_fit"]]
    today = [
        r
        for r in modern
        if r["hardware"] in ("dgx-h100-superpod", "dgx-h200-superpod", "dgx-b200-superpod", "gb200-nvl72")
    ]
    assert len(today) >= 30
    assert {r["hardware"] for r in modern} >= {"dgx-h100-superpod", "dgx-b200-superpod", "gb200-nvl72", "gb300-nvl72"}
    assert {r["source"] for r in modern} >= {
        "DGX Cloud benchmarking recipes",
        "MLPerf Training",
        "Megatron-Bridge performance summary",
        "NeMo performance summary (docs)",
    }


def test_a100_did_not_get_worse(result):
    # before the modern calibration: 2.8 % median, 7.9 % max over the A100 rows (Narayanan, Korthikanti)
    st = result["summary"]["by_hardware"]["dgx-a100-superpod"]
    assert st["median_abs_error_pct"] <= 2.8 and st["max_abs_error_pct"] <= 7.9


# Rows in the bar that miss it with no software fact to set them apart (the charter keeps them in the bar and
# counted in its figures): each named, with the bound it must not grow past. NeMo 25.02's Llama 3 8B on 8 B200 (docs
# table), +13.1 %: apart as superseded until its release's cuDNN 9.7.0 attention was priced (2026-12-04), which
# explains all but 6.3 % of the later Megatron-Bridge 25.09 run's speed-up (within twice the release-to-release
# scatter, calibrate.RUN_NOISE), so it is back in the bar; the 25.09 run of its plan is +6.4 %. (NeMo 25.02's GPT-3
# 175B on 512 B200, -12.1 % after the fourth 2026-12-02 refit, is -9.3 % since its delayed-scaling amaxes are reduced
# over TP only, as NeMo v2.2.0's GPT-3 performance script sets, docs/cost-model.md §6.12, §10.2, and its attention
# is priced.)
OPEN_MISSES: dict[str, float] = {"NEMODOC-25.02-B200-Llama3-8B-n8": 14.0}


@pytest.mark.parametrize("gen", ["Ampere (A100)", "Hopper (H100, H200)", "Blackwell (B200, B300, GB200, GB300)"])
def test_each_generation_meets_the_bar(result, gen):
    # issue 9's bar over the runs whose whole configuration is published, one calibration per GPU; every such
    # row within 12 %, but the open misses named above within their own bound
    st = result["summary"]["by_generation_published"][gen]
    assert st["runs"] >= 30
    assert st["median_abs_error_pct"] <= 5.0
    rows = [r for r in result["runs"] if r["in_bar"] and r["in_fit"] and generation(r["hardware"]) == gen]
    assert len(rows) == st["runs"]
    for r in rows:
        assert abs(r["error_pct"]) <= OPEN_MISSES.get(r["id"], 12.0), (r["id"], r["error_pct"])
    misses = [r["id"] for r in rows if abs(r["error_pct"]) > 12.0]
    assert set(misses) <= set(OPEN_MISSES)
    assert st["max_abs_error_pct"] == max(abs(r["error_pct"]) for r in rows)


# Every row in the bar beyond issue 17's maxima (dense 12 %, MoE 20 %), with the bound it must not grow past: the ten
# rows of docs/cost-model.md §10.8, each needing a measurement nobody has published (what each needs is there).
BEYOND_DENSE_MAX: dict[str, float] = {
    "MLPERF-v5.1-Cisco-hpf_n16-H100-llama31_8b": 34.0,  # a per-step cost at one micro-batch a step (test_cisco_rows)
    "MLPERF-v5.1-Cisco-hpf_n8-H100-llama31_8b": 21.5,
    "MLM-README-H100-1.7B": 22.0,  # micro-batch, VPP, recomputation unpublished (Megatron-LM #1571, #1031)
    "MLM-README-H100-7.1B": 20.0,
    "MLM-README-H100-119B": 20.0,
    "MLM-README-H100-177B": 13.5,
    "MLPERF-v5.1-HPE-XD670-H200-n8-llama31_8b": 14.0,  # H200 carries H100's fit
    "NEMODOC-25.02-B200-Llama3-8B-n8": 14.0,  # OPEN_MISSES above
    "DGXC-v24.11.1-H100-GPT3-175B-fp8-n1024": 13.5,  # 6.72 s between 6.44 s and 6.24 s of the same software
}
BEYOND_MOE_MAX: dict[str, float] = {"MB-26.02-B300-GPTOSS120B-64": 34.0}  # all-to-all at half the 800G line rate


def test_the_rows_beyond_issue_17s_maxima_are_the_ten_named(result):
    # dense: predicted/published - 1 in each row's metric; MoE: tokens/s per GPU (validate_moe)
    from planner.fidelity.validate import validate_moe

    moe_rows = validate_moe()["runs"]
    for rows, bar, named in ((result["runs"], 12.0, BEYOND_DENSE_MAX), (moe_rows, 20.0, BEYOND_MOE_MAX)):
        beyond = {r["id"]: abs(r["error_pct"]) for r in rows if r["in_bar"] and abs(r["error_pct"]) > bar}
        assert set(beyond) == set(named), sorted(beyond)
        for rid, err in beyond.items():
            assert err <= named[rid], (rid, err)
    # the bars the issue sets that are met: dense median 3 %, MoE median 6 %, the runs of 8,192 GPUs or more 6 %
    dense = [abs(r["error_pct"]) for r in result["runs"] if r["in_bar"]]
    assert np.median(dense) <= 3.0
    moe = [abs(r["error_pct"]) for r in moe_rows if r["in_bar"]]
    assert np.median(moe) <= 6.0
    gpus = {r.id: r.request.get("gpus", 0) for r in load_runs()}
    big = [abs(r["error_pct"]) for r in result["runs"] if r["in_bar"] and gpus.get(r["id"], 0) >= 8192]
    assert len(big) == 7 and max(big) <= 6.0


def test_nemo1_distributed_fused_adam_runs_are_back_in_the_bar(result):
    # MLPerf GPT-3 under NeMo 1 syncs with Apex's DistributedFusedAdam in 200 MB buckets, without SHARP,
    # the DP communicator at 8 CTAs (presets/reference/dp_sync_runs.csv): modelled, so fitted; at 10,752
    # and 11,616 GPUs (DP 448 and 484, six micro-batches) each bucket's ring pays 447-483 steps of latency
    rows = {r["id"]: r for r in result["runs"] if r["id"].startswith("MLPERF-v4.") and r["id"].endswith("gpt3")}
    assert len(rows) == 9  # NVIDIA's 6, Oracle's 2 and SMC's (held out, tests/test_oracle_gpt3_rows.py)
    assert all("DistributedFusedAdam" in " ".join(r["assumptions"]) for r in rows.values())
    at_scale = [rows[i] for i in rows if "_n1344_" in i or "_n1452_" in i]
    assert len(at_scale) == 2 and all(r["in_fit"] and abs(r["error_pct"]) <= 6.0 for r in at_scale)
    # the B200 preview too: its userbuffer file resolved under its config's variables, no atomic GEMMs
    # (presets/userbuffers/mlperf_v41_gpt3_b200_preview_tp4_mbs2.yaml; tests/test_blackwell_rows.py)
    assert all(r["in_fit"] == ("Oracle" not in i and "SMC" not in i) and r["in_bar"] for i, r in rows.items())


@pytest.mark.parametrize("source", [N21, K22])
def test_each_paper_source_meets_the_bar(result, source):
    st = result["summary"]["by_source"][source]
    assert st["median_abs_error_pct"] <= 5.0
    assert st["max_abs_error_pct"] <= 12.0


def test_runs_with_unpublished_settings_are_validated_but_not_fitted(result):
    readme = [r for r in result["runs"] if r["source"] == MLM]
    assert readme and not any(r["in_fit"] for r in readme)
    # in the bar with their unpublished knobs searched: Hopper's generation summary counts all 9 rows
    assert len(readme) == 9 and all(r["in_bar"] for r in readme)
    by_gen, published = result["summary"]["by_generation"], result["summary"]["by_generation_published"]
    hopper = "Hopper (H100, H200)"
    # ... and Megatron-LM's own FP8 table (3 H100 rows), held out: in the bar, not in the fitted runs' summary
    held = [r for r in result["runs"] if r["source"] == "Megatron-LM examples (FP8, H100)"]
    assert len(held) == 3 and all(r["in_bar"] and not r["in_fit"] for r in held)
    # ... and NeMo's long-context table (9 H100 rows from the 24.03.01 container, micro-batch, VP and recomputation
    # searched), held out likewise
    long_ctx = [r for r in result["runs"] if r["source"] == "NeMo long-context performance (docs)"]
    assert len(long_ctx) == 17 and all(r["in_bar"] and not r["in_fit"] for r in long_ctx)
    # ... and DGX Cloud's first published recipes (64 H100 rows of NeMo 24.05 and 24.09), held out likewise
    dgxc_2024 = [r for r in result["runs"] if r["source"] == DGXC_2024]
    assert len(dgxc_2024) == 64 and all(r["in_bar"] and not r["in_fit"] for r in dgxc_2024)
    # ... and Nebius's MLPerf v5.0 405B on 512 and 1,024 H200 (the first H200 rows) and HPE's v5.1 8B on 64 H200,
    # held out likewise
    h200 = [r for r in result["runs"] if r["hardware"] == "dgx-h200-superpod"]
    assert len(h200) == 3 and all(r["in_bar"] and not r["in_fit"] for r in h200)
    # ... and Oracle's MLPerf v4.1 GPT-3 175B on 1,536 and 3,072 H100 (RoCE), held out likewise
    oracle = [r for r in result["runs"] if r["id"].startswith("MLPERF-v4.1-Oracle")]
    assert len(oracle) == 2 and all(r["in_bar"] and not r["in_fit"] for r in oracle)
    # ... and Cisco's MLPerf v5.1 8B on 64 and 128 H100 (Ethernet), held out likewise
    cisco = [r for r in result["runs"] if r["id"].startswith("MLPERF-v5.1-Cisco")]
    assert len(cisco) == 2 and all(r["in_bar"] and not r["in_fit"] for r in cisco)
    # ... and Sustainable Metal Cloud's MLPerf v4.0 GPT-3 on 512 H100, held out likewise
    smc = [r for r in result["runs"] if r["id"] == "MLPERF-v4.0-SMC-64xSMC-H100-gpt3"]
    assert len(smc) == 1 and smc[0]["in_bar"] and not smc[0]["in_fit"]
    # ... and MLPerf v3.1's GPT-3 series on 512 to 10,752 H100 (NVIDIA's seven and Azure's), held out likewise
    v31 = [r for r in result["runs"] if r["id"].startswith("MLPERF-v3.1")]
    assert len(v31) == 8 and all(r["in_bar"] and not r["in_fit"] for r in v31)
    # ... and MLPerf v3.0's (NVIDIA's two and CoreWeave's three, flash-attn 1), held out likewise
    v30 = [r for r in result["runs"] if r["id"].startswith("MLPERF-v3.0")]
    assert len(v30) == 5 and all(r["in_bar"] and not r["in_fit"] for r in v30)
    assert by_gen[hopper]["runs"] == published[hopper]["runs"] + 9 + 3 + 9 + 64 + 3 + 2 + 2 + 1 + 8 + 5
    assert "dgx-h100-superpod" not in result["summary"]["by_hardware_assumed"]
    # NeMo 25.02 on B200: only the rows a later run of the same plan shows superseded are apart
    early = {r["id"]: r["in_fit"] for r in result["runs"] if r["id"].startswith("NEMODOC-25.02-B200")}
    assert sorted(i for i, fit in early.items() if not fit) == ["NEMODOC-25.02-B200-Nemotron4-15B-n64"]
    # NVFP4's 17 Bridge rows are in the bar (out of the dense fit, no software fact sets them apart), and so are
    # NVIDIA's 4 MLPerf v5.1 NVFP4 rows (Llama 3.1 405B on 512-5,120 GB200 and 512 GB300, held out): Blackwell's bar
    # has them beside the fitted rows; apart are only the rows with a named software fact
    nvfp4 = [r for r in result["runs"] if "-NVFP4-" in r["id"]]
    assert len(nvfp4) == 17 and all(r["in_bar"] and not r["in_fit"] for r in nvfp4)
    # and NVIDIA's 4 FP8 Llama 3.1 8B runs of the same round (72 and 512 GB200 and GB300), held out as well
    nvidia_v51 = [r for r in result["runs"] if r["id"].startswith("MLPERF-v5.1") and "_ngc25.09_nemo" in r["id"]]
    assert len(nvidia_v51) == 10 and all(r["in_bar"] and not r["in_fit"] for r in nvidia_v51)  # + NVFP4 on 8 GPUs
    # and IBM, CoreWeave and NVIDIA's MLPerf v5.0 405B on 512-2,496 GB200 (NVIDIA's tyche implementation), held out
    carina = [r for r in result["runs"] if "carina" in r["id"]]
    assert len(carina) == 5 and all(r["in_bar"] and not r["in_fit"] for r in carina)
    # and Oracle's, Verda's and Dell's (two systems) MLPerf v5.1 runs of NVIDIA's B200 8B config, held out
    copies = [
        r
        for r in result["runs"]
        if r["id"].split("-")[2] in ("Oracle", "Verda", "Dell") and "_8b" in r["id"] and r["hardware"] != B300
    ]
    assert len(copies) == 6 and all(r["in_bar"] and not r["in_fit"] for r in copies)
    # and the single-node NVFP4 runs of NVIDIA's B200 8B config by Oracle, Nebius, Supermicro (two), Lenovo (two), Dell
    one_node = [r for r in result["runs"] if r["id"] in NVFP4_B200_ONE_NODE]
    assert len(one_node) == 7 and all(r["in_bar"] and not r["in_fit"] for r in one_node)
    # and Lambda's run of an earlier snapshot of NVIDIA's 8B config on 72 GB300, held out
    lam = [r for r in result["runs"] if r["id"] == "MLPERF-v5.1-Lambda-gb300_n18-llama31_8b"]
    assert len(lam) == 1 and lam[0]["in_bar"] and not lam[0]["in_fit"]
    blackwell = "Blackwell (B200, B300, GB200, GB300)"
    # and the four HGX B300 runs of MLPerf v5.1 (Dell, Supermicro, Nebius, Lenovo), held out
    b300 = [r for r in result["runs"] if r["hardware"] == B300]
    assert len(b300) == 4 and all(r["in_bar"] and not r["in_fit"] for r in b300)
    # 8 long-context B200 among them
    assert by_gen[blackwell]["runs"] == published[blackwell]["runs"] + 17 + 8 + 8 + 5 + 4 + 1 + 9 + 4
    apart = sorted(r["id"] for r in result["runs"] if not r["in_bar"])
    assert apart == ["MB-25.09-GB200-LLAMA31_405B-PRETRAIN-FP8_MX-n128-gbs64", "NEMODOC-25.02-B200-Nemotron4-15B-n64"]


def test_error_is_signed_relative_difference(result):
    for row in result["runs"]:
        assert row["error_pct"] == pytest.approx(100 * (row["predicted"] - row["published"]) / row["published"])


def test_gpt3_175b_narayanan_run_is_within_ten_percent_of_140(result):
    row = next(r for r in result["runs"] if r["id"] == "N21-S51-GPT3-175B-1024")
    assert row["published"] == 140.0  # Narayanan et al. 2021 §5.1
    assert abs(row["predicted"] - 140.0) / 140.0 <= 0.10


def test_korthikanti_table5_175b_order_and_values(result):
    full = next(r for r in result["runs"] if r["id"] == "K22-T5-175B-full")
    sel = next(r for r in result["runs"] if r["id"] == "K22-T5-175B-selSP")
    assert (full["published"], sel["published"]) == (18.13, 13.75)  # Korthikanti et al. 2022 Table 5
    assert abs(full["predicted"] / 18.13 - 1) <= 0.10 and abs(sel["predicted"] / 13.75 - 1) <= 0.10
    assert sel["predicted"] < full["predicted"]


# Korthikanti et al. 2022 Figure 7, percent of the tensor-parallel baseline (Eq. 2), as transcribed in
# Korthikanti et al. 2022 Figure 7: none, SP, selective, SP + selective, full.
FIGURE_7 = {
    "gpt-22b": (1, 100, 66.84, 49.42, 16.18, 7.64),
    "gpt3-175b": (8, 100, 62.04, 56.53, 18.49, 8.71),
    "gpt-530b": (35, 100, 58.31, 62.04, 20.27, 9.42),
    "gpt-1t": (64, 100, 58.31, 62.04, 20.27, 9.42),
}


@pytest.mark.parametrize("model", FIGURE_7)
def test_activation_memory_matches_korthikanti_figure_7(model):
    """Transformer-layer activations of the first stage (in-flight micro-batches × layers × Table 2
    bytes), each case as a percentage of the no-SP, no-recompute baseline, within 1 point."""
    p, *expected = FIGURE_7[model]
    req = api.make_request(model=model, gpus=8 * p, tp=8, pp=p, options={"attention_kernel": "unfused"})
    m, tr = req.ctx.model, req.ctx.training
    cases = ((False, 0), (True, 0), (False, 1), (True, 1), (False, 2))

    def layers_bytes(sp, rc):
        per_layer = activation_bytes_per_layer(
            tr.seq_len,
            1,
            m.hidden_size,
            m.num_attention_heads,
            8,
            sequence_parallel=np.array(sp),
            recompute=np.array(rc),
            unfused_attention=True,
        )
        in_flight = in_flight_microbatches(p, tr.global_batch, 1, 0)
        return float(in_flight * (m.num_layers // p) * per_layer)

    base = layers_bytes(False, 0)
    for (sp, rc), pct in zip(cases, expected, strict=False):
        assert 100 * layers_bytes(sp, rc) / base == pytest.approx(pct, abs=1.0), (sp, rc)


def megatron_weight_and_optimizer_bytes(L, h, a, V, t, p, D, distributed):
    """Megatron-LM compute_weight_and_optimizer_memory (megatron/training/theoretical_memory_usage.py
    at commit d98e8a64)
    for a GPT model (g = a, d = h/a, f = 4h, LayerNorm n = 2, tied embeddings), most-loaded (first) stage:
    N1 = (L·(P_attn + P_mlp)/p + E)/t + (L·P_norm + n·h)/p, bytes = N1 · (6 + 12/D or 18)."""
    P_attn = 2 * h * h * (1 + 1) * 1  # 2h²(1 + g/a)·(ad/h) with g = a, d = h/a
    P_mlp = 2 * h * 4 * h
    P_norm = 2 * 2 * h
    E = h * V
    N1 = (L * (P_attn + P_mlp) / p + E) / t + (L * P_norm + 2 * h) / p
    return N1 * ((6 + 12 / D) if distributed else 18)


def _first_stage_states(model, tp, pp, gpus, distributed):
    req = api.make_request(model=model, gpus=gpus, tp=tp, pp=pp, distributed_optimizer=distributed, precision="bf16")
    lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
    mem = stage_memory_bytes(lt, req.ctx, np.zeros((1, 1), dtype=int))
    ours = float(mem["weights"][0, 0] + mem["gradients"][0, 0] + mem["optimizer"][0, 0])
    m = req.ctx.model
    theirs = megatron_weight_and_optimizer_bytes(
        m.num_layers,
        m.hidden_size,
        m.num_attention_heads,
        int(padded_vocab(m.vocab_size, m.make_vocab_size_divisible_by, tp)),
        tp,
        pp,
        req.plan.dp,
        distributed,
    )
    return req, ours, theirs


PLANS = [
    ("gpt3-175b", 8, 8, 512),
    ("gpt-530b", 8, 35, 2240),
    ("gpt-22b", 8, 1, 64),
    ("gpt-1t", 8, 64, 1024),
    ("gpt-1.7b", 1, 1, 32),
]


@pytest.mark.parametrize("model,tp,pp,gpus", PLANS)
@pytest.mark.parametrize("distributed", [False, True])
def test_weights_and_optimizer_equal_megatron_plus_what_it_leaves_out(model, tp, pp, gpus, distributed):
    """bf16 weights + grads + optimizer of the first stage = Megatron's own formula + the two things it
    leaves out: the learned position table (s_max·h, replicated over t) and the linear biases (per layer
    QKV 3h and fc1 4h split over t, projection and fc2 h each replicated); and less Megatron's 1/p share
    of the final norm, which the planner keeps on the last stage where it lives."""
    req, ours, theirs = _first_stage_states(model, tp, pp, gpus, distributed)
    m = req.ctx.model
    h, layers = m.hidden_size, m.num_layers // pp
    final_norm_share = (
        2 * h / pp if pp > 1 else 0
    )  # Megatron spreads the final norm over the stages; it sits on the last one
    extra_params = m.max_position_embeddings * h + layers * ((3 * h + 4 * h) / tp + 2 * h) - final_norm_share
    per_param = (6 + 12 / req.plan.dp) if distributed else 18
    assert ours == pytest.approx(theirs + extra_params * per_param, rel=1e-9)


@pytest.mark.parametrize("model,tp,pp,gpus", [p for p in PLANS if p[0] not in ("gpt-530b", "gpt-1t")])
@pytest.mark.parametrize("distributed", [False, True])
def test_weights_and_optimizer_within_two_percent_of_megatron(model, tp, pp, gpus, distributed):
    """Within 2 % of Megatron's formula whenever a stage holds more than 3 layers; with GPT 530B on 35
    stages (3 layers each) or GPT 1T on 64 (2 each) the replicated position table alone is 2.1-2.6 %
    of a stage, which Megatron's formula leaves out."""
    _, ours, theirs = _first_stage_states(model, tp, pp, gpus, distributed)
    assert ours == pytest.approx(theirs, rel=0.02)
    assert ours > theirs


def test_runs_use_the_behaviour_of_their_time():
    runs = {r.id: r for r in load_runs()}
    n21 = runs["N21-T1-76.1B"].request
    assert n21["precision"] == "fp16" and n21["options"]["attention_kernel"] == "unfused"
    assert n21["options"]["pp_scatter_gather"] and not n21["options"]["overlap_grad_reduce"]  # DDP impl local
    assert runs["N21-T1-1.7B"].request["options"]["overlap_grad_reduce"]  # DDP impl torch
    assert n21["vpp"] == 3 and n21["micro_batch"] == 2  # run_table_1.sh: 5 layers per virtual stage, MBS 2
    assert runs["MLM-README-H100-70B"].request["options"]["attention_kernel"] == "flash"
    assert any("unstated" in a for a in runs["MLM-README-H100-70B"].assumptions)


def test_each_plan_is_evaluated_once_for_its_metrics_and_the_memory_verdicts(monkeypatch):
    # a run published with several metrics (K22 Table 5: iteration time, MFU, HFU) is one plan: one evaluation,
    # which memory.reference_verdicts reads back instead of evaluating the plan again
    from planner.fidelity import memory
    from planner.fidelity import validate as val

    runs = [r for r in load_runs() if r.id.split(":")[0] == "K22-T5-22B-selSP"]
    assert [r.metric for r in runs] == ["iteration time (s)", "MFU (Eq. 7)", "HFU (Eq. 8)"]
    calls = []

    def counted(grid, ctx, **kw):
        calls.append(ctx.model.name)
        return real(grid, ctx, **kw)

    real = val.evaluate
    val._EVALUATED.clear()
    monkeypatch.setattr(val, "evaluate", counted)
    rows = val.validate(runs)["runs"]
    assert len(calls) == 1 and len(rows) == 3
    monkeypatch.setattr(memory, "load_runs", lambda: runs)
    monkeypatch.setattr(memory, "load_moe_runs", lambda: [])
    (verdict,) = memory.reference_verdicts()
    assert len(calls) == 1  # read back: no second evaluation
    # the values are those of each run evaluated on its own (predict evaluates afresh)
    assert [r["predicted"] for r in rows] == [val.predict(run) for run in runs]
    req = api.make_request(hardware=runs[0].hardware, **runs[0].request)
    from planner.costs.estimate import peak_memory_bytes

    assert verdict["peak_gib"] * 2**30 == pytest.approx(peak_memory_bytes(PlanGrid.from_plans([req.plan]), req.ctx)[0])


def _arrays(ev) -> dict:
    """An evaluation (or one layer's step times) as {name: array}, every term of every dict."""
    items = ev.items() if isinstance(ev, dict) else vars(ev).items()
    out = {}
    for name, value in items:
        for key, arr in value.items() if isinstance(value, dict) else [("", value)]:
            if arr is not None:
                out[f"{name}.{key}"] = np.asarray(arr)
    return out


def test_plans_sharing_a_context_evaluate_in_one_grid_to_the_values_each_has_alone():
    # validate and calibrate evaluate the runs whose context (model, hardware, training, options) is the
    # same in one grid; each plan's row must be exactly what it gets evaluated alone, term by term
    from planner.fidelity import validate as val
    from planner.fidelity.moe_runs import load_moe_runs

    runs = load_runs() + load_moe_runs()
    reqs = [val.prepared(r) for r in runs]
    layers = [r.metric.startswith("layer") for r in runs]
    groups = val.shared_contexts(reqs, layers)
    assert sorted(i for g in groups for i in g) == list(range(len(runs)))  # each run in one group
    shared = [g for g in groups if len(g) > 1]
    assert len(shared) >= 10 and any(layers[g[0]] for g in shared)  # both readings are batched
    for g in groups:
        assert all(reqs[i].ctx == reqs[g[0]].ctx and layers[i] == layers[g[0]] for i in g)
    firsts = [(layers[g[0]], reqs[g[0]].ctx) for g in groups]
    assert not any(a == b for j, a in enumerate(firsts) for b in firsts[j + 1 :])  # the groups are the contexts
    idx = [i for g in shared for i in g]
    batched = val.evaluations([reqs[i] for i in idx], [layers[i] for i in idx])
    assert len(val.shared_contexts([reqs[i] for i in idx], [layers[i] for i in idx])) == len(shared)
    for i, ev in zip(idx, batched, strict=True):
        alone, rows = _arrays(val._evaluation(runs[i].metric, reqs[i])), _arrays(ev)
        assert rows.keys() == alone.keys(), runs[i].id
        for name, arr in alone.items():
            assert rows[name].shape == arr.shape and np.array_equal(rows[name], arr, equal_nan=True), (runs[i].id, name)


def test_a_calibration_trial_predicts_the_grouped_runs_as_one_by_one():
    # calibrate's residuals: the runs of a preset on trial values, grouped once by context
    from planner.fidelity import validate as val
    from planner.fidelity.calibrate import Problem, with_calibration
    from planner.presets import load_hardware

    runs = [r for r in load_runs() if r.hardware == "dgx-a100-superpod"]
    problem = Problem(load_hardware("dgx-a100-superpod"), runs)
    assert len(problem.groups) < len(runs)
    hw = with_calibration(problem.hw, {"gemm_efficiency": 0.8})
    reqs = [val.on_hardware(q, hw) for q in problem.reqs]
    one_by_one = [val.predict(r, req=q) for r, q in zip(runs, reqs, strict=True)]
    assert val.predictions(runs, reqs, problem.groups) == one_by_one
    assert one_by_one != [val.predict(r, req=q) for r, q in zip(runs, problem.reqs, strict=True)]  # moved
