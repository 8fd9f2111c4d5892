"""docs/cost-model.md's contents list names every numbered section, in order, with GitHub's anchor for it."""

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "cost-model.md"


def github_anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped (word characters, hyphens and spaces kept), spaces
    to hyphens - '2. Parameters (`planner/models/params.py`)' -> '2-parameters-plannermodelsparamspy'."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def test_anchor_rule_by_hand():
    assert github_anchor("2. Parameters (`planner/models/params.py`)") == "2-parameters-plannermodelsparamspy"
    assert github_anchor("5.7 Megatron-LM's own estimate") == "57-megatron-lms-own-estimate"


def test_contents_list_every_numbered_section_in_order():
    text = DOC.read_text()
    body = text.split("## Contents", 1)[1]
    listed = re.findall(r"^( *)- \[(.+)\]\(#([^)]+)\)$", body.split("\n## 1.", 1)[0], flags=re.M)
    heads = re.findall(r"^(#{2,3}) (\d.*)$", body, flags=re.M)
    assert len(heads) >= 56
    assert [(len(indent) // 2 + 2, title) for indent, title, _ in listed] == [(len(h), t) for h, t in heads]
    assert [a for _, _, a in listed] == [github_anchor(t) for _, t in heads]
