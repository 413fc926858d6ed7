"""Tasks: what differs between machine translation, language modelling, ...

The trainer sees a task only through the `Task` interface below; adding a
task means adding a module here and a line to `build`, never editing the
trainer.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Callable, Iterable, Iterator, Protocol

import jax
from jax.experimental import multihost_utils
import ml_collections

from transformer import checkpoints

Batch = dict[str, Any]
# Each is a module of this package with `default_config()` and a class TASK.
TASKS = ('translation', 'language_modeling', 'masked_language_modeling',
         'text_classification', 'image_classification', 'captioning')


class Task(Protocol):
  """What the trainer needs from a task."""

  unit: str  # what the loss is counted in, for throughput ('tokens')

  def init(self, rng: jax.Array) -> Any:
    """Parameters (with logical axis metadata) for a PRNG key."""

  def train_iter(self, start_step: int) -> Iterator[Batch]:
    """Training batches from `start_step` on; the same batches for the same
    step whether or not the run was interrupted."""

  def eval_batches(self) -> Iterable[Batch]:
    """Held-out batches for the loss metrics."""

  def loss(self, params: Any, batch: Batch, rng: jax.Array | None, *,
           deterministic: bool) -> tuple[jax.Array, dict[str, Any]]:
    """Scalar training loss and metric (sum, count) pairs; pure, jittable."""

  def evaluate(self, params: Any, *, label: str) -> dict[str, float]:
    """Task metrics computed on the host (BLEU, ...); reports and plots are
    named with `label` (e.g. 'step2000', 'step2000_average5')."""


def default_config(task: str) -> ml_collections.ConfigDict:
  """Every setting of a task's experiments, at its default value."""
  return _module(task).default_config()


def build(config: ml_collections.ConfigDict, workdir: str, *,
          batch_divisor: int = 1) -> Task:
  """The task named by `config.task`.

  Args:
    config: the experiment config.
    workdir: where the task caches its vocabulary and writes reports.
    batch_divisor: batches must have a multiple of this many rows (the
      number of data-parallel shards).
  """
  module = _module(config.task)
  return module.TASK(config, workdir, batch_divisor=batch_divisor)


def workdir_vocabulary(workdir: str, filename: str,
                       build: Callable[[str], Any]) -> str:
  """The path of a task's vocabulary file, `workdir/vocab/filename`.

  Process 0 calls `build(path)` (which reuses a file already there, e.g.
  `tokenizers.load_or_train`); the other processes wait for it. A workdir
  that has checkpoints but lost its vocabulary is refused: a new one would
  not match the ids the checkpoints were trained with.
  """
  path = os.path.join(workdir, 'vocab', filename)
  if not os.path.exists(path) and checkpoints.exist(workdir):
    raise FileNotFoundError(
        f'{path} is missing but {workdir} has checkpoints: a new vocabulary '
        f'would not match them. Restore the file or use a new workdir.')
  if jax.process_index() == 0:
    build(path)
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(f'{filename} written')
  return path


def check_batch_sizes(data: ml_collections.ConfigDict, batch_divisor: int,
                      names: Iterable[str] = ('batch_size', 'eval_batch_size')
                      ) -> None:
  """Refuses batch sizes (rows) that the data-parallel shards times the
  micro-batches do not divide."""
  for name in names:
    if data[name] % batch_divisor:
      raise ValueError(
          f'config.data.{name}={data[name]} is not a multiple of '
          f'{batch_divisor} (data-parallel shards x train.microbatches); '
          f'choose a multiple.')


# Vocabularies that come with converted checkpoints (`transformer.convert`
# writes them into the workdir's vocab/ folder).
PUBLISHED_TOKENIZERS = ('marian', 'gpt2', 'bert')


def published_tokenizer(name: str, workdir: str):
  """The converted checkpoint's tokenizer kept in `workdir/vocab`."""
  from transformer.interop import vocabularies  # pylint: disable=g-import-not-at-top
  kind = {'marian': vocabularies.MarianTokenizer,
          'gpt2': vocabularies.GPT2Tokenizer,
          'bert': vocabularies.BertTokenizer}[name]
  return kind(os.path.join(workdir, 'vocab'))


def text_tokenizer(data: ml_collections.ConfigDict, workdir: str,
                   texts: Callable[[], Iterable[str]]):
  """The tokenizer `data.tokenizer` names ('byte', 'char', 'word' or
  'sentencepiece' of `data.vocab_size` pieces of `data.tokenizer_model_type`),
  its vocabulary built from `texts()` once and kept in the workdir, or a
  converted checkpoint's (`PUBLISHED_TOKENIZERS`)."""
  from transformer.data import tokenizers  # pylint: disable=g-import-not-at-top
  if data.tokenizer in PUBLISHED_TOKENIZERS:
    return published_tokenizer(data.tokenizer, workdir)
  if data.tokenizer == 'byte':
    return tokenizers.ByteTokenizer()
  files = {'char': 'chars.json', 'word': 'words.json',
           'sentencepiece': 'spm.model'}
  if data.tokenizer not in files:
    raise ValueError(f"config.data.tokenizer={data.tokenizer!r}; choose "
                     f"'byte' or one of {sorted(files)} (or, for converted "
                     f"checkpoints, {PUBLISHED_TOKENIZERS}).")
  vocabularies = {'char': tokenizers.CharTokenizer,
                  'word': tokenizers.WordTokenizer}
  if data.tokenizer in vocabularies:
    kind = vocabularies[data.tokenizer]
    return kind(workdir_vocabulary(
        workdir, files[data.tokenizer],
        lambda path: kind.load_or_build(path, texts)))
  return tokenizers.SentencePieceTokenizer(workdir_vocabulary(
      workdir, files[data.tokenizer],
      lambda path: tokenizers.load_or_train(
          path, texts, data.vocab_size,
          model_type=data.tokenizer_model_type)))


def _module(task: str):
  """The module of a task, imported only when that task is used."""
  if task not in TASKS:
    raise ValueError(f'Unknown config.task {task!r}; available: '
                     f'{sorted(TASKS)}.')
  return importlib.import_module(f'transformer.tasks.{task}')
