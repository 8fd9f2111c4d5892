"""Base recipes per Bridge tag, and the fields each sets (generated from Bridge's own code, in data/)."""

from __future__ import annotations

import functools
import json
from importlib import resources

from planner.bridge.table import LEGACY_NAMES, RECIPES
from planner.errors import PlannerError


@functools.cache
def _defaults() -> dict:
    text = resources.files("planner.bridge.data").joinpath("recipe_defaults.json").read_text("utf-8")
    return json.loads(text)


def defaults(tag: str, name: str) -> dict:
    """The base recipe's fields at ``tag`` before any override ({} when not dumped)."""
    return _defaults().get("recipes", {}).get(tag, {}).get(name, {})


def resolve(tag: str, recipe: str | None, model: str) -> tuple[str, str, str]:
    """(recipe name, its module, the megaplan model preset it builds) for a named recipe or the model's."""
    known = RECIPES[tag]
    if recipe is None:
        names = [n for n, (_, preset) in known.items() if preset == model]
        if not names:
            raise PlannerError(
                f"no Megatron-Bridge {tag} base recipe for model {model!r} is known; give --bridge-recipe NAME "
                f"(known: {', '.join(sorted(known))})"
            )
        recipe = names[0]
    module, _, name = recipe.rpartition(":")
    name = LEGACY_NAMES.get(tag, {}).get(name, name)  # Bridge's own alias: the recipe it runs
    if name in known:
        return name, module or known[name][0], known[name][1]
    raise PlannerError(
        f"--bridge-recipe {recipe}: not a Megatron-Bridge {tag} pretraining recipe megaplan knows; "
        f"allowed: {', '.join(sorted(known))}"
    )


def preset_of(tag: str, recipe: str) -> str:
    return resolve(tag, recipe, "")[2]


def section_fields(tag: str) -> dict[str, set[str]]:
    """Every ConfigContainer section's field names at ``tag`` (dumped from Bridge's classes)."""
    return {k: set(v["fields"]) for k, v in _defaults().get("sections", {}).get(tag, {}).items()}
