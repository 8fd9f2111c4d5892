"""The search ranks without sorting every feasible row: ``_lex_first`` (the first k rows by several keys)
and ``_lex_rank`` (how many rows come before one) against numpy's full lexsort, ties and NaN included."""

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from planner.search import _lex_first, _lex_rank

VALUES = st.sampled_from([0.0, 1.0, 1.5, 2.0, 7.25, np.nan])


@st.composite
def key_sets(draw):
    n = draw(st.integers(1, 40))
    ints = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    floats = np.array(draw(st.lists(VALUES, min_size=n, max_size=n)))
    flags = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    order = draw(st.permutations([ints, floats, flags]))
    return tuple(order[: draw(st.integers(1, 3))])


@settings(max_examples=200, deadline=None)
@given(keys=key_sets(), k=st.integers(0, 45))
def test_first_k_are_lexsorts_first_k(keys, k):
    want = np.lexsort(tuple(reversed(keys)))[:k]
    np.testing.assert_array_equal(_lex_first(keys, k), want)
    # one key: a stable argsort's first k (the search's probe of the lowest floors, ``_time_fitting``)
    np.testing.assert_array_equal(_lex_first(keys[:1], k), np.argsort(keys[0], kind="stable")[:k])


@settings(max_examples=200, deadline=None)
@given(keys=key_sets(), data=st.data())
def test_rank_is_the_position_in_lexsort(keys, data):
    i = data.draw(st.integers(0, len(keys[0]) - 1))
    assume(not any(np.isnan(key[i]) for key in keys if key.dtype.kind == "f"))  # the fastest plan's are finite
    order = np.lexsort(tuple(reversed(keys)))
    assert _lex_rank(keys, i) == int(np.flatnonzero(order == i)[0])


def test_by_hand():
    # keys (3, 1, 3, 1, 2) then (0.5, 0.2, 0.1, 0.2, 9): order 1, 3, 4, 2, 0 (rows 1 and 3 tie: by position)
    keys = (np.array([3, 1, 3, 1, 2]), np.array([0.5, 0.2, 0.1, 0.2, 9.0]))
    assert _lex_first(keys, 3).tolist() == [1, 3, 4]
    assert [_lex_rank(keys, i) for i in range(5)] == [4, 0, 3, 1, 2]
