"""Masked language modelling (BERT pretraining) on the language-model corpora.

The documents and tokenizers are those of `language_modeling`; each row is
one chunk of a document, [EOS, t_1, ...] with EOS in the place of [CLS], and
one id past the tokenizer's vocabulary is [MASK]. Masks are drawn on the
device from the step's key (80% [MASK], 10% random, 10% unchanged), so a
resumed run masks exactly as an uninterrupted one; evaluation uses one fixed
masking. The metric is MLM accuracy on the masked positions.

With `data.next_sentence` BERT's second objective is added: each row is cut
into segments A and B, half the rows take B from another row, and the
pooled [CLS] vector predicts whether B follows A (`encoder.
next_sentence_pairs`, drawn on the device from the step's key as the masks
are); rows read [CLS] A [SEP] B [SEP] with token types, as fine-tuning on
sentence pairs does. The loss is the sum of the two means; 'nsp_accuracy'
is reported beside MLM accuracy.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from transformer import configs
from transformer.core import losses
from transformer.core import ranges
from transformer.data import batching
from transformer.data import tokenization
from transformer.models import encoder
from transformer.tasks import base
from transformer.tasks import language_modeling

# The kind of examples the task reads (`data.sources`).
DATA_KIND = 'documents'

# Set by the task from the data.
MODEL_EXCLUDE = ('vocab_size', 'max_length', 'num_classes')


def default_config() -> ml_collections.ConfigDict:
  config = language_modeling.default_config()
  config.task = 'masked_language_modeling'
  # BERT's optimiser (Devlin et al.): AdamW (0.9, 0.999, 1e-6), weight decay
  # 0.01, warmup then decay; gradients clipped at 1.
  config.optimizer.update(dict(schedule='cosine', learning_rate=1e-3,
                               b2=0.999, eps=1e-6, weight_decay=0.01,
                               grad_clip_norm=1.0))
  # next_sentence: BERT's next-sentence prediction beside masked LM.
  config.data.update(dict(max_length=128, mask_rate=0.15,
                          next_sentence=False))
  config.model = configs.model_section(
      encoder.Config, exclude=MODEL_EXCLUDE, size='tiny', dtype='float32')
  return config


class MaskedLanguageModelingTask(language_modeling.CorpusTask):
  """The `transformer.tasks.Task` for BERT pretraining."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *,
               batch_divisor: int = 1, shapes_only: bool = False):
    ranges.check('config.data.mask_rate', config.data.mask_rate, low=0,
                 low_in=False, high=1,
                 why=': with nothing masked there is nothing to predict')
    super().__init__(config, workdir, batch_divisor=batch_divisor,
                     shapes_only=shapes_only)
    self.mask_id = self.tokenizer.vocab_size
    self.model_config = encoder.config_for(
        config.model.size, vocab_size=self.tokenizer.vocab_size + 1,
        max_length=config.data.max_length,
        dtype=jnp.dtype(config.model.dtype),
        **configs.model_overrides(config.model, encoder.Config,
                                  MODEL_EXCLUDE))
    self.model = encoder.build(self.model_config)

  def rows(self, split: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """One document chunk per row (its tokens as inputs and targets)."""
    return [(inputs, inputs) for inputs, _ in self.examples(split)]

  def init(self, rng: jax.Array) -> Any:
    method = ('pretraining_logits' if self.config.data.next_sentence
              else 'mlm_logits')
    return self.model.init({'params': rng}, jnp.ones((1, 8), jnp.int32),
                           deterministic=True, method=method)['params']

  def train_iter(self, start_step: int) -> Iterator[dict[str, np.ndarray]]:
    data = self.config.data
    inputs, _, _ = self.cached_sides(data.train_split)
    batches = batching.BucketedTrainBatches(
        (inputs, inputs), max_length=data.max_length,
        tokens_per_batch=data.tokens_per_batch, seed=self.config.seed,
        start_step=start_step, row_multiple=self.batch_divisor,
        host=(jax.process_index(), jax.process_count()))
    self.rows(data.eval_split)  # a wrong split fails now, not later
    print(f'Training data: {batches.examples_per_epoch:,} sequences, '
          f'{batches.batches_per_epoch:,} batches per epoch, padding '
          f'{batches.padding_fraction:.1%}.', flush=True)
    return iter(batches)

  def train_batch_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
    """The widest length bucket's rows of one chunk (inputs = targets)."""
    return base.token_batch_shapes(self.config.data, self.batch_divisor,
                                   ('inputs', 'targets'))

  def eval_batches(self) -> Iterable[dict[str, np.ndarray]]:
    for batch in batching.padded_batches(
        self.rows(self.config.data.eval_split),
        batch_size=self.config.data.eval_rows,
        row_multiple=self.batch_divisor, max_width=self.config.data.max_length):
      yield {'inputs': batch['inputs']}

  def loss(self, params: Any, batch: dict[str, jax.Array],
           rng: jax.Array | None, *, deterministic: bool):
    if rng is None:  # evaluation: the same masks every time
      mask_key, dropout_key = jax.random.key(self.config.seed), None
    else:
      mask_key, dropout_key = jax.random.split(rng)
    if self.config.data.next_sentence:
      return self._pretraining_loss(params, batch['inputs'], mask_key,
                                    dropout_key, deterministic)
    inputs, targets = encoder.mask_tokens(
        batch['inputs'], mask_key, vocab_size=self.tokenizer.vocab_size,
        mask_id=self.mask_id, rate=self.config.data.mask_rate)
    logits = self.model.apply(
        {'params': params}, inputs, deterministic=deterministic,
        method='mlm_logits',
        rngs=None if dropout_key is None else {'dropout': dropout_key})
    sums = losses.token_sums(logits, targets, 0.0)
    sums['mlm_accuracy'] = sums.pop('accuracy')
    return losses.mean(sums), sums

  def _pretraining_loss(self, params, tokens, key, dropout_key,
                        deterministic):
    """Masked LM and next-sentence prediction on the same rows."""
    pair_key, mask_key = jax.random.split(key)
    sep = tokenization.EOS_ID  # our [SEP], as [CLS]
    pairs, labels, valid = encoder.next_sentence_pairs(tokens, pair_key,
                                                       sep_id=sep)
    inputs, targets = encoder.mask_tokens(
        pairs, mask_key, vocab_size=self.tokenizer.vocab_size,
        mask_id=self.mask_id, rate=self.config.data.mask_rate)
    logits, nsp_logits = self.model.apply(
        {'params': params}, inputs,
        token_types=encoder.pair_token_types(pairs, sep, sep),
        deterministic=deterministic, method='pretraining_logits',
        rngs=None if dropout_key is None else {'dropout': dropout_key})
    sums = losses.token_sums(logits, targets, 0.0)
    sums['mlm_accuracy'] = sums.pop('accuracy')
    _, nsp_nll = losses.smoothed_cross_entropy(nsp_logits, labels, 0.0)
    weights = valid.astype(jnp.float32)
    rows = weights.sum()
    sums['nsp_loss'] = ((nsp_nll * weights).sum(), rows)
    sums['nsp_accuracy'] = (
        ((nsp_logits.argmax(-1) == labels) * weights).sum(), rows)
    # 'loss' is the sum of the two means, kept as a (sum, count) pair over
    # the masked tokens so that micro-batches weigh it as every loss.
    total, count = sums['loss']
    sums['loss'] = (total + count * losses.mean(sums, 'nsp_loss'), count)
    return losses.mean(sums), sums

  def evaluate(self, params: Any, *, label: str) -> dict[str, float]:
    del params, label  # MLM accuracy comes from the evaluation batches
    return {}


TASK = MaskedLanguageModelingTask
