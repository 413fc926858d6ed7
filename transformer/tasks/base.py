"""The interface between the trainer and a task, and what tasks share.

The trainer (and `workdir.restore`) see a task only through `Task`; task
classes subclass it, which gives them the default `adapt_pretrained`.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

import jax
import ml_collections

from transformer import storage
from transformer.core import ranges
from transformer.data import batching
from transformer.data import token_cache
from transformer.tasks import vocabularies

Batch = dict[str, Any]


class Task(Protocol):
  """What the trainer needs from a task.

  A task is built as `TaskClass(config, workdir, batch_divisor=...,
  shapes_only=False)`: every batch it yields has a multiple of
  `batch_divisor` rows (the data-parallel shards times the micro-batches).
  With `shapes_only=True` it reads no data and builds no vocabulary (text
  tasks take `vocabularies.StandIn`, a vocabulary of `data.vocab_size`
  ids): its model, `init`, `loss` and `train_batch_shapes` are what
  `transformer.plan` compiles for a TPU topology; it cannot train.
  """

  unit: str  # what the loss is counted in, for throughput ('tokens')
  config: ml_collections.ConfigDict
  workdir: str  # where its vocabulary, reports and plots go

  def init(self, rng: jax.Array) -> Any:
    """Parameters (with logical axis metadata) for a PRNG key."""

  def train_iter(self, start_step: int) -> Iterator[Batch]:
    """Training batches from `start_step` on; the same batches for the same
    step whether or not the run was interrupted."""

  def eval_batches(self) -> Iterable[Batch]:
    """Held-out batches for the loss metrics."""

  def train_batch_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
    """The global shape and dtype of every array of a training batch, from
    the config alone; where batches vary (length buckets), the widest, as
    `train_iter` yields it (tests check the two agree)."""

  def loss(self, params: Any, batch: Batch, rng: jax.Array | None, *,
           deterministic: bool) -> tuple[jax.Array, dict[str, Any]]:
    """Scalar training loss and metric (sum, count) pairs; pure, jittable."""

  def search_program(self) -> tuple[Callable[..., Any],
                                    dict[str, jax.ShapeDtypeStruct]] | None:
    """For a task whose evaluation decodes: `(search, arrays)`, the
    search it runs, `search(params, **arrays)`, and its inputs' shapes at
    the experiment's evaluation batch and beam (what a plan compiles
    beside the train step); None for tasks that do not decode."""
    return None

  def evaluate(self, params: Any, *, label: str) -> dict[str, float]:
    """Task metrics computed on the host (BLEU, ...); reports are named
    with `label` (e.g. 'step2000', 'step2000_average5'), and what is worth
    a figure goes to `write_figures`."""

  def write_figures(self, params: Any, label: str, **evaluated: Any
                    ) -> list[str]:
    """Figures of what an evaluation `evaluated` (the task's own keywords):
    none here; the trainer wires in
    `insight.attention_figures.evaluation_figures`, which draws them, so
    that tasks hold no plotting."""
    del params, label, evaluated
    return []

  def adapt_pretrained(self, loaded: Any, params: Any, source: Task) -> Any:
    """The parameters `loaded` from the workdir of `source` (the task it was
    trained with) made to fit this task's `params` before the trainer
    copies every array of the same path and shape
    (`config.train.init_from`): e.g. position embeddings resampled for a new
    resolution, or a head dropped. By default unchanged."""
    del params, source
    return loaded


def check_starts_from(source: str, trained: str, task: str,
                      fits: Sequence[str]) -> None:
  """Refuses a `train.init_from` workdir (`source`) that trained a task
  (`trained`) which `task` does not start from (`fits`), naming both."""
  if trained not in fits:
    raise ValueError(f'config.train.init_from={source} is a {trained!r} '
                     f'workdir; {task} starts from a {" or ".join(fits)} '
                     f'workdir.')


def trained_task(workdir: str) -> str:
  """The task a workdir's config.json names (read here, below the module
  that reads whole workdirs, `transformer.workdir`, which builds tasks)."""
  path = storage.join(workdir, 'config.json')
  if not storage.exists(path):
    raise FileNotFoundError(f'{path} not found: {workdir} is not a training '
                            f'workdir.')
  return storage.read_record(path, lambda saved: '' if isinstance(
      saved, dict) and isinstance(saved.get('task'), str) else
                           'not an experiment config (no "task")')['task']


def batch_shapes(rows: int, **arrays: tuple[tuple[int, ...], Any]
                 ) -> dict[str, jax.ShapeDtypeStruct]:
  """{name: ShapeDtypeStruct} of a batch of `rows` rows, from each array's
  shape after the row axis and its dtype (as jax holds it: int64 labels
  become int32)."""
  return {name: jax.ShapeDtypeStruct((rows, *shape),
                                     jax.dtypes.canonicalize_dtype(dtype))
          for name, (shape, dtype) in arrays.items()}


def token_batch_shapes(data: ml_collections.ConfigDict, row_multiple: int,
                       keys: Iterable[str], rows_per_batch: int = 0
                       ) -> dict[str, jax.ShapeDtypeStruct]:
  """int32 [R, max_length] arrays `keys` of a token-counted batch at its
  widest (`batching.rows_of_width`): packed rows, or length buckets'."""
  rows = batching.rows_of_width(data.max_length,
                                tokens_per_batch=data.tokens_per_batch,
                                row_multiple=row_multiple,
                                rows_per_batch=rows_per_batch)
  return batch_shapes(rows, **{key: ((data.max_length,), 'int32')
                               for key in keys})


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


# config.data fields that count rows, tokens or examples, where a task has
# them: 0 would divide by zero or read nothing.
_COUNTS = ('batch_size', 'eval_batch_size', 'eval_rows', 'tokens_per_batch')


def _is_number(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_data(config: ml_collections.ConfigDict) -> None:
  """Refuses data settings (and evaluation settings, `check_eval`) that
  cannot mean anything, naming the field and its range, before a task
  reads data or builds a model."""
  seeds = {'config.seed': config.seed,
           'config.data.seed': config.data.get('seed', 0)}
  for name, value in seeds.items():
    if _is_number(value):
      ranges.check(name, value, low=0)
  data = config.data
  for name in _COUNTS:
    if _is_number(data.get(name)):
      ranges.check(f'config.data.{name}', data[name], low=1)
  if _is_number(data.get('max_length')):
    ranges.check('config.data.max_length', data.max_length, low=2,
                 why=': a sequence holds a token and the end-of-sequence (or '
                 'start) symbol')
  if data.get('source') == 'offline' and _is_number(data.get('num_train')):
    ranges.check('config.data.num_train', data.num_train, low=1,
                 why=': the offline data would have no training examples')
  check_eval(config)


# config.eval fields, where a task has them, and their ranges (keywords of
# `ranges.check`): a value outside would fail only in the evaluation at the
# end of training, or mean nothing there.
_EVAL_RANGES = {
    'average_checkpoints': dict(low=1),
    'beam_size': dict(low=1),
    'length_penalty': dict(low=0),  # 0: no length normalisation
    'max_length_offset': dict(low=0),
    'max_new_tokens': dict(low=1),
    'temperature': dict(low=0, low_in=False),
    'top_k': dict(low=0),  # 0: no top-k cut
    'top_p': dict(low=0, low_in=False, high=1, high_in=True),
    'sample_seed': dict(low=0),
    'plot_example': dict(low=-1),  # -1: no plot
    # Counts of examples printed, plotted or scored; 0: none (or all, for
    # num_bleu_examples and num_examples).
    **{name: dict(low=0) for name in (
        'num_bleu_examples', 'num_examples', 'num_print', 'num_plots',
        'retrieval_images')},
}


def _bleu_tokenizers() -> tuple[str, ...]:
  import sacrebleu  # pylint: disable=g-import-not-at-top
  return tuple(sacrebleu.BLEU.TOKENIZERS)


# config.eval fields with a set of values: the function that gives them.
_EVAL_CHOICES = {'bleu_tokenize': _bleu_tokenizers}


def check_eval(config: ml_collections.ConfigDict) -> None:
  """Refuses evaluation settings out of range (beam size 0, a negative
  length penalty, ...), naming the field, before anything trains."""
  settings = config.get('eval') or {}
  for name, bounds in _EVAL_RANGES.items():
    value = settings.get(name)
    if value is None:
      continue
    if not _is_number(value):
      interval = ranges.describe(**{'high': None, **bounds})
      raise ValueError(f'config.eval.{name}={value!r} must be a number '
                       f'{interval}.')
    ranges.check(f'config.eval.{name}', value, **bounds)
  for name, choices in _EVAL_CHOICES.items():
    if name in settings and settings[name] not in choices():
      raise ValueError(f'config.eval.{name}={settings[name]!r}; choose one '
                       f'of {", ".join(choices())}.')
  prompts = settings.get('prompts')
  if prompts is not None and (isinstance(prompts, str) or not all(
      isinstance(prompt, str) for prompt in prompts)):
    raise ValueError(f'config.eval.prompts={prompts!r} must be a list of '
                     f'strings, e.g. ("Once upon a time",).')


# Data settings that change how examples are batched or masked, not their
# tokens: changing them keeps the token cache.
_NOT_TOKEN_FIELDS = ('tokens_per_batch', 'packing', 'eval_batch_size',
                     'eval_rows', 'eval_split', 'mask_rate')
CACHE_CHUNK = 50_000  # examples tokenised and written at a time


def cached_sides(task: Any, split: str,
                 examples: Callable[[], Iterable[list[batching.Example]]],
                 ) -> tuple[batching.Side, batching.Side, dict[str, Any]]:
  """A text task's tokenised `split` from the token cache on this host's
  disk (`token_cache`), built on the first start from `examples()`, which
  yields (examples, counts): a list of examples and a dict of counts (e.g.
  of examples dropped) summed into the notes the cache keeps.

  The cache is keyed by the task, the split, the data settings that decide
  tokens, the vocabulary files and, for local corpora, the files' sizes and
  modification times. It lives in the workdir's cache/ folder (for a
  gs:// workdir, in its local mirror: memory maps need a local file).
  """
  data = task.config.data
  settings = {k: v for k, v in data.to_dict().items()
              if k not in _NOT_TOKEN_FIELDS}
  key = {'task': task.config.task, 'split': split, 'data': settings,
         'vocabulary': vocabularies.fingerprint(task.workdir,
                                                data.tokenizer)}
  if data.source == 'local':
    key['files'] = token_cache.path_stamps(data.path)
  notes = {}

  def chunks():
    for chunk, chunk_notes in examples():
      for field, count in chunk_notes.items():
        notes[field] = notes.get(field, 0) + count
      yield chunk

  return token_cache.load_or_build(
      storage.local_mirror(storage.join(task.workdir, 'cache')),
      f'{task.config.task}-{split}', key, chunks,
      vocab_size=task.tokenizer.vocab_size, notes=lambda: notes)
