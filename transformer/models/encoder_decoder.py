"""The encoder-decoder Transformer of "Attention Is All You Need".

N encoder and N decoder layers (`transformer.layers`), one source/target
vocabulary whose embedding is shared by encoder, decoder and the pre-softmax
projection, embeddings scaled by sqrt(D), sinusoidal (or learned) positions,
post-LN, dropout on embeddings and residuals.

Token conventions: 0 is padding and also the decoder's start symbol (targets
are shifted right with 0, as in T5 and flax's WMT example), so no separate
BOS id is needed. Packed rows carry segment ids (1, 2, ... per example, 0 for
padding) and per-segment positions; attention never crosses segments.
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
from transformer.core import masks
from transformer.core import positional
from transformer.models import family

Array = jax.Array

# Named sizes. base and big are Table 3 of the paper; dropout is that of the
# paper's EN-DE runs (EN-FR big used 0.1, set by its experiment).
SIZES = {
    'tiny': dict(num_layers=1, d_model=32, num_heads=4, d_ff=64),
    'mini': dict(num_layers=2, d_model=128, num_heads=4, d_ff=512),
    'small': dict(num_layers=3, d_model=256, num_heads=8, d_ff=512),
    'base': dict(num_layers=6, d_model=512, num_heads=8, d_ff=2048,
                 dropout_rate=0.1),
    'big': dict(num_layers=6, d_model=1024, num_heads=16, d_ff=4096,
                dropout_rate=0.3),
}


@dataclasses.dataclass(frozen=True)
class Config(layers.TransformerConfig):
  """Block hyperparameters plus what the whole model needs."""
  vocab_size: int = 37_000
  max_length: int = 256  # longest source or target sequence
  positional_encoding: str = 'sinusoidal'  # 'learned': Table 3 row E
  tie_embeddings: bool = True  # softmax weights = embedding table
  scale_embeddings: bool = True  # token embeddings times sqrt(D) (paper)
  # A learned bias added to the logits (Marian and BART keep one, at zero
  # unless trained).
  final_logits_bias: bool = False


config_for = family.size_lookup(Config, SIZES, 'Transformer')


class Transformer(nn.Module):
  """Encoder-decoder Transformer.

  `__call__` is the teacher-forced training pass; `encode` and `decode` are
  used separately for inference, `decode` with `config.decode=True` one
  position at a time against a KV cache.
  """
  config: Config

  def setup(self):
    c = self.config
    self.embed = layers.TokenEmbedding(
        c.vocab_size, c.d_model, scale_by_sqrt_dim=c.scale_embeddings,
        dtype=c.dtype, param_dtype=c.param_dtype)
    self.encoder_positions = positional.PositionalEncoding(
        c.max_length, c.positional_encoding, c.sinusoidal_layout,
        param_dtype=c.param_dtype)
    self.decoder_positions = positional.PositionalEncoding(
        c.max_length, c.positional_encoding, c.sinusoidal_layout,
        decode=c.decode, param_dtype=c.param_dtype)
    self.encoder = layers.SelfAttentionStack(c.replace(decode=False))
    self.decoder = layers.CrossAttentionStack(c)
    self.dropout = nn.Dropout(c.dropout_rate)
    if not c.tie_embeddings:
      self.logits_projection = nn.Dense(
          c.vocab_size, use_bias=False, dtype=c.dtype,
          param_dtype=c.param_dtype,
          kernel_init=nn.with_logical_partitioning(
              nn.initializers.xavier_uniform(), ('embed', 'vocab')))
    if c.final_logits_bias:
      self.logits_bias = self.param(
          'final_logits_bias',
          nn.with_logical_partitioning(nn.initializers.zeros, ('vocab',)),
          (c.vocab_size,), c.param_dtype)

  def encode(self, inputs: Array, *, inputs_positions: Array | None = None,
             inputs_segmentation: Array | None = None,
             deterministic: bool) -> Array:
    """inputs: [B, S] tokens -> encoded [B, S, D]."""
    x = self.embed(inputs)
    x = self.encoder_positions(x, positions=inputs_positions)
    x = self.dropout(x, deterministic=deterministic)
    # Unpacked rows: padding as key lengths, which cuDNN takes as such.
    mask = masks.key_lengths(inputs) if inputs_segmentation is None else \
        masks.segment_mask(inputs_segmentation, inputs_segmentation)
    return self.encoder(x, mask=mask,
                        positions=inputs_positions,
                        deterministic=deterministic)

  def decode(self, encoded: Array, inputs: Array, decoder_inputs: Array, *,
             targets_positions: Array | None = None,
             inputs_segmentation: Array | None = None,
             targets_segmentation: Array | None = None,
             deterministic: bool) -> Array:
    """Logits of the next token at every decoder position.

    Args:
      encoded: [B, S, D] from `encode`.
      inputs: [B, S] source tokens (for the source padding mask).
      decoder_inputs: [B, T] shifted targets (`layers.shift_right`), or in
        decode
        mode the newest T tokens.
      targets_positions: [B, T] positions within packed segments.
      inputs_segmentation: [B, S] segment ids of packed rows.
      targets_segmentation: [B, T] segment ids of packed rows.
      deterministic: disables dropout.

    Returns:
      [B, T, V] float32 logits.
    """
    y = self.embed(decoder_inputs)
    y = self.decoder_positions(y, positions=targets_positions)
    y = self.dropout(y, deterministic=deterministic)
    if targets_segmentation is None or inputs_segmentation is None:
      self_mask, cross_mask = None, masks.key_lengths(inputs)
    else:
      self_mask = masks.segment_mask(targets_segmentation, targets_segmentation)
      cross_mask = masks.segment_mask(targets_segmentation, inputs_segmentation)
    y = self.decoder(y, encoded, self_mask=self_mask, cross_mask=cross_mask,
                     positions=targets_positions,
                     deterministic=deterministic)
    if self.config.tie_embeddings:
      logits = self.embed.attend(y)
    else:
      logits = self.logits_projection(y)
    if self.config.final_logits_bias:
      logits = logits + self.logits_bias.astype(logits.dtype)
    return logits.astype(jnp.float32)

  def __call__(self, inputs: Array, targets: Array, *,
               inputs_positions: Array | None = None,
               targets_positions: Array | None = None,
               inputs_segmentation: Array | None = None,
               targets_segmentation: Array | None = None,
               deterministic: bool) -> Array:
    """Teacher forcing: inputs [B, S], targets [B, T] -> logits [B, T, V]."""
    encoded = self.encode(inputs, inputs_positions=inputs_positions,
                          inputs_segmentation=inputs_segmentation,
                          deterministic=deterministic)
    return self.decode(
        encoded, inputs, layers.shift_right(targets, targets_segmentation),
        targets_positions=targets_positions,
        inputs_segmentation=inputs_segmentation,
        targets_segmentation=targets_segmentation,
        deterministic=deterministic)


# -- The model-family interface used by the translation task ----------------


def build(config: Config, *, decode: bool = False) -> Transformer:
  return Transformer(config.for_decoding() if decode else config)


def init_decoding(model: Transformer, params: Any, inputs: Array,
                  max_length: int, beam_size: int = 1) -> dict[str, Any]:
  """Decoding state for inputs [B, S] and outputs of up to max_length.

  `model` has `config.decode=True`. The cache-creating call runs the decoder
  once over a dummy target of max_length (the KV cache capacity) with the
  real encoder outputs, whose projected keys and values every layer's
  cross-attention stores. Those and the source tokens (for the padding
  mask) are `decoding.PerExample`: beams share them. For a beam search of
  `beam_size` > 1 the self-attention caches track the beams
  (`attention.track_beams`) and stay in their slots (`decoding.PerSlot`).
  """
  params = layers.unstack_layers(params)
  encoded = model.apply({'params': params}, inputs, deterministic=True,
                        method='encode')
  _, cache = model.apply(
      {'params': params}, encoded, inputs,
      jnp.zeros((inputs.shape[0], max_length), jnp.int32),
      deterministic=True, method='decode', mutable=['cache'])
  cache = cache['cache']
  if beam_size > 1:
    cache = attention.track_beams(cache, beam_size)
  return decoding_state(cache, inputs=inputs)


def decoding_state(cache: dict[str, Any], **shared: Array) -> dict[str, Any]:
  """A decoder's 'cache' collection as beam search's state: the parts of
  `attention.split_cache`, those that beams share with `shared`."""
  steps, in_place, cross = attention.split_cache(cache)
  return {'cache': steps,
          'slots': decoding.PerSlot(in_place, attention.tracked_beams(steps)),
          'shared': decoding.PerExample({'cache': cross, **shared})}


def decoding_cache(state: dict[str, Any]) -> dict[str, Any]:
  """The 'cache' collection held by a `decoding_state`."""
  return attention.merge_caches(state['cache'], state['slots'].tree,
                                state['shared'].tree['cache'])


def decoding_step(model: Transformer, params: Any, tokens: Array,
                  state: dict[str, Any]) -> tuple[Array, dict[str, Any]]:
  """tokens [N, 1] -> (next-token logits [N, V], new state)."""
  # Cross-attention reads the keys/values cached by `init_decoding`; the
  # encoder outputs passed here are a placeholder that is never projected.
  shared = state['shared'].tree
  placeholder = jnp.zeros((shared['inputs'].shape[0], 1,
                           model.config.d_model), model.config.dtype)
  logits, cache = model.apply(
      {'params': layers.unstack_layers(params),
       'cache': decoding_cache(state)},
      placeholder, shared['inputs'], tokens, deterministic=True,
      method='decode', mutable=['cache'])
  return logits[:, -1], decoding_state(cache['cache'],
                                       inputs=shared['inputs'])


def param_count(config: Config) -> int:
  """Parameters of a configuration, from shapes alone (nothing allocated;
  layers scanned, so that tracing does not grow with depth)."""
  tokens = jax.ShapeDtypeStruct((1, 8), jnp.int32)
  return layers.count_parameters(
      lambda key, s, t: Transformer(config.replace(scan_layers=True)).init(
          key, s, t, deterministic=True),
      tokens, tokens)
