"""Attention and Transformers in JAX/Flax.

Importing the package (and its models, trainer and local data paths) never
imports TensorFlow; only the TFDS data source does, lazily.
"""
