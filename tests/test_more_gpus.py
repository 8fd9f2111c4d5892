"""explain of a plan that does not fit names the same layout on more GPUs where it fits (api.more_gpus).

With the distributed optimizer the optimizer state is sharded over the d·c data- and context-parallel ranks
(Megatron-LM's DistributedOptimizer: each rank keeps 1/(d·c) of the fp32 main weights and both Adam moments),
so doubling d halves that term and nothing else of the per-GPU memory grows. Llama 3 8B at TP1 PP1 CP2 on 2
H100 (Megatron-Bridge's llama3_8b_pretrain_2gpu_h100_bf16_config, one model replica) does not fit; the first
doubling that does is the one more_gpus returns."""

from planner.api import explain, make_request, more_gpus

H100 = "dgx-h100-superpod"


def _llama8b(gpus: int, **options):
    return make_request(
        model="llama3-8b",
        hardware=H100,
        gpus=gpus,
        global_batch=512,
        seq_len=8192,
        tp=1,
        pp=1,
        cp=2,
        micro_batch=1,
        distributed_optimizer=options.pop("distributed_optimizer", True),
        options=options or None,
    )


def test_the_first_doubling_that_fits_is_named_and_the_one_before_does_not_fit():
    req = _llama8b(2)
    pj = explain(req)
    assert not pj["estimate"]["fits"]
    more = pj["more_gpus"]
    assert more["gpus"] == 2 * more["dp"] and more["gpus"] in (4, 8, 16, 32, 64, 128)
    at = explain(_llama8b(more["gpus"]), suggest=False)["estimate"]
    before = explain(_llama8b(more["gpus"] // 2), suggest=False)["estimate"]
    assert at["fits"] and not before["fits"]
    assert more["peak_memory_gib"] == at["peak_memory_gib"]


def test_the_optimizer_state_shrinks_as_one_over_d_times_c():
    """8.03e9 parameters × 12 bytes (fp32 main weights, two fp32 Adam moments) over d·c ranks: 2 ranks at 2 GPUs,
    16 at 16 GPUs; the ratio of the optimizer terms is 2/16 (the rest of the state is not sharded by DO)."""
    small = explain(_llama8b(2), suggest=False)["estimate"]["memory"]["optimizer"]
    big = explain(_llama8b(16), suggest=False)["estimate"]["memory"]["optimizer"]
    assert abs(big / small - 2 / 16) < 1e-9
    assert abs(small - 8.03e9 * 12 / 2 / 2**30) / small < 0.01


def test_without_a_sharded_optimizer_more_gpus_never_helps():
    req = _llama8b(2, distributed_optimizer=False)
    assert more_gpus(req) is None
    assert explain(req)["more_gpus"] is None
