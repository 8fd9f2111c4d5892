"""Closed-form cost models: pure functions of the paper's letters that broadcast over numpy arrays.

Each module also says, for one plan, the formula text and source of the terms it computes
(``Formula``), so what ``explain`` prints beside a number is written where the number is computed.
"""

from typing import NamedTuple


class Formula(NamedTuple):
    """A cost term's formula in the papers' letters, and where it comes from."""

    text: str
    source: str
