"""The command line's JSON text (report.json_out.json_text) is json.dumps(data, indent=2), character for character."""

from __future__ import annotations

import json
import math
from enum import IntEnum, StrEnum

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.report.json_out import json_text

SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text()  # floats: NaN and ±inf too
TREES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=40,
)


@given(TREES)
def test_as_json_dumps_indent_2_writes_it(data):
    assert json_text(data) == json.dumps(data, indent=2)


class Colour(StrEnum):
    RED = "red"


class Size(IntEnum):
    BIG = 7


@pytest.mark.parametrize(
    "data",
    [
        {"a": {1: "int key", None: 2, False: [], 2.5: {}}},  # keys json turns into strings
        [Colour.RED, Size.BIG, {"x": Colour.RED}],  # str and int subclasses
        {"nested": [[], {}, [[1.0, -0.0, 1e300, 5e-324, math.inf, -math.inf, math.nan]]]},
        {"unicode": 'naïve ☃ \U0001f600 "quoted" back\\slash\n\t\x00'},
    ],
    ids=["non-string keys", "enums", "floats", "escapes"],
)
def test_what_json_has_its_own_way_with_is_written_as_json_writes_it(data):
    assert json_text(data) == json.dumps(data, indent=2)


def test_what_json_refuses_is_refused_as_json_refuses_it():
    cycle: list = []
    cycle.append(cycle)
    for bad in ({"s": {1, 2}}, [object()], cycle):
        with pytest.raises((TypeError, ValueError)) as mine:
            json_text(bad)
        with pytest.raises(type(mine.value)) as theirs:
            json.dumps(bad, indent=2)
        assert str(mine.value) == str(theirs.value)


def test_a_search_result_is_written_as_json_dumps_writes_it():
    from planner.api import make_request
    from planner.search import search

    req = make_request(model="gpt-1.7b", gpus=8, hardware="dgx-a100-superpod")
    data = search(req.ctx, 8, top=3).to_json()
    assert len(data["plans"]) >= 3  # the top 3 (and the fastest plan, where the ranking puts it lower)
    assert json_text(data) == json.dumps(data, indent=2)
