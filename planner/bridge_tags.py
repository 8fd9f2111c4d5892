"""The Megatron-Bridge tags megaplan reads (recipes, overrides, validate()): here, outside ``planner.bridge``, so
the command line can offer them as a choice without loading the Bridge tables (tests/test_startup.py)."""

TAGS = ("v0.2.1", "v0.6.0")  # the 25.11 release, and the newest
NEWEST = TAGS[-1]
