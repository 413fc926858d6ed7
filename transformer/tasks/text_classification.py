"""Sentence classification with the BERT encoder (e.g. SST-2 sentiment).

Sources: TFDS `glue/sst2`, local TSV files (`{split}.tsv`, lines of
`text<TAB>label`), or an offline sentiment set generated from the grammar
(the label says whether the sentence's adjectives are mostly pleasant).
Usually fine-tuned from a masked-language-model workdir
(`config.train.init_from`), whose vocabulary it then reuses.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
from typing import Any, Iterable, Iterator

import jax
import jax.numpy as jnp
import ml_collections
from ml_collections import config_dict
import numpy as np

from transformer import layers
from transformer import metrics
from transformer import tasks
from transformer import train
from transformer.data import batching
from transformer.data import offline_mt
from transformer.data import tokenizers
from transformer.models import encoder

MODEL_FIELDS = dict(num_layers=int, d_model=int, num_heads=int, d_ff=int,
                    dropout_rate=float, activation=str,
                    layer_norm_epsilon=float, type_vocab_size=int,
                    attention_implementation=str,
                    **layers.MEMORY_FIELDS)
# Adjectives of the offline grammar with a polarity; the rest are neutral.
PLEASANT = frozenset('beautiful happy rich famous clean sweet bright brave '
                     'clever funny strong'.split())
UNPLEASANT = frozenset('ugly sad poor strange dirty angry weak tired hungry '
                       'lazy empty'.split())


def default_config() -> ml_collections.ConfigDict:
  config = train.default_config()
  config.task = 'text_classification'
  config.train.label_smoothing = 0.0
  # BERT's optimiser (Devlin et al.): AdamW (0.9, 0.999, 1e-6), weight decay
  # 0.01, warmup then decay; gradients clipped at 1.
  config.optimizer.update(dict(schedule='cosine', learning_rate=1e-3,
                               b2=0.999, eps=1e-6, weight_decay=0.01,
                               grad_clip_norm=1.0))
  config.data = ml_collections.ConfigDict(dict(
      source='offline',  # 'offline' | 'tsv' | 'tfds'
      train_split='train', eval_split='validation',
      num_train=10_000, num_eval=500, seed=0,  # offline
      path='',  # tsv: folder of {split}.tsv
      tfds_name='glue/sst2', tfds_data_dir='', max_examples_per_split=0,
      num_classes=2, vocab_size=1_000, max_length=64,
      tokens_per_batch=4_096, eval_rows=64))
  config.model = ml_collections.ConfigDict(dict(
      size='tiny', dtype='float32',
      **{field: config_dict.placeholder(kind)
         for field, kind in MODEL_FIELDS.items()}))
  return config


def offline_sentiment(num_examples: int, seed: int,
                      split: str) -> list[tuple[str, int]]:
  """Generated sentences labelled 1 when they hold more pleasant than
  unpleasant adjectives (ties and sentences without either are skipped):
  the label depends on words anywhere in the sentence."""
  rng = random.Random(f'sentiment:{split}:{seed}')
  examples = []
  while len(examples) < num_examples:
    sentence = offline_mt.sample_sentence(rng).english()
    words = sentence.split()
    score = sum(w in PLEASANT for w in words) - sum(w in UNPLEASANT
                                                    for w in words)
    if score:
      examples.append((sentence, int(score > 0)))
  return examples


def read_split(data: ml_collections.ConfigDict,
               split: str) -> list[tuple[str, int]]:
  """(text, label) pairs of one split."""
  if data.source == 'offline':
    return offline_sentiment(
        data.num_train if split == data.train_split else data.num_eval,
        data.seed, split)
  if data.source == 'tsv':
    path = os.path.join(data.path, f'{split}.tsv')
    if not os.path.exists(path):
      raise FileNotFoundError(
          f'{path} not found: config.data.path must hold {split}.tsv with '
          f'lines "text<TAB>label" (GLUE names its validation split dev: '
          f'set config.data.eval_split=dev).')
    with open(path, encoding='utf-8') as f:
      rows = [line.rstrip('\n').rsplit('\t', 1) for line in f if line.strip()]
    if rows and len(rows[0]) == 2 and not rows[0][1].strip().isdigit():
      rows = rows[1:]  # a header such as GLUE's "sentence<TAB>label"
    bad = [i for i, row in enumerate(rows) if len(row) != 2 or
           not row[1].strip().isdigit()]
    if bad:
      raise ValueError(f'{path}: line {bad[0] + 1} is not "text<TAB>label" '
                       f'with an integer label ({len(bad)} such lines).')
    return [(text, int(label)) for text, label in rows]
  if data.source == 'tfds':
    from transformer.data import tfds_source  # pylint: disable=g-import-not-at-top
    return [(text, int(label)) for text, label in tfds_source.load_features(
        data.tfds_name, split, data.tfds_data_dir or None,
        ('sentence', 'label'),
        max_examples=data.max_examples_per_split or None)]
  raise ValueError(f"config.data.source={data.source!r}; choose 'offline', "
                   f"'tsv' or 'tfds'.")


class TextClassificationTask:
  """The `transformer.tasks.Task` for sentence classification."""

  unit = 'sentences'

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *,
               batch_divisor: int = 1):
    self.config, self.workdir = config, workdir
    self.batch_divisor = batch_divisor
    # Fine-tuning takes the model sizes, context and vocabulary of the
    # pretrained workdir, so that every one of its parameters fits.
    source = config.train.init_from
    self.source_config = train.load_config(source) if source else None
    if self.source_config and (self.source_config.task !=
                               'masked_language_modeling'):
      raise ValueError(f'config.train.init_from={source} trained a '
                       f'{self.source_config.task!r} task; fine-tune from a '
                       f'masked_language_modeling (experiments/bert_mlm.py) '
                       f'workdir.')
    model_cfg = (self.source_config or config).model
    self.max_length = (self.source_config or config).data.max_length
    self.tokenizer = self._tokenizer()
    overrides = {k: model_cfg[k] for k in MODEL_FIELDS
                 if model_cfg.get(k) is not None}
    if self.source_config:  # the task's own dropout applies
      overrides['dropout_rate'] = config.model.dropout_rate
    self.model = encoder.Bert(encoder.config_for(
        model_cfg.size, vocab_size=self.tokenizer.vocab_size + 1,
        num_classes=config.data.num_classes, max_length=self.max_length,
        dtype=jnp.dtype(config.model.dtype), **overrides))

  def _tokenizer(self):
    """The pretrained workdir's SentencePiece model (or a converted BERT's
    WordPiece) when fine-tuning, else one trained on this training text."""
    if self.source_config and self.source_config.data.tokenizer == 'bert':
      source = os.path.join(self.config.train.init_from, 'vocab')

      def copy(path: str) -> None:
        if not os.path.exists(path):
          shutil.copytree(source, os.path.dirname(path), dirs_exist_ok=True)

      tasks.workdir_vocabulary(self.workdir, 'bert_ids.json', copy)
      return tasks.published_tokenizer('bert', self.workdir)
    if self.source_config and (self.source_config.data.tokenizer !=
                               'sentencepiece'):
      raise ValueError(
          f'{self.config.train.init_from} uses a '
          f'{self.source_config.data.tokenizer!r} tokenizer; text '
          f'classification fine-tunes SentencePiece models.')

    def build(path: str) -> None:
      if not self.source_config:
        tokenizers.load_or_train(
            path, lambda: [t for t, _ in self.pairs(
                self.config.data.train_split)], self.config.data.vocab_size)
      elif not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.copy(os.path.join(self.config.train.init_from, 'vocab',
                                 'spm.model'), path)

    return tokenizers.SentencePieceTokenizer(
        tasks.workdir_vocabulary(self.workdir, 'spm.model', build))

  @functools.cache
  def pairs(self, split: str) -> list[tuple[str, int]]:
    pairs = read_split(self.config.data, split)
    labels = {label for _, label in pairs}
    if not labels <= set(range(self.config.data.num_classes)):
      raise ValueError(f'Labels {sorted(labels)} of split {split!r} are '
                       f'outside [0, config.data.num_classes='
                       f'{self.config.data.num_classes}).')
    return pairs

  @functools.cache
  def examples(self, split: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Token rows ([EOS] in the place of [CLS]) and label + 1 as the target
    (so that 0 stays padding)."""
    limit = self.max_length - 1
    pairs = self.pairs(split)
    ids = self.tokenizer.encode_batch([t for t, _ in pairs], add_eos=False)
    return [(np.asarray([tokenizers.EOS_ID] + i[:limit], np.int32),
             np.asarray([label + 1], np.int32))
            for i, (_, label) in zip(ids, pairs)]

  def init(self, rng: jax.Array) -> Any:
    return self.model.init({'params': rng}, jnp.ones((1, 8), jnp.int32),
                           deterministic=True, method='classify')['params']

  def train_iter(self, start_step: int) -> Iterator[dict[str, np.ndarray]]:
    data = self.config.data
    batches = batching.BucketedTrainBatches(
        self.examples(data.train_split), max_length=self.max_length,
        tokens_per_batch=data.tokens_per_batch, seed=self.config.seed,
        start_step=start_step, row_multiple=self.batch_divisor)
    self.examples(data.eval_split)  # a wrong split fails now, not later
    print(f'Training data: {batches.examples_per_epoch:,} sentences, '
          f'{batches.batches_per_epoch:,} batches per epoch.', flush=True)
    return iter(batches)

  def eval_batches(self) -> Iterable[dict[str, np.ndarray]]:
    for batch in batching.padded_batches(
        self.examples(self.config.data.eval_split),
        batch_size=self.config.data.eval_rows,
        row_multiple=self.batch_divisor, max_width=self.max_length):
      yield {'inputs': batch['inputs'], 'targets': batch['targets']}

  def loss(self, params: Any, batch: dict[str, jax.Array],
           rng: jax.Array | None, *, deterministic: bool):
    logits = self.model.apply(
        {'params': params}, batch['inputs'], deterministic=deterministic,
        method='classify', rngs=None if rng is None else {'dropout': rng})
    labels = batch['targets'][:, 0] - 1  # -1 for filler rows
    weights = (labels >= 0).astype(jnp.float32)
    _, nll = metrics.smoothed_cross_entropy(logits, jnp.maximum(labels, 0),
                                            0.0)
    count = weights.sum()
    sums = {'loss': ((nll * weights).sum(), count),
            'accuracy': (((logits.argmax(-1) == labels) * weights).sum(),
                         count)}
    return sums['loss'][0] / jnp.maximum(count, 1.0), sums

  def evaluate(self, params: Any, *, label: str) -> dict[str, float]:
    del params, label  # accuracy comes from the evaluation batches
    return {}


TASK = TextClassificationTask
