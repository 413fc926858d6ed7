"""Insight: what models attend to (`views`), read from trained tasks."""
