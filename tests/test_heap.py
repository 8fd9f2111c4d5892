"""planner.heap: the search's freed arrays are reused, not faulted in again (a page-fault count, not a timing)."""

from __future__ import annotations

import resource
import sys

import pytest

from planner import heap


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_search_reuses_its_freed_arrays_instead_of_faulting_in_fresh_pages():
    # On glibc's default thresholds the GPT-3 175B / 64 A100 search (global batch 64) took about 1,300-1,550 minor
    # page faults per search in process (rate12m; 1,287 on this commit's parent, 50 searches): every array above
    # the mmap threshold mapped fresh and every trim of the heap's top given back. planner.search sets the
    # thresholds at import; three searches after a warm-up then fault under 400 pages in all (40 to 1 each as the
    # heap settles), against about 3,700 before (3,745 with the setting skipped); 21,573 plans evaluated
    from planner.api import make_request
    from planner.search import search

    assert heap.keep_freed_memory() is True  # glibc: every mallopt accepted (returns 1)
    req = make_request(model="gpt3-175b", gpus=64, hardware="dgx-a100-superpod", global_batch=64)
    for _ in range(3):
        search(req.ctx, 64)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):
        result = search(req.ctx, 64)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert result.evaluated == 21_573 and faults < 400, faults  # 21,576 before Ampere kept its supported twins


def test_without_mallopt_nothing_is_changed(monkeypatch):
    # macOS and musl have no mallopt: the symbol lookup fails and the heap is left as it is
    import ctypes

    class NoMallopt:
        def __init__(self, name):
            pass

        def __getattr__(self, name):
            raise AttributeError(name)

    monkeypatch.setattr(ctypes, "CDLL", NoMallopt)
    assert heap.keep_freed_memory() is False
