"""Rotary frequencies against transformers' own (`LlamaRotaryEmbedding`
and `modeling_rope_utils`) for the base and each scaling; skipped without
torch and transformers."""

import jax.numpy as jnp
import numpy as np
import pytest

from transformer.core import positional

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')
rope_utils = pytest.importorskip('transformers.modeling_rope_utils')

HEAD_DIM = 16

# (rope_type, parameters, the sequence length of the call).
HF_CASES = [
    ('default', dict(rope_theta=500_000.0), None),
    ('linear', dict(factor=4.0), None),
    ('dynamic', dict(factor=2.0), 10),
    ('dynamic', dict(factor=2.0), 40),
    ('llama3', dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                    original_max_position_embeddings=32), None),
]


@pytest.mark.parametrize('kind,parameters,length', HF_CASES)
def test_frequencies_equal_transformers(kind, parameters, length):
  hf = transformers.LlamaConfig(
      hidden_size=2 * HEAD_DIM, num_attention_heads=2,
      max_position_embeddings=16, rope_parameters={
          'rope_type': kind, 'rope_theta': 10_000.0, **parameters})
  if kind == 'default':
    expected = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding(
        hf).inv_freq
  else:
    expected, attention_factor = rope_utils.ROPE_INIT_FUNCTIONS[kind](
        hf, seq_len=None if length is None else torch.tensor(length))
    assert attention_factor == 1.0  # cos and sin are not rescaled
  rope = positional.Rope(
      theta=parameters.get('rope_theta', 10_000.0),
      scaling='' if kind == 'default' else kind,
      factor=parameters.get('factor', 1.0),
      low_freq_factor=parameters.get('low_freq_factor', 1.0),
      high_freq_factor=parameters.get('high_freq_factor', 4.0),
      original_max_positions=(
          16 if kind == 'dynamic' else
          parameters.get('original_max_position_embeddings')))
  positions = None if length is None else jnp.arange(length)
  np.testing.assert_allclose(
      positional.rotary_frequencies(rope, HEAD_DIM, positions),
      expected.numpy(), rtol=1e-6)
