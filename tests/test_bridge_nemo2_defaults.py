"""NeMo 2 recipe defaults (data/nemo2_defaults.json, read from NeMo v2.4.0's llm recipes by
scripts/dump_nemo2_defaults.py): a command line's keys apply over what its factory's recipe sets, the import says
which recipe fields it assumed, and the export writes every field whose plan value is not the recipe's."""

from planner.api import make_request
from planner.bridge.formats import NEMO2_TAG, nemo2_defaults, nemo2_fields, nemo2_lines
from planner.bridge.importer import read_bridge_source
from planner.plan_file import request_from_fields


def test_the_llama3_70b_recipe_sets_what_its_source_says():
    """NeMo v2.4.0 recipes/llama3_70b.py: trainer(tensor_parallelism=4, pipeline_parallelism=4,
    virtual_pipeline_parallelism=5, context_parallelism=2, sequence_parallelism=True), MockDataModule(seq_length=8192,
    global_batch_size=512, micro_batch_size=1), bf16_mixed(), DDP overlaps on, the distributed fused Adam."""
    d = nemo2_defaults("llama3_70b")
    s = "trainer.strategy."
    assert {k: d[s + k] for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size")} == {
        "tensor_model_parallel_size": 4,
        "pipeline_model_parallel_size": 4,
    }
    assert (d[s + "virtual_pipeline_model_parallel_size"], d[s + "context_parallel_size"]) == (5, 2)
    assert (d["data.seq_length"], d["data.global_batch_size"], d["data.micro_batch_size"]) == (8192, 512, 1)
    assert d["trainer.plugins"] == "bf16_mixed" and d[s + "ddp.use_distributed_optimizer"] is True
    assert d[s + "ddp.overlap_grad_reduce"] is True and d[s + "ddp.overlap_param_gather"] is True
    ds = nemo2_defaults("deepseek_v3")  # recipe.model.config.recompute_* = ... in pretrain_recipe
    assert ds["model.config.recompute_granularity"] == "selective"
    assert ds["model.config.recompute_modules"] == ["mla_up_proj", "layernorm"]
    assert nemo2_defaults("no_such_factory") == {}


def test_a_command_line_applies_over_its_recipe_and_says_what_it_assumed(tmp_path):
    line = "nemo llm pretrain --factory llama3_70b trainer.strategy.tensor_model_parallel_size=8 "
    line += "data.global_batch_size=1024"
    fields, preset, (assumed, factory) = nemo2_fields(line)
    assert preset == "llama3-70b" and factory == "llama3_70b"
    assert fields["model.tensor_model_parallel_size"] == 8  # given
    assert fields["model.pipeline_model_parallel_size"] == 4 and fields["model.context_parallel_size"] == 2  # recipe
    assert "trainer.strategy.tensor_model_parallel_size" not in assumed
    path = tmp_path / "launch.sh"
    path.write_text(line + "\n")
    read, _ = read_bridge_source({"bridge_config": str(path), "gpus": 256, "hardware": "dgx-h100-superpod"})
    req = request_from_fields(read.data)
    assert (req.plan.tp, req.plan.pp, req.plan.cp, req.plan.vpp, req.plan.dp) == (8, 4, 2, 5, 4)
    assert req.ctx.training.global_batch == 1024 and req.ctx.training.seq_len == 8192
    assert any(n.startswith(f"assumed from NeMo 2 recipe llama3_70b (NeMo {NEMO2_TAG}): ") for n in read.notes)


def test_the_export_undoes_a_recipe_field_the_plan_does_not_have():
    """deepseek_v3's recipe recomputes selectively; a plan without recomputation must say so, or NeMo would run the
    recipe's (the value is Megatron-LM's default, which the export used to leave out)."""
    req = make_request(model="deepseek-v3", hardware="dgx-h100-superpod", gpus=1024, tp=2, pp=16, ep=64)
    lines = nemo2_lines(req, "deepseek_v3")
    assert "model.config.recompute_granularity=None" in lines
    back, _, _ = nemo2_fields("nemo llm pretrain --factory deepseek_v3 " + " ".join(lines))
    assert back["model.recompute_granularity"] is None and back["model.pipeline_model_parallel_size"] == 16
