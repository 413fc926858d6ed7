"""RNN encoder-decoder for translation, with and without attention.

Encoder h_t = f_W(x_t, h_{t-1}): stacked LSTMs, optionally bidirectional
(h_t is then [forward; backward]). Decoder s_t = g_U(y_{t-1}, s_{t-1}, c_t),
its initial state s_0 predicted from the encoder's final state. The context
c_t is, by variant (`Config.attention`):
  'none'      c_t = h_T for every step: the single-vector bottleneck;
  'additive'  Bahdanau et al. 2015: e_{t,i} = v^T tanh(W s_{t-1} + U h_i),
              a_t = softmax(e_t), c_t = sum_i a_{t,i} h_i;
  'dot'       Luong et al. 2015 ("general"): e_{t,i} = s_{t-1} . (W h_i).
The output layer sees [s_t; c_t; embedding of y_{t-1}] (Bahdanau's deep
output, without maxout), projected to the embedding size and tied to the
shared token embedding.

Token conventions are those of `encoder_decoder`: 0 is padding and the
decoder's start symbol. Rows are single examples (no packing: an LSTM state
would leak across packed segments).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer import attention
from transformer import decoding
from transformer import layers
from transformer.models import family

Array = jax.Array
ATTENTION = ('none', 'additive', 'dot')

# Named sizes. 'rnnsearch' is Bahdanau et al.'s RNNsearch (620-d embeddings,
# 1000 hidden units, bidirectional encoder), without the maxout layer.
SIZES = {
    'tiny': dict(embed_dim=16, hidden_dim=32, attention_dim=16),
    'mini': dict(embed_dim=128, hidden_dim=256, attention_dim=128),
    'small': dict(embed_dim=256, hidden_dim=256, attention_dim=256),
    'rnnsearch': dict(embed_dim=620, hidden_dim=1000, attention_dim=1000),
}


@dataclasses.dataclass(frozen=True)
class Config:
  """Hyperparameters of the RNN encoder-decoder."""
  vocab_size: int = 8_000
  embed_dim: int = 256
  hidden_dim: int = 256  # per direction in the encoder; the decoder's size
  num_layers: int = 1
  bidirectional: bool = True
  attention: str = 'additive'  # 'none' | 'additive' | 'dot'
  attention_dim: int = 256  # A of additive attention
  dropout_rate: float = 0.1
  max_length: int = 256  # longest target, for the decoding API
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def __post_init__(self):
    layers.check_ranges(self)
    if self.attention not in ATTENTION:
      raise ValueError(f'attention={self.attention!r}; choose one of '
                       f'{ATTENTION}.')

  def replace(self, **changes) -> Config:
    return dataclasses.replace(self, **changes)


config_for = family.size_lookup(Config, SIZES, 'RNN')


class DecoderStep(nn.Module):
  """One decoder step: attend with s_{t-1}, update the LSTMs, predict.

  The teacher-forced pass scans this module over time and decoding calls it
  once per token, so both compute exactly the same function.
  """
  config: Config

  @nn.compact
  def __call__(self, carry, embedded: Array, memory: dict[str, Array], *,
               deterministic: bool):
    """Args:
      carry: per layer an LSTM (c, h) pair of [B, hidden].
      embedded: [B, E], the embedded previous token y_{t-1}.
      memory: 'keys' [B, S, A or hidden] (projected encoder states),
        'values' [B, S, D_enc] (the encoder states h_i), 'mask' [B, S] bool,
        'final' [B, D_enc] (h_T, the context without attention). The carry
        may have G rows per memory row (the beams of each example, rows
        b * G + g): each example's G states are then its queries, so the
        memory is never copied into every beam.
      deterministic: disables dropout.

    Returns:
      (new carry, (output [B*G, E] before the softmax, weights [B*G, S])).
    """
    c = self.config
    state = carry[-1][1]  # s_{t-1}: the top layer's hidden state
    rows, (examples, length) = state.shape[0], memory['mask'].shape
    if rows % examples:
      raise ValueError(f'{rows} decoder rows for {examples} encoded '
                       f'examples: the rows must be G beams of each example.')
    queries = state.reshape(examples, rows // examples, state.shape[-1])
    if c.attention == 'none':
      context = jnp.repeat(memory['final'], rows // examples, axis=0)
      weights = jnp.zeros((rows, length), jnp.float32)
    elif c.attention == 'additive':
      scorer = attention.AdditiveAttention(
          c.attention_dim, dtype=c.dtype, param_dtype=c.param_dtype,
          name='attention')
      context, weights = scorer.attend(queries, memory['keys'],
                                       memory['values'],
                                       memory['mask'][:, None, :])
    else:  # 'dot': keys were projected to the decoder size once
      context, weights = attention.dot_product_attention(
          queries[:, :, None, :], memory['keys'][:, :, None, :],
          memory['values'][:, :, None, :],
          mask=memory['mask'][:, None, None, :], scale=1.0,
          implementation='einsum', return_weights=True)
      context, weights = context[:, :, 0], weights[:, 0]
    # [B, G, ...] -> [B*G, ...]: row b * G + g again.
    context = context.reshape(rows, context.shape[-1])
    weights = weights.reshape(rows, length)
    x = jnp.concatenate([embedded, context.astype(embedded.dtype)], -1)
    new_carry = []
    for i, layer_carry in enumerate(carry):
      layer_carry, x = nn.OptimizedLSTMCell(
          c.hidden_dim, dtype=c.dtype, param_dtype=c.param_dtype,
          name=f'lstm_{i}')(layer_carry, x)
      new_carry.append(layer_carry)
      x = nn.Dropout(c.dropout_rate)(x, deterministic=deterministic)
    output = nn.Dense(c.embed_dim, dtype=c.dtype, param_dtype=c.param_dtype,
                      name='deep_output')(
                          jnp.concatenate([x, context.astype(x.dtype),
                                           embedded], -1))
    return tuple(new_carry), (jnp.tanh(output), weights)


class Seq2Seq(nn.Module):
  """The RNN encoder-decoder; same call signature as the Transformer."""
  config: Config

  def setup(self):
    c = self.config
    self.embed = layers.TokenEmbedding(
        c.vocab_size, c.embed_dim, scale_by_sqrt_dim=False, dtype=c.dtype,
        param_dtype=c.param_dtype)
    cell = functools.partial(nn.OptimizedLSTMCell, c.hidden_dim,
                             dtype=c.dtype, param_dtype=c.param_dtype)
    if c.bidirectional:
      self.encoder_layers = [
          nn.Bidirectional(nn.RNN(cell()), nn.RNN(cell()), return_carry=True)
          for _ in range(c.num_layers)]
    else:
      self.encoder_layers = [nn.RNN(cell(), return_carry=True)
                             for _ in range(c.num_layers)]
    self.bridge = [nn.Dense(2 * c.hidden_dim, dtype=c.dtype,
                            param_dtype=c.param_dtype, name=f'bridge_{i}')
                   for i in range(c.num_layers)]
    if c.attention == 'additive':
      # U h_i of e = v^T tanh(W s + U h_i), projected once per sentence.
      self.key_projection = nn.Dense(c.attention_dim, use_bias=False,
                                     dtype=c.dtype, param_dtype=c.param_dtype)
    elif c.attention == 'dot':
      self.key_projection = nn.Dense(c.hidden_dim, use_bias=False,
                                     dtype=c.dtype, param_dtype=c.param_dtype)
    self.dropout = nn.Dropout(c.dropout_rate)
    self.step = DecoderStep(c)

  def encode(self, inputs: Array, *, deterministic: bool):
    """inputs [B, S] -> (memory dict for `DecoderStep`, initial carry)."""
    c = self.config
    mask = inputs > 0
    lengths = mask.sum(-1).astype(jnp.int32)
    x = self.dropout(self.embed(inputs), deterministic=deterministic)
    for layer in self.encoder_layers:
      carry, x = layer(x, seq_lengths=lengths)
      x = self.dropout(x, deterministic=deterministic)
    if c.bidirectional:  # h_T: forward state at the end, backward at the start
      (_, forward), (_, backward) = carry
      final = jnp.concatenate([forward, backward], -1)
    else:
      final = carry[1]
    memory = {'values': x, 'mask': mask, 'final': final,
              'keys': (self.key_projection(x) if c.attention != 'none'
                       else jnp.zeros(x.shape[:2] + (1,), x.dtype))}
    # s_0 = tanh(W h_T), for both the cell and the hidden state of each layer.
    carry = tuple(tuple(jnp.split(jnp.tanh(bridge(final)), 2, axis=-1))
                  for bridge in self.bridge)
    return memory, carry

  def __call__(self, inputs: Array, targets: Array, *,
               deterministic: bool, **unused_packing) -> Array:
    """Teacher forcing: inputs [B, S], targets [B, T] -> logits [B, T, V]."""
    if any(v is not None for v in unused_packing.values()):
      raise ValueError('The RNN model takes unpacked rows: set '
                       'config.data.packing=False.')
    memory, carry = self.encode(inputs, deterministic=deterministic)
    embedded = self.embed(layers.shift_right(targets))
    scan = nn.scan(lambda module, carry, x: module(
        carry, x, memory, deterministic=deterministic),
                   variable_broadcast='params',
                   split_rngs={'params': False, 'dropout': True},
                   in_axes=1, out_axes=1)
    # The alignment a_{t,i} of every step, [B, T, S] (`layers.
    # attention_weights`); what the step's own attention sows is dropped.
    _, (outputs, weights) = scan(self.step, carry, embedded)
    if self.config.attention != 'none':  # without attention there is none
      self.sow('intermediates', 'attention_weights', weights)
    return self.embed.attend(outputs).astype(jnp.float32)

  def decode_step(self, tokens: Array, state: dict[str, Any]):
    """One step of inference: tokens [N, 1] -> (logits [N, V], new state);
    N is a multiple of the examples in the (shared) memory."""
    carry, (output, _) = self.step(state['carry'], self.embed(tokens[:, 0]),
                                   state['memory'].tree, deterministic=True)
    return self.embed.attend(output).astype(jnp.float32), {
        'carry': carry, 'memory': state['memory']}


# -- The model-family interface used by the translation task ----------------


def build(config: Config, *, decode: bool = False) -> Seq2Seq:
  del decode  # decoding runs the same module one step at a time
  return Seq2Seq(config)


def init_decoding(model: Seq2Seq, params: Any, inputs: Array,
                  max_length: int, beam_size: int = 1) -> dict[str, Any]:
  """Decoding state for inputs [B, S]: s_0 and the encoder memory, which
  beams share (`decoding.PerExample`)."""
  del max_length  # an RNN state has no capacity
  del beam_size  # nor history: beam search reorders the state itself
  memory, carry = model.apply({'params': params}, inputs, deterministic=True,
                              method='encode')
  return {'carry': carry, 'memory': decoding.PerExample(memory)}


def decoding_step(model: Seq2Seq, params: Any, tokens: Array,
                  state: dict[str, Any]) -> tuple[Array, dict[str, Any]]:
  return model.apply({'params': params}, tokens, state, method='decode_step')


def param_count(config: Config) -> int:
  """Parameters of a configuration, from shapes alone (nothing allocated)."""
  tokens = jax.ShapeDtypeStruct((1, 8), jnp.int32)
  return layers.count_parameters(
      lambda key, s, t: build(config).init(key, s, t, deterministic=True),
      tokens, tokens)
