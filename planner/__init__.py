"""megaplan: analytical parallelism planner for Megatron-LM training of large transformers."""

__version__ = "0.1.0"
