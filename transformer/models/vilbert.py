"""ViLBERT (Lu et al. 2019): a two-stream vision-and-language Transformer.

A linguistic stream (BERT: token, position and token-type embeddings,
post-LN blocks) and a visual stream over image regions (each region's
features through a learned projection plus a learned projection of its
5-d location (x0, y0, x1, y1, area), LayerNorm and dropout; a global IMG
token first, the mean of the regions' features over the whole image) meet
in co-attentional layers (Co-TRM, the paper's Figure 2): each stream's
queries attend to the other stream's keys and values
(`attention.MultiHeadAttention` as cross-attention, residual and LayerNorm),
then a feed-forward sublayer per stream. Between co-attentional layers each
stream runs its own Transformer blocks. Regions carry no position other
than their boxes, so reordering them reorders the visual outputs and leaves
the text unchanged.

The layout follows the reference implementation (facebookresearch/
vilbert-multi-task, config bert_base_6layer_6conect): 12 BERT-base text
layers, 6 visual layers 1,024 wide with 8 heads and a 1,024 feed-forward,
co-attention 1,024 wide with 8 heads before text layers 6-11 and visual
layers 0-5:

    T0 .. T5, C0, (T6, V0), C1, (T7, V1), ... C5, (T11, V5)

Poolers: token 0 of each stream (CLS, IMG) through a dense layer to the
co-attention width and ReLU; their element-wise product is the joint
vector that the alignment, answer and retrieval heads read. A row without
regions skips co-attention, so with an empty visual stream the text stream
computes exactly BERT (tested against `encoder.Bert`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer import attention
from transformer import layers
from transformer.core import masks
from transformer.models import encoder
from transformer.models import family

Array = jax.Array
ARCHITECTURES = ('two_stream', 'single_stream')

# ViLBERT's text stream is BERT-base (uncased WordPiece vocabulary).
_PAPER = dict(
    vocab_size=30_522, max_length=512, num_layers=12, d_model=768,
    num_heads=12, d_ff=3072, v_num_layers=6, v_d_model=1024, v_num_heads=8,
    v_d_ff=1024, co_d_model=1024, co_num_heads=8,
    text_co_layers=(6, 7, 8, 9, 10, 11), visual_co_layers=(0, 1, 2, 3, 4, 5),
    feature_dim=2048, num_region_classes=1601)
SIZES = {
    'tiny': dict(num_layers=2, d_model=32, num_heads=4, d_ff=64,
                 v_num_layers=2, v_d_model=48, v_num_heads=4, v_d_ff=48,
                 co_d_model=48, co_num_heads=4, text_co_layers=(1, 2),
                 visual_co_layers=(0, 1)),
    'small': dict(num_layers=4, d_model=128, num_heads=4, d_ff=512,
                  v_num_layers=2, v_d_model=128, v_num_heads=4, v_d_ff=256,
                  co_d_model=128, co_num_heads=4, text_co_layers=(2, 3),
                  visual_co_layers=(0, 1)),
    'vilbert': _PAPER,
}


@dataclasses.dataclass(frozen=True)
class Config:
  """Hyperparameters of both streams and their co-attention.

  `text_co_layers[k]` and `visual_co_layers[k]` place co-attentional layer
  k: before text layer text_co_layers[k] and visual layer
  visual_co_layers[k] (an index equal to the stream's depth: after its last
  layer). Both are non-decreasing.
  """
  vocab_size: int = 30_522
  max_length: int = 512  # text positions
  type_vocab_size: int = 2
  num_layers: int = 12  # text stream
  d_model: int = 768
  num_heads: int = 12
  d_ff: int = 3072
  v_num_layers: int = 6  # visual stream
  v_d_model: int = 1024
  v_num_heads: int = 8
  v_d_ff: int = 1024
  co_d_model: int = 1024  # co-attention width (queries, keys, values)
  co_num_heads: int = 8
  text_co_layers: tuple[int, ...] = (6, 7, 8, 9, 10, 11)
  visual_co_layers: tuple[int, ...] = (0, 1, 2, 3, 4, 5)
  # 'two_stream' (ViLBERT); 'single_stream': words and regions in one BERT
  # (VisualBERT-style), the baseline of the comparison.
  architecture: str = 'two_stream'
  feature_dim: int = 2048  # region features
  num_region_classes: int = 1601  # masked-region targets
  answer_classes: int = 0  # of the answer head (0: none)
  activation: str = 'gelu_exact'
  layer_norm_epsilon: float = 1e-12
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def __post_init__(self):
    layers.check_ranges(self)
    if self.architecture not in ARCHITECTURES:
      raise ValueError(f'architecture={self.architecture!r}; choose one of '
                       f'{ARCHITECTURES}.')
    placements = (self.text_co_layers, self.visual_co_layers)
    if len(placements[0]) != len(placements[1]) or not placements[0]:
      raise ValueError(
          f'text_co_layers={self.text_co_layers} and visual_co_layers='
          f'{self.visual_co_layers} must name the same number (at least one) '
          f'of co-attentional layers.')
    for name, ids, depth in (('text_co_layers', placements[0],
                              self.num_layers),
                             ('visual_co_layers', placements[1],
                              self.v_num_layers)):
      if list(ids) != sorted(ids) or min(ids) < 0 or max(ids) > depth:
        raise ValueError(f'{name}={ids}: give non-decreasing layer indices '
                         f'between 0 and the stream depth {depth}.')
    for width, heads, what in ((self.co_d_model, self.co_num_heads, 'co'),
                               (self.v_d_model, self.v_num_heads, 'v')):
      if width % heads:
        raise ValueError(f'{what}_d_model={width} is not divisible by '
                         f'{what}_num_heads={heads}.')
    self.text()  # BERT's own checks of the text stream

  def replace(self, **changes) -> Config:
    return dataclasses.replace(self, **changes)

  def text(self) -> encoder.Config:
    """The linguistic stream: BERT."""
    return encoder.Config(
        vocab_size=self.vocab_size, max_length=self.max_length,
        type_vocab_size=self.type_vocab_size, num_layers=self.num_layers,
        d_model=self.d_model, num_heads=self.num_heads, d_ff=self.d_ff,
        activation=self.activation, norm_position='post',
        layer_norm_epsilon=self.layer_norm_epsilon,
        dropout_rate=self.dropout_rate,
        attention_dropout_rate=self.attention_dropout_rate, dtype=self.dtype,
        param_dtype=self.param_dtype)

  def visual(self) -> layers.TransformerConfig:
    """The visual stream's blocks (BERT's, at their own sizes)."""
    return self.text().replace(num_layers=self.v_num_layers,
                               d_model=self.v_d_model,
                               num_heads=self.v_num_heads, d_ff=self.v_d_ff)


config_for = family.size_lookup(Config, SIZES, 'ViLBERT')


def region_locations(boxes: Array) -> Array:
  """[..., 4] boxes (x0, y0, x1, y1), fractions of the image side ->
  [..., 5] with the box's fraction of the image area."""
  area = (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])
  return jnp.concatenate([boxes, area[..., None]], -1)


class CoAttentionLayer(nn.Module):
  """Co-TRM: each stream's queries attend to the other stream (its inputs
  to this layer), residual and LayerNorm, then a feed-forward sublayer per
  stream."""
  config: Config

  @nn.compact
  def __call__(self, text: Array, visual: Array, *, text_mask: Array,
               visual_mask: Array, deterministic: bool
               ) -> tuple[Array, Array]:
    """text [B, T, D], visual [B, R, Dv]; masks [B, T] and [B, R] bool
    (True: a real token or region) -> updated (text, visual)."""
    c = self.config
    updated = []
    for name, stream, stream_config, other, other_mask in (
        ('text', text, c.text(), visual, visual_mask),
        ('visual', visual, c.visual(), text, text_mask)):
      cross = attention.MultiHeadAttention(
          num_heads=c.co_num_heads, head_dim=c.co_d_model // c.co_num_heads,
          out_features=stream.shape[-1],
          dropout_rate=c.attention_dropout_rate, dtype=c.dtype,
          param_dtype=c.param_dtype, name=f'{name}_attends_to_other')
      x = layers.Sublayer(stream_config, name=f'{name}_co_sublayer')(
          stream, lambda h, cross=cross, kv=other, m=other_mask: cross(
              h, kv, mask=m[:, None, None, :], deterministic=deterministic),
          deterministic=deterministic)
      x = layers.Sublayer(stream_config, name=f'{name}_mlp_sublayer')(
          x, layers.FeedForward(
              stream_config.mlp_dim, c.activation, dtype=c.dtype,
              param_dtype=c.param_dtype, name=f'{name}_mlp'),
          deterministic=deterministic)
      updated.append(x)
    return tuple(updated)


class ViLBERT(nn.Module):
  """`encode` gives both streams' states and the joint vector; the heads
  are `pretraining_logits`, `answer_logits` and `region_scores`."""
  config: Config

  def setup(self):
    c = self.config
    two_streams = c.architecture == 'two_stream'
    text = c.text()
    # Regions are embedded at the visual stream's width, or at the text's
    # when they join the words (single stream).
    visual = c.visual() if two_streams else text
    # The text stream's parameters are named as `encoder.Bert`'s, its
    # blocks text_layers_i for Bert's blocks/layer_i (`from_bert`).
    (self.embed, self.positions, self.token_types, self.embedding_norm,
     self.dropout) = encoder.text_embeddings(text)
    self.text_layers = [layers.SelfAttentionBlock(text)
                        for _ in range(c.num_layers)]
    dense = lambda width: nn.Dense(width, dtype=c.dtype,
                                   param_dtype=c.param_dtype)
    self.region_projection = dense(visual.d_model)
    self.location_projection = dense(visual.d_model)
    self.region_norm = layers.layer_norm(visual)
    if two_streams:
      self.visual_layers = [layers.SelfAttentionBlock(visual)
                            for _ in range(c.v_num_layers)]
      self.co_layers = [CoAttentionLayer(c)
                        for _ in range(len(c.text_co_layers))]
    self.text_pooler = dense(c.co_d_model)
    self.image_pooler = dense(c.co_d_model)

  def embed_regions(self, features: Array, boxes: Array, region_mask: Array,
                    *, deterministic: bool) -> Array:
    """[B, 1 + R, Dv]: the IMG token (mean features of the real regions,
    the whole image as its box), then each region."""
    mask = region_mask[..., None].astype(features.dtype)
    mean = (features * mask).sum(1) / jnp.maximum(mask.sum(1), 1)
    features = jnp.concatenate([mean[:, None], features], 1)
    whole = jnp.broadcast_to(jnp.array([0., 0., 1., 1.], boxes.dtype),
                             (boxes.shape[0], 1, 4))
    boxes = jnp.concatenate([whole, boxes], 1)
    x = (self.region_projection(features.astype(self.config.dtype))
         + self.location_projection(region_locations(boxes).astype(
             self.config.dtype)))
    return self.dropout(self.region_norm(x), deterministic=deterministic)

  def encode(self, tokens: Array, features: Array, boxes: Array,
             region_mask: Array, *, token_types: Array | None = None,
             deterministic: bool) -> tuple[Array, Array, Array]:
    """Both streams.

    Args:
      tokens: [B, T] ids, 0 = padding; token 0 of a row is its [CLS].
      features: [B, R, F] region features.
      boxes: [B, R, 4] (x0, y0, x1, y1) as fractions of the image side.
      region_mask: [B, R] bool, False for padding regions.
      token_types: [B, T] segment ids (default 0).
      deterministic: disables dropout.

    Returns:
      text states [B, T, D], visual states [B, 1 + R, Dv] (IMG first) and
      the joint vector [B, co_d_model].
    """
    c = self.config
    text = encoder.embed_text(self, tokens, token_types,
                              deterministic=deterministic)
    visual = self.embed_regions(features, boxes, region_mask,
                                deterministic=deterministic)
    text_mask = tokens > 0
    has_regions = region_mask.any(-1)
    visual_mask = jnp.concatenate([has_regions[:, None], region_mask], 1)
    run = lambda blocks, x, mask, begin, end: _run_blocks(
        blocks[begin:end], x, mask, deterministic)
    t = v = 0
    for k, co_layer in enumerate(self.co_layers):
      text = run(self.text_layers, text, text_mask, t, c.text_co_layers[k])
      visual = run(self.visual_layers, visual, visual_mask, v,
                   c.visual_co_layers[k])
      t, v = c.text_co_layers[k], c.visual_co_layers[k]
      new_text, visual = co_layer(text, visual, text_mask=text_mask,
                                  visual_mask=visual_mask,
                                  deterministic=deterministic)
      # Without regions there is nothing to attend to: the text stream
      # goes on as BERT.
      text = jnp.where(has_regions[:, None, None], new_text, text)
    text = run(self.text_layers, text, text_mask, t, c.num_layers)
    visual = run(self.visual_layers, visual, visual_mask, v, c.v_num_layers)
    joint = (nn.relu(self.text_pooler(text[:, 0]))
             * nn.relu(self.image_pooler(visual[:, 0])))
    return text, visual, joint

  @nn.compact
  def pretraining_logits(self, tokens: Array, features: Array, boxes: Array,
                         region_mask: Array, *,
                         token_types: Array | None = None,
                         deterministic: bool) -> dict[str, Array]:
    """The three pretraining heads, float32: 'words' [B, T, V] (BERT's
    masked-LM head, tied embedding), 'regions' [B, R, num_region_classes]
    (each region's class distribution) and 'aligned' [B] (the logit that
    the caption belongs to the image, from the joint vector)."""
    c = self.config
    text, visual, joint = self.encode(
        tokens, features, boxes, region_mask, token_types=token_types,
        deterministic=deterministic)
    h = layers.pointwise(c.activation)(nn.Dense(
        c.v_d_model, dtype=c.dtype, param_dtype=c.param_dtype,
        name='region_transform')(visual[:, 1:]))
    h = layers.layer_norm(c.visual(), name='region_norm_head')(h)
    regions = nn.Dense(c.num_region_classes, dtype=c.dtype,
                       param_dtype=c.param_dtype, name='region_classes')(h)
    joint = self.dropout(joint, deterministic=deterministic)
    aligned = nn.Dense(1, dtype=c.dtype, param_dtype=c.param_dtype,
                       name='alignment')(joint)[:, 0]
    return {'words': encoder.mlm_head(self, c.text(), text),
            'regions': regions.astype(jnp.float32),
            'aligned': aligned.astype(jnp.float32)}

  @nn.compact
  def answer_logits(self, tokens: Array, features: Array, boxes: Array,
                    region_mask: Array, *, token_types: Array | None = None,
                    deterministic: bool) -> Array:
    """[B, answer_classes] float32: the reference VQA head (dense to twice the
    joint width, activation, LayerNorm, dense) on the joint vector."""
    c = self.config
    if c.answer_classes < 1:
      raise ValueError('answer_classes is 0: set it to the answer '
                       'vocabulary size to build the answer head.')
    _, _, joint = self.encode(tokens, features, boxes, region_mask,
                              token_types=token_types,
                              deterministic=deterministic)
    h = self.dropout(joint, deterministic=deterministic)
    h = layers.pointwise(c.activation)(nn.Dense(
        2 * c.co_d_model, dtype=c.dtype, param_dtype=c.param_dtype,
        name='answer_hidden')(h))
    h = nn.LayerNorm(epsilon=c.layer_norm_epsilon, dtype=c.dtype,
                     param_dtype=c.param_dtype, name='answer_norm')(h)
    return nn.Dense(c.answer_classes, dtype=c.dtype, param_dtype=c.param_dtype,
                    name='answer')(h).astype(jnp.float32)

  @nn.compact
  def region_scores(self, tokens: Array, features: Array, boxes: Array,
                    region_mask: Array, *, token_types: Array | None = None,
                    deterministic: bool) -> Array:
    """[B, R] float32: how well each region fits the text (referring
    expressions); padding regions score `masks.MASKED_LOGIT`."""
    c = self.config
    _, visual, _ = self.encode(tokens, features, boxes, region_mask,
                               token_types=token_types,
                               deterministic=deterministic)
    h = self.dropout(visual[:, 1:], deterministic=deterministic)
    scores = nn.Dense(1, dtype=c.dtype, param_dtype=c.param_dtype,
                      name='region_score')(h)[..., 0].astype(jnp.float32)
    return jnp.where(region_mask, scores, masks.MASKED_LOGIT)


class SingleStream(ViLBERT):
  """The single-stream baseline (VisualBERT-style): the regions, embedded
  at the text width with token type 1, join the words in one BERT. Same
  heads and poolers as ViLBERT (token 0 of each part), no co-attention;
  its blocks are text_layers_i, so `from_bert` loads it too (its modules:
  `ViLBERT.setup` for this architecture)."""

  def encode(self, tokens: Array, features: Array, boxes: Array,
             region_mask: Array, *, token_types: Array | None = None,
             deterministic: bool) -> tuple[Array, Array, Array]:
    """As `ViLBERT.encode`; the visual states are the region positions'
    outputs of the one stack, [B, 1 + R, D]."""
    text = encoder.embed_text(self, tokens, token_types,
                              deterministic=deterministic)
    visual = self.embed_regions(features, boxes, region_mask,
                                deterministic=deterministic)
    visual = visual + self.token_types(jnp.ones(visual.shape[:2],
                                                jnp.int32))
    has_regions = region_mask.any(-1)
    mask = jnp.concatenate([tokens > 0, has_regions[:, None], region_mask],
                           1)
    x = _run_blocks(self.text_layers, jnp.concatenate([text, visual], 1),
                    mask, deterministic)
    text, visual = x[:, :tokens.shape[1]], x[:, tokens.shape[1]:]
    joint = (nn.relu(self.text_pooler(text[:, 0]))
             * nn.relu(self.image_pooler(visual[:, 0])))
    return text, visual, joint


def build(config: Config) -> ViLBERT:
  """The model `config.architecture` names."""
  return (SingleStream if config.architecture == 'single_stream'
          else ViLBERT)(config)


def co_attention(model: ViLBERT, params: Any, tokens: Array,
                 features: Array, boxes: Array, region_mask: Array
                 ) -> tuple[Array, Array]:
  """The co-attention weights of every co-attentional layer: each word's
  attention over the regions [B, K, N, T, R] and each region's over the
  words [B, K, N, R, T] (K layers, N heads; the IMG token left out). For
  the single stream, the same blocks of its last layer's self-attention
  (K = 1)."""
  _, state = model.apply({'params': params}, tokens, features, boxes,
                         region_mask, deterministic=True, method='encode',
                         mutable=['intermediates'])
  weights = layers.attention_weights(state['intermediates'])
  if model.config.architecture == 'single_stream':
    last = weights[f'text_layers_{model.config.num_layers - 1}/'
                   'self_attention'][:, None]
    t = tokens.shape[1]
    return last[..., :t, t + 1:], last[..., t + 1:, :t]
  layers_ = range(len(model.config.text_co_layers))
  words = jnp.stack([weights[f'co_layers_{k}/text_attends_to_other']
                     for k in layers_], 1)
  regions = jnp.stack([weights[f'co_layers_{k}/visual_attends_to_other']
                       for k in layers_], 1)
  return words[..., 1:], regions[..., 1:, :]


def _run_blocks(blocks, x: Array, mask: Array, deterministic: bool) -> Array:
  """x through `blocks` (self-attention over the positions `mask` [B, L]
  keeps)."""
  for block in blocks:
    x = block(x, mask=mask[:, None, None, :], deterministic=deterministic)
  return x


def from_bert(bert_params: Any, params: Any) -> Any:
  """`params` of a ViLBERT with its text stream (embeddings, blocks, and
  the masked-LM head when the BERT has one) replaced by an `encoder.Bert`'s
  parameters, as ViLBERT starts from BERT-base. Sizes must agree."""
  bert = layers.unstack_layers(bert_params)
  if 'blocks' not in bert or 'embed' not in bert:
    raise ValueError('Not the parameters of an encoder.Bert (no embed or '
                     'blocks): give a BERT workdir\'s parameters.')
  names = [(name, name) for name in _BERT_NAMES if name in bert]
  names += [(('blocks', f'layer_{i}'), f'text_layers_{i}')
            for i in range(len(bert['blocks']))]
  result = dict(params)
  for source, target in names:
    value = (bert[source[0]][source[1]] if isinstance(source, tuple)
             else bert[source])
    if target not in params:
      raise ValueError(f'The BERT has {len(bert["blocks"])} layers and this '
                       f'text stream fewer ({target} is missing): give the '
                       f'same num_layers.')
    shapes = jax.tree.map(jnp.shape, (value, params[target]))
    if shapes[0] != shapes[1]:
      raise ValueError(f'{target}: the BERT\'s shapes {shapes[0]} differ '
                       f'from the text stream\'s {shapes[1]}; give the '
                       f'BERT\'s sizes (d_model, num_heads, d_ff, '
                       f'vocab_size, max_length).')
    result[target] = value
  if sum(name.startswith('text_layers_') for name in params) != len(
      bert['blocks']):
    raise ValueError(f'The BERT has {len(bert["blocks"])} layers and the text '
                     f'stream more: give the same num_layers.')
  return result


# The parameters `encoder.Bert` and the text stream share by name.
_BERT_NAMES = ('embed', 'positions', 'token_types', 'embedding_norm',
               'mlm_transform', 'mlm_norm', 'mlm_bias')


def param_count(config: Config, method: str = 'encode') -> int:
  """Parameters used by `method` ('encode': both streams and the poolers),
  from shapes alone."""
  r, f = 3, config.feature_dim
  return layers.count_parameters(
      lambda key, t, x, b, m: build(config).init(
          key, t, x, b, m, deterministic=True, method=method),
      jax.ShapeDtypeStruct((1, 8), jnp.int32),
      jax.ShapeDtypeStruct((1, r, f), jnp.float32),
      jax.ShapeDtypeStruct((1, r, 4), jnp.float32),
      jax.ShapeDtypeStruct((1, r), jnp.bool_))
