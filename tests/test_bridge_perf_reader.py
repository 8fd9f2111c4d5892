"""v0.6.0 performance recipes whose fields are set in helpers: a recipe starting from another, family helpers in
common.py, benchmark defaults in perf_recipes/_common.py, the DeepSeek layout helper, ``if`` tests on fields read,
``cfg.env_vars`` with a shared dict. The package below is written here in that pattern (not Bridge's files); the
reader follows it without running it, and each workload imports as the plan its code sets."""

import pytest

from planner.bridge.importer import read_bridge_source
from planner.bridge.perf_reader import UNKNOWN, deepseek_v3_layout, read_perf_recipe
from planner.bridge.workloads import read_workload
from planner.errors import PlannerError
from planner.plan_file import request_from_fields

SHARED = """
from megatron.bridge.training.config import ConfigContainer

SHARED_ENV = {"TORCH_NCCL_HIGH_PRIORITY": 1}


def _bench(cfg: ConfigContainer, ce_impl: str = "te") -> None:
    cfg.train.train_iters = 40
    cfg.scheduler.lr_decay_iters = cfg.train.train_iters
    cfg.model.cross_entropy_fusion_impl = ce_impl
    cfg.ddp.grad_reduce_in_fp32 = False
    impl = getattr(cfg.model, "cuda_graph_impl", None)
    if impl == "none":
        cfg.model.cuda_graph_scope = []
    if impl is not None and impl != "none":
        cfg.rng.te_rng_tracker = cfg.model.use_te_rng_tracker = True


def _step_overlap(cfg):
    cfg.optimizer.overlap_param_gather_with_optimizer_step = True


def _perf_precision(compute_dtype):
    raise ValueError(compute_dtype)
"""

FAMILY = """
import torch

from megatron.bridge.perf_recipes._common import SHARED_ENV, _bench, _perf_precision, _step_overlap
from megatron.bridge.recipes.deepseek.deepseek_v3 import (
    deepseek_v3_pretrain_config,
    set_deepseek_v3_pipeline_model_parallel_layout,
)


def _ds_common(cfg):
    cfg.model.recompute_granularity = "selective"
    cfg.model.moe_router_force_load_balancing = True


def _ds_fsdp(cfg):
    _ds_common(cfg)
    cfg.model.tensor_model_parallel_size = 1
    cfg.model.pipeline_model_parallel_size = 1
    cfg.model.virtual_pipeline_model_parallel_size = None
    cfg.model.expert_model_parallel_size = 64
    cfg.model.expert_tensor_parallel_size = 1
    cfg.model.sequence_parallel = False
    cfg.train.global_batch_size = 256
    cfg.train.micro_batch_size = 1
    cfg.ddp.use_megatron_fsdp = True
    cfg.ddp.data_parallel_sharding_strategy = "optim_grads_params"
    cfg.model.recompute_modules = ["mla_up_proj", "moe_act"]
    set_deepseek_v3_pipeline_model_parallel_layout(cfg.model)
    _bench(cfg)


def _ds_lean_optimizer(cfg):
    cfg.optimizer.use_precision_aware_optimizer = True
    cfg.optimizer.exp_avg_dtype = torch.bfloat16
    cfg.optimizer.exp_avg_sq_dtype = torch.bfloat16


def _with_gbs(cfg, gbs):
    cfg.train.global_batch_size = gbs
    return cfg
"""

RECIPES = """
from megatron.bridge.perf_recipes.deepseek.common import (
    SHARED_ENV,
    _bench,
    _ds_common,
    _ds_fsdp,
    _ds_lean_optimizer,
    _perf_precision,
    _step_overlap,
    _with_gbs,
    deepseek_v3_pretrain_config,
    set_deepseek_v3_pipeline_model_parallel_layout,
)


def deepseek_v3_pretrain_512gpu_gb300_bf16_config():
    cfg = deepseek_v3_pretrain_config()
    cfg.mixed_precision = _perf_precision("bf16")
    _ds_common(cfg)
    cfg.model.tensor_model_parallel_size = 1
    cfg.model.pipeline_model_parallel_size = 8
    cfg.model.virtual_pipeline_model_parallel_size = 2
    cfg.model.expert_model_parallel_size = 32
    cfg.model.sequence_parallel = False
    cfg.train.global_batch_size = 4096
    cfg.train.micro_batch_size = 1
    cfg.model.cuda_graph_impl = "none"
    cfg.ddp.overlap_grad_reduce = False
    cfg.comm_overlap.overlap_grad_reduce = False
    set_deepseek_v3_pipeline_model_parallel_layout(cfg.model)
    _bench(cfg)
    _step_overlap(cfg)
    _ds_lean_optimizer(cfg)
    cfg.env_vars = {**SHARED_ENV, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    return cfg


def deepseek_v3_pretrain_256gpu_gb300_fp8mx_config():
    cfg = _with_gbs(deepseek_v3_pretrain_512gpu_gb300_bf16_config(), 2048)
    cfg.mixed_precision = _perf_precision("fp8_mx")
    cfg.model.expert_model_parallel_size = 16
    set_deepseek_v3_pipeline_model_parallel_layout(cfg.model, "Et|(tt|)*30mL")
    cfg.model.virtual_pipeline_model_parallel_size = None
    return cfg


def deepseek_v3_pretrain_64gpu_gb300_fp8mx_fsdp_config():
    cfg = deepseek_v3_pretrain_config()
    cfg.mixed_precision = _perf_precision("fp8_mx")
    _ds_fsdp(cfg)
    return cfg
"""


@pytest.fixture
def recipe_file(tmp_path):
    root = tmp_path / "src" / "megatron" / "bridge" / "perf_recipes"
    (root / "deepseek" / "gb300").mkdir(parents=True)
    (root / "_common.py").write_text(SHARED)
    (root / "deepseek" / "common.py").write_text(FAMILY)
    path = root / "deepseek" / "gb300" / "deepseek_v3.py"
    path.write_text(RECIPES)
    return path


def _read(path, name):
    return read_perf_recipe(path.read_text(), name, path)


def test_helpers_in_the_family_and_shared_modules_set_their_fields_in_order(recipe_file):
    fields, env, _ = _read(recipe_file, "deepseek_v3_pretrain_512gpu_gb300_bf16_config")
    assert fields["model.recompute_granularity"] == "selective"  # _ds_common in deepseek/common.py
    assert fields["train.train_iters"] == 40 and fields["scheduler.lr_decay_iters"] == 40  # a field read back
    assert fields["model.cross_entropy_fusion_impl"] == "te"  # the helper's default argument
    assert fields["model.cuda_graph_scope"] == []  # if impl == "none": decided from the field read
    assert "rng.te_rng_tracker" not in fields  # the other branch's test is False
    assert fields["optimizer.overlap_param_gather_with_optimizer_step"] is True
    assert fields["optimizer.exp_avg_dtype"] == "torch.bfloat16"  # a torch dtype, as a ConfigContainer YAML names it
    assert fields["mixed_precision"] == "bf16_mixed" and fields["mixed_precision.grad_reduce_in_fp32"] is False
    # no layout given, (pp, vp) = (8, 2): the layout map's 16 stages of ceil(61/16) = 4 layers, 1 + MTP + loss last
    assert fields["model.pipeline_model_parallel_layout"] == "E" + "tttt|" * 15 + "tmL"
    assert env == {"TORCH_NCCL_HIGH_PRIORITY": 1, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def test_a_recipe_built_on_another_keeps_its_fields_and_overrides_some(recipe_file):
    fields, _, _ = _read(recipe_file, "deepseek_v3_pretrain_256gpu_gb300_fp8mx_config")
    assert fields["train.global_batch_size"] == 2048  # _with_gbs(other(), 2048) returns the same cfg
    assert fields["model.expert_model_parallel_size"] == 16 and fields["model.pipeline_model_parallel_size"] == 8
    assert fields["model.pipeline_model_parallel_layout"] == "Et|(tt|)*30mL"  # the layout given
    assert fields["mixed_precision"] == "bf16_with_mxfp8_mixed"
    assert fields["model.virtual_pipeline_model_parallel_size"] is None


def test_a_helper_that_sets_the_whole_parallel_layout_imports_as_that_plan(recipe_file):
    name = "deepseek_v3_pretrain_64gpu_gb300_fp8mx_fsdp_config"
    read, _ = read_bridge_source({"bridge_config": f"{recipe_file}#{name}"})
    req = request_from_fields(read.data)
    p = req.plan
    assert (req.gpus, p.tp, p.pp, p.ep, p.etp, p.dp, p.micro_batch) == (64, 1, 1, 64, 1, 64, 1)
    assert p.fsdp and p.fsdp_sharding.value == "optim_grads_params" and p.recompute.value == "selective"
    assert [m.value for m in req.ctx.options.recompute_modules] == ["mla_up_proj", "moe_act"]
    assert req.ctx.training.global_batch == 256 and req.ctx.options.fp8_recipe.value == "mxfp8"
    assert req.ctx.hardware.name == "gb300-nvl72"


def test_overlapped_param_gather_without_overlapped_grad_reduction_is_priced_without_it(recipe_file):
    """Bridge turns both DDP overlaps on for dp > 1 unless comm_overlap gives them; the recipe gives gradient
    reduction off (on ddp and comm_overlap), which
    Megatron-LM's arguments.py refuses beside --overlap-param-gather: the nearest plan, with a warning."""
    name = "deepseek_v3_pretrain_512gpu_gb300_bf16_config"
    read, _ = read_bridge_source({"bridge_config": f"{recipe_file}#{name}"})
    req = request_from_fields(read.data)
    assert (req.plan.pp, req.plan.vpp, req.plan.ep) == (8, 2, 32)
    assert not req.ctx.options.overlap_grad_reduce and not req.ctx.options.overlap_param_gather
    assert any("overlap_param_gather=true with overlap_grad_reduce=false" in w for w in read.warnings)
    assert req.ctx.options.use_precision_aware_optimizer


def test_the_deepseek_layout_map_splits_61_layers_as_written_out():
    assert deepseek_v3_layout(4) == "E" + "t" * 16 + "|" + "t" * 16 + "|" + "t" * 16 + "|" + "t" * 13 + "mL"
    assert deepseek_v3_layout(8) == "E" + "t" * 8 + "|" + ("t" * 8 + "|") * 6 + "t" * 5 + "mL"  # 8·7 + 5 = 61
    assert deepseek_v3_layout(1) is None


def test_what_the_reader_cannot_decide_is_left_to_the_base_recipe(tmp_path):
    path = tmp_path / "perf.py"
    path.write_text(
        "def llama3_8b_pretrain_8gpu_h100_bf16_config():\n"
        "    cfg = llama3_8b_pretrain_config()\n"
        "    if cfg.model.some_flag:\n"
        "        cfg.model.tensor_model_parallel_size = 4\n"
        "    cfg.model.context_parallel_size = unknown_helper()\n"
        "    cfg.train.micro_batch_size = 2\n"
        "    return cfg\n"
    )
    fields, _, base = _read(path, "llama3_8b_pretrain_8gpu_h100_bf16_config")
    assert fields == {"train.micro_batch_size": 2} and base == "llama3_8b_pretrain_config"
    assert UNKNOWN not in fields.values()
    w = read_workload(path.read_text(), "llama3_8b_pretrain_8gpu_h100_bf16_config", path)
    assert (w.model, w.gpus, w.hardware) == ("llama3-8b", 8, "dgx-h100-superpod")
    with pytest.raises(PlannerError, match="not in the file"):
        _read(path, "llama3_8b_pretrain_16gpu_h100_bf16_config")


def test_a_recipe_whose_expert_grid_does_not_divide_its_world_is_refused_naming_the_rule(tmp_path):
    """v0.6.0 sets EP 32 x PP 4 in recipes named 64-GPU (e.g. Qwen3-235B on GB300): Megatron-Core's
    parallel_state.py (881 at d98e8a64) raises when etp·ep·pp does not divide the world; so does megaplan."""
    from planner.api import explain
    from planner.errors import InfeasibleError

    path = tmp_path / "perf.py"
    path.write_text(
        "def qwen3_235b_a22b_pretrain_64gpu_gb300_bf16_config():\n"
        "    cfg = qwen3_235b_a22b_pretrain_config()\n"
        "    cfg.model.tensor_model_parallel_size = 1\n"
        "    cfg.model.pipeline_model_parallel_size = 4\n"
        "    cfg.model.virtual_pipeline_model_parallel_size = None\n"
        "    cfg.model.expert_model_parallel_size = 32\n"
        "    cfg.model.expert_tensor_parallel_size = 1\n"
        "    cfg.train.global_batch_size = 2048\n"
        "    return cfg\n"
    )
    read, _ = read_bridge_source({"bridge_config": f"{path}#qwen3_235b_a22b_pretrain_64gpu_gb300_bf16_config"})
    with pytest.raises(InfeasibleError, match=r"etp·ep·pp = 1·32·4 does not divide 64 GPUs"):
        explain(request_from_fields(read.data))


def test_the_library_recipe_a_perf_recipe_starts_from_is_its_base_even_under_another_name(tmp_path):
    """v0.6.0's H100 Qwen3-30B perf recipes start from the 16-GPU library recipe imported under another name; its
    defaults (TP, EP, batch) are the ones beneath, not the model's first recipe's."""
    path = tmp_path / "perf.py"
    path.write_text(
        "from megatron.bridge.recipes.qwen.h100.qwen3_moe import (\n"
        "    qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config as _default_config,\n"
        ")\n\n\n"
        "def qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config():\n"
        "    cfg = _default_config()\n"
        "    cfg.model.moe_router_force_load_balancing = True\n"
        "    return cfg\n"
    )
    name = "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config"
    w = read_workload(path.read_text(), name, path)
    assert w.recipe == "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config"
    read, _ = read_bridge_source({"bridge_config": f"{path}#{name}"})
    assert any("assumed from base recipe qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config" in n for n in read.notes)


def test_a_recipe_copied_out_of_its_package_is_refused_naming_the_helper_it_cannot_read(tmp_path):
    """`git show v0.6.0:.../deepseek/h100/deepseek_v3.py > x.py` leaves its family's common.py behind: the
    helpers it calls (here _ds_common: selective recomputation) would set nothing and the plan would change
    without a word (DeepSeek-V3 1024 H100 BF16: FITS 63.9 GiB -> DOES NOT FIT 81.4 GiB), so it is refused."""
    alone = tmp_path / "deepseek_v3.py"
    alone.write_text(RECIPES)
    with pytest.raises(PlannerError, match=r"uses _ds_common from megatron\.bridge\.perf_recipes\.deepseek\.common"):
        read_workload(alone.read_text(), "deepseek_v3_pretrain_512gpu_gb300_bf16_config", alone)
    with pytest.raises(PlannerError, match="perf_recipes folder"):
        read_bridge_source({"bridge_config": f"{alone}#deepseek_v3_pretrain_64gpu_gb300_fp8mx_fsdp_config"})


def test_a_missing_family_module_inside_the_package_and_a_missing_shared_env_are_refused(recipe_file):
    (recipe_file.parents[1] / "common.py").unlink()
    with pytest.raises(PlannerError, match="uses _ds_common from"):
        _read(recipe_file, "deepseek_v3_pretrain_512gpu_gb300_bf16_config")
    env_only = recipe_file.parent / "env_only.py"
    env_only.write_text(
        "from ..shared import SHARED_ENV\n\n\n"
        "def llama3_8b_pretrain_8gpu_h100_bf16_config():\n"
        "    cfg = llama3_8b_pretrain_config()\n"
        '    cfg.env_vars = {**SHARED_ENV, "CUDA_DEVICE_MAX_CONNECTIONS": 1}\n'
        "    return cfg\n"
    )
    with pytest.raises(PlannerError, match=r"uses SHARED_ENV from \.\.shared"):
        _read(env_only, "llama3_8b_pretrain_8gpu_h100_bf16_config")


def test_the_cli_refuses_a_lone_recipe_copy_in_one_line(tmp_path):
    from conftest import one_line_error, run_cli

    alone = tmp_path / "deepseek_v3.py"
    alone.write_text(RECIPES)
    res = run_cli(["explain", "--bridge-config", f"{alone}#deepseek_v3_pretrain_512gpu_gb300_bf16_config"])
    assert one_line_error(res).startswith("megaplan: error: workload deepseek_v3_pretrain_512gpu_gb300_bf16_config")


def test_a_workload_file_that_is_not_python_or_lacks_the_name_is_one_line_naming_what_is_there(tmp_path, recipe_file):
    """Trial 4: a perf file with a syntax error ended in a SyntaxError traceback; a misspelt function name of a
    v0.6.0 file said 'allowed: none' (the v0.2.1 list); `FILE#` and `#NAME` were read as other things."""
    from conftest import one_line_error, run_cli

    broken = tmp_path / "broken_perf.py"
    broken.write_text("def llama3_8b_pretrain_8gpu_h100_bf16_config(:\n    cfg = 1\n")
    line = one_line_error(run_cli(["explain", "--bridge-config", f"{broken}#llama3_8b_pretrain_8gpu_h100_bf16_config"]))
    assert line == "megaplan: error: broken_perf.py: not Python megaplan can read (line 1: invalid syntax)"
    (recipe_file.parents[1] / "common.py").write_text("def _ds_common(cfg:\n")  # a module it imports, broken
    with pytest.raises(PlannerError, match=r"^common\.py: not Python megaplan can read \(line 1"):
        read_workload(recipe_file.read_text(), "deepseek_v3_pretrain_512gpu_gb300_bf16_config", recipe_file)
    typo = "deepseek_v3_pretrain_512gpu_gb300_bf16_confg"
    with pytest.raises(
        PlannerError, match=r"did you mean deepseek_v3_pretrain_512gpu_gb300_bf16_config\?\); allowed: "
    ):
        read_workload(recipe_file.read_text(), typo, recipe_file)
    assert "no workload name after '#'" in one_line_error(run_cli(["explain", "--bridge-config", f"{broken}#"]))
    assert "no file before '#'" in one_line_error(run_cli(["explain", "--bridge-config", "#x"]))
