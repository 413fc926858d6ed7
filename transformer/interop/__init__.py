"""Importing published checkpoints (issue 10): safetensors only, never
pickle; names and shapes checked, mismatches listed."""
