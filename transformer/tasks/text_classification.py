"""Sentence classification with the BERT encoder (e.g. SST-2 sentiment).

Sources: TFDS `glue/sst2`, local TSV files (`{split}.tsv`, lines of
`text<TAB>label`), or an offline sentiment set generated from the grammar
(`data.offline_sentiment`: the label says whether the sentence's adjectives
are mostly pleasant). Usually fine-tuned from a masked-language-model
workdir (`config.train.init_from`), whose vocabulary it then copies; the
experiment takes that workdir's model sizes into its config
(`experiments/sst2.py`).
"""

from __future__ import annotations

import functools
import os
import shutil
from typing import Any, Iterable, Iterator

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from transformer import configs
from transformer import losses
from transformer.data import batching
from transformer.data import offline_sentiment
from transformer.data import text
from transformer.data import tokenizers
from transformer.models import encoder
from transformer.tasks import base
from transformer.tasks import vocabularies

# Set by the task from the data.
MODEL_EXCLUDE = ('vocab_size', 'max_length', 'num_classes')
# Vocabulary files of each tokenizer, as a masked-LM workdir keeps them.
VOCABULARY_FILES = {'sentencepiece': 'spm.model', 'bert': 'bert_ids.json'}


def default_config() -> ml_collections.ConfigDict:
  config = configs.default_config()
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
      num_classes=2,
      # 'sentencepiece' (trained here, or copied from train.init_from) or
      # 'bert' (a converted BERT's WordPiece, copied from train.init_from)
      tokenizer='sentencepiece',
      vocab_size=1_000, max_length=64, tokens_per_batch=4_096, eval_rows=64))
  config.model = configs.model_section(
      encoder.Config, exclude=MODEL_EXCLUDE, size='tiny', dtype='float32')
  return config


def take_pretrained(config: ml_collections.ConfigDict,
                    pretrained: ml_collections.ConfigDict) -> None:
  """Gives `config` (fine-tuning from `config.train.init_from`) the model
  sizes, context and tokenizer of that masked-LM workdir's config
  `pretrained`, keeping its own dropout and dtype."""
  if pretrained.task != 'masked_language_modeling':
    raise ValueError(f'config.train.init_from={config.train.init_from} '
                     f'trained a {pretrained.task!r} task; fine-tune from a '
                     f'masked_language_modeling (experiments/bert_mlm.py) '
                     f'workdir.')
  own = dict(dropout_rate=config.model.dropout_rate, dtype=config.model.dtype)
  config.model.update(pretrained.model.to_dict())
  config.model.update(own)
  config.data.update(dict(max_length=pretrained.data.max_length,
                          tokenizer=pretrained.data.tokenizer))


def _read_tsv(path: str) -> list[tuple[str, int]]:
  """The (text, label) rows of a UTF-8 file of "text<TAB>label" lines; a
  first line whose label is not a number is a header (GLUE's)."""
  rows = [(number, line.rstrip('\r').rsplit('\t', 1))
          for number, line in enumerate(text.utf8_lines(path), 1)
          if line.strip()]
  if rows and len(rows[0][1]) == 2 and not rows[0][1][1].strip().isdigit():
    rows = rows[1:]
  bad = [number for number, row in rows
         if len(row) != 2 or not row[1].strip().isdigit()]
  if bad:
    raise ValueError(f'{path}: line {bad[0]} is not "text<TAB>label" '
                     f'with an integer label ({len(bad)} such lines).')
  return [(words, int(label)) for _, (words, label) in rows]


def read_split(data: ml_collections.ConfigDict,
               split: str) -> list[tuple[str, int]]:
  """(text, label) pairs of one split."""
  if data.source == 'offline':
    return offline_sentiment.examples(
        data.num_train if split == data.train_split else data.num_eval,
        data.seed, split)
  if data.source == 'tsv':
    path = os.path.join(data.path, f'{split}.tsv')
    if not os.path.exists(path):
      raise FileNotFoundError(
          f'{path} not found: config.data.path must hold {split}.tsv with '
          f'lines "text<TAB>label" (GLUE names its validation split dev: '
          f'set config.data.eval_split=dev).')
    return _read_tsv(path)
  if data.source == 'tfds':
    from transformer.data import tfds_source  # pylint: disable=g-import-not-at-top
    rows = tfds_source.load_features(
        data.tfds_name, split, data.tfds_data_dir or None,
        ('sentence', 'label'),
        max_examples=data.max_examples_per_split or None)
    return [(sentence, int(label)) for sentence, label in rows]
  raise ValueError(f"config.data.source={data.source!r}; choose 'offline', "
                   f"'tsv' or 'tfds'.")


class TextClassificationTask(base.Task):
  """The `transformer.tasks.Task` for sentence classification."""

  unit = 'sentences'

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *,
               batch_divisor: int = 1):
    self.config, self.workdir = config, workdir
    self.batch_divisor = batch_divisor
    self.max_length = config.data.max_length
    self.tokenizer = self._tokenizer()
    self.model = encoder.Bert(encoder.config_for(
        config.model.size, vocab_size=self.tokenizer.vocab_size + 1,
        num_classes=config.data.num_classes, max_length=self.max_length,
        dtype=jnp.dtype(config.model.dtype),
        **configs.model_overrides(config.model, encoder.Config,
                                  MODEL_EXCLUDE)))

  def _tokenizer(self):
    """With `train.init_from`, the pretrained workdir's vocabulary
    (SentencePiece, or a converted BERT's WordPiece), copied into this
    workdir; else a SentencePiece model trained on this training text."""
    data, source = self.config.data, self.config.train.init_from
    if data.tokenizer not in VOCABULARY_FILES:
      raise ValueError(f'config.data.tokenizer={data.tokenizer!r}; choose '
                       f'one of {sorted(VOCABULARY_FILES)}.')
    if data.tokenizer == 'bert' and not source:
      raise ValueError("config.data.tokenizer='bert' is a converted BERT's: "
                       "set config.train.init_from to its workdir.")

    def build(path: str) -> None:
      if os.path.exists(path):
        return
      if source:  # the whole folder: WordPiece keeps several files
        shutil.copytree(os.path.join(source, 'vocab'), os.path.dirname(path),
                        dirs_exist_ok=True)
      else:
        tokenizers.load_or_train(
            path, lambda: [t for t, _ in self.pairs(data.train_split)],
            data.vocab_size)

    path = vocabularies.in_workdir(self.workdir,
                                   VOCABULARY_FILES[data.tokenizer], build)
    if data.tokenizer == 'bert':
      return vocabularies.published_tokenizer('bert', self.workdir)
    return tokenizers.SentencePieceTokenizer(path)

  def adapt_pretrained(self, loaded: Any, params: Any,
                       source: base.Task) -> Any:
    """The encoder of a masked-LM workdir (its MLM head is not used; the
    classifier starts fresh)."""
    del params
    if source.config.task != 'masked_language_modeling':
      raise ValueError(f'config.train.init_from={source.workdir} trained a '
                       f'{source.config.task!r} task; fine-tune from a '
                       f'masked_language_modeling (experiments/bert_mlm.py) '
                       f'workdir.')
    return loaded

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
    _, nll = losses.smoothed_cross_entropy(logits, jnp.maximum(labels, 0),
                                           0.0)
    count = weights.sum()
    sums = {'loss': ((nll * weights).sum(), count),
            'accuracy': (((logits.argmax(-1) == labels) * weights).sum(),
                         count)}
    return losses.mean(sums), sums

  def attention_views(self, params: Any, text_: str
                      ) -> list[base.AttentionView]:
    """The encoder's self-attention on `text_` (the explorer's page)."""
    return base.encoder_views(self, params, text_)

  def evaluate(self, params: Any, *, label: str) -> dict[str, float]:
    del params, label  # accuracy comes from the evaluation batches
    return {}


TASK = TextClassificationTask
