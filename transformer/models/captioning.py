"""Image captioning with attention over a grid of image features.

An image encoder turns pixels into a grid of feature vectors z_{i,j} (a small
CNN trained from scratch, or ViT patch features). Two decoders caption it:

'show_attend_tell' (Xu et al. 2015): an LSTM whose every step scores the
  grid with additive attention, e_{t,i,j} = v^T tanh(W h_{t-1} + U z_{i,j}),
  a_t = softmax(e_t) over all locations, context c_t = sum a_{t,i,j} z_{i,j}
  (`rnn.DecoderStep`, the RNNsearch decoder of #4, with the grid as its
  memory); its initial state is predicted from the mean feature. The
  doubly stochastic regulariser lambda sum_i (1 - sum_t a_{t,i})^2 (Xu et
  al. eq. 14) pushes the caption to look at every location.
'transformer': the grid, projected to D and given learned 2-D positions,
  goes through a Transformer encoder; the Transformer decoder of
  `encoder_decoder` (masked self-attention, cross-attention to the grid,
  tied softmax) writes the caption.

Both are teacher-forced for training and decoded with `decoding`'s greedy
and beam search. Token conventions are those of `encoder_decoder`: 0 is
padding and the start symbol.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer import attention
from transformer import decoding
from transformer import layers
from transformer.models import encoder_decoder
from transformer.models import family
from transformer.models import rnn

Array = jax.Array
MODELS = ('show_attend_tell', 'transformer')
ENCODERS = ('cnn', 'vit')

SIZES = {
    'tiny': dict(cnn_features=(16, 32), num_layers=1, d_model=32,
                 num_heads=4, d_ff=64, embed_dim=32, hidden_dim=64,
                 attention_dim=32),
    'small': dict(cnn_features=(32, 64, 128), num_layers=2, d_model=128,
                  num_heads=4, d_ff=512, embed_dim=128, hidden_dim=256,
                  attention_dim=128),
}


@dataclasses.dataclass(frozen=True)
class Config:
  """Hyperparameters of both captioners (each reads its own fields)."""
  model: str = 'transformer'  # see MODELS
  vocab_size: int = 1_000
  max_length: int = 32  # longest caption in tokens, EOS included
  image_size: int = 32
  num_channels: int = 3
  encoder: str = 'cnn'  # see ENCODERS
  # CNN: 3x3 convolutions, each followed by 2x2 max pooling, so the grid
  # side is image_size / 2^len(cnn_features).
  cnn_features: tuple[int, ...] = (32, 64, 128)
  patch_size: int = 8  # ViT patches
  # Transformer encoder (image tokens) and decoder (caption); also the ViT.
  num_layers: int = 2
  d_model: int = 128
  num_heads: int = 4
  d_ff: int = 512
  dropout_rate: float = 0.1
  # Show, Attend and Tell.
  embed_dim: int = 128
  hidden_dim: int = 256
  attention_dim: int = 128
  dtype: Any = jnp.float32
  decode: bool = False

  def __post_init__(self):
    layers.check_ranges(self)
    if self.model not in MODELS:
      raise ValueError(f'model={self.model!r}; choose one of {MODELS}.')
    if self.encoder not in ENCODERS:
      raise ValueError(f'encoder={self.encoder!r}; choose one of '
                       f'{ENCODERS}.')
    divisor = (self.patch_size if self.encoder == 'vit'
               else 2**len(self.cnn_features))
    if self.image_size % divisor:
      raise ValueError(f'image_size={self.image_size} is not divisible by '
                       f'{divisor} (the {self.encoder} encoder\'s stride).')

  def replace(self, **changes) -> Config:
    return dataclasses.replace(self, **changes)

  @property
  def grid_size(self) -> int:
    """Side of the feature grid."""
    if self.encoder == 'vit':
      return self.image_size // self.patch_size
    return self.image_size // 2**len(self.cnn_features)

  def text(self) -> encoder_decoder.Config:
    """The Transformer blocks (image encoder and caption decoder): pre-LN,
    learned caption positions."""
    return encoder_decoder.Config(
        vocab_size=self.vocab_size, max_length=self.max_length,
        num_layers=self.num_layers, d_model=self.d_model,
        num_heads=self.num_heads, d_ff=self.d_ff,
        dropout_rate=self.dropout_rate, norm_position='pre',
        positional_encoding='learned', dtype=self.dtype, decode=self.decode)

  def recurrent(self) -> rnn.Config:
    return rnn.Config(
        vocab_size=self.vocab_size, embed_dim=self.embed_dim,
        hidden_dim=self.hidden_dim, attention='additive',
        attention_dim=self.attention_dim, dropout_rate=self.dropout_rate,
        max_length=self.max_length, dtype=self.dtype)


config_for = family.size_lookup(Config, SIZES, 'captioning')


class ImageGrid(nn.Module):
  """Pixels in [-1, 1], [B, S, S, C] -> features z [B, g*g, F], row-major."""
  config: Config

  @nn.compact
  def __call__(self, images: Array, *, deterministic: bool) -> Array:
    c = self.config
    x = images.astype(c.dtype)
    if c.encoder == 'cnn':
      for i, features in enumerate(c.cnn_features):
        x = nn.Conv(features, (3, 3), dtype=c.dtype, name=f'conv_{i}')(x)
        x = nn.LayerNorm(dtype=c.dtype, name=f'norm_{i}')(nn.relu(x))
        x = nn.max_pool(x, (2, 2), strides=(2, 2))
      return x.reshape(x.shape[0], -1, x.shape[-1])
    # ViT: non-overlapping patches, learned positions, pre-LN blocks.
    text = c.text()
    x = nn.Conv(c.d_model, (c.patch_size,) * 2, strides=(c.patch_size,) * 2,
                dtype=c.dtype, name='patches')(x)
    x = x.reshape(x.shape[0], -1, c.d_model)
    x = x + self.param('patch_positions', nn.initializers.normal(0.02),
                       x.shape[1:]).astype(x.dtype)
    return layers.SelfAttentionStack(text.replace(decode=False), name='vit')(
        x, deterministic=deterministic)


class ShowAttendTell(nn.Module):
  """CNN or ViT grid, LSTM decoder with additive attention over it."""
  config: Config

  def setup(self):
    c, r = self.config, self.config.recurrent()
    self.grid = ImageGrid(c)
    self.embed = layers.TokenEmbedding(c.vocab_size, c.embed_dim,
                                       scale_by_sqrt_dim=False, dtype=c.dtype)
    # U z_{i,j} of e = v^T tanh(W h + U z), computed once per image.
    self.key_projection = nn.Dense(c.attention_dim, use_bias=False,
                                   dtype=c.dtype)
    self.bridge = nn.Dense(2 * c.hidden_dim, dtype=c.dtype)
    self.step = rnn.DecoderStep(r)

  def encode(self, images: Array, *, deterministic: bool):
    """-> (memory for `rnn.DecoderStep`, initial LSTM carry)."""
    z = self.grid(images, deterministic=deterministic)
    mean = z.mean(axis=1)
    memory = {'values': z, 'keys': self.key_projection(z), 'final': mean,
              'mask': jnp.ones(z.shape[:2], bool)}
    # Xu et al.: c_0, h_0 = f_init(mean of the annotation vectors).
    carry = (tuple(jnp.split(jnp.tanh(self.bridge(mean)), 2, axis=-1)),)
    return memory, carry

  def __call__(self, images: Array, targets: Array, *,
               deterministic: bool) -> Array:
    """Teacher forcing: images [B, S, S, C], targets [B, T] -> logits
    [B, T, V]; sows the attention weights [B, T, g*g]."""
    memory, carry = self.encode(images, deterministic=deterministic)
    embedded = self.embed(layers.shift_right(targets))
    scan = nn.scan(lambda module, carry, x: module(
        carry, x, memory, deterministic=deterministic),
                   variable_broadcast='params',
                   split_rngs={'params': False, 'dropout': True},
                   in_axes=1, out_axes=1)
    _, (outputs, weights) = scan(self.step, carry, embedded)
    self.sow('intermediates', 'attention_weights', weights)
    return self.embed.attend(outputs).astype(jnp.float32)

  def decode_step(self, tokens: Array, state: dict[str, Any]):
    """tokens [N, 1] -> (logits [N, V], new state with the step's weights
    [N, g*g])."""
    carry, (output, weights) = self.step(
        state['carry'], self.embed(tokens[:, 0]), state['memory'].tree,
        deterministic=True)
    return self.embed.attend(output).astype(jnp.float32), {
        'carry': carry, 'memory': state['memory'], 'weights': weights}


class TransformerCaptioner(nn.Module):
  """Grid -> Transformer encoder -> `encoder_decoder`'s decoder."""
  config: Config

  def setup(self):
    c = self.config
    text = c.text()
    self.grid = ImageGrid(c.replace(decode=False))
    self.feature_projection = nn.Dense(c.d_model, dtype=c.dtype)
    self.grid_positions = self.param(
        'grid_positions', nn.initializers.normal(0.02),
        (c.grid_size**2, c.d_model))
    self.encoder = layers.SelfAttentionStack(text.replace(decode=False))
    # Its token encoder is never called, so it has no parameters.
    self.text = encoder_decoder.Transformer(text)

  def encode(self, images: Array, *, deterministic: bool) -> Array:
    """images [B, S, S, C] -> encoded grid [B, g*g, D]."""
    z = self.feature_projection(self.grid(images,
                                          deterministic=deterministic))
    return self.encoder(z + self.grid_positions.astype(z.dtype),
                        deterministic=deterministic)

  def decode(self, encoded: Array, decoder_inputs: Array, *,
             deterministic: bool) -> Array:
    """Logits [B, T, V] of the next token; every grid cell is visible."""
    cells = jnp.ones(encoded.shape[:2], jnp.int32)  # no padding in a grid
    return self.text.decode(encoded, cells, decoder_inputs,
                            deterministic=deterministic)

  def __call__(self, images: Array, targets: Array, *,
               deterministic: bool) -> Array:
    encoded = self.encode(images, deterministic=deterministic)
    return self.decode(encoded, layers.shift_right(targets),
                       deterministic=deterministic)


def build(config: Config, *, decode: bool = False) -> nn.Module:
  if config.model == 'show_attend_tell':
    return ShowAttendTell(config)  # decoding steps the same module
  return TransformerCaptioner(config.replace(decode=decode))


def init_decoding(model: nn.Module, params: Any, images: Array,
                  beam_size: int = 1) -> dict[str, Any]:
  """The decoding state for images [B, S, S, C]; a Transformer's KV caches
  track the beams of a search of `beam_size` > 1 (the LSTM's state is
  small: beam search reorders it)."""
  if isinstance(model, ShowAttendTell):
    memory, carry = model.apply({'params': params}, images,
                                deterministic=True, method='encode')
    return {'carry': carry, 'memory': decoding.PerExample(memory),
            'weights': jnp.zeros(memory['mask'].shape, jnp.float32)}
  encoded = model.apply({'params': params}, images, deterministic=True,
                        method='encode')
  # The cache-creating call: capacity max_length; cross-attention projects
  # and stores the grid's keys and values, which beams share.
  _, cache = model.apply(
      {'params': params}, encoded,
      jnp.zeros((images.shape[0], model.config.max_length), jnp.int32),
      deterministic=True, method='decode', mutable=['cache'])
  cache = cache['cache']
  if beam_size > 1:
    cache = attention.track_beams(cache, beam_size)
  return encoder_decoder.decoding_state(cache, encoded=encoded)


def decoding_step(model: nn.Module, params: Any, tokens: Array,
                  state: dict[str, Any]) -> tuple[Array, dict[str, Any]]:
  """tokens [N, 1] -> (next-token logits [N, V], new state)."""
  if isinstance(model, ShowAttendTell):
    return model.apply({'params': params}, tokens, state,
                       method='decode_step')
  logits, cache = model.apply(
      {'params': params, 'cache': encoder_decoder.decoding_cache(state)},
      state['shared'].tree['encoded'], tokens, deterministic=True,
      method='decode', mutable=['cache'])
  return logits[:, -1], encoder_decoder.decoding_state(
      cache['cache'], encoded=state['shared'].tree['encoded'])


def word_attention(model: nn.Module, params: Any, images: Array,
                   captions: Array) -> Array:
  """Attention over the grid for each caption position, [B, T, g, g]: the
  LSTM's a_t, or the last decoder layer's cross-attention averaged over its
  heads. `captions` [B, T] are the (generated) tokens, fed teacher-forced."""
  c = model.config
  _, state = model.apply({'params': params}, images, captions,
                         deterministic=True, mutable=['intermediates'])
  weights = layers.attention_weights(state['intermediates'])
  if isinstance(model, ShowAttendTell):
    word_maps = weights['attention'][:, 0]  # [B, T, g*g]
  else:
    last = weights[f'text/decoder/layer_{c.num_layers - 1}/cross_attention']
    word_maps = last.mean(axis=1)  # over heads
  return word_maps.reshape(*word_maps.shape[:2], c.grid_size, c.grid_size)


def param_count(config: Config) -> int:
  model = build(config)
  return layers.count_parameters(
      lambda key, x, t: model.init(key, x, t, deterministic=True),
      jax.ShapeDtypeStruct((1, config.image_size, config.image_size,
                            config.num_channels), jnp.float32),
      jax.ShapeDtypeStruct((1, 4), jnp.int32))
