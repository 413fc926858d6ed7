"""The one registry of data sources: for each kind of example, the sources
`config.data.source` may name and how a split of each is read.

Tasks ask `read(kind, config.data, split)` and never switch on the source
themselves (big_vision keeps its input pipelines in one registry the same
way); a new source is a function here with `@register(kind, name)`, and
every task of that kind can read it. The kinds, and what a split reads as:

  pairs          [(source sentence, target sentence)]: translation
  documents      [text]: language modelling, masked language modelling
  labelled_text  [(sentence a, sentence b or None, label)]: text
                 classification, GLUE
  captions       (images uint8 [N, S, S, 3], [[caption, ...]] lower case):
                 captioning, vision-and-language pretraining on files
  images         (images uint8 [N, S', S', C], labels [N], class names),
                 before resizing to the model's size (`image_batches`)
  scenes         generated scenes of shapes (`scenes`), with the generator
                 of what a task asks about them (captions, questions,
                 referring expressions)

TensorFlow is imported by the 'tfds' sources only, when one is read.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import ml_collections

from transformer.core import ranges
from transformer.data import captions as caption_data
from transformer.data import glue
from transformer.data import images as image_data
from transformer.data import parallel_text
from transformer.data import reading
from transformer.data import text
from transformer.data.generated import offline_mt
from transformer.data.generated import offline_sentiment

Reader = Callable[..., Any]
KINDS = ('pairs', 'documents', 'labelled_text', 'captions', 'images',
         'scenes')
READERS: dict[str, dict[str, Reader]] = {kind: {} for kind in KINDS}
# The config.data fields only a source reads, per kind and source.
FIELDS: dict[str, dict[str, tuple[str, ...]]] = {kind: {} for kind in KINDS}
_TFDS_FIELDS = ('tfds_name', 'tfds_data_dir', 'max_examples_per_split')


def register(kind: str, name: str, fields: tuple[str, ...] = ()
             ) -> Callable[[Reader], Reader]:
  """Registers `reader(data, split, **options)` as source `name` of
  `kind`, which alone reads the config.data `fields`."""
  def add(reader: Reader) -> Reader:
    if name in READERS[kind]:
      raise ValueError(f'source {name!r} of {kind} registered twice')
    READERS[kind][name] = reader
    FIELDS[kind][name] = fields
    return reader
  return add


def in_use(kind: str, data: ml_collections.ConfigDict
           ) -> ml_collections.ConfigDict:
  """`data` without the fields only the kind's other sources read (a
  workdir's config.json shows what applies to its source; the task's
  defaults give the others back when it is read)."""
  if data.get('source') not in READERS[kind]:
    return data
  own = set(FIELDS[kind][data.source])
  others = {field for name, fields in FIELDS[kind].items()
            if name != data.source for field in fields} - own
  return ml_collections.ConfigDict(
      {key: value for key, value in data.items() if key not in others})


def sources_reading(kind: str, fields: list[str]) -> list[str]:
  """The kind's sources that read every one of `fields`."""
  return [name for name, read in FIELDS[kind].items()
          if set(fields) <= set(read)] or ['none reads them all']


def names(kind: str) -> tuple[str, ...]:
  """The sources a config may name for `kind`."""
  return tuple(READERS[kind])


def read(kind: str, data: ml_collections.ConfigDict, split: str,
         **options) -> Any:
  """One split of `config.data`'s source, as `kind` reads."""
  if data.source not in READERS[kind]:
    raise ValueError(f'config.data.source={data.source!r}; choose one of '
                     f'{names(kind)} ({kind.replace("_", " ")}).')
  return READERS[kind][data.source](data, split, **options)


def check_split(split: str, splits: tuple[str, ...], what: str) -> None:
  """Refuses a split that a source does not have, naming those it has."""
  if split not in splits:
    raise ValueError(f'The {what} have splits {splits}, not {split!r}: set '
                     f'config.data.train_split and eval_split to them.')


def _count(data: ml_collections.ConfigDict, split: str) -> int:
  return data.num_train if split == data.get('train_split',
                                             'train') else data.num_eval


def _max_examples(data: ml_collections.ConfigDict) -> int | None:
  return data.max_examples_per_split or None


def _tfds():
  from transformer.data import tfds_reader  # pylint: disable=g-import-not-at-top
  return tfds_reader


# -- pairs ----------------------------------------------------------------------


@register('pairs', 'offline',
          ('num_train', 'num_eval', 'num_test', 'max_clauses'))
def _offline_pairs(data, split):
  check_split(split, ('train', 'validation', 'test'), 'offline pairs')
  return offline_mt.splits(data.num_train, data.num_eval, data.num_test,
                           seed=data.seed, max_clauses=data.max_clauses)[split]


@register('pairs', 'local', ('path',))
def _local_pairs(data, split):
  return parallel_text.read_parallel(data.path, split, data.source_lang,
                                     data.target_lang)


@register('pairs', 'tfds', _TFDS_FIELDS)
def _tfds_pairs(data, split):
  return _tfds().load_translation(
      data.tfds_name, split, data.source_lang, data.target_lang,
      data.tfds_data_dir or None, max_examples=_max_examples(data))


# -- documents ------------------------------------------------------------------


@register('documents', 'offline', ('num_train', 'num_eval', 'max_sentences'))
def _offline_documents(data, split):
  check_split(split, ('train', 'validation'), 'offline documents')
  return text.offline_splits(data.num_train, data.num_eval, data.seed,
                             max_sentences=data.max_sentences)[split]


@register('documents', 'tfds', _TFDS_FIELDS)
def _tfds_documents(data, split):
  return _tfds().load_text(data.tfds_name, split, data.tfds_data_dir or None,
                           max_examples=_max_examples(data))


def _nonempty_documents(path: str, per: str, field: str = 'path'
                        ) -> list[str]:
  """`text.read_documents`, refused naming `path` (config.data.`field`)
  when it holds no text."""
  documents = text.read_documents(path, per=per)
  if not documents:
    raise ValueError(f'{path} holds no text: every {per} is empty or '
                     f'blank. Point config.data.{field} at the text.')
  return documents


@register('documents', 'local',
          ('path', 'per', 'eval_path', 'train_fraction'))
def _local_documents(data, split):
  """`data.path`'s documents: all of them for training and
  `data.eval_path`'s for validation, or the first `train_fraction` of
  them (of its text, for one document) and the rest."""
  check_split(split, ('train', 'validation'), 'local text')
  if data.eval_path:
    if split == 'train':
      return _nonempty_documents(data.path, data.per)
    return _nonempty_documents(data.eval_path, data.per, 'eval_path')
  ranges.check('config.data.train_fraction', data.train_fraction, low=0,
               low_in=False, high=1,
               why=f': the rest of {data.path} is the validation text (or '
               f'give config.data.eval_path)')
  documents = _nonempty_documents(data.path, data.per)
  if len(documents) == 1:
    parts = text.split_text(documents[0], data.train_fraction)
    return [parts[0] if split == 'train' else parts[1]]
  cut = int(len(documents) * data.train_fraction)
  if not 0 < cut < len(documents):
    raise ValueError(
        f'{data.path}: config.data.train_fraction={data.train_fraction} of '
        f'its {len(documents)} {data.per}s leaves a split empty; use more '
        f'text, or give config.data.eval_path.')
  return documents[:cut] if split == 'train' else documents[cut:]


# -- labelled_text --------------------------------------------------------------
# GLUE tasks (`data.glue_task`) read their own files, fields and labels;
# without one, single sentences with integer labels (SST-2's shape).


def _not_generated(data) -> None:
  if data.glue_task in glue.OFFLINE:
    raise ValueError(f'config.data.glue_task={data.glue_task!r} is '
                     f"generated: set config.data.source='offline'.")


@register('labelled_text', 'offline', ('num_train', 'num_eval'))
def _offline_labelled_text(data, split):
  if data.glue_task in glue.OFFLINE:
    return glue.offline_pairs(data.glue_task, _count(data, split), data.seed,
                              split)
  if data.glue_task:
    raise ValueError(
        f"config.data.glue_task={data.glue_task!r} is read from files: set "
        f"config.data.source to 'tsv' or 'tfds' (the generated tasks: "
        f"{tuple(glue.OFFLINE)}).")
  rows = offline_sentiment.examples(_count(data, split), data.seed, split)
  return [(sentence, None, float(label)) for sentence, label in rows]


def _read_sentences_tsv(path: str) -> list[tuple[str, int]]:
  """The (text, label) rows of a UTF-8 file of "text<TAB>label" lines; a
  first line whose label is not a number is a header (GLUE's)."""
  rows = [(number, line.rstrip('\r').rsplit('\t', 1))
          for number, line in enumerate(reading.lines(path), 1)
          if line.strip()]
  if rows and len(rows[0][1]) == 2 and not rows[0][1][1].strip().isdigit():
    rows = rows[1:]
  bad = [number for number, row in rows
         if len(row) != 2 or not row[1].strip().isdigit()]
  if bad:
    raise ValueError(f'{path}: line {bad[0]} is not "text<TAB>label" '
                     f'with an integer label ({len(bad)} such lines).')
  return [(words, int(label)) for _, (words, label) in rows]


@register('labelled_text', 'tsv', ('path',))
def _tsv_labelled_text(data, split):
  _not_generated(data)
  if data.glue_task:
    return glue.read_tsv(data.glue_task,
                         glue.tsv_path(data.path, data.glue_task, split))
  path = os.path.join(data.path, f'{split}.tsv')
  if not os.path.exists(path):
    raise FileNotFoundError(
        f'{path} not found: config.data.path must hold {split}.tsv with '
        f'lines "text<TAB>label" (GLUE names its validation split dev: '
        f'set config.data.eval_split=dev).')
  return [(sentence, None, float(label))
          for sentence, label in _read_sentences_tsv(path)]


@register('labelled_text', 'tfds', _TFDS_FIELDS)
def _tfds_labelled_text(data, split):
  _not_generated(data)
  if data.glue_task:
    return glue.read_tfds(data.glue_task, split, data.tfds_data_dir or None,
                          _max_examples(data))
  rows = _tfds().load_features(data.tfds_name, split,
                               data.tfds_data_dir or None, ('sentence', 'label'),
                               max_examples=_max_examples(data))
  return [(sentence, None, float(label)) for sentence, label in rows]


# -- captions -------------------------------------------------------------------


def _lower(images, references):
  return images, [[r.strip().lower() for r in refs] for refs in references]


@register('captions', 'offline', ('num_train', 'num_eval'))
def _offline_captions(data, split):
  offsets = {'train': 0, 'validation': 1, 'test': 2}
  check_split(split, tuple(offsets), 'offline captions')
  count = data.num_train if split == 'train' else data.num_eval
  return _lower(*caption_data.offline_captions(
      count, 3 * data.seed + offsets[split], image_size=data.image_size))


@register('captions', 'folder', ('path',))
def _folder_captions(data, split):
  images, references, _ = caption_data.read_caption_folder(
      data.path, split, image_size=data.image_size)
  return _lower(images, references)


@register('captions', 'tfds', _TFDS_FIELDS)
def _tfds_captions(data, split):
  return _lower(*_tfds().load_captions(
      data.tfds_name, split, data.tfds_data_dir or None,
      image_size=data.image_size, max_examples=_max_examples(data)))


# -- images ---------------------------------------------------------------------


@register('images', 'offline', ('num_train', 'num_eval'))
def _offline_images(data, split, *, size, class_names=None):
  del class_names  # the shapes' own
  offsets = {'train': 0, 'validation': 1, 'test': 2}
  check_split(split, tuple(offsets), 'offline shapes')
  count = data.num_train if split == 'train' else data.num_eval
  return image_data.offline_shapes(count, 3 * data.seed + offsets[split],
                                   image_size=size)


@register('images', 'mnist', ('path',))
def _mnist_images(data, split, *, size, class_names=None):
  del size, class_names  # 28 x 28, the digits
  return image_data.read_mnist(data.path, split)


@register('images', 'folder', ('path', 'bad_images'))
def _folder_images(data, split, *, size, class_names=None):
  return image_data.read_folder(data.path, split, image_size=size,
                                class_names=class_names,
                                bad_images=data.bad_images)


@register('images', 'tfds', _TFDS_FIELDS)
def _tfds_images(data, split, *, size, class_names=None):
  del class_names  # the dataset's
  return _tfds().load_images(data.tfds_name, split, data.tfds_data_dir or None,
                             image_size=size, max_examples=_max_examples(data))


# -- scenes ---------------------------------------------------------------------


@register('scenes', 'offline', ('num_train', 'num_eval', 'max_objects'))
def _offline_scenes(data, split, *, generate, what):
  """`generate(count, seed, image_size=, max_objects=)` for a split of the
  generated scenes (splits 'train', 'validation', 'test', a seed each)."""
  offsets = {'train': 0, 'validation': 1, 'test': 2}
  check_split(split, tuple(offsets), what)
  count = data.num_train if split == 'train' else data.num_eval
  return generate(count, 3 * data.seed + offsets[split],
                  image_size=data.image_size, max_objects=data.max_objects)
