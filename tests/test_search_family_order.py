"""search sorts a block's plans by family, then micro-batch (``search._family_order``, where ``_by_family_states``
bounds the larger micro-batches of a family by a smaller one's peak): the order must be ``np.lexsort``'s, ties in
their order, whichever way it is found."""

from __future__ import annotations

import numpy as np

import planner.search as search_module


def test_family_order_is_lexsorts():
    """``_family_order`` sorts by family, then micro-batch, ties in their order: ``np.lexsort``'s order exactly (a
    stable sort), by one sort of the family where each family's micro-batches then come in order, else by lexsort
    (a packed sort of family, micro-batch and position was tried: slower than lexsort on DeepSeek-V3's blocks)."""
    rng = np.random.default_rng(3)
    for n, families, span in ((1, 1, 1), (7, 3, 4), (5000, 40, 64), (20000, 2**40, 512), (300, 2**61, 8)):
        family = rng.integers(0, families, n) + 5
        b = 2 ** rng.integers(0, max(span.bit_length() - 1, 1), n)
        order = search_module._family_order(family, b)
        expected = np.lexsort([b, family])
        if order is None:  # already in that order
            np.testing.assert_array_equal(expected, np.arange(n))
        else:
            np.testing.assert_array_equal(order, expected)
    # already sorted by family, micro-batches in order within each: nothing to sort
    assert search_module._family_order(np.array([1, 1, 2, 2]), np.array([1, 2, 1, 4])) is None
    # hand case: family 9's rows first (micro-batch 1 before 2, the two 2s in their order), then family 10's
    order = search_module._family_order(np.array([10, 9, 9, 9, 10]), np.array([1, 2, 1, 2, 1]))
    np.testing.assert_array_equal(order, [2, 1, 3, 0, 4])
