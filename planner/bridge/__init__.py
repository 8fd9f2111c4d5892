"""Megatron-Bridge and NeMo 2 recipes out and in: one mapping table (table.py), export (export.py), import
(importer.py) and Bridge's runtime rules (runtime.py)."""
