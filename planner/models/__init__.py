"""The transformer being trained: ModelSpec and parameter counts."""

from planner.models.spec import ModelSpec, Normalization, PositionEmbedding, TrainingDefaults

__all__ = ["ModelSpec", "Normalization", "PositionEmbedding", "TrainingDefaults"]
