"""Closed-form cost models: pure functions of the paper's letters that broadcast over numpy arrays."""
