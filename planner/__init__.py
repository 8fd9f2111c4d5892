"""megaplan: analytical parallelism planner for Megatron-LM training of large transformers."""
