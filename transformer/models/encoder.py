"""Encoder-only Transformer (BERT): masked language model and classifier.

Token + learned position + token-type embeddings, LayerNorm and dropout,
post-LN encoder blocks (`layers.SelfAttentionStack`), a pooler (tanh dense
on the first token, [CLS]), and two heads: the masked-language-model head
(dense, GELU, LayerNorm, then the tied embedding plus a bias) and a
sequence classifier on the pooled output.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer import layers
from transformer.core import masks
from transformer.core import positional
from transformer.models import family

Array = jax.Array

# Named sizes. bert-base/-large are Devlin et al. 2019 at the 30,522-token
# uncased WordPiece vocabulary; with the pooler the reference implementation
# counts 109,482,240 and 335,141,888 parameters (published as 110M/340M).
BERT = dict(vocab_size=30_522, max_length=512, activation='gelu',
            norm_position='post', layer_norm_epsilon=1e-12, dropout_rate=0.1)
SIZES = {
    'tiny': dict(num_layers=2, d_model=32, num_heads=4),
    'bert-base': dict(BERT, num_layers=12, d_model=768, num_heads=12),
    'bert-large': dict(BERT, num_layers=24, d_model=1024, num_heads=16),
    # RoBERTa-large: BERT-large with a 50,265-token BPE vocabulary, 514
    # positions and one token type.
    'roberta-large': dict(BERT, vocab_size=50_265, max_length=514,
                          type_vocab_size=1, num_layers=24, d_model=1024,
                          num_heads=16, layer_norm_epsilon=1e-5),
    # XLNet-Large's shape (24 x 1024, 16 heads, 32,000 SentencePiece
    # pieces) in this encoder, for the model-size table: its relative
    # positions and two-stream attention are not built here.
    'xlnet-large': dict(BERT, vocab_size=32_000, num_layers=24, d_model=1024,
                        num_heads=16),
}


# BERT's initializer_range for the pooler and the next-sentence head. With
# LeCun's scale the next-sentence gradient, noise while that task is
# unlearnt, had 2 to 4 times the norm of the masked-LM one and drowned it:
# `bert_mlm.py:nsp` stayed at the unigram loss (5.1) for 2,000 steps; now
# its masked-LM loss falls with the run without next-sentence prediction
# (4.95 against 4.79 at step 400).
HEAD_INIT = nn.initializers.normal(stddev=0.02)


@dataclasses.dataclass(frozen=True)
class Config(layers.TransformerConfig):
  vocab_size: int = 30_522
  max_length: int = 512
  type_vocab_size: int = 2
  num_classes: int = 2  # of the classification head
  activation: str = 'gelu'
  norm_position: str = 'post'
  positional_encoding: str = 'learned'


config_for = family.size_lookup(Config, SIZES, 'encoder')


class Bert(nn.Module):
  """BERT: `encode` gives token states and the pooled [CLS] vector;
  `mlm_logits` and `classify` are the two heads."""
  config: Config

  def setup(self):
    c = self.config
    (self.embed, self.positions, self.token_types, self.embedding_norm,
     self.dropout) = text_embeddings(c)
    self.blocks = layers.SelfAttentionStack(c)
    self.pooler = nn.Dense(c.d_model, kernel_init=HEAD_INIT, dtype=c.dtype,
                           param_dtype=c.param_dtype)

  def encode(self, tokens: Array, *, token_types: Array | None = None,
             deterministic: bool) -> tuple[Array, Array]:
    """tokens [B, T] (0 = padding, at the end) -> states [B, T, D], pooled
    [B, D]."""
    x = embed_text(self, tokens, token_types, deterministic=deterministic)
    states = self.blocks(x, mask=masks.key_lengths(tokens),
                         deterministic=deterministic)
    return states, jnp.tanh(self.pooler(states[:, 0]))

  @nn.compact
  def mlm_logits(self, tokens: Array, *, token_types: Array | None = None,
                 deterministic: bool) -> Array:
    """[B, T, V] float32 logits of the original token at every position."""
    states, _ = self.encode(tokens, token_types=token_types,
                            deterministic=deterministic)
    return mlm_head(self, self.config, states)

  @nn.compact
  def classify(self, tokens: Array, *, token_types: Array | None = None,
               deterministic: bool) -> Array:
    """[B, num_classes] float32 logits from the pooled [CLS] vector. The
    classifier starts as BERT's and transformers' do (normal, std 0.02),
    not at zero: a zero head passes the encoder no gradient at first, then
    one that grows with the head, which Adam's second moment follows
    slowly. Fine-tuning all-MiniLM-L6-v2 on CoLA (learning rate 5e-5, 3
    epochs, seed 0): Matthews 27.6 from this start, 22.1 from zero
    (transformers: 27.4)."""
    _, pooled = self.encode(tokens, token_types=token_types,
                            deterministic=deterministic)
    pooled = self.dropout(pooled, deterministic=deterministic)
    return nn.Dense(self.config.num_classes, kernel_init=HEAD_INIT,
                    dtype=self.config.dtype, param_dtype=self.config.param_dtype,
                    name='classifier')(pooled).astype(jnp.float32)


  @nn.compact
  def pretraining_logits(self, tokens: Array, *,
                         token_types: Array | None = None,
                         deterministic: bool) -> tuple[Array, Array]:
    """BERT's two pretraining heads from one pass: the masked-LM logits
    [B, T, V] and next-sentence logits [B, 2] (IsNext, NotNext order: 0 is
    the true next segment) from the pooled [CLS] vector."""
    states, pooled = self.encode(tokens, token_types=token_types,
                                 deterministic=deterministic)
    nsp = nn.Dense(2, kernel_init=HEAD_INIT, dtype=self.config.dtype,
                   param_dtype=self.config.param_dtype,
                   name='next_sentence')(pooled).astype(jnp.float32)
    return mlm_head(self, self.config, states), nsp


def pair_token_types(tokens: Array, sep_id: int, cls_id: int) -> Array:
  """Token types of `[CLS] a [SEP] b [SEP]` rows: 0 up to and including
  the first [SEP], 1 after it, 0 at padding. Where [SEP] is [CLS] (our EOS
  serves as both) the first separator is the second one in the row."""
  is_sep = tokens == sep_id
  before = jnp.cumsum(is_sep, axis=-1) - is_sep  # separators before i
  first = 2 if sep_id == cls_id else 1
  return ((before >= first) & (tokens > 0)).astype(jnp.int32)


def next_sentence_pairs(tokens: Array, key: Array, *, sep_id: int
                        ) -> tuple[Array, Array, Array]:
  """BERT's next-sentence task from rows of running text, on the device.

  Each row [CLS, t_1, ..., t_n] is cut at a random point into segment A
  (t_1 up to the cut) and B (the rest); half the rows (drawn from `key`)
  take B from the next row of the batch instead (NotNext: another
  document's text, or another chunk), the others keep their own (IsNext: B
  follows A). Rows become [CLS] A [SEP] B [SEP], B cut to keep the width.

  Args:
    tokens: [R, W] rows, 0 at padding, [CLS] first.
    key: the step's key (a resumed run draws the same pairs).
    sep_id: [SEP].

  Returns:
    (pairs [R, W], labels [R] 0 IsNext / 1 NotNext, valid [R]: rows of at
    least 4 tokens, which can be cut; the others are left as they are and
    carry no next-sentence loss).
  """
  rows, width = tokens.shape
  cut_key, swap_key = jax.random.split(key)
  lengths = (tokens > 0).sum(-1)
  valid = lengths >= 4
  # The cut s in [2, length - 1): both segments hold at least one token.
  cut = jax.random.randint(cut_key, (rows,), 2, jnp.maximum(lengths - 1, 3))
  not_next = jax.random.bernoulli(swap_key, 0.5, (rows,)) & valid
  index = jnp.arange(rows)
  source = jnp.where(not_next, (index + 1) % rows, index)
  b_start = cut[source]
  b_length = jnp.maximum(
      jnp.minimum(lengths[source] - b_start, width - cut - 2), 0)
  column = jnp.arange(width)[None, :]
  in_b = (column > cut[:, None]) & (column <= (cut + b_length)[:, None])
  b_tokens = jnp.take_along_axis(
      tokens[source], jnp.clip(column - cut[:, None] - 1 + b_start[:, None],
                               0, width - 1), axis=1)
  pairs = jnp.where(column < cut[:, None], tokens, 0)
  pairs = jnp.where(column == cut[:, None], sep_id, pairs)
  pairs = jnp.where(in_b, b_tokens, pairs)
  pairs = jnp.where(column == (cut + b_length + 1)[:, None], sep_id, pairs)
  pairs = jnp.where(valid[:, None], pairs, tokens)
  return pairs.astype(jnp.int32), not_next.astype(jnp.int32), valid


def text_embeddings(c: Config) -> tuple[nn.Module, ...]:
  """BERT's input modules, for a module's setup: token, position and token
  type embeddings, their LayerNorm and dropout (see `embed_text`)."""
  init = nn.initializers.normal(stddev=0.02)
  return (
      layers.TokenEmbedding(
          c.vocab_size, c.d_model, scale_by_sqrt_dim=False,
          embedding_init=init, dtype=c.dtype, param_dtype=c.param_dtype),
      positional.PositionalEncoding(
          c.max_length, c.positional_encoding, c.sinusoidal_layout,
          param_dtype=c.param_dtype),
      nn.Embed(c.type_vocab_size, c.d_model, dtype=c.dtype,
               param_dtype=c.param_dtype,
               embedding_init=nn.with_logical_partitioning(
                   init, (None, 'embed'))),
      layers.layer_norm(c),
      nn.Dropout(c.dropout_rate))


def embed_text(module: nn.Module, tokens: Array, token_types: Array | None,
               *, deterministic: bool) -> Array:
  """[B, T, D] BERT inputs from the `text_embeddings` of `module` (set up as
  its embed, positions, token_types, embedding_norm and dropout)."""
  types = jnp.zeros_like(tokens) if token_types is None else token_types
  x = module.positions(module.embed(tokens)) + module.token_types(types)
  return module.dropout(module.embedding_norm(x), deterministic=deterministic)


def mlm_head(module: nn.Module, c: Config, states: Array) -> Array:
  """BERT's masked-LM head (dense, activation, LayerNorm, the tied embedding
  plus a bias): [B, T, V] float32 logits. Called from a compact method of
  `module`, which owns the head's parameters and an `embed`."""
  h = layers.pointwise(c.activation)(nn.Dense(
      c.d_model, dtype=c.dtype, param_dtype=c.param_dtype,
      name='mlm_transform')(states))
  h = layers.layer_norm(c, name='mlm_norm')(h)
  bias = module.param('mlm_bias', nn.initializers.zeros, (c.vocab_size,),
                      c.param_dtype)
  return (module.embed.attend(h) + bias).astype(jnp.float32)


def build(config: Config) -> Bert:
  return Bert(config)


def param_count(config: Config, method: str = 'encode') -> int:
  """Parameters used by `method` ('encode': the reference count with the
  pooler; 'mlm_logits'; 'classify'), from shapes alone (layers scanned, so
  that tracing does not grow with depth)."""
  return layers.count_parameters(
      lambda key, t: Bert(config.replace(scan_layers=True)).init(
          key, t, deterministic=True, method=method),
      jax.ShapeDtypeStruct((1, 8), jnp.int32))


def mask_tokens(tokens: Array, key: Array, *, vocab_size: int, mask_id: int,
                first_id: int = 3, rate: float = 0.15) -> tuple[Array, Array]:
  """BERT's masking: choose `rate` of the real tokens; of those, 80% become
  [MASK], 10% a random token, 10% stay. Jittable; the caller's key makes it
  reproducible per step.

  Args:
    tokens: [B, T] ids, 0 = padding; ids below `first_id` are special and
      never chosen.

  Returns:
    (inputs, targets) [B, T] int32, targets 0 where nothing is predicted.
  """
  choose, roll, replace = jax.random.split(key, 3)
  chosen = (tokens >= first_id) & jax.random.bernoulli(choose, rate,
                                                        tokens.shape)
  u = jax.random.uniform(roll, tokens.shape)
  random_tokens = jax.random.randint(replace, tokens.shape, first_id,
                                     vocab_size)
  inputs = jnp.where(chosen & (u < 0.8), mask_id, tokens)
  inputs = jnp.where(chosen & (u >= 0.8) & (u < 0.9), random_tokens, inputs)
  return inputs.astype(jnp.int32), jnp.where(chosen, tokens, 0).astype(
      jnp.int32)
