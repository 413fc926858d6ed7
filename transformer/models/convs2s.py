"""Convolutional sequence to sequence (Gehring et al. 2017, ConvS2S): the
convolution baseline of the lectures' "convolution vs recurrence vs
self-attention".

Encoder: token embeddings plus learned positions e_j, a linear map to the
hidden size, then blocks of a 1-D convolution over `kernel_size` positions
with a gated linear unit, GLU([A; B]) = A * sigmoid(B) (Dauphin et al.
2017), and a residual connection scaled by sqrt(0.5); outputs z_j mapped
back to the embedding size. Decoder: the same blocks made causal (the
convolution sees positions t - k + 1 .. t only), each followed by
attention over the source with dot-product scores d_i . z_j, where d_i is
the block's output mapped to the embedding size plus the embedding of the
previous target g_i, and values z_j + e_j; the context, mapped back to the
hidden size, is added to the block's output. The softmax is tied to the
token embedding. A stack of L blocks with kernel k sees L (k - 1) + 1
positions: the receptive field that self-attention does not need.

Same interfaces as `encoder_decoder` and `rnn` (the translation task's
model families): teacher forcing `model(inputs, targets)`, `init_decoding`
and `decoding_step` for greedy and beam search (a causal convolution keeps
the last k - 1 inputs of each block as its decoding state; the encoder's
outputs are shared by the beams of an example, `decoding.PerExample`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer import decoding
from transformer import layers
from transformer.models import family

Array = jax.Array
SCALE = math.sqrt(0.5)  # keeps the variance of residual sums

SIZES = {
    'tiny': dict(embed_dim=16, hidden_dim=32, num_layers=2, kernel_size=3),
    'mini': dict(embed_dim=128, hidden_dim=256, num_layers=4, kernel_size=3),
    'small': dict(embed_dim=256, hidden_dim=256, num_layers=4,
                  kernel_size=3),
    # WMT'14 En-De in the paper: 512/512, 15 layers (kernel 3) in each.
    'wmt': dict(embed_dim=512, hidden_dim=512, num_layers=15, kernel_size=3),
}


@dataclasses.dataclass(frozen=True)
class Config:
  """Hyperparameters of the convolutional encoder-decoder."""
  vocab_size: int = 8_000
  embed_dim: int = 256
  hidden_dim: int = 256
  num_layers: int = 4  # blocks in the encoder and in the decoder
  kernel_size: int = 3
  dropout_rate: float = 0.1
  max_length: int = 256  # positions of either side
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def __post_init__(self):
    layers.check_ranges(self)
    if self.kernel_size < 1:
      raise ValueError(f'kernel_size={self.kernel_size} must be at least 1.')

  def replace(self, **changes) -> Config:
    return dataclasses.replace(self, **changes)

  @property
  def receptive_field(self) -> int:
    """Positions one output of a block stack depends on, one side."""
    return self.num_layers * (self.kernel_size - 1) + 1


config_for = family.size_lookup(Config, SIZES, 'ConvS2S')


class SourceAttention(nn.Module):
  """One decoder block's attention over the encoder's outputs (its
  weights sown for `layers.attention_weights`)."""
  config: Config

  @nn.compact
  def __call__(self, x: Array, g: Array, memory: dict[str, Array]) -> Array:
    """x [N, T, H] block outputs (N = G rows per memory row: the beams of
    an example), g [N, T, E] target embeddings -> x with the context
    added."""
    c = self.config
    dense = lambda size, name: nn.Dense(size, dtype=c.dtype,
                                        param_dtype=c.param_dtype, name=name)
    rows, examples = x.shape[0], memory['keys'].shape[0]
    d = (dense(c.embed_dim, 'query')(x) + g) * SCALE
    d = d.reshape(examples, rows // examples * d.shape[1], d.shape[-1])
    scores = jnp.einsum('bqe,bse->bqs', d, memory['keys'])
    kept = memory['mask'][:, None, :]
    scores = jnp.where(kept, scores, jnp.finfo(scores.dtype).min)
    weights = jnp.where(kept, jax.nn.softmax(scores.astype(jnp.float32), -1),
                        0.0)
    context = jnp.einsum('bqs,bse->bqe', weights.astype(x.dtype),
                         memory['values'])
    context = context.reshape(rows, x.shape[1], context.shape[-1])
    self.sow('intermediates', 'attention_weights',
             weights.reshape(rows, x.shape[1], -1)[:, None])
    return (x + dense(c.hidden_dim, 'out')(context) * SCALE) * SCALE


def _gated(conv: nn.Module, x: Array, y: Array) -> Array:
  """The block's output for inputs x [N, T, H] from conv's input y."""
  return (x + nn.glu(conv(y), axis=-1)) * SCALE


class Encoder(nn.Module):
  """inputs [B, S] -> {'keys' z [B, S, E], 'values' (z + e), 'mask'}."""
  config: Config

  @nn.compact
  def __call__(self, inputs: Array, embedded: Array, *,
               deterministic: bool) -> dict[str, Array]:
    c, k = self.config, self.config.kernel_size
    dropout = nn.Dropout(c.dropout_rate)
    dense = lambda size, name: nn.Dense(size, dtype=c.dtype,
                                        param_dtype=c.param_dtype, name=name)
    mask = (inputs > 0)[..., None]
    x = dense(c.hidden_dim, 'input')(
        dropout(embedded, deterministic=deterministic))
    for i in range(c.num_layers):
      conv = nn.Conv(2 * c.hidden_dim, (k,), padding='VALID', dtype=c.dtype,
                     param_dtype=c.param_dtype, name=f'layer_{i}')
      # Padding is zeroed before every block, so a sentence's outputs do
      # not depend on the padding after it; the window is centred.
      y = dropout(x * mask, deterministic=deterministic)
      x = _gated(conv, x * mask,
                 jnp.pad(y, ((0, 0), ((k - 1) // 2, k // 2), (0, 0))))
    z = dense(c.embed_dim, 'output')(x) * mask
    return {'keys': z, 'values': (z + embedded) * SCALE * mask,
            'mask': mask[..., 0]}


class DecoderBlock(nn.Module):
  """A causal gated convolution, then attention over the source."""
  config: Config

  def setup(self):
    c = self.config
    self.conv = nn.Conv(2 * c.hidden_dim, (c.kernel_size,), padding='VALID',
                        dtype=c.dtype, param_dtype=c.param_dtype)
    self.cross_attention = SourceAttention(c)
    self.dropout = nn.Dropout(c.dropout_rate)

  def __call__(self, x: Array, g: Array, memory: dict[str, Array], *,
               deterministic: bool) -> Array:
    """Teacher forcing: position t sees inputs t - k + 1 .. t."""
    y = self.dropout(x, deterministic=deterministic)
    y = jnp.pad(y, ((0, 0), (self.config.kernel_size - 1, 0), (0, 0)))
    return self.cross_attention(_gated(self.conv, x, y), g, memory)

  def step(self, window: Array, g: Array, memory: dict[str, Array]
           ) -> Array:
    """The block at the last position of `window` [N, k, H], its last k
    inputs: [N, 1, H], what __call__ gives there."""
    return self.cross_attention(_gated(self.conv, window[:, -1:], window), g,
                                memory)


class Decoder(nn.Module):
  """Target embeddings g [N, T, E] -> outputs [N, T, E] before the
  softmax; `step` runs one position from the blocks' windows."""
  config: Config

  def setup(self):
    c = self.config
    dense = lambda size: nn.Dense(size, dtype=c.dtype,
                                  param_dtype=c.param_dtype)
    self.input = dense(c.hidden_dim)
    self.blocks = [DecoderBlock(c, name=f'layer_{i}')
                   for i in range(c.num_layers)]
    self.output = dense(c.embed_dim)
    self.dropout = nn.Dropout(c.dropout_rate)

  def __call__(self, g: Array, memory: dict[str, Array], *,
               deterministic: bool) -> Array:
    x = self.input(self.dropout(g, deterministic=deterministic))
    for block in self.blocks:
      x = block(x, g, memory, deterministic=deterministic)
    return self.dropout(self.output(x), deterministic=deterministic)

  def step(self, g: Array, windows: list[Array], memory: dict[str, Array]
           ) -> tuple[Array, list[Array]]:
    """g [N, 1, E] -> (output [N, 1, E], the windows slid by one)."""
    x, slid = self.input(g), []
    for block, window in zip(self.blocks, windows):
      window = jnp.concatenate([window[:, 1:], x], axis=1)
      slid.append(window)
      x = block.step(window, g, memory)
    return self.output(x), slid


class ConvS2S(nn.Module):
  """The convolutional encoder-decoder; same call signature as the
  Transformer's."""
  config: Config

  def setup(self):
    c = self.config
    self.embed = layers.TokenEmbedding(
        c.vocab_size, c.embed_dim, scale_by_sqrt_dim=False, dtype=c.dtype,
        param_dtype=c.param_dtype)
    positions = lambda: nn.Embed(
        c.max_length, c.embed_dim, dtype=c.dtype, param_dtype=c.param_dtype,
        embedding_init=nn.initializers.normal(stddev=0.1))
    self.source_positions = positions()
    self.target_positions = positions()
    self.encoder = Encoder(c)
    self.decoder = Decoder(c)

  def _embed(self, tokens: Array, positions: nn.Module,
             start: Array | int = 0) -> Array:
    # Positions past max_length (long decodes) share the last embedding.
    index = jnp.minimum(start + jnp.arange(tokens.shape[1]),
                        self.config.max_length - 1)
    return self.embed(tokens) + positions(index)[None]

  def encode(self, inputs: Array, *, deterministic: bool
             ) -> dict[str, Array]:
    return self.encoder(inputs, self._embed(inputs, self.source_positions),
                        deterministic=deterministic)

  def __call__(self, inputs: Array, targets: Array, *,
               deterministic: bool, **unused_packing) -> Array:
    """Teacher forcing: inputs [B, S], targets [B, T] -> logits [B, T, V]."""
    if any(v is not None for v in unused_packing.values()):
      raise ValueError('The ConvS2S model takes unpacked rows: set '
                       'config.data.packing=False.')
    memory = self.encode(inputs, deterministic=deterministic)
    g = self._embed(layers.shift_right(targets), self.target_positions)
    outputs = self.decoder(g, memory, deterministic=deterministic)
    return self.embed.attend(outputs).astype(jnp.float32)

  def decode_step(self, tokens: Array, state: dict[str, Any]):
    """tokens [N, 1] -> (logits [N, V], new state)."""
    g = self._embed(tokens, self.target_positions, state['position'])
    outputs, windows = self.decoder.step(g, state['windows'],
                                         state['memory'].tree)
    return self.embed.attend(outputs)[:, 0].astype(jnp.float32), {
        'windows': windows, 'position': state['position'] + 1,
        'memory': state['memory']}


# -- The model-family interface used by the translation task ----------------


def build(config: Config, *, decode: bool = False) -> ConvS2S:
  del decode  # decoding runs the same module one step at a time
  return ConvS2S(config)


def init_decoding(model: ConvS2S, params: Any, inputs: Array,
                  max_length: int, beam_size: int = 1) -> dict[str, Any]:
  """Decoding state for inputs [B, S]: empty windows (the zeros a causal
  convolution sees before the start) and the encoder's outputs, shared by
  each example's beams."""
  del max_length  # a convolution's state does not grow
  del beam_size  # its windows are small: beam search reorders them
  c = model.config
  memory = model.apply({'params': params}, inputs, deterministic=True,
                       method='encode')
  windows = [jnp.zeros((inputs.shape[0], c.kernel_size, c.hidden_dim),
                       c.dtype) for _ in range(c.num_layers)]
  return {'windows': windows, 'position': jnp.zeros((), jnp.int32),
          'memory': decoding.PerExample(memory)}


def decoding_step(model: ConvS2S, params: Any, tokens: Array,
                  state: dict[str, Any]) -> tuple[Array, dict[str, Any]]:
  return model.apply({'params': params}, tokens, state, method='decode_step')


def param_count(config: Config) -> int:
  """Parameters of a configuration, from shapes alone (nothing allocated)."""
  tokens = jax.ShapeDtypeStruct((1, 8), jnp.int32)
  return layers.count_parameters(
      lambda key, s, t: build(config).init(key, s, t, deterministic=True),
      tokens, tokens)
