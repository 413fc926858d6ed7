"""Sentence and sentence-pair classification and regression with the BERT
encoder: SST-2 sentiment and every GLUE task.

Sources: with `data.glue_task` empty, single sentences from TFDS
`glue/sst2`, local TSV files (`{split}.tsv`, lines of `text<TAB>label`) or
an offline sentiment set generated from the grammar
(`data.offline_sentiment`: the label says whether the sentence's adjectives
are mostly pleasant); with `data.glue_task` a GLUE task (`data.glue`: CoLA,
SST-2, MRPC, QQP, STS-B, MNLI, QNLI, RTE, WNLI) from TFDS `glue/*` or the
official TSV files, or an offline pair task ('entailment', 'paraphrase').
A pair is read as BERT reads it, `[CLS] a [SEP] b [SEP]` with token types
0 up to the first [SEP] and 1 after it ([CLS] is our EOS, and so is [SEP]
unless the vocabulary has its own, as a converted BERT's does), the longer
sentence cut first to fit `max_length`. STS-B (one output) is regression
on its [0, 5] score. Evaluation reports the task's GLUE metrics (Matthews
correlation, F1, Pearson and Spearman, MNLI's mismatched accuracy). Usually fine-tuned from a masked-language-model
workdir (`config.train.init_from`), whose vocabulary it then copies; the
experiment takes that workdir's model sizes into its config
(`experiments/sst2.py`).
"""

from __future__ import annotations

import functools
import os
import shutil
from typing import Any, Callable, Iterable, Iterator

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from transformer import configs
from transformer import metrics
from transformer import storage
from transformer.core import losses
from transformer.core import ranges
from transformer.data import batching
from transformer.data import glue
from transformer.data import sources
from transformer.data import tokenization
from transformer.models import encoder
from transformer.tasks import base
from transformer.tasks import vocabularies

# The kind of examples the task reads (`data.sources`).
DATA_KIND = 'labelled_text'

# Set by the task from the data.
MODEL_EXCLUDE = ('vocab_size', 'max_length', 'num_classes')
# Vocabulary files of each tokenizer, as a masked-LM workdir keeps them.
VOCABULARY_FILES = {'sentencepiece': 'spm.model', 'bert': 'bert_ids.json'}
Row = tuple[str, 'str | None', float]
# The tasks whose workdirs fine-tuning starts from: BERT pretraining, or a
# classifier (a converted BertForSequenceClassification, or one of ours).
PRETRAINED_TASKS = ('masked_language_modeling', 'text_classification')
STARTS_FROM = PRETRAINED_TASKS  # `tasks.check_init_from`


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
      # A GLUE task (data.glue.TASKS: 'cola', 'mrpc', 'stsb', 'mnli', ...)
      # or an offline pair task ('entailment', 'paraphrase'); '': single
      # sentences as below. Sets num_classes.
      glue_task='',
      tfds_name='glue/sst2', tfds_data_dir='', max_examples_per_split=0,
      num_classes=2,
      # Names of the classes, in label order ([] : their numbers), e.g. a
      # converted classifier's id2label; `predict` prints them.
      class_names=[],
      # 'sentencepiece' (trained here, or copied from train.init_from) or
      # 'bert' (a converted BERT's WordPiece, copied from train.init_from)
      tokenizer='sentencepiece',
      vocab_size=1_000, max_length=64, tokens_per_batch=4_096, eval_rows=64,
      # > 0: training batches of this many rows whatever their length (as
      # fine-tuning recipes count batches) instead of tokens_per_batch.
      batch_rows=0,
      # Batch widths are multiples of this: fewer widths, fewer compiled
      # steps (a 6-layer encoder compiles in about 11 s on 2 CPU cores).
      length_multiple=8))
  config.model = configs.model_section(
      encoder.Config, exclude=MODEL_EXCLUDE, size='tiny', dtype='float32')
  return config


def take_pretrained(config: ml_collections.ConfigDict,
                    pretrained: ml_collections.ConfigDict) -> None:
  """Gives `config` (fine-tuning from `config.train.init_from`) the model
  sizes, context and tokenizer of that masked-LM or classifier workdir's
  config `pretrained`, keeping its own dropout and dtype."""
  check_pretrained_task(config.train.init_from, pretrained.task)
  own = dict(dropout_rate=config.model.dropout_rate, dtype=config.model.dtype)
  config.model.update(pretrained.model.to_dict())
  config.model.update(own)
  config.data.update(dict(max_length=pretrained.data.max_length,
                          tokenizer=pretrained.data.tokenizer))


def restore_config(config: ml_collections.ConfigDict,
                   load_config: Callable[[str], ml_collections.ConfigDict]
                   ) -> None:
  """Text classification once took the model, context and tokenizer of
  its `train.init_from` workdir when it was built, not from its own config;
  workdirs written then restore with them, as they trained. Its generated
  pair tasks read as generated whatever the source (now refused). (Experiments
  now copy them into the config, and may then set their own context, e.g.
  128 tokens from BERT's 512: theirs is left as it is.)"""
  if config.data.glue_task in glue.OFFLINE:
    # Generated pair tasks were once generated whatever the source said.
    config.data.source = 'offline'
  source = config.train.init_from
  if source and storage.exists(storage.join(source, 'config.json')):
    pretrained = load_config(source)
    copied = all(config.model.get(key) == value
                 for key, value in pretrained.model.items()
                 if key not in ('dropout_rate', 'dtype'))
    if pretrained.task == 'masked_language_modeling' and not copied:
      take_pretrained(config, pretrained)


def check_pretrained_task(source: str, task: str | None = None) -> None:
  """Refuses a `train.init_from` workdir that did not train a task this one
  fine-tunes from (a masked LM or a classifier), naming the task it
  trained; `task` is read from its config.json where not given."""
  if task is None:
    try:
      task = base.trained_task(source)
    except (OSError, ValueError) as e:
      raise type(e)(f'config.train.init_from={source}: {e}') from None
  base.check_starts_from(source, task, 'text_classification', STARTS_FROM)


def truncate_pair(a: list[int], b: list[int], limit: int
                  ) -> tuple[list[int], list[int]]:
  """Cuts the longer of the two (a on ties) one token at a time until both
  fit in `limit` tokens together, as BERT's `_truncate_seq_pair`."""
  a, b = list(a), list(b)
  while len(a) + len(b) > limit:
    (a if len(a) >= len(b) else b).pop()
  return a, b


# STS-B scores travel as integer targets: round(score * SCALE) + 1.
REGRESSION_SCALE = 1000


class TextClassificationTask(base.Task):
  """The `transformer.tasks.Task` for sentence classification."""

  unit = 'sentences'

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *,
               batch_divisor: int = 1, shapes_only: bool = False):
    self.config, self.workdir = config, workdir
    self.batch_divisor = batch_divisor
    ranges.check('config.data.batch_rows', config.data.batch_rows, low=0,
                 why=' (0: batches of tokens_per_batch tokens)')
    base.check_batch_sizes(config.data, batch_divisor, ('batch_rows',))
    self.max_length = config.data.max_length
    self.glue = glue.spec(config.data.glue_task) if config.data.glue_task \
        else None
    # What the progress line, TensorBoard and the data line count.
    self.unit = 'pairs' if self.glue is not None and self.glue.pair else (
        'sentences')
    self.num_classes = (self.glue.num_classes if self.glue
                        else config.data.num_classes)
    self.tokenizer = (vocabularies.stand_in(config.data) if shapes_only
                      else self._tokenizer())
    # [SEP]: the vocabulary's own (a converted BERT's), else EOS.
    self.sep_id = getattr(self.tokenizer, 'sep_id', tokenization.EOS_ID)
    self.model_config = encoder.config_for(
        config.model.size, vocab_size=self.tokenizer.vocab_size + 1,
        num_classes=self.num_classes, max_length=self.max_length,
        dtype=jnp.dtype(config.model.dtype),
        **configs.model_overrides(config.model, encoder.Config,
                                  MODEL_EXCLUDE))
    self.model = encoder.build(self.model_config)

  def _tokenizer(self):
    """With `train.init_from`, the pretrained workdir's vocabulary
    (SentencePiece, or a converted BERT's WordPiece), copied into this
    workdir; else a SentencePiece model trained on this training text."""
    data, source = self.config.data, self.config.train.init_from
    if data.tokenizer not in VOCABULARY_FILES:
      raise ValueError(f'config.data.tokenizer={data.tokenizer!r}; choose '
                       f'one of {sorted(VOCABULARY_FILES)}.')
    own = storage.exists(storage.join(self.workdir, 'vocab',
                                  VOCABULARY_FILES['bert']))
    if data.tokenizer == 'bert' and not source and not own:
      raise ValueError("config.data.tokenizer='bert' is a converted BERT's: "
                       "set config.train.init_from to its workdir.")

    def build(path: str) -> None:
      if os.path.exists(path):
        return
      if source:  # the whole folder: WordPiece keeps several files
        check_pretrained_task(source)  # before its files are looked for
        shutil.copytree(os.path.join(source, 'vocab'), os.path.dirname(path),
                        dirs_exist_ok=True)
      else:
        tokenization.load_or_train(
            path, lambda: [t for a, b, _ in self.rows(data.train_split)
                           for t in (a, b) if t is not None],
            data.vocab_size)

    path = vocabularies.in_workdir(self.workdir,
                                   VOCABULARY_FILES[data.tokenizer], build)
    if data.tokenizer == 'bert':
      return vocabularies.published_tokenizer('bert', self.workdir)
    return tokenization.SentencePieceTokenizer(path)

  def adapt_pretrained(self, loaded: Any, params: Any,
                       source: base.Task) -> Any:
    """The encoder of a masked-LM workdir (its MLM head is not used; the
    classifier starts fresh) or of a text-classification one (a converted
    classifier: its head kept when the classes are as many); the position
    table cut to this task's `max_length` (BERT's 512 positions when rows
    are 128 tokens)."""
    check_pretrained_task(source.workdir, source.config.task)
    loaded = dict(loaded)
    table = loaded['positions']['embedding']
    if len(table) > self.max_length:
      loaded['positions'] = {'embedding': table[:self.max_length]}
    head = loaded.get('classifier')
    if head is not None and head['kernel'].shape != params[
        'classifier']['kernel'].shape:
      print(f'The classifier of {source.workdir} has '
            f'{head["kernel"].shape[-1]} outputs, this task '
            f'{self.num_classes}: it starts fresh.', flush=True)
      del loaded['classifier']
    return loaded

  @functools.cache
  def rows(self, split: str) -> list[Row]:
    data = self.config.data
    rows = sources.read('labelled_text', data, split)
    if not rows:
      # Training on nothing fails later; a score over nothing (accuracy
      # or Matthews 0) would look like a result.
      where = (f', config.data.path={data.path}' if data.get('path')
               else '')
      raise ValueError(
          f'The {split!r} split of config.data.source={data.source!r}'
          f'{where} has no rows: nothing to train on or to score. Give a '
          f'file with rows, or another split.')
    if self.num_classes > 1:
      labels = {label for *_, label in rows}
      if not labels <= set(range(self.num_classes)):
        raise ValueError(f'Labels {sorted(labels)} of split {split!r} are '
                         f'outside [0, num_classes={self.num_classes}).')
    return rows

  @functools.cache
  def examples(self, split: str) -> list[tuple[np.ndarray, np.ndarray]]:
    return self.encode(self.rows(split))

  def encode(self, rows: list[Row]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Token rows ([EOS] in the place of [CLS]; pairs as `[CLS] a [SEP] b
    [SEP]`; a single sentence ends with [SEP] too where the vocabulary has
    its own, as BERT reads it) and the label + 1 as the target (so that 0
    stays padding; a regression score scaled by REGRESSION_SCALE)."""
    first = self.tokenizer.encode_batch([a for a, _, _ in rows],
                                        add_eos=False)
    second = self.tokenizer.encode_batch([b or '' for _, b, _ in rows],
                                         add_eos=False)
    sep = [self.sep_id]
    end = sep if self.sep_id != tokenization.EOS_ID else []
    tokens = []
    for a, b, (_, pair, _) in zip(first, second, rows):
      if pair is None:
        tokens.append([tokenization.EOS_ID] + a[:self.max_length - 1 - len(end)]
                      + end)
      else:
        a, b = truncate_pair(a, b, self.max_length - 3)
        tokens.append([tokenization.EOS_ID] + a + sep + b + sep)
    scale = REGRESSION_SCALE if self.num_classes == 1 else 1
    return [(np.asarray(t, np.int32),
             np.asarray([round(label * scale) + 1], np.int32))
            for t, (_, _, label) in zip(tokens, rows)]

  def _types(self, tokens: jax.Array) -> jax.Array:
    """Token types: 1 for a pair's second sentence, else 0."""
    return encoder.pair_token_types(tokens, self.sep_id, tokenization.EOS_ID)

  def init(self, rng: jax.Array) -> Any:
    return self.model.init({'params': rng}, jnp.ones((1, 8), jnp.int32),
                           deterministic=True, method='classify')['params']

  def train_iter(self, start_step: int) -> Iterator[dict[str, np.ndarray]]:
    data = self.config.data
    batches = batching.BucketedTrainBatches(
        self.examples(data.train_split), max_length=self.max_length,
        tokens_per_batch=data.tokens_per_batch, seed=self.config.seed,
        start_step=start_step, row_multiple=self.batch_divisor,
        rows_per_batch=data.batch_rows, length_multiple=data.length_multiple)
    self.examples(data.eval_split)  # a wrong split fails now, not later
    print(f'Training data: {batches.examples_per_epoch:,} {self.unit}, '
          f'{batches.batches_per_epoch:,} batches per epoch.', flush=True)
    return iter(batches)

  def train_batch_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
    """The widest length bucket's rows of one example."""
    return base.token_batch_shapes(self.config.data, self.batch_divisor,
                                   ('inputs', 'targets'),
                                   self.config.data.batch_rows)

  def eval_batches(self) -> Iterable[dict[str, np.ndarray]]:
    for batch in batching.padded_batches(
        self.examples(self.config.data.eval_split),
        batch_size=self.config.data.eval_rows,
        row_multiple=self.batch_divisor, max_width=self.max_length,
        length_multiple=self.config.data.length_multiple):
      yield {'inputs': batch['inputs'], 'targets': batch['targets']}

  def loss(self, params: Any, batch: dict[str, jax.Array],
           rng: jax.Array | None, *, deterministic: bool):
    logits = self.model.apply(
        {'params': params}, batch['inputs'],
        token_types=self._types(batch['inputs']),
        deterministic=deterministic, method='classify',
        rngs=None if rng is None else {'dropout': rng})
    targets = batch['targets'][:, 0] - 1  # -1 for filler rows
    weights = (targets >= 0).astype(jnp.float32)
    count = weights.sum()
    if self.num_classes == 1:  # STS-B: squared error on the score
      error = (logits[:, 0] - targets / REGRESSION_SCALE) ** 2
      sums = {'loss': ((error * weights).sum(), count)}
      return losses.mean(sums), sums
    _, nll = losses.smoothed_cross_entropy(logits, jnp.maximum(targets, 0),
                                           0.0)
    sums = {'loss': ((nll * weights).sum(), count),
            'accuracy': (((logits.argmax(-1) == targets) * weights).sum(),
                         count)}
    return losses.mean(sums), sums

  @functools.cached_property
  def _scores(self):
    def scores(params, tokens):
      logits = self.model.apply({'params': params}, tokens,
                                token_types=self._types(tokens),
                                deterministic=True, method='classify')
      return logits if self.num_classes == 1 else jax.nn.softmax(logits)
    return jax.jit(scores)

  def scores(self, params: Any, rows: list[Row]) -> np.ndarray:
    """[len(rows), C] class probabilities of (sentence a, sentence b or
    None, label) rows, or [len(rows), 1] regression scores."""
    examples = self.encode(rows)
    scores = np.zeros((len(examples), self.num_classes), np.float64)
    for batch in batching.padded_batches(
        examples, batch_size=self.config.data.eval_rows,
        row_multiple=self.batch_divisor, max_width=self.max_length,
        length_multiple=self.config.data.length_multiple):
      kept = batch['index'] >= 0
      scores[batch['index'][kept]] = np.asarray(
          self._scores(params, batch['inputs']))[kept]
    return scores

  @property
  def class_names(self) -> list[str]:
    """The config's, a GLUE task's label names, or the labels' numbers."""
    names = list(self.config.data.class_names)
    if not names and self.glue is not None:
      names = list(self.glue.label_names)
    return names or [str(i) for i in range(self.num_classes)]

  def predict(self, params: Any, split: str) -> np.ndarray:
    """The model's label (or STS-B score) for every row of `split`."""
    scores = self.scores(params, self.rows(split))
    return scores[:, 0] if self.num_classes == 1 else scores.argmax(-1)

  def evaluate(self, params: Any, *, label: str) -> dict[str, float]:
    """A GLUE or pair task's metrics (Matthews, F1, Pearson, Spearman, as
    fractions like the batches' accuracy) on the evaluation split, and
    MNLI's accuracy on the mismatched one; single sentences report the
    batches' accuracy only."""
    del label
    if self.glue is None:
      return {}
    data = self.config.data
    splits = {'': data.eval_split}
    for name, tfds_split, tsv_split in self.glue.extra_eval:
      splits[f'_{name}'] = tsv_split if data.source == 'tsv' else tfds_split
    result = {}
    for suffix, split in splits.items():
      predictions = self.predict(params, split)
      labels = np.asarray([label for *_, label in self.rows(split)])
      for metric in self.glue.metrics:
        if metric != 'accuracy' or suffix:
          result[f'{metric}{suffix}'] = metrics.SCORES[metric](predictions,
                                                              labels)
    return result


TASK = TextClassificationTask
