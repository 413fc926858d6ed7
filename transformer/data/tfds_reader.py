"""TensorFlow Datasets as a data source: translation pairs (wmt14), texts
(lm1b), labelled sentences (glue/sst2), labelled images (cifar10, mnist, ...),
captioned images (coco_captions), and imagenet2012 streamed.

Each split is read once, into a list or arrays, except `stream_images`,
which decodes on the fly.

TensorFlow stays at the edge: importing this module does not import
TensorFlow or TFDS. Every loader imports them when called and hides
TensorFlow's GPUs first, so that TensorFlow never allocates accelerator
memory beside JAX.

Nothing here downloads: a dataset must be prepared beforehand, e.g.

    tfds build wmt14_translate/de-en --data_dir=~/tensorflow_datasets
    tfds build lm1b --data_dir=~/tensorflow_datasets
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re

# Names used elsewhere in this codebase for TFDS's 'validation' split.
_SPLIT_ALIASES = {'val': 'validation', 'valid': 'validation',
                  'dev': 'validation'}


class DatasetNotFoundError(FileNotFoundError):
  """A TFDS dataset is unknown, or not prepared in the data directory (the
  tools exit with their missing-input code)."""


def _import_tfds():
  """Imports TensorFlow with its GPUs hidden, then TFDS."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    tf.config.set_visible_devices([], 'GPU')
  except RuntimeError:
    # TensorFlow had already initialised its devices (imported and used
    # elsewhere in this process); nothing can be hidden any more.
    pass
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  return tfds


def _not_prepared_message(name: str, data_dir_root: str,
                          data_dir: str | None) -> str:
  if data_dir is None:
    searched = (f'{data_dir_root} (the TFDS default: $TFDS_DATA_DIR if set, '
                'else ~/tensorflow_datasets)')
  else:
    searched = data_dir_root
  return (
      f'TFDS dataset {name!r} is not prepared in {searched}. Prepare it once '
      f'(this downloads the data), then run again:\n'
      f'  tfds build {name} --data_dir={data_dir_root}\n'
      f'or\n'
      f'  python -c "import tensorflow_datasets as tfds; '
      f"tfds.builder('{name}', data_dir='{data_dir_root}')"
      f'.download_and_prepare()"\n'
      'or point data_dir at a directory where it is prepared.')


def _check_max_examples(max_examples: int | None) -> None:
  if max_examples is not None and max_examples < 0:
    raise ValueError(f'max_examples must be >= 0 or None, got {max_examples}.')


def _root(data_dir: str | None) -> str:
  return data_dir or os.environ.get('TFDS_DATA_DIR', '~/tensorflow_datasets')


def _prepare_again(name: str, data_dir: str | None) -> str:
  return f'prepare it again: tfds build {name} --data_dir={_root(data_dir)}'


def _builder(tfds, name: str, data_dir: str | None, example: str):
  """The TFDS builder of `name`; `example` is a name to suggest. Damaged
  metadata of a prepared dataset (dataset_info.json, features.json cut
  short) is refused naming the dataset."""
  from google.protobuf import json_format  # pylint: disable=g-import-not-at-top
  try:
    return tfds.builder(name, data_dir=data_dir)
  except tfds.core.DatasetNotFoundError:
    raise DatasetNotFoundError(
        f'TFDS has no dataset named {name!r}; see '
        'https://www.tensorflow.org/datasets/catalog/overview for names, '
        f'e.g. {example}.') from None
  except (json.JSONDecodeError, json_format.ParseError) as e:
    raise ValueError(
        f'The metadata of TFDS dataset {name!r} in '
        f'{os.path.join(_root(data_dir), name)} (dataset_info.json, '
        f'features.json) is damaged ({e}); {_prepare_again(name, data_dir)}'
        ) from None


@contextlib.contextmanager
def _reading(name: str, split, data_dir: str | None):
  """Turns TensorFlow's errors while reading a prepared split's files (cut
  short, garbled, removed) into one line naming the dataset and split."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    yield
  except tf.errors.OpError as e:
    # TensorFlow's message is '{{function_node ...}} <what> [Op:...]'.
    what = re.sub(r'\{\{.*?\}\}|\[Op:.*', '', e.message).strip()
    error = (DatasetNotFoundError if isinstance(e, tf.errors.NotFoundError)
             else ValueError)
    raise error(f'TFDS dataset {name!r} split {str(split)!r}: a prepared '
                f'file is damaged or missing ({what}); '
                f'{_prepare_again(name, data_dir)}') from None


def _dataset(tfds, builder, name: str, split: str, data_dir: str | None,
             max_examples: int | None, *, shuffle_seed: int | None = None,
             decoders=None):
  """The tf.data dataset of a split (its files in order, or shuffled with
  `shuffle_seed`), at most `max_examples` long."""
  try:
    # TFDS's in-memory cache of small datasets would only cost memory (each
    # split is read once) and warn when take() stops.
    dataset = builder.as_dataset(
        split=_SPLIT_ALIASES.get(split, split),
        shuffle_files=shuffle_seed is not None, decoders=decoders,
        read_config=tfds.ReadConfig(shuffle_seed=shuffle_seed,
                                    try_autocache=False))
  except AssertionError:
    # TFDS asserts that the prepared files exist. This is checked here rather
    # than with builder.is_prepared() up front because
    # tfds.testing.mock_data serves fake examples without any files.
    if builder.is_prepared():
      raise
    raise DatasetNotFoundError(_not_prepared_message(
        name, os.fspath(builder.data_dir_root), data_dir)) from None
  if max_examples is not None:
    # take() rather than a 'train[:n]' split: it composes with any split
    # expression and also limits tfds.testing.mock_data, which ignores slices.
    dataset = dataset.take(max_examples)
  return dataset


def _examples(tfds, builder, name: str, split: str, data_dir: str | None,
              max_examples: int | None):
  """Iterates over the examples of a split as dicts of numpy values."""
  examples = tfds.as_numpy(_dataset(tfds, builder, name, split, data_dir,
                                    max_examples))
  with _reading(name, split, data_dir):
    yield from examples


def load_translation(name: str, split: str, source_lang: str,
                     target_lang: str, data_dir: str | None = None,
                     max_examples: int | None = None) -> list[tuple[str, str]]:
  """Returns the (source, target) sentence pairs of a prepared TFDS split.

  Args:
    name: a TFDS translation dataset with its config, e.g.
      'wmt14_translate/de-en'.
    split: 'train', 'validation' (or 'val', 'dev') or 'test', or any TFDS
      split expression such as 'train[:1%]'.
    source_lang: language code of the source side, e.g. 'en'.
    target_lang: language code of the target side, e.g. 'de'.
    data_dir: TFDS data directory; None for the TFDS default.
    max_examples: read only the first this many examples.

  Raises:
    DatasetNotFoundError: `name` is unknown, or not prepared in `data_dir`.
    ValueError: a language is not in the dataset, or `max_examples` < 0.
  """
  _check_max_examples(max_examples)
  tfds = _import_tfds()
  builder = _builder(tfds, name, data_dir, example='wmt14_translate/de-en')
  languages = list(builder.info.features.keys())
  for lang in (source_lang, target_lang):
    if lang not in languages:
      raise ValueError(f'{name} has no language {lang!r}; it has {languages}.')
  return [(example[source_lang].decode('utf-8'),
           example[target_lang].decode('utf-8'))
          for example in _examples(tfds, builder, name, split, data_dir,
                                   max_examples)]


def load_features(name: str, split: str, data_dir: str | None,
                  features: tuple[str, ...], *,
                  max_examples: int | None = None) -> list[tuple]:
  """Returns tuples of the named features of a prepared TFDS split, as
  Python values (text decoded to str, scalars to int or float), e.g.
  ('sentence', 'label') of glue/sst2.

  Args and errors as `load_text`.
  """
  _check_max_examples(max_examples)
  tfds = _import_tfds()
  builder = _builder(tfds, name, data_dir, example='lm1b')
  available = list(builder.info.features.keys())
  missing = [f for f in features if f not in available]
  if missing:
    raise ValueError(f'{name} has no feature {missing[0]!r}; it has '
                     f'{available}. Pass some of them as `features`.')

  def python(value):
    if isinstance(value, bytes):
      return value.decode('utf-8')
    return value.item() if hasattr(value, 'item') else value

  return [tuple(python(example[f]) for f in features)
          for example in _examples(tfds, builder, name, split, data_dir,
                                   max_examples)]


def load_text(name: str, split: str, data_dir: str | None, *,
              feature: str = 'text',
              max_examples: int | None = None) -> list[str]:
  """Returns the texts of a prepared TFDS split, e.g. lm1b's sentences.

  Args:
    name: a TFDS dataset (with its config, if it has several), e.g. 'lm1b'.
    split: 'train', 'validation' (or 'val', 'dev') or 'test', or any TFDS
      split expression such as 'train[:1%]'.
    data_dir: TFDS data directory; None for the TFDS default.
    feature: the text feature of an example, e.g. 'text' for lm1b.
    max_examples: read only the first this many examples.

  Raises:
    DatasetNotFoundError: `name` is unknown, or not prepared in `data_dir`.
    ValueError: `feature` is not in the dataset, or `max_examples` < 0.
  """
  return [text for text, in load_features(name, split, data_dir, (feature,),
                                           max_examples=max_examples)]


def load_images(name: str, split: str, data_dir: str | None, *,
                image_size: int, max_examples: int | None = None):
  """Returns (images uint8 [N, S, S, C], labels int32 [N], class names) of a
  prepared TFDS image-classification split (mnist, cifar10, cifar100, ...),
  held in memory. Images of another size have their shorter side resized to
  `image_size` and the centre square kept.

  Args and errors as `load_text`.
  """
  _check_max_examples(max_examples)
  tfds = _import_tfds()
  builder = _builder(tfds, name, data_dir, example='cifar10')
  features = builder.info.features
  if 'image' not in features or 'label' not in features:
    raise ValueError(f'{name} has features {list(features.keys())}; image '
                     f'classification needs "image" and "label".')
  from transformer.data import images as image_data  # pylint: disable=g-import-not-at-top
  pictures, labels = [], []
  for example in _examples(tfds, builder, name, split, data_dir,
                           max_examples):
    pictures.append(image_data.square(example['image'], image_size))
    labels.append(int(example['label']))
  if not pictures:
    raise ValueError(f'{name} split {split!r} has no examples.')
  import numpy as np  # pylint: disable=g-import-not-at-top
  return (np.stack(pictures), np.asarray(labels, np.int32),
          tuple(features['label'].names))


def load_captions(name: str, split: str, data_dir: str | None, *,
                  image_size: int, max_examples: int | None = None):
  """Returns (images uint8 [N, S, S, 3], per image its reference captions)
  of a prepared TFDS captioning split (coco_captions: about 5 captions per
  image), held in memory. Images have their shorter side resized to
  `image_size` and the centre square kept.

  Args:
    name: a dataset with features 'image' and 'captions' ({'text': ...}),
      e.g. 'coco_captions'.
    split: the dataset's own split name, e.g. coco_captions' 'train', 'val',
      'test' or 'restval' (Karpathy's splits), or a TFDS split expression
      such as 'val[:500]'.
    data_dir: TFDS data directory; None for the TFDS default.
    max_examples: read only the first this many examples.

  Raises:
    DatasetNotFoundError: `name` is unknown, or not prepared in `data_dir`.
    ValueError: the features are not a captioning dataset's, the split is
      empty, or `max_examples` < 0.
  """
  _check_max_examples(max_examples)
  tfds = _import_tfds()
  builder = _builder(tfds, name, data_dir, example='coco_captions')
  features = builder.info.features
  if 'image' not in features or 'captions' not in features:
    raise ValueError(f'{name} has features {list(features.keys())}; image '
                     f'captioning needs "image" and "captions".')
  # A parsed split rather than its name: coco_captions calls its validation
  # split 'val', which `_dataset` would read as an alias of 'validation'.
  instruction = tfds.core.ReadInstruction.from_spec(split)
  from transformer.data import images as image_data  # pylint: disable=g-import-not-at-top
  pictures, references = [], []
  for example in _examples(tfds, builder, name, instruction, data_dir,
                           max_examples):
    pictures.append(image_data.square(example['image'], image_size))
    references.append([text.decode('utf-8')
                       for text in example['captions']['text']])
  if not pictures:
    raise ValueError(f'{name} split {split!r} has no examples.')
  import numpy as np  # pylint: disable=g-import-not-at-top
  return np.stack(pictures), references


def _split_size(builder, split: str, max_examples: int | None,
                examples) -> int:
  """Examples in a split: from the metadata, else counted (`examples()`,
  e.g. under tfds.testing.mock_data, which knows no split sizes)."""
  try:
    size = builder.info.splits[split].num_examples
  except KeyError:
    size = None
  if max_examples is not None:
    size = min(size, max_examples) if size else max_examples
  if size is None:
    size = int(examples().reduce(0, lambda n, _: n + 1))
  return size


def _decode_image(tf, index, example, *, seed: int, training: bool,
                  image_size: int, min_scale: float):
  """(image uint8 [S, S, 3], label) of an encoded example at stream position
  `index`: an Inception crop seeded by (seed, index) for training, the
  centre crop of the image resized to S / 0.875 for evaluation."""
  image = tf.io.decode_image(example['image'], channels=3,
                             expand_animations=False)
  if training:
    box_seed = tf.stack([tf.cast(seed, tf.int64), index])
    begin, crop, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image), tf.zeros([1, 0, 4]), seed=box_seed,
        area_range=(min_scale, 1.0), aspect_ratio_range=(3 / 4, 4 / 3),
        max_attempts=10, use_image_if_no_bounding_boxes=True)
    image = tf.image.resize(tf.slice(image, begin, crop),
                            (image_size, image_size), antialias=True)
  else:
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = image_size / 0.875 / tf.reduce_min(shape)
    resized = tf.cast(tf.round(shape * scale), tf.int32)
    image = tf.image.resize(image, resized, antialias=True)
    top = (resized[0] - image_size) // 2
    left = (resized[1] - image_size) // 2
    image = image[top:top + image_size, left:left + image_size]
  image = tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)
  return image, example['label']


def stream_images(name: str, split: str, data_dir: str | None, *,
                  image_size: int, training: bool, seed: int = 0,
                  start: int = 0, min_scale: float = 0.08,
                  max_examples: int | None = None,
                  shard: tuple[int, int] = (0, 1)):
  """Yields (image uint8 [S, S, 3], label) of a prepared TFDS split decoded
  on the fly, for datasets too large to hold in memory (imagenet2012).

  `shard` = (index, count) reads only part `index` of `count` near-equal
  parts of the split (`tfds.even_splits`), so that each host of a training
  run reads and decodes only its own examples; positions, crops and
  shuffles then belong to that part's stream.

  Training: endless epochs, each a fresh order (files and a 10,000-example
  buffer shuffled with seeds from (seed, epoch)); every image gets an
  Inception crop (area fraction in [min_scale, 1], aspect ratio in [3/4,
  4/3]) resized to S x S, drawn from a stateless seed of (seed, its position
  in the stream). Example k of the stream is therefore the same in every
  run, and `start` resumes at example `start` without decoding the ones
  before it. Evaluation: every example once, in order, the shorter side
  resized to S / 0.875 and the centre S x S kept.
  """
  _check_max_examples(max_examples)
  tfds = _import_tfds()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  builder = _builder(tfds, name, data_dir, example='imagenet2012')
  part, parts = shard
  split = _SPLIT_ALIASES.get(split, split)
  if parts > 1:
    split = tfds.even_splits(split, n=parts)[part]
  # Different parts draw different shuffles and crops.
  seed = seed * 4_096 + part

  def epoch_examples(epoch: int):
    epoch_seed = seed * 1_000 + epoch
    dataset = _dataset(tfds, builder, name, split, data_dir, max_examples,
                       shuffle_seed=epoch_seed if training else None,
                       decoders={'image': tfds.decode.SkipDecoding()})
    return dataset.shuffle(10_000, seed=epoch_seed) if training else dataset

  size = _split_size(builder, split, max_examples,
                     lambda: epoch_examples(0))
  prepare = functools.partial(_decode_image, tf, seed=seed, training=training,
                              image_size=image_size, min_scale=min_scale)
  epoch, offset = divmod(start, size) if training else (0, start)
  while True:
    # Global positions number the examples of the whole stream.
    dataset = tf.data.Dataset.zip((tf.data.Dataset.range(epoch * size,
                                                         (epoch + 1) * size),
                                   epoch_examples(epoch)))
    dataset = dataset.skip(offset).map(
        prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    with _reading(name, split, data_dir):
      for image, label in tfds.as_numpy(dataset.prefetch(tf.data.AUTOTUNE)):
        yield image, int(label)
    if not training:
      return
    epoch, offset = epoch + 1, 0


def image_classes(name: str, data_dir: str | None) -> tuple[str, ...]:
  """The class names of a TFDS image-classification dataset (from its
  metadata, without reading examples)."""
  tfds = _import_tfds()
  builder = _builder(tfds, name, data_dir, example='imagenet2012')
  return tuple(builder.info.features['label'].names)
