"""Positional encodings (self-attention alone is permutation equivariant):
sinusoidal (Vaswani et al., with the paper's interleaved or the
concatenated sin|cos layout of Marian and fairseq), learned (Table 3 row E,
BERT, GPT) and rotary (RoPE: queries and keys rotated inside self-attention,
no table). Shapes use the letters of `transformer.attention`."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array
Dtype = Any

# 'rotary' adds nothing to the embeddings: self-attention rotates its queries
# and keys instead (`rotary_embedding`).
KINDS = ('sinusoidal', 'learned', 'rotary')
# How the sin and cos of each frequency sit in the vector: 'interleaved'
# (the paper: sin at 2i, cos at 2i+1) or 'concatenated' (all sines, then all
# cosines: Marian, fairseq, tensor2tensor).
SINUSOIDAL_LAYOUTS = ('interleaved', 'concatenated')


def sinusoidal_encoding(length: int, features: int,
                        max_timescale: float = 10_000.0,
                        layout: str = 'interleaved') -> np.ndarray:
  """PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(same).

  With layout='concatenated' the same values sit as [sin... | cos...]:
  PE(pos, i) = sin(.) and PE(pos, D/2 + i) = cos(.) for i < D/2.

  Returns:
    [length, features] float32.
  """
  if features % 2:
    raise ValueError(f'Sinusoidal encodings pair sin and cos: features must '
                     f'be even, got {features}.')
  positions = np.arange(length, dtype=np.float64)[:, None]
  two_i = np.arange(0, features, 2, dtype=np.float64)[None, :]
  angles = positions / max_timescale**(two_i / features)
  if layout == 'concatenated':
    table = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
  elif layout == 'interleaved':
    table = np.empty((length, features), np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles)
  else:
    raise ValueError(f'layout={layout!r}; choose one of '
                     f'{SINUSOIDAL_LAYOUTS}.')
  return table.astype(np.float32)


class PositionalEncoding(nn.Module):
  """Adds sinusoidal or learned position encodings to embeddings.

  With `decode=True` the position of the next call is kept in the 'cache'
  collection, so one-token decoding steps get consecutive positions; the call
  that creates the cache starts counting at 0 and does not advance it.
  Explicit `positions` (e.g. of packed sequences) are used as given.

  Attributes:
    max_length: longest sequence (the table size).
    kind: 'sinusoidal' (paper), 'learned' (paper Table 3 row E) or
      'rotary' (adds nothing; the attention layers rotate queries and keys).
    layout: of the sinusoids (`SINUSOIDAL_LAYOUTS`).
  """
  max_length: int
  kind: str = 'sinusoidal'
  layout: str = 'interleaved'
  decode: bool = False
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: Array, *, positions: Array | None = None) -> Array:
    """x: [B, T, D]; positions: [B, T] int (default 0..T-1) -> [B, T, D]."""
    t, features = x.shape[-2:]
    if self.kind == 'rotary':
      return x
    if self.kind == 'sinusoidal':
      table = jnp.asarray(sinusoidal_encoding(self.max_length, features,
                                              layout=self.layout))
    elif self.kind == 'learned':
      table = self.param(
          'embedding',
          nn.with_logical_partitioning(nn.initializers.normal(stddev=0.02),
                                       (None, 'embed')),
          (self.max_length, features), self.param_dtype)
    else:
      raise ValueError(f'Positional encoding kind {self.kind!r}; choose '
                       f'one of {KINDS}.')
    if t > self.max_length:
      raise ValueError(f'Sequence length {t} exceeds the positional encoding '
                       f'max_length={self.max_length}; raise max_length.')
    if positions is None:
      positions = jnp.arange(t)
      if self.decode:
        initialized = self.has_variable('cache', 'position_index')
        index = self.variable('cache', 'position_index',
                              lambda: jnp.array(0, jnp.int32))
        if initialized:
          positions = positions + index.value
          index.value = index.value + t
    return x + jnp.take(table, positions, axis=0).astype(x.dtype)




def rotary_embedding(x: Array, positions: Array,
                     max_timescale: float = 10_000.0) -> Array:
  """Rotates query or key heads by their positions (RoPE, Su et al. 2021).

  The head dim is split into halves [x1, x2]; pair i is rotated by the
  angle p * max_timescale^(-2i/H). A rotation by p on queries and by q on keys
  makes their dot product depend on p - q only, so attention sees relative
  positions and no position table is learned.

  Args:
    x: [..., T, N, H] (or [..., T, K, H]); H even.
    positions: [..., T] (or [T]) int positions.
    max_timescale: the base of the geometric frequency sequence.

  Returns:
    x rotated, same shape and dtype.
  """
  head_dim = x.shape[-1]
  if head_dim % 2:
    raise ValueError(f'Rotary positions rotate pairs of features: the head '
                     f'dim must be even, got {head_dim}.')
  fraction = jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim
  angles = (jnp.asarray(positions, jnp.float32)[..., None]
            * max_timescale**-fraction)[..., None, :]  # [..., T, 1, H/2]
  sin, cos = jnp.sin(angles), jnp.cos(angles)
  x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
  rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
  return rotated.astype(x.dtype)
