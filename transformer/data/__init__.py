"""Data sources, tokenizers and batching."""
