"""Image classification with the Vision Transformer.

Sources (`config.data.source`): 'offline' (generated shapes, no files),
'mnist' (the original idx files in `path`), 'folder' (`path/split/class/
*.png|jpg`) and 'tfds' (cifar10, cifar100, mnist, ... prepared with `tfds
build`). Splits are held in memory as uint8; the host only gathers batches,
and the accelerator augments them inside the jitted step (random crop with
padding or random resized crop, flips, RandAugment, mixup; `data.augment`)
with the step's key, so resumed runs see exactly the same inputs.
Metrics: loss, top-1 and top-5 accuracy on the (centre-cropped) held-out
split.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any, Iterable, Iterator

import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import ml_collections
from ml_collections import config_dict
import numpy as np
import optax

from transformer import layers
from transformer import plots
from transformer import sharding
from transformer import tasks
from transformer import train
from transformer.data import augment
from transformer.data import batching
from transformer.data import images as image_data
from transformer.models import vit

MODEL_FIELDS = dict(
    num_layers=int, d_model=int, num_heads=int, d_ff=int,
    dropout_rate=float, attention_dropout_rate=float, pooling=str,
    positional_encoding=str, patch_embedding=str, activation=str,
    layer_norm_epsilon=float, attention_implementation=str,
    **layers.MEMORY_FIELDS)
CROPS = ('none', 'pad', 'resized')
# Class names and channels of the training data, kept in the workdir so that
# predictions need neither the dataset nor the time to read it.
DATASET_FILE = 'dataset.json'
LOSSES = ('softmax', 'sigmoid')


def default_config() -> ml_collections.ConfigDict:
  """Every setting of an image-classification experiment."""
  config = train.default_config()
  config.task = 'image_classification'
  config.train.label_smoothing = 0.0
  config.train.loss = 'softmax'  # or 'sigmoid' (per-class binary, big_vision)
  # AdamW (0.9, 0.999, 1e-8), cosine decay to 1% after warmup, gradients
  # clipped at 1, as the small-ViT recipes.
  config.optimizer.update(dict(schedule='cosine', learning_rate=1e-3,
                               b2=0.999, eps=1e-8, weight_decay=0.05,
                               grad_clip_norm=1.0,
                               end_learning_rate_ratio=0.01))
  config.data = ml_collections.ConfigDict(dict(
      source='offline',  # 'offline' | 'mnist' | 'folder' | 'tfds'
      train_split='train', eval_split='test',
      num_train=20_000, num_eval=2_000, seed=0,  # offline
      path='', tfds_name='cifar10', tfds_data_dir='',
      max_examples_per_split=0,
      bad_images='error',  # folder: undecodable files refused, or 'skip'
      # tfds only: decode on the fly (Inception crop on the host) instead of
      # holding the split in memory; for imagenet2012.
      stream=False,
      image_size=32,  # the model's input side
      load_size=0,  # side images are stored at (0: image_size); evaluation
      # centre-crops image_size from it
      batch_size=128, eval_batch_size=256,
      crop='pad',  # training crop: 'none' | 'pad' | 'resized'
      crop_padding=4, crop_min_scale=0.08, flip=True,
      randaugment_layers=0, randaugment_magnitude=10, mixup_alpha=0.0))
  # The reference ViTs decay kernels only: not the class token or positions.
  config.optimizer.weight_decay_skip = (r"'cls'", r"'pos_embedding'")
  config.model = ml_collections.ConfigDict(dict(
      size='mu/4', dtype='float32',
      **{field: config_dict.placeholder(kind)
         for field, kind in MODEL_FIELDS.items()}))
  return config


def read_split(data: ml_collections.ConfigDict, split: str, *,
               class_names: tuple[str, ...] | None = None
               ) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
  """(images uint8 [N, S, S, C], labels [N], class names) of a split."""
  size = data.load_size or data.image_size
  if data.source == 'offline':
    offsets = {'train': 0, 'validation': 1, 'test': 2}
    if split not in offsets:
      raise ValueError(f'The offline shapes have splits {tuple(offsets)}, '
                       f'not {split!r}.')
    count = data.num_train if split == 'train' else data.num_eval
    return image_data.offline_shapes(count, 3 * data.seed + offsets[split],
                                     image_size=size)
  if data.source == 'mnist':
    result = image_data.read_mnist(data.path, split)
  elif data.source == 'folder':
    result = image_data.read_folder(data.path, split, image_size=size,
                                    class_names=class_names,
                                    bad_images=data.bad_images)
  elif data.source == 'tfds':
    from transformer.data import tfds_source  # pylint: disable=g-import-not-at-top
    result = tfds_source.load_images(
        data.tfds_name, split, data.tfds_data_dir or None, image_size=size,
        max_examples=data.max_examples_per_split or None)
  else:
    raise ValueError(f"config.data.source={data.source!r}; choose 'offline', "
                     f"'mnist', 'folder' or 'tfds'.")
  pictures, labels, names = result
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

  def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
    for index in self.indices:
      yield {'images': self.pictures[index], 'labels': self.labels[index]}


def eval_batches(pictures: np.ndarray, labels: np.ndarray, *,
                 batch_size: int, row_multiple: int
                 ) -> Iterator[dict[str, np.ndarray]]:
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


class ImageClassificationTask:
  """The `transformer.tasks.Task` for image classification."""

  unit = 'images'

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *,
               batch_divisor: int = 1):
    self.config, self.workdir = config, workdir
    self.batch_divisor = batch_divisor
    data = config.data
    if data.crop not in CROPS:
      raise ValueError(f'config.data.crop={data.crop!r}; choose one of '
                       f'{CROPS}.')
    if config.train.loss not in LOSSES:
      raise ValueError(f'config.train.loss={config.train.loss!r}; choose one '
                       f'of {LOSSES}.')
    if data.stream:
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
    if data.load_size and data.load_size < data.image_size:
      raise ValueError(f'config.data.load_size={data.load_size} is below '
                       f'image_size={data.image_size}; images are cropped, '
                       f'never padded, to the model size.')
    tasks.check_batch_sizes(data, batch_divisor)
    self.class_names, self.num_channels = self._dataset_info()
    overrides = {k: config.model[k] for k in MODEL_FIELDS
                 if config.model.get(k) is not None}
    self.model_config = vit.config_for(
        config.model.size, image_size=data.image_size,
        num_channels=self.num_channels, num_classes=len(self.class_names),
        dtype=jnp.dtype(config.model.dtype), **overrides)
    self.model = vit.build(self.model_config)

  def _dataset_info(self) -> tuple[tuple[str, ...], int]:
    """Class names and channels: from the workdir, or from the training
    split (then written to the workdir)."""
    path = os.path.join(self.workdir, DATASET_FILE)
    if os.path.exists(path):
      with open(path) as f:
        info = json.load(f)
      return tuple(info['classes']), info['channels']
    if self.config.data.stream:
      from transformer.data import tfds_source  # pylint: disable=g-import-not-at-top
      names = tfds_source.image_classes(self.config.data.tfds_name,
                                        self.config.data.tfds_data_dir or None)
      pictures = np.zeros((0, 1, 1, 3), np.uint8)
    else:
      pictures, _, names = self.split(self.config.data.train_split)
    if jax.process_index() == 0:
      os.makedirs(self.workdir, exist_ok=True)
      with open(path, 'w') as f:
        json.dump({'classes': list(names), 'channels': pictures.shape[-1]},
                  f)
    return names, pictures.shape[-1]

  @functools.cache
  def split(self, split: str):
    """(images, labels, class names); labels checked against the classes."""
    names = None if split == self.config.data.train_split \
        else self.class_names
    pictures, labels, found = read_split(self.config.data, split,
                                         class_names=names)
    known = getattr(self, 'class_names', None)
    if names is None and known is not None and tuple(found) != known:
      raise ValueError(
          f'The training split now has classes {list(found)}, but this '
          f'workdir was trained with {list(known)} ({DATASET_FILE}): '
          f'labels would change meaning. Use a new workdir.')
    names = names or found
    if len(labels) and (labels.min() < 0 or labels.max() >= len(names)):
      raise ValueError(f'Labels of split {split!r} are outside [0, '
                       f'{len(names)}).')
    return pictures, labels, names

  def adapt_pretrained(self, loaded: dict[str, Any], params: dict[str, Any]
                       ) -> dict[str, Any]:
    """Pretrained parameters made to fit this model: position embeddings
    resampled to this resolution's patch grid, the patch embedding summed
    over colour channels for grey inputs (or spread over them for colour
    inputs), and the classifier left out (so it starts at zero) when the
    classes differ."""
    source = self.config.train.init_from
    source_config = train.load_config(source)
    if source_config.task != 'image_classification':
      raise ValueError(f'config.train.init_from={source} trained a '
                       f'{source_config.task!r} task; fine-tune from an '
                       f'image_classification workdir.')
    with open(os.path.join(source, DATASET_FILE)) as f:
      source_info = json.load(f)
    loaded = dict(loaded)
    if 'embedding' in loaded:
      loaded['embedding'] = dict(loaded['embedding'])
      loaded['embedding']['kernel'] = self._adapt_channels(
          loaded['embedding']['kernel'], source_info['channels'])
    if ('pos_embedding' in loaded and 'pos_embedding' in params and
        loaded['pos_embedding'].shape != params['pos_embedding'].shape):
      old = loaded['pos_embedding'].shape
      loaded['pos_embedding'] = vit.resize_position_embedding(
          jnp.asarray(loaded['pos_embedding']), self.model_config.grid_size,
          has_class_token=self.model_config.pooling == 'token')
      print(f'Position embeddings resized from {old} to '
            f'{loaded["pos_embedding"].shape}.', flush=True)
    if 'head' in loaded and tuple(source_info['classes']) != self.class_names:
      print(f'The classifier starts at zero: classes {list(self.class_names)}'
            f' here, {source_info["classes"]} in the pretrained model.',
            flush=True)
      del loaded['head']
    return loaded

  def _adapt_channels(self, kernel: Any, channels: int) -> Any:
    """A patch-embedding kernel of `channels` input channels for this
    model's: grey from colour sums the colour kernels (the colour model's
    response to a grey image copied into every channel); colour from grey
    spreads the grey kernel evenly over the channels."""
    mine = self.num_channels
    if channels == mine:
      return kernel
    p = self.model_config.patch_size
    full = jnp.asarray(kernel).reshape(p, p, channels, -1)
    if mine == 1:
      full = full.sum(axis=2, keepdims=True)
    elif channels == 1:
      full = jnp.repeat(full / mine, mine, axis=2)
    else:
      raise ValueError(f'Cannot fine-tune a {channels}-channel model on '
                       f'{mine}-channel images.')
    print(f'Patch embedding adapted from {channels} to {mine} input '
          f'channels.', flush=True)
    if self.model_config.patch_embedding == 'dense':
      return full.reshape(p * p * mine, -1)
    return full

  def init(self, rng: jax.Array) -> Any:
    c = self.model_config
    images = jnp.zeros((1, c.image_size, c.image_size, c.num_channels))
    return self.model.init({'params': rng}, images,
                           deterministic=True)['params']

  def _stream(self, split: str, *, training: bool, start: int = 0,
              shard: tuple[int, int] = (0, 1)):
    from transformer.data import tfds_source  # pylint: disable=g-import-not-at-top
    data = self.config.data
    return tfds_source.stream_images(
        data.tfds_name, split, data.tfds_data_dir or None,
        image_size=data.image_size, training=training, seed=self.config.seed,
        start=start, min_scale=data.crop_min_scale,
        max_examples=data.max_examples_per_split or None, shard=shard)

  def _streamed_train_batches(self, start_step: int
                              ) -> Iterator[dict[str, np.ndarray]]:
    """This process's rows of each batch, from its own part of the split
    (evaluation reads the whole split on every host: its batches must be
    the same in number everywhere)."""
    size = self.config.data.batch_size
    local = size // jax.process_count()
    stream = self._stream(self.config.data.train_split, training=True,
                          start=start_step * local,
                          shard=(jax.process_index(), jax.process_count()))
    while True:
      examples = [next(stream) for _ in range(local)]
      yield sharding.HostRows({
          'images': np.stack([image for image, _ in examples]),
          'labels': np.asarray([label for _, label in examples], np.int32)},
                              global_rows=size)

  def _streamed_eval_batches(self) -> Iterator[dict[str, np.ndarray]]:
    data = self.config.data
    stream = self._stream(data.eval_split, training=False)
    while True:
      examples = [e for _, e in zip(range(data.eval_batch_size), stream)]
      if not examples:
        return
      yield from eval_batches(
          np.stack([image for image, _ in examples]),
          np.asarray([label for _, label in examples], np.int32),
          batch_size=data.eval_batch_size, row_multiple=self.batch_divisor)

  def train_iter(self, start_step: int) -> Iterator[dict[str, np.ndarray]]:
    data = self.config.data
    if data.stream:
      print(f'Training data: {data.tfds_name} {data.train_split} streamed, '
            f'{len(self.class_names)} classes, batches of {data.batch_size}.',
            flush=True)
      return self._streamed_train_batches(start_step)
    pictures, labels, _ = self.split(data.train_split)
    self.split(data.eval_split)  # a wrong split fails now, not later
    print(f'Training data: {len(labels):,} images of {pictures.shape[1:]}, '
          f'{len(self.class_names)} classes, {len(labels) / data.batch_size:,.1f} '
          f'batches of {data.batch_size} per epoch.', flush=True)
    return iter(ImageBatches(pictures, labels, batch_size=data.batch_size,
                             seed=self.config.seed, start_step=start_step))

  def eval_batches(self) -> Iterable[dict[str, np.ndarray]]:
    if self.config.data.stream:
      return self._streamed_eval_batches()
    pictures, labels, _ = self.split(self.config.data.eval_split)
    return eval_batches(pictures, labels,
                        batch_size=self.config.data.eval_batch_size,
                        row_multiple=self.batch_divisor)

  def _augment(self, images: jax.Array, targets: jax.Array, key: jax.Array):
    """Training inputs in [0, 1] and (possibly mixed) target distributions."""
    data, size = self.config.data, self.config.data.image_size
    crop_key, flip_key, rand_key, mix_key = jax.random.split(key, 4)
    if data.crop == 'resized':
      images = augment.random_resized_crop(
          crop_key, images, size, scale=(data.crop_min_scale, 1.0))
    else:
      if data.crop == 'pad' and data.crop_padding:
        images = augment.random_pad_crop(crop_key, images, data.crop_padding)
      images = augment.center_crop(images, size)
    if data.flip:
      images = augment.random_flip(flip_key, images)
    if data.randaugment_layers:
      images = augment.rand_augment(
          rand_key, images, num_layers=data.randaugment_layers,
          magnitude=data.randaugment_magnitude)
    if data.mixup_alpha:
      images, targets = augment.mixup(mix_key, images, targets,
                                      data.mixup_alpha)
    return images, targets

  def loss(self, params: Any, batch: dict[str, jax.Array],
           rng: jax.Array | None, *, deterministic: bool):
    labels = batch['labels']  # -1: filler rows
    num_classes = len(self.class_names)
    images = augment.to_unit(batch['images'])
    targets = jax.nn.one_hot(jnp.maximum(labels, 0), num_classes)
    dropout_key = None
    if rng is None:
      images = augment.center_crop(images, self.config.data.image_size)
    else:
      augment_key, dropout_key = jax.random.split(rng)
      images, targets = self._augment(images, targets, augment_key)
    logits = self.model.apply(
        {'params': params}, augment.normalize(images),
        deterministic=deterministic,
        rngs=None if dropout_key is None else {'dropout': dropout_key})
    logits = logits.astype(jnp.float32)  # the loss in float32 under bf16
    smoothing = self.config.train.label_smoothing
    targets = targets * (1.0 - smoothing) + smoothing / num_classes
    if self.config.train.loss == 'softmax':
      losses = optax.softmax_cross_entropy(logits, targets)
    else:
      losses = optax.sigmoid_binary_cross_entropy(logits, targets).sum(-1)
    weights = (labels >= 0).astype(jnp.float32)
    count = weights.sum()
    top5 = jax.lax.top_k(logits, min(5, num_classes))[1]
    sums = {
        'loss': ((losses * weights).sum(), count),
        'accuracy': (((logits.argmax(-1) == labels) * weights).sum(), count),
        'top5_accuracy': (((top5 == labels[:, None]).any(-1) * weights).sum(),
                          count),
    }
    return sums['loss'][0] / jnp.maximum(count, 1.0), sums

  def inputs(self, pictures: np.ndarray) -> np.ndarray:
    """uint8 [B, L, L, C] at the stored size -> normalised model inputs, on
    the host (the augment functions take numpy arrays too)."""
    images = augment.to_unit(pictures)
    return augment.normalize(augment.center_crop(
        images, self.config.data.image_size))

  def _forward(self, params: Any, pictures: np.ndarray, *,
               with_weights: bool = False):
    """Logits [B, classes] (and the attention weights of every layer) as
    host arrays. Every process must call this with the same pictures: rows
    are padded to a multiple of the data-parallel shards and the results,
    which may live on other hosts' devices, are gathered."""
    count = len(pictures)
    filler = -count % self.batch_divisor
    if filler:
      pictures = np.concatenate([pictures, np.repeat(pictures[:1], filler, 0)])
    inputs = self.inputs(pictures)
    if with_weights:
      logits, state = self.model.apply(
          {'params': params}, inputs, deterministic=True,
          mutable=['intermediates'])
      weights = vit.attention_weights_from(state, self.model_config)
    else:
      logits = self.model.apply({'params': params}, inputs,
                                deterministic=True)
      weights = None
    logits, weights = multihost_utils.process_allgather((logits, weights),
                                                        tiled=True)
    return (np.asarray(logits)[:count],
            None if weights is None else [w[:count] for w in weights])

  def _probabilities(self, logits: np.ndarray) -> np.ndarray:
    if self.config.train.loss == 'sigmoid':
      return np.asarray(jax.nn.sigmoid(logits))
    return np.asarray(jax.nn.softmax(logits))

  def predict(self, params: Any, pictures: np.ndarray) -> np.ndarray:
    """Class probabilities [B, classes] of uint8 pictures at the stored
    size (independent per class with the sigmoid loss)."""
    return self._probabilities(self._forward(params, pictures)[0])

  def plot_attention(self, params: Any, picture: np.ndarray, path: str
                     ) -> str | None:
    """The class token's attention over the patches for one image: each
    head of the last layer, and the rollout through all layers. Every
    process calls this; process 0 writes the PNG."""
    c = self.model_config
    if c.pooling != 'token':
      raise ValueError("Attention maps follow the class token; this model "
                       "pools with 'gap'.")
    logits, weights = self._forward(params, picture[None], with_weights=True)
    if jax.process_index() != 0:
      return None
    grid = lambda row: np.asarray(row[..., 1:]).reshape(-1, c.grid_size,
                                                        c.grid_size)
    last = grid(weights[-1][0, :, 0])
    rollout = grid(vit.attention_rollout(weights)[0, 0])
    probabilities = self._probabilities(logits)[0]
    best = int(probabilities.argmax())
    image = augment.center_crop(augment.to_unit(picture[None]),
                                c.image_size)[0]
    return plots.plot_image_attention(
        image, np.concatenate([last, rollout]),
        [f'layer {c.num_layers - 1} head {h}' for h in range(len(last))]
        + ['rollout'], path,
        suptitle=f'{self.class_names[best]} ({probabilities[best]:.2f})')

  def evaluate(self, params: Any, *, label: str) -> dict[str, float]:
    """Accuracy comes from the evaluation batches; this plots the class
    token's attention for the first held-out image."""
    if self.model_config.pooling == 'token':
      if self.config.data.stream:
        first = next(self._stream(self.config.data.eval_split,
                                  training=False))[0]
      else:
        first = self.split(self.config.data.eval_split)[0][0]
      self.plot_attention(params, first, os.path.join(
          self.workdir, 'plots', f'attention_{label}.png'))
    return {}


TASK = ImageClassificationTask
