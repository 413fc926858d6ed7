"""Transformer building blocks: embeddings, positions, feed-forward,
residual sublayers, the self-attention stack (encoders, GPT, ViT) and the
cross-attention stack (decoders of encoder-decoders), decoder inputs and
masks, and the attention weights a model sows.

Shapes use the letters of `transformer.attention`. Every parameter carries
logical axis names ('vocab', 'embed', 'mlp', 'heads', 'kv') and block
activations are constrained to ('batch', 'length', 'embed'), so a mesh and a
set of logical axis rules shard a model without changing it.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any, Callable, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer import attention
from transformer.core import positional
from transformer.core import ranges

Array = jax.Array
Dtype = Any

# 'gelu' is the tanh approximation (GPT-2's 'gelu_new', flax's and the
# original ViT's default); 'gelu_exact' the erf form (BERT, Hugging Face ViT).
ACTIVATIONS = {'relu': nn.relu, 'gelu': nn.gelu,
               'gelu_exact': lambda x: nn.gelu(x, approximate=False),
               'swish': nn.swish}
# Gated linear units (Shazeer 2020): FFN(x) = W2 (act(W1 x) * W3 x), with
# the gate's nonlinearity; SwiGLU is LLaMA's feed-forward layer.
GATED_ACTIVATIONS = {'swiglu': nn.silu,
                     'geglu': lambda x: nn.gelu(x, approximate=False)}
NORM_POSITIONS = ('post', 'pre')
# 'layer': LayerNorm (the paper); 'rms': RMSNorm (Zhang and Sennrich 2019,
# LLaMA), x / sqrt(mean(x^2) + eps) * gamma, no centring and no bias.
NORMS = ('layer', 'rms')
ACTIVATION_AXES = ('batch', 'length', 'embed')
# Rematerialisation: what a block keeps from its forward pass for the
# backward pass. 'none' keeps everything; 'full' keeps only the block inputs
# (least memory, one more forward pass); 'dots' keeps matmul outputs without
# batch dimensions (the weight products) and recomputes the rest.
REMAT_POLICIES = {
    'none': None, 'full': jax.checkpoint_policies.nothing_saveable,
    'dots': jax.checkpoint_policies.dots_with_no_batch_dims_saveable}
# The name of a scanned stack's layers (parameters stacked on a leading
# 'layers' axis); an unscanned stack names them layer_0, layer_1, ...
SCANNED = 'layers'
# Memory and compile-time options every Transformer family's experiments may
# set under config.model (with their types).
MEMORY_FIELDS = dict(remat=str, scan_layers=bool)


# Fields named like these are counts and sizes (>= 1 where set).
_COUNTS = ('num_', 'd_model', 'd_ff')
_SIZES = ('_dim', '_size', '_length')


def check_ranges(config: Any) -> None:
  """Refuses a model dataclass whose numbers cannot mean anything, naming
  the field and its range: rates (`*_rate`) in [0, 1), counts and sizes
  (`num_*`, `*_dim`, `*_size`, `*_length`, d_model, d_ff, also after a
  prefix: v_num_layers, co_d_model) >= 1 where set,
  epsilons (`*_epsilon`) > 0."""
  for field in dataclasses.fields(config):
    value, name = getattr(config, field.name), field.name
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      continue
    if name.endswith('_rate'):
      ranges.check(name, value, low=0, high=1)
    if (name.startswith(_COUNTS) or name.endswith(_SIZES)
        or any(f'_{count}' in name for count in _COUNTS)):  # v_num_layers
      ranges.check(name, value, low=1)
    if name.endswith('_epsilon'):
      ranges.check(name, value, low=0, low_in=False)


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Hyperparameters of a stack of Transformer blocks (paper base defaults).

  Decode variants come from `config.replace(decode=True)`.
  """
  num_layers: int = 6
  d_model: int = 512
  num_heads: int = 8
  num_kv_heads: int | None = None  # None: num_heads; fewer: grouped-query
  head_dim: int | None = None  # None: d_model // num_heads
  value_head_dim: int | None = None  # None: head_dim (d_v = d_k)
  d_ff: int | None = None  # None: 4 * d_model
  activation: str = 'relu'  # 'relu' (paper); see ACTIVATIONS
  dropout_rate: float = 0.1  # on every residual branch
  attention_dropout_rate: float = 0.0
  norm_position: str = 'post'  # 'post': LN(x + f(x)) (paper); 'pre'
  norm: str = 'layer'  # 'layer' (paper) or 'rms'; see NORMS
  positional_encoding: str = 'sinusoidal'  # see positional.KINDS
  sinusoidal_layout: str = 'interleaved'  # see positional.SINUSOIDAL_LAYOUTS
  # Rotary positions' base and scaling (`positional.Rope`, whose checks
  # name these fields): flat scalars, so that configs set them.
  rope_theta: float = 10_000.0
  rope_scaling: str = ''  # see positional.ROPE_SCALINGS; '': none
  rope_factor: float = 1.0
  rope_low_freq_factor: float = 1.0  # 'llama3'
  rope_high_freq_factor: float = 4.0  # 'llama3'
  rope_original_max_positions: int | None = None  # 'dynamic', 'llama3'
  layer_norm_epsilon: float = 1e-6
  use_bias: bool = True
  attention_implementation: str = 'auto'
  decode: bool = False
  dtype: Dtype = jnp.float32  # computation
  param_dtype: Dtype = jnp.float32
  remat: str = 'none'  # see REMAT_POLICIES
  # One block body under `nn.scan`: compile time independent of depth.
  # Decoding (`decode=True`) runs the unscanned stack on `unstack_layers`.
  scan_layers: bool = False
  # Low-rank adapters on the attention projections (`attention.lora`; rank
  # 0: none): only they train, the rest of the model frozen.
  lora_rank: int = 0
  lora_alpha: float = 16.0
  lora_dropout: float = 0.0
  lora_targets: str = 'query,value'  # of attention.lora.TARGETS

  # The position schemes a model family accepts (a subclass may narrow or
  # change them, e.g. the ViT's 2-D ones).
  positional_encodings: ClassVar[tuple[str, ...]] = positional.KINDS

  def __post_init__(self):
    check_ranges(self)
    if self.activation not in {**ACTIVATIONS, **GATED_ACTIVATIONS}:
      raise ValueError(f'activation={self.activation!r}; choose one of '
                       f'{(*ACTIVATIONS, *GATED_ACTIVATIONS)}.')
    if self.norm not in NORMS:
      raise ValueError(f'norm={self.norm!r}; choose one of {NORMS}.')
    if self.norm_position not in NORM_POSITIONS:
      raise ValueError(f'norm_position={self.norm_position!r}; choose one of '
                       f'{NORM_POSITIONS}.')
    if self.positional_encoding not in self.positional_encodings:
      raise ValueError(
          f'positional_encoding={self.positional_encoding!r}; choose one of '
          f'{self.positional_encodings}.')
    if self.sinusoidal_layout not in positional.SINUSOIDAL_LAYOUTS:
      raise ValueError(f'sinusoidal_layout={self.sinusoidal_layout!r}; choose '
                       f'one of {positional.SINUSOIDAL_LAYOUTS}.')
    rope = self.rope  # checks the rope_* fields
    if self.positional_encoding != 'rotary' and rope != positional.Rope():
      raise ValueError(
          f'The rope_* fields set the rotary positions; with '
          f'positional_encoding={self.positional_encoding!r} they would be '
          f"ignored: set positional_encoding='rotary' or leave them at "
          f'their defaults.')
    if self.attention_implementation not in attention.IMPLEMENTATIONS:
      raise ValueError(
          f'attention_implementation={self.attention_implementation!r}; '
          f'choose one of {attention.IMPLEMENTATIONS}.')
    if self.remat not in REMAT_POLICIES:
      raise ValueError(f'remat={self.remat!r}; choose one of '
                       f'{tuple(REMAT_POLICIES)}.')
    if self.head_dim is None and self.d_model % self.num_heads:
      raise ValueError(
          f'd_model={self.d_model} is not divisible by num_heads='
          f'{self.num_heads}; change one of them or set head_dim.')
    self.lora  # checks the lora_* fields
    if self.num_heads % (self.num_kv_heads or self.num_heads):
      divisors = [k for k in range(1, self.num_heads + 1)
                  if self.num_heads % k == 0]
      raise ValueError(
          f'num_heads={self.num_heads} is not a multiple of num_kv_heads='
          f'{self.num_kv_heads}: each key/value head serves a whole group '
          f'of query heads. Set model.num_kv_heads to one of {divisors} (1: '
          f'multi-query; {self.num_heads}: multi-head).')

  def replace(self, **changes) -> TransformerConfig:
    return dataclasses.replace(self, **changes)

  @property
  def lora(self) -> attention.lora.Lora | None:
    """The adapters the lora_* fields ask for; None at rank 0."""
    return attention.lora.from_fields(self.lora_rank, self.lora_alpha,
                                      self.lora_dropout, self.lora_targets,
                                      self.d_model)

  def for_decoding(self) -> TransformerConfig:
    """The decode variant: KV caches, one layer after another (a scanned
    model's parameters go through `unstack_layers`)."""
    return self.replace(decode=True, scan_layers=False)

  @property
  def mlp_dim(self) -> int:
    return self.d_ff or 4 * self.d_model

  @property
  def rope(self) -> positional.Rope:
    """The rope_* fields as the attention layers take them."""
    return positional.Rope(
        self.rope_theta, self.rope_scaling, self.rope_factor,
        self.rope_low_freq_factor, self.rope_high_freq_factor,
        self.rope_original_max_positions)


def shift_right(targets: Array, segmentation: Array | None = None) -> Array:
  """Decoder inputs: targets moved one step right, 0 at each segment start."""
  shifted = jnp.pad(targets, ((0, 0), (1, 0)))[:, :-1]
  if segmentation is not None:
    previous = jnp.pad(segmentation, ((0, 0), (1, 0)))[:, :-1]
    shifted = jnp.where(segmentation == previous, shifted, 0)
  return shifted


def count_parameters(init: Callable[..., Any], *inputs: Any) -> int:
  """Parameters that `init(key, *inputs)` creates, from shapes alone
  (`jax.eval_shape`: nothing is allocated, whatever the model's size).

  Args:
    init: e.g. `lambda key, x: model.init(key, x, deterministic=True)`.
    *inputs: `jax.ShapeDtypeStruct`s of the example inputs.
  """
  shapes = jax.eval_shape(init, jax.random.key(0), *inputs)
  return sum(int(x.size) for x in jax.tree.leaves(nn.unbox(shapes)))


def _partitioned(init: Callable[..., Array], names: tuple[str | None, ...]):
  return nn.with_logical_partitioning(init, names)


def pointwise(activation: str) -> Callable[[Array], Array]:
  """The elementwise nonlinearity of an activation name: a gated one's gate
  (for the layers that are not gated, e.g. a masked-LM head's transform)."""
  return {**ACTIVATIONS, **GATED_ACTIVATIONS}[activation]


def layer_norm(config: TransformerConfig, name: str | None = None) -> nn.Module:
  """The config's norm over D: LayerNorm, gamma * (x - mean) /
  sqrt(var + eps) + beta, or RMSNorm, gamma * x / sqrt(mean(x^2) + eps)."""
  if config.norm == 'rms':
    return nn.RMSNorm(
        epsilon=config.layer_norm_epsilon, dtype=config.dtype,
        param_dtype=config.param_dtype, name=name,
        scale_init=_partitioned(nn.initializers.ones, ('embed',)))
  return nn.LayerNorm(
      epsilon=config.layer_norm_epsilon, dtype=config.dtype,
      param_dtype=config.param_dtype, name=name,
      scale_init=_partitioned(nn.initializers.ones, ('embed',)),
      bias_init=_partitioned(nn.initializers.zeros, ('embed',)))


class TokenEmbedding(nn.Module):
  """Token embedding, optionally scaled by sqrt(D), reusable as the softmax.

  `attend(x)` multiplies by the transposed table, which ties the input
  embedding and the pre-softmax linear layer as in the paper (Section 3.4).
  """
  vocab_size: int
  features: int
  scale_by_sqrt_dim: bool = True
  embedding_init: Callable[..., Array] | None = None  # None: N(0, 1/D)
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  def setup(self):
    # With N(0, 1/D) entries and the sqrt(D) input scale, inputs have unit
    # scale and tied output logits start small.
    init = self.embedding_init or nn.initializers.normal(
        stddev=self.features**-0.5)
    self.embed = nn.Embed(
        self.vocab_size, self.features, dtype=self.dtype,
        param_dtype=self.param_dtype,
        embedding_init=_partitioned(init, ('vocab', 'embed')))

  def __call__(self, tokens: Array) -> Array:
    """tokens: [...] int -> [..., D]."""
    x = self.embed(tokens)
    return x * jnp.sqrt(self.features).astype(x.dtype) \
        if self.scale_by_sqrt_dim else x

  def attend(self, x: Array) -> Array:
    """x: [..., D] -> logits [..., V] with the embedding table as weights."""
    # One [B*T, D] x [D, V] product, not flax's `Embed.attend` on [B, T, D]:
    # for the 3-D product XLA's CPU backend wrote the [B, T, V] logits'
    # gradient a second time, transposed, for the table's gradient (0.36 s
    # of a 2-layer GPT-2-width train step's 4.1 s); the 2-D one reads it as
    # it is.
    table = jnp.asarray(self.embed.embedding, self.dtype)
    flat = x.reshape(-1, x.shape[-1]).astype(self.dtype)
    return jnp.dot(flat, table.T).reshape(*x.shape[:-1], table.shape[0])


class FeedForward(nn.Module):
  """Position-wise FFN(x) = W2 act(W1 x + b1) + b2, act = ReLU or GELU; a
  gated activation (SwiGLU) is W2 (act(W1 x + b1) * (W3 x + b3)) + b2."""
  mlp_dim: int
  activation: str = 'relu'
  use_bias: bool = True
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32
  kernel_init: Callable[..., Array] = nn.initializers.xavier_uniform()

  @nn.compact
  def __call__(self, x: Array) -> Array:
    """x: [..., D] -> [..., D]."""
    dense = functools.partial(nn.Dense, use_bias=self.use_bias,
                              dtype=self.dtype, param_dtype=self.param_dtype)
    h = dense(self.mlp_dim, name='wi',
              kernel_init=_partitioned(self.kernel_init, ('embed', 'mlp')),
              bias_init=_partitioned(nn.initializers.zeros, ('mlp',)))(x)
    if self.activation in GATED_ACTIVATIONS:
      h = GATED_ACTIVATIONS[self.activation](h) * dense(
          self.mlp_dim, name='wi_linear',
          kernel_init=_partitioned(self.kernel_init, ('embed', 'mlp')),
          bias_init=_partitioned(nn.initializers.zeros, ('mlp',)))(x)
    else:
      h = ACTIVATIONS[self.activation](h)
    return dense(x.shape[-1], name='wo',
                 kernel_init=_partitioned(self.kernel_init, ('mlp', 'embed')),
                 bias_init=_partitioned(nn.initializers.zeros, ('embed',)))(h)


class Sublayer(nn.Module):
  """Residual connection with LayerNorm and dropout around a sublayer f.

  post-LN (the paper): LN(x + Dropout(f(x))).
  pre-LN:              x + Dropout(f(LN(x))); the stack ends with one LN.
  """
  config: TransformerConfig

  @nn.compact
  def __call__(self, x: Array, fn: Callable[[Array], Array], *,
               deterministic: bool) -> Array:
    norm = layer_norm(self.config, name='norm')
    dropout = nn.Dropout(self.config.dropout_rate)
    if self.config.norm_position == 'pre':
      return x + dropout(fn(norm(x)), deterministic=deterministic)
    return norm(x + dropout(fn(x), deterministic=deterministic))


def _attention(config: TransformerConfig, name: str) -> nn.Module:
  rotary = config.positional_encoding == 'rotary' and name == 'self_attention'
  return attention.MultiHeadAttention(
      num_heads=config.num_heads, num_kv_heads=config.num_kv_heads,
      head_dim=config.head_dim, value_head_dim=config.value_head_dim,
      use_bias=config.use_bias,
      dropout_rate=config.attention_dropout_rate,
      implementation=config.attention_implementation, decode=config.decode,
      rotary=rotary, rope=config.rope, dtype=config.dtype,
      param_dtype=config.param_dtype, lora=config.lora, name=name)


def _feed_forward(config: TransformerConfig) -> nn.Module:
  return FeedForward(config.mlp_dim, config.activation, config.use_bias,
                     dtype=config.dtype, param_dtype=config.param_dtype,
                     name='mlp')


class SelfAttentionBlock(nn.Module):
  """Self-attention and feed-forward, each inside a `Sublayer`: an encoder
  block (BERT, ViT, the encoder of an encoder-decoder), or with
  `causal=True` a decoder-only (GPT) block.
  """
  config: TransformerConfig

  @nn.compact
  def __call__(self, x: Array, *, mask: Array | None = None,
               causal: bool = False, positions: Array | None = None,
               deterministic: bool) -> Array:
    """x: [B, T, D]; mask broadcastable to [B, N, T, T] -> [B, T, D].

    `positions` [B, T] reach the attention (rotary positions only).
    """
    def forward(block, x, mask, positions):
      del block  # the submodules below attach to it
      x = nn.with_logical_constraint(x, ACTIVATION_AXES)
      self_attention = _attention(self.config, 'self_attention')
      x = Sublayer(self.config, name='attention_sublayer')(
          x, lambda h: self_attention(h, mask=mask, causal=causal,
                                      positions=positions,
                                      deterministic=deterministic),
          deterministic=deterministic)
      x = Sublayer(self.config, name='mlp_sublayer')(
          x, _feed_forward(self.config), deterministic=deterministic)
      return nn.with_logical_constraint(x, ACTIVATION_AXES)

    return _rematerialised(forward, self.config)(self, x, mask, positions)


class CrossAttentionBlock(nn.Module):
  """Masked self-attention, cross-attention to the encoder, feed-forward:
  the decoder block of an encoder-decoder."""
  config: TransformerConfig

  @nn.compact
  def __call__(self, y: Array, encoded: Array, *,
               self_mask: Array | None = None,
               cross_mask: Array | None = None,
               positions: Array | None = None,
               deterministic: bool) -> Array:
    """Decoder layer.

    Args:
      y: [B, T, D] target-side inputs.
      encoded: [B, S, D] encoder outputs.
      self_mask: extra mask for self-attention, broadcastable to
        [B, N, T, T] (the causal mask is always applied).
      cross_mask: broadcastable to [B, N, T, S], e.g. source padding.
      positions: [B, T] target positions (rotary positions only).
      deterministic: disables dropout.

    Returns:
      [B, T, D].
    """
    def forward(block, y, encoded, self_mask, cross_mask, positions):
      del block  # the submodules below attach to it
      y = nn.with_logical_constraint(y, ACTIVATION_AXES)
      self_attention = _attention(self.config, 'self_attention')
      cross_attention = _attention(self.config, 'cross_attention')
      y = Sublayer(self.config, name='attention_sublayer')(
          y, lambda h: self_attention(h, mask=self_mask, causal=True,
                                      positions=positions,
                                      deterministic=deterministic),
          deterministic=deterministic)
      y = Sublayer(self.config, name='cross_attention_sublayer')(
          y, lambda h: cross_attention(h, encoded, mask=cross_mask,
                                       deterministic=deterministic),
          deterministic=deterministic)
      y = Sublayer(self.config, name='mlp_sublayer')(
          y, _feed_forward(self.config), deterministic=deterministic)
      return nn.with_logical_constraint(y, ACTIVATION_AXES)

    return _rematerialised(forward, self.config)(
        self, y, encoded, self_mask, cross_mask, positions)


class SelfAttentionStack(nn.Module):
  """N `SelfAttentionBlock`s (causal ones for a GPT), then a LayerNorm if
  pre-LN."""
  config: TransformerConfig

  @nn.compact
  def __call__(self, x: Array, *, mask: Array | None = None,
               causal: bool = False, positions: Array | None = None,
               deterministic: bool) -> Array:
    """x: [B, T, D] embedded inputs -> [B, T, D]."""
    if self.config.scan_layers:
      x, _ = _scanned(_ScannedSelfAttentionBlock, self.config)(
          self.config, causal, deterministic, name=SCANNED)(
              x, mask, positions)
    for i in range(0 if self.config.scan_layers else self.config.num_layers):
      x = SelfAttentionBlock(self.config, name=f'layer_{i}')(
          x, mask=mask, causal=causal, positions=positions,
          deterministic=deterministic)
    if self.config.norm_position == 'pre':
      x = layer_norm(self.config, name='final_norm')(x)
    return x


class CrossAttentionStack(nn.Module):
  """N `CrossAttentionBlock`s attending to the encoder, then a LayerNorm if
  pre-LN."""
  config: TransformerConfig

  @nn.compact
  def __call__(self, y: Array, encoded: Array, *,
               self_mask: Array | None = None,
               cross_mask: Array | None = None,
               positions: Array | None = None,
               deterministic: bool) -> Array:
    """y: [B, T, D] embedded targets, encoded: [B, S, D] -> [B, T, D]."""
    if self.config.scan_layers:
      y, _ = _scanned(_ScannedCrossAttentionBlock, self.config)(
          self.config, deterministic, name=SCANNED)(
              y, encoded, self_mask, cross_mask, positions)
    for i in range(0 if self.config.scan_layers else self.config.num_layers):
      y = CrossAttentionBlock(self.config, name=f'layer_{i}')(
          y, encoded, self_mask=self_mask, cross_mask=cross_mask,
          positions=positions, deterministic=deterministic)
    if self.config.norm_position == 'pre':
      y = layer_norm(self.config, name='final_norm')(y)
    return y


def _rematerialised(forward: Callable[..., Array],
                    config: TransformerConfig) -> Callable[..., Array]:
  """`forward(module, *arrays)` under the config's remat policy. Static
  options (causal, deterministic) stay closed over, never traced."""
  if config.remat == 'none':
    return forward
  # Inside a scan, XLA cannot merge the recomputation away (no CSE across
  # loop iterations), so the barrier that prevents it is not needed.
  return nn.remat(forward, policy=REMAT_POLICIES[config.remat],
                  prevent_cse=not config.scan_layers)


class _ScannedSelfAttentionBlock(nn.Module):
  """An `SelfAttentionBlock` as a scan body: static options as attributes, the
  activations as carry, the per-layer output unused."""
  config: TransformerConfig
  causal: bool
  deterministic: bool

  @nn.compact
  def __call__(self, x, mask, positions):
    return SelfAttentionBlock(self.config, name='block')(
        x, mask=mask, causal=self.causal, positions=positions,
        deterministic=self.deterministic), None


class _ScannedCrossAttentionBlock(nn.Module):
  """A `CrossAttentionBlock` as a scan body (see
  `_ScannedSelfAttentionBlock`)."""
  config: TransformerConfig
  deterministic: bool

  @nn.compact
  def __call__(self, y, encoded, self_mask, cross_mask, positions):
    return CrossAttentionBlock(self.config, name='block')(
        y, encoded, self_mask=self_mask, cross_mask=cross_mask,
        positions=positions, deterministic=self.deterministic), None


def _scanned(body: type[nn.Module], config: TransformerConfig):
  """`body` scanned over config.num_layers layers: parameters (and sown
  attention weights) stacked on a leading axis named 'layers', dropout keys
  split per layer, the non-carry inputs broadcast to every layer."""
  if config.decode:
    raise ValueError('Decoding runs the unscanned stack: build the decode '
                     'model from config.for_decoding().')
  return nn.scan(
      body, variable_axes={'params': 0, 'intermediates': 0},
      split_rngs={'params': True, 'dropout': True}, in_axes=nn.broadcast,
      length=config.num_layers,
      metadata_params={nn.PARTITION_NAME: 'layers'})


def unstack_layers(tree: Any) -> Any:
  """A scanned model's parameters (or sown intermediates) in the layout of
  the unscanned model: each 'layers' entry, stacked on a leading axis,
  becomes layer_0, layer_1, ... The identity on an unscanned tree."""
  if not isinstance(tree, dict) and not hasattr(tree, 'items'):
    return tree
  result = {}
  for key, value in tree.items():
    if key == SCANNED:
      stacked = value['block']
      count = jax.tree.leaves(stacked)[0].shape[0]
      for i in range(count):
        result[f'layer_{i}'] = jax.tree.map(lambda x, i=i: x[i], stacked)
    else:
      result[key] = unstack_layers(value)
  return result


def attention_weights(intermediates: Any) -> dict[str, Array]:
  """The attention weights a model sowed, by the path of the layer that
  sowed them: {'decoder/layer_0/cross_attention': [B, N, T, S], ...} (scanned
  stacks unstacked, in the order the layers ran). Additive attention's
  weights, sown by the model itself as [B, T, S], come as 'attention'
  [B, 1, T, S]. The one attention hook of every model family:

      _, state = model.apply(variables, ..., mutable=['intermediates'])
      weights = layers.attention_weights(state['intermediates'])
  """
  found = {}

  def walk(node: Any, path: tuple[str, ...]) -> None:
    for key, value in node.items():
      if key == 'attention_weights':
        weights = value[0]
        found['/'.join(path) or 'attention'] = (
            weights if path else weights[:, None])
      elif hasattr(value, 'items'):
        walk(value, path + (key,))

  walk(unstack_layers(intermediates), ())
  return found


def group_layers(weights: dict[str, Any], example: int = 0
                 ) -> dict[str, np.ndarray]:
  """`layers.attention_weights` of a batch grouped by kind of attention,
  layers stacked by their index: {'encoder/self_attention': [L, N, T, S],
  ...} for one example of the batch. (A jitted function returns the dict
  with its keys sorted as text, layer_10 before layer_2: hence the
  numeric sort.)"""
  numeric = lambda name: [int(part) if part.isdigit() else part
                          for part in re.split(r'(\d+)', name)]
  grouped = {}
  for name in sorted(weights, key=numeric):
    value = weights[name]
    # 'encoder/layer_3/self_attention' and 'co_layers_3/...' lose the index.
    kind = re.sub(r'(^|/)layer_\d+(/|$)', r'\1', name).strip('/')
    kind = re.sub(r'_\d+(?=/|$)', '', kind)
    grouped.setdefault(kind or name, []).append(np.asarray(value[example]))
  return {kind: np.stack(layers) for kind, layers in grouped.items()}
