"""Bridge's performance workloads read into plans: a v0.2.1 workload_base_configs.py and a v0.6.0 perf_recipes
module, written here in their pattern (WorkloadBaseConfig / replace assignments; one function per workload
assigning cfg fields), for every model x GPU of theirs that megaplan has presets for. Each imports to the plan
the file describes, with the perf scripts' precision and the base recipe's defaults beneath it."""

import pytest

from planner.bridge.importer import read_bridge_source
from planner.bridge.workloads import GPUS, MODELS, V060_MODELS
from planner.errors import PlannerError
from planner.plan_file import request_from_fields

# model -> (gpus, tp, pp, vpp, cp, ep, global batch, micro batch): shapes of the kind the perf scripts use
SHAPES = {
    "LLAMA3_8B": (8, 1, 1, None, 2, 1, 128, 1),
    "LLAMA3_70B": (64, 4, 4, 5, 1, 1, 256, 1),
    "LLAMA31_405B": (512, 8, 8, 4, 2, 1, 512, 1),
    "QWEN3_30B_A3B": (16, 1, 2, 12, 1, 8, 512, 1),
    "QWEN3_235B_A22B": (256, 2, 8, 4, 1, 32, 1024, 1),
    "DEEPSEEK_V3": (1024, 2, 8, None, 1, 64, 8192, 1),
    "GPT_OSS_120B": (64, 1, 1, None, 1, 64, 512, 4),
}


def v021_text() -> str:
    lines = ["from dataclasses import replace", "from utils.utils import WorkloadBaseConfig", ""]
    for model, (gpus, tp, pp, vpp, cp, ep, gbs, mbs) in SHAPES.items():
        lines.append(f"BASE_{model}_CONFIG = WorkloadBaseConfig(num_gpus={gpus}, global_batch_size={gbs})")
        for gpu in GPUS:
            etp = ", expert_tensor_parallel_size=1" if ep > 1 else ""
            lines += [
                f"{model}_{gpu}_BF16_BASE_CONFIG = replace(",
                f"    BASE_{model}_CONFIG, tensor_model_parallel_size={tp}, pipeline_model_parallel_size={pp},",
                f"    virtual_pipeline_model_parallel_size={vpp}, context_parallel_size={cp},",
                f"    expert_model_parallel_size={ep}{etp}, micro_batch_size={mbs},",
                ")",
                f"{model}_{gpu}_FP8_CS_BASE_CONFIG = {model}_{gpu}_BF16_BASE_CONFIG",
            ]
    return "\n".join(lines) + "\n"


def v060_text() -> str:
    lines = ["from megatron.bridge.perf_recipes.llama.common import CommOverlapConfig, _perf_precision", ""]
    for model, (gpus, tp, pp, vpp, cp, ep, gbs, mbs) in SHAPES.items():
        name = model.lower()
        if name not in V060_MODELS:
            continue
        for gpu in GPUS:
            lines += [
                f"def {name}_pretrain_{gpus}gpu_{gpu.lower()}_fp8cs_config():",
                f"    cfg = {name}_pretrain_config()",
                '    cfg.mixed_precision = _perf_precision("fp8_cs")',
                f"    cfg.model.tensor_model_parallel_size = {tp}",
                f"    cfg.model.pipeline_model_parallel_size = {pp}",
                f"    cfg.model.virtual_pipeline_model_parallel_size = {vpp}",
                f"    cfg.model.context_parallel_size = {cp}",
                f"    cfg.model.expert_model_parallel_size = {ep}",
                f"    cfg.model.expert_tensor_parallel_size = {1 if ep > 1 else None}",
                f"    cfg.model.sequence_parallel = {tp > 1}",
                f"    cfg.train.global_batch_size = {gbs}",
                f"    cfg.train.micro_batch_size = {mbs}",
                f"    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap={tp > 1})",
                "    return cfg",
                "",
            ]
    return "\n".join(lines) + "\n"


CASES = [("v0.2.1", f"{m}_{g}_{d}_BASE_CONFIG", m, g) for m in SHAPES for g in GPUS for d in ("BF16", "FP8_CS")]
CASES += [
    ("v0.6.0", f"{m.lower()}_pretrain_{SHAPES[m][0]}gpu_{g.lower()}_fp8cs_config", m, g)
    for m in SHAPES
    if m.lower() in V060_MODELS
    for g in GPUS
]


@pytest.mark.parametrize(("tag", "name", "model", "gpu"), CASES, ids=[c[1] for c in CASES])
def test_a_workload_imports_as_the_plan_it_describes(tag, name, model, gpu, tmp_path):
    path = tmp_path / ("workload_base_configs.py" if tag == "v0.2.1" else "perf_recipe.py")
    path.write_text(v021_text() if tag == "v0.2.1" else v060_text())
    gpus, tp, pp, vpp, cp, ep, gbs, mbs = SHAPES[model]
    try:
        read, _ = read_bridge_source({"bridge_config": f"{path}#{name}"})
        req = request_from_fields(read.data)
    except PlannerError as err:  # the file's shape is one megaplan's rules refuse: it must say so in one line
        assert "\n" not in str(err)
        pytest.skip(f"{name}: {err}")
    p = req.plan
    assert (req.gpus, p.tp, p.pp, p.cp, p.ep, p.micro_batch) == (gpus, tp, pp, cp, ep, mbs)
    assert req.ctx.training.global_batch == gbs and req.ctx.hardware.name == GPUS[gpu]
    assert req.ctx.model.name == (MODELS.get(model) or (V060_MODELS[model.lower()],))[0]
    if model != "DEEPSEEK_V3" and pp > 1:  # the DeepSeek recipe's layout places its virtual stages
        assert p.vpp == (vpp or 1)
    fp8 = "FP8" in name or "fp8" in name
    assert (req.ctx.options.fp8 is not None) == fp8
    assert req.ctx.options.grad_reduce_in_bf16  # the perf scripts reduce gradients in bf16


def test_a_workload_name_megaplan_cannot_price_is_refused_in_one_line(tmp_path):
    path = tmp_path / "workload_base_configs.py"
    path.write_text(v021_text() + "NEMOTRONH_56B_H100_FP8_CS_BASE_CONFIG = BASE_LLAMA3_8B_CONFIG\n")
    with pytest.raises(PlannerError, match="megaplan reads <MODEL>_<GPU>_<DTYPE>_BASE_CONFIG for models"):
        read_bridge_source({"bridge_config": f"{path}#NEMOTRONH_56B_H100_FP8_CS_BASE_CONFIG"})
    with pytest.raises(PlannerError, match="not in the file; allowed: "):
        read_bridge_source({"bridge_config": f"{path}#LLAMA3_8B_A100_BF16_BASE_CONFIG"})


def _read(tmp_path, tag: str, name: str, **values):
    path = tmp_path / ("workload_base_configs.py" if tag == "v0.2.1" else "perf_recipe.py")
    path.write_text(v021_text() if tag == "v0.2.1" else v060_text())
    read, _ = read_bridge_source({"bridge_config": f"{path}#{name}", **values})
    return request_from_fields(read.data), read.notes


def test_v021_perf_scripts_set_the_precision_aware_optimizer_and_weak_scale_the_batch(tmp_path):
    """v0.2.1 utils/helpers.py, on every run: bf16 -> use_precision_aware_optimizer; DP, PP, VP > 1 ->
    overlap_param_gather_with_optimizer_step; N != N_0 -> B = int(B_0 / N_0 * N). Checked against Bridge v0.2.1's
    own get_model_recipe_with_user_overrides for llama3 70b h100 (bf16 at 64 and 128 GPUs: B 128, 256;
    fp8_cs at 96: B 192, no precision-aware optimizer)."""
    req, notes = _read(tmp_path, "v0.2.1", "LLAMA3_70B_H100_BF16_BASE_CONFIG")  # 64 GPUs TP4 PP4 V5: DP 4
    assert req.ctx.options.use_precision_aware_optimizer and req.ctx.training.global_batch == 256
    assert any("overlap_param_gather_with_optimizer_step=True (not modelled)" in n for n in notes)
    req, notes = _read(tmp_path, "v0.2.1", "LLAMA3_70B_H100_FP8_CS_BASE_CONFIG", gpus=96)
    assert not req.ctx.options.use_precision_aware_optimizer
    assert req.ctx.training.global_batch == 384  # int(256 / 64 * 96)
    assert any("global_batch_size=384 (weak scaling from 256 at 64 GPUs)" in n for n in notes)
    req, notes = _read(tmp_path, "v0.2.1", "LLAMA3_8B_H100_BF16_BASE_CONFIG", gpus=24, global_batch=64)
    assert req.ctx.training.global_batch == 128  # not scaled to 384: the user's --global-batch applies over it
    assert not any("weak scaling" in n for n in notes)


def test_v060_post_overrides_only_where_no_recipe_is_named_for_the_gpus(tmp_path):
    """v0.6.0 run_script.py runs a flat recipe as written at its own GPU count; at another it applies
    set_post_overrides: B = B_0 · DP / DP_0 (refused unless whole). Checked against Bridge v0.6.0's own
    set_post_overrides for llama3_70b_pretrain_64gpu_h100_{bf16,fp8cs}_config at 128 GPUs (B 256 -> 512)."""
    name = "llama3_70b_pretrain_64gpu_h100_fp8cs_config"  # TP4 PP4 V5 CP1 at 64: DP 4, B 256
    req, notes = _read(tmp_path, "v0.6.0", name)
    assert req.ctx.training.global_batch == 256 and not any("set by the perf scripts" in n for n in notes)
    req, notes = _read(tmp_path, "v0.6.0", name, gpus=96)  # DP 6: 256 · 6 / 4
    assert req.ctx.training.global_batch == 384 and not req.ctx.options.use_precision_aware_optimizer
    assert any("overlap_param_gather_with_optimizer_step=True" in n and "384" in n for n in notes)
    bf16 = tmp_path / "bf16.py"
    bf16.write_text(v060_text().replace("fp8cs_config", "bf16_config").replace('"fp8_cs"', '"bf16"'))
    read, _ = read_bridge_source({"bridge_config": f"{bf16}#{name.replace('fp8cs', 'bf16')}", "gpus": 128})
    req = request_from_fields(read.data)
    assert req.ctx.options.use_precision_aware_optimizer and req.ctx.training.global_batch == 512
    odd = tmp_path / "odd.py"  # B_0 250 from DP 4 to DP 5 (80 GPUs): 312.5
    odd.write_text(v060_text().replace("global_batch_size = 256", "global_batch_size = 250"))
    with pytest.raises(PlannerError, match=r"from DP 4 to DP 5 is not whole, which Bridge refuses; give --global-b"):
        read_bridge_source({"bridge_config": f"{odd}#{name}", "gpus": 80})
