"""A mixture of experts launched without --moe-grouped-gemm runs each GPU's experts one by one.

Megatron-Core's Transformer Engine spec builds TEGroupedMLP only with moe_grouped_gemm, else SequentialMLP, a
TE linear per local expert (megatron/core/extensions/transformer_engine_spec_provider.py grouped_mlp_modules @
d98e8a64). megaplan prices the experts as grouped GEMMs either way; the import says so instead of staying silent.
The command line below is written here (a Mixtral-shaped model)."""

import pytest

from planner.megatron.importer import import_fields
from planner.megatron.unpriced import SEQUENTIAL_EXPERTS

MOE = (
    "pretrain_gpt.py --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
    "--num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 8 --micro-batch-size 1 "
    "--global-batch-size 256 --seq-length 4096 --max-position-embeddings 4096 --bf16 --swiglu "
    "--normalization RMSNorm --position-embedding-type rope --disable-bias-linear --vocab-size 32000"
)


@pytest.mark.parametrize("extra, said", [("", True), (" --moe-grouped-gemm", False)])
def test_experts_without_grouped_gemm_are_said(extra, said):
    notes = import_fields(MOE + extra, gpus=64, hardware="dgx-h100-superpod").notes
    assert (SEQUENTIAL_EXPERTS in notes) is said


def test_a_dense_model_says_nothing_of_experts():
    dense = MOE.replace("--num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 8 ", "")
    assert SEQUENTIAL_EXPERTS not in import_fields(dense, gpus=64, hardware="dgx-h100-superpod").notes
