"""Where an image-classification run's images come from, from its
`config.data`: held in memory as uint8 (offline shapes, MNIST idx files,
image folders, TFDS), or streamed from TFDS and decoded on the fly (ImageNet
scale). Both give the same batches: {'images': uint8 [B, S, S, C],
'labels': [B]}, evaluation batches filled up with rows labelled -1.
"""

from __future__ import annotations

import functools
from typing import Iterator

import jax
import ml_collections
import numpy as np

from transformer.data import batching
from transformer.data import images as image_data
from transformer.data import sources
from transformer.sharding import HostRows

Batch = dict[str, np.ndarray]


def read_split(data: ml_collections.ConfigDict, split: str, *,
               class_names: tuple[str, ...] | None = None
               ) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
  """(images uint8 [N, S, S, C], labels [N], class names) of a split."""
  size = data.load_size or data.image_size
  pictures, labels, names = sources.read('images', data, split, size=size,
                                         class_names=class_names)
  if pictures.shape[1:3] != (size, size):
    pictures = np.stack([image_data.square(p, size) for p in pictures])
  return pictures, labels, names


class ImageBatches:
  """Training batches of a fixed number of images
  (`batching.epoch_indices`: a fresh permutation every epoch, no image ever
  dropped, any step a valid start)."""

  def __init__(self, pictures: np.ndarray, labels: np.ndarray, *,
               batch_size: int, seed: int, start_step: int = 0):
    self.pictures, self.labels = pictures, labels
    self.indices = batching.epoch_indices(
        len(labels), batch_size=batch_size, seed=seed, start_step=start_step)

  def __iter__(self) -> Iterator[Batch]:
    for index in self.indices:
      yield {'images': self.pictures[index], 'labels': self.labels[index]}


def eval_batches(pictures: np.ndarray, labels: np.ndarray, *,
                 batch_size: int, row_multiple: int) -> Iterator[Batch]:
  """Every held-out image once, in order; the last batch is filled up to a
  multiple of `row_multiple` rows with blank images labelled -1 (which
  count nowhere)."""
  for begin in range(0, len(labels), batch_size):
    x, y = pictures[begin:begin + batch_size], labels[begin:begin + batch_size]
    filler = -len(y) % row_multiple
    if filler:
      x = np.concatenate([x, np.zeros((filler, *x.shape[1:]), x.dtype)])
      y = np.concatenate([y, np.full(filler, -1, y.dtype)])
    yield {'images': x, 'labels': y}


class InMemoryImages:
  """Splits read once and held in memory; the host only gathers batches."""

  def __init__(self, data: ml_collections.ConfigDict, *, seed: int,
               row_multiple: int):
    self.data, self.seed, self.row_multiple = data, seed, row_multiple

  def classes(self) -> tuple[tuple[str, ...], int]:
    """Class names and channels, from the training split."""
    pictures, _, names = self.split(self.data.train_split)
    return names, pictures.shape[-1]

  @functools.cache
  def _read(self, split: str, class_names: tuple[str, ...] | None):
    return read_split(self.data, split, class_names=class_names)

  def split(self, split: str, class_names: tuple[str, ...] | None = None
            ) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """(images, labels, class names); labels checked against the classes.
    The training split's classes are its own (refused if they differ from
    `class_names`); other splits take `class_names` (a folder's classes in
    the training split's order)."""
    names = None if split == self.data.train_split else class_names
    pictures, labels, found = self._read(split, names)
    if class_names is not None and names is None and \
        tuple(found) != class_names:
      raise ValueError(
          f'The training split now has classes {list(found)}, but this '
          f'workdir was trained with {list(class_names)}: labels would '
          f'change meaning. Use a new workdir.')
    names = names or found
    if len(labels) and (labels.min() < 0 or labels.max() >= len(names)):
      raise ValueError(f'Labels of split {split!r} are outside [0, '
                       f'{len(names)}).')
    return pictures, labels, names

  def train_batches(self, start_step: int, class_names: tuple[str, ...]
                    ) -> Iterator[Batch]:
    data = self.data
    pictures, labels, _ = self.split(data.train_split, class_names)
    self.split(data.eval_split, class_names)  # a wrong split fails now
    print(f'Training data: {len(labels):,} images of {pictures.shape[1:]}, '
          f'{len(class_names)} classes, {len(labels) / data.batch_size:,.1f} '
          f'batches of {data.batch_size} per epoch.', flush=True)
    return iter(ImageBatches(pictures, labels, batch_size=data.batch_size,
                             seed=self.seed, start_step=start_step))

  def eval_batches(self, class_names: tuple[str, ...]) -> Iterator[Batch]:
    pictures, labels, _ = self.split(self.data.eval_split, class_names)
    return eval_batches(pictures, labels,
                        batch_size=self.data.eval_batch_size,
                        row_multiple=self.row_multiple)

  def first_eval_image(self, class_names: tuple[str, ...]) -> np.ndarray:
    return self.split(self.data.eval_split, class_names)[0][0]


class StreamedImages:
  """TFDS splits decoded on the fly, Inception-cropped on the host for
  training; each process streams its own part of the training split."""

  def __init__(self, data: ml_collections.ConfigDict, *, seed: int,
               row_multiple: int):
    if data.source != 'tfds':
      raise ValueError('config.data.stream reads TFDS datasets; set '
                       "config.data.source='tfds'.")
    if data.crop != 'none':
      raise ValueError("Streamed images are Inception-cropped on the host; "
                       "set config.data.crop='none'.")
    if data.batch_size % jax.process_count():
      raise ValueError(
          f'config.data.batch_size={data.batch_size} is not a multiple of '
          f'the {jax.process_count()} processes, each streaming its part.')
    self.data, self.seed, self.row_multiple = data, seed, row_multiple

  def classes(self) -> tuple[tuple[str, ...], int]:
    from transformer.data import tfds_reader  # pylint: disable=g-import-not-at-top
    return tfds_reader.image_classes(self.data.tfds_name,
                                     self.data.tfds_data_dir or None), 3

  def _stream(self, split: str, *, training: bool, start: int = 0,
              shard: tuple[int, int] = (0, 1)):
    from transformer.data import tfds_reader  # pylint: disable=g-import-not-at-top
    data = self.data
    return tfds_reader.stream_images(
        data.tfds_name, split, data.tfds_data_dir or None,
        image_size=data.image_size, training=training, seed=self.seed,
        start=start, min_scale=data.crop_min_scale,
        max_examples=data.max_examples_per_split or None, shard=shard)

  def train_batches(self, start_step: int, class_names: tuple[str, ...]
                    ) -> Iterator[Batch]:
    """This process's rows of each batch, from its own part of the split
    (evaluation reads the whole split on every host: its batches must be
    the same in number everywhere)."""
    data = self.data
    print(f'Training data: {data.tfds_name} {data.train_split} streamed, '
          f'{len(class_names)} classes, batches of {data.batch_size}.',
          flush=True)
    local = data.batch_size // jax.process_count()
    stream = self._stream(data.train_split, training=True,
                          start=start_step * local,
                          shard=(jax.process_index(), jax.process_count()))
    while True:
      examples = [next(stream) for _ in range(local)]
      yield HostRows({
          'images': np.stack([image for image, _ in examples]),
          'labels': np.asarray([label for _, label in examples], np.int32)},
                     global_rows=data.batch_size)

  def eval_batches(self, class_names: tuple[str, ...]) -> Iterator[Batch]:
    del class_names  # TFDS labels are the dataset's own
    data = self.data
    stream = self._stream(data.eval_split, training=False)
    while True:
      examples = [e for _, e in zip(range(data.eval_batch_size), stream)]
      if not examples:
        return
      yield from eval_batches(
          np.stack([image for image, _ in examples]),
          np.asarray([label for _, label in examples], np.int32),
          batch_size=data.eval_batch_size, row_multiple=self.row_multiple)

  def first_eval_image(self, class_names: tuple[str, ...]) -> np.ndarray:
    del class_names
    return next(self._stream(self.data.eval_split, training=False))[0]
