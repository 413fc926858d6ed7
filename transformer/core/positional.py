"""Positional encodings (self-attention alone is permutation equivariant):
sinusoidal (Vaswani et al., with the paper's interleaved or the
concatenated sin|cos layout of Marian and fairseq), learned (Table 3 row E,
BERT, GPT) and rotary (RoPE: queries and keys rotated inside self-attention,
no table). Shapes use the letters of `transformer.attention`."""

from __future__ import annotations

import dataclasses
import math
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


# Rescalings of the rotary frequencies for contexts longer than the one a
# model was trained on ('': none), as transformers computes them
# (`modeling_rope_utils`): 'linear' divides every frequency by the factor
# (positions / factor), 'dynamic' raises the base with the sequence length
# (dynamic NTK), 'llama3' divides the low frequencies by the factor, keeps
# the high ones and blends the band between (Llama 3.1).
ROPE_SCALINGS = ('', 'linear', 'dynamic', 'llama3')


@dataclasses.dataclass(frozen=True)
class Rope:
  """How rotary positions turn into angles: the base of the frequencies and
  their scaling. The model configs carry the same settings as flat fields
  named rope_theta, rope_scaling, rope_factor, rope_low_freq_factor,
  rope_high_freq_factor and rope_original_max_positions, which the error
  messages name.

  Attributes:
    theta: the base of the geometric frequency sequence, theta^(-2i/H).
    scaling: one of `ROPE_SCALINGS`.
    factor: how many times longer the context is made ('linear',
      'dynamic', 'llama3').
    low_freq_factor, high_freq_factor: 'llama3' only: wavelengths above
      original_max_positions / low_freq_factor are scaled by 1 / factor,
      those below original_max_positions / high_freq_factor are kept, and
      the band between is blended.
    original_max_positions: the context the model was trained on
      ('dynamic': the base grows only for longer sequences; 'llama3').
  """
  theta: float = 10_000.0
  scaling: str = ''
  factor: float = 1.0
  low_freq_factor: float = 1.0
  high_freq_factor: float = 4.0
  original_max_positions: int | None = None

  def __post_init__(self):
    if self.scaling not in ROPE_SCALINGS:
      raise ValueError(f'rope_scaling={self.scaling!r}; choose one of '
                       f'{ROPE_SCALINGS} (\'\': no scaling).')
    if not self.theta > 0:
      raise ValueError(f'rope_theta={self.theta} must be > 0 (10,000 in '
                       f'the paper and Llama 2, 500,000 in Llama 3).')
    if not self.factor > 0:
      raise ValueError(f'rope_factor={self.factor} must be > 0 (the context '
                       f'is made factor times longer).')
    self._check_unused()
    if self.scaling in ('dynamic', 'llama3') and not (
        self.original_max_positions or 0) >= 1:
      raise ValueError(
          f'rope_scaling={self.scaling!r} needs rope_original_max_positions'
          f' >= 1 (the context the model was trained on), got '
          f'{self.original_max_positions}.')
    if self.scaling == 'llama3' and not (
        0 < self.low_freq_factor < self.high_freq_factor):
      raise ValueError(
          f'rope_low_freq_factor={self.low_freq_factor} and '
          f'rope_high_freq_factor={self.high_freq_factor} must satisfy 0 < '
          f'low < high (Llama 3.1: 1 and 4).')

  def _check_unused(self):
    """A setting the scaling would ignore is refused, not dropped."""
    unused = []
    if self.scaling == '' and self.factor != 1.0:
      unused.append(f'rope_factor={self.factor}')
    if self.scaling != 'llama3':
      unused += [f'rope_{name}={getattr(self, name)}' for name, default in
                 (('low_freq_factor', 1.0), ('high_freq_factor', 4.0))
                 if getattr(self, name) != default]
    if self.scaling in ('', 'linear') and (
        self.original_max_positions is not None):
      unused.append(f'rope_original_max_positions='
                    f'{self.original_max_positions}')
    if unused:
      raise ValueError(f'{", ".join(unused)} has no effect with '
                       f'rope_scaling={self.scaling!r}; set the scaling '
                       f'that uses it, or leave it at its default.')


def rotary_frequencies(rope: Rope, head_dim: int,
                       positions: Array | None = None) -> Array:
  """The angle per position of each rotated pair, as transformers computes
  it in float32 (its attention_factor is 1 for every scaling here).

  Args:
    rope: the settings.
    head_dim: H (even).
    positions: [..., T] int positions of this call; 'dynamic' only: the
      sequence length max(positions) + 1 sets the base, as transformers'
      `dynamic_rope_update` does on each forward pass (so a KV cache holds
      keys rotated with the frequencies of the call that wrote them).
      transformers also keeps the largest base it has grown to for later,
      shorter calls (until one fits the original context); each call here
      stands alone, which is the same for one forward pass and for a
      generation, whose positions only grow.

  Returns:
    [H/2] float32 inverse frequencies.
  """
  fraction = jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim
  theta = jnp.float32(rope.theta)
  if rope.scaling == 'dynamic':
    theta = _dynamic_ntk_theta(rope, head_dim, positions)
  inverse = 1.0 / theta**fraction
  if rope.scaling == 'linear':
    inverse = inverse / rope.factor
  elif rope.scaling == 'llama3':
    inverse = _llama3_frequencies(rope, inverse)
  return inverse


def _dynamic_ntk_theta(rope: Rope, head_dim: int, positions: Array | None
                       ) -> Array:
  """theta * (factor * L / L0 - (factor - 1))^(H / (H - 2)) for a sequence
  of L = max(positions) + 1 longer than L0 = original_max_positions; theta
  itself up to L0."""
  if positions is None:
    raise ValueError("rope_scaling='dynamic' sets its base from the "
                     "sequence length: pass the positions.")
  if head_dim <= 2:  # the exponent H / (H - 2)
    raise ValueError(f"rope_scaling='dynamic' needs a head dim above 2, got "
                     f"{head_dim}.")
  length = jnp.maximum(jnp.max(positions) + 1,
                       rope.original_max_positions).astype(jnp.float32)
  growth = rope.factor * length / rope.original_max_positions - (
      rope.factor - 1)
  return rope.theta * growth**(head_dim / (head_dim - 2))


def _llama3_frequencies(rope: Rope, inverse: Array) -> Array:
  """Llama 3.1's bands: long wavelengths (above L0 / low_freq_factor)
  slowed by the factor, short ones (below L0 / high_freq_factor) kept, and
  between them a blend, linear in L0 / wavelength."""
  context = rope.original_max_positions
  wavelength = 2 * math.pi / inverse
  scaled = jnp.where(wavelength > context / rope.low_freq_factor,
                     inverse / rope.factor, inverse)
  smooth = (context / wavelength - rope.low_freq_factor) / (
      rope.high_freq_factor - rope.low_freq_factor)
  blended = (1 - smooth) * scaled / rope.factor + smooth * scaled
  between = ~(wavelength < context / rope.high_freq_factor) & ~(
      wavelength > context / rope.low_freq_factor)
  return jnp.where(between, blended, scaled)


def rotary_embedding(x: Array, positions: Array,
                     frequencies: Array | None = None) -> Array:
  """Rotates query or key heads by their positions (RoPE, Su et al. 2021).

  The head dim is split into halves [x1, x2]; pair i is rotated by the
  angle p * frequencies[i] (by default 10000^(-2i/H)). A rotation by p on
  queries and by q on keys makes their dot product depend on p - q only,
  so attention sees relative positions and no position table is learned.

  Args:
    x: [..., T, N, H] (or [..., T, K, H]); H even.
    positions: [..., T] (or [T]) int positions.
    frequencies: [H/2] from `rotary_frequencies`; None: `Rope()`'s.

  Returns:
    x rotated, same shape and dtype.
  """
  head_dim = x.shape[-1]
  if head_dim % 2:
    raise ValueError(f'Rotary positions rotate pairs of features: the head '
                     f'dim must be even, got {head_dim}.')
  if frequencies is None:
    frequencies = rotary_frequencies(Rope(), head_dim)
  angles = (jnp.asarray(positions, jnp.float32)[..., None]
            * frequencies)[..., None, :]  # [..., T, 1, H/2]
  sin, cos = jnp.sin(angles), jnp.cos(angles)
  x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
  rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
  return rotated.astype(x.dtype)
