"""Image classification with the Vision Transformer.

Sources (`config.data.source`, `data.image_batches`): 'offline' (generated
shapes, no files), 'mnist' (the original idx files in `path`), 'folder'
(`path/split/class/*.png|jpg`) and 'tfds' (cifar10, cifar100, mnist, ...
prepared with `tfds build`; `stream=True` decodes imagenet2012 on the fly).
Batches are uint8; the accelerator augments them inside the jitted step
(random crop with padding or random resized crop, flips, RandAugment, mixup;
`data.augment`) with the step's key, so resumed runs see exactly the same
inputs.
Metrics: loss, top-1 and top-5 accuracy on the (centre-cropped) held-out
split.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Iterable, Iterator

import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from transformer import configs
from transformer import layers
from transformer import storage
from transformer.data import augment
from transformer.data import image_batches
from transformer.data import images as image_data
from transformer.models import vit
from transformer.tasks import base

# The kind of examples the task reads (`data.sources`).
DATA_KIND = 'images'

# Set by the task from the data, or by the size name ('mu/4': patch 4).
MODEL_EXCLUDE = ('image_size', 'num_channels', 'num_classes', 'patch_size')
CROPS = ('none', 'pad', 'resized')
# Class names and channels of the training data, kept in the workdir so that
# predictions need neither the dataset nor the time to read it.
DATASET_FILE = 'dataset.json'
# The colour channels images are read with: grey or RGB.
CHANNELS = (1, 3)
LOSSES = ('softmax', 'sigmoid')


def default_config() -> ml_collections.ConfigDict:
  """Every setting of an image-classification experiment."""
  config = configs.default_config()
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
      randaugment_layers=0, randaugment_magnitude=10, mixup_alpha=0.0,
      # The classes and colour channels of the data, for a plan
      # (`transformer.plan`), which reads none; 0: as the data has them
      # (the offline shapes and MNIST are known without reading). A run
      # refuses data that has others.
      num_classes=0, channels=0))
  # The reference ViTs decay kernels only: not the class token or positions.
  config.optimizer.weight_decay_skip = (r"'cls'", r"'pos_embedding'")
  config.model = configs.model_section(
      vit.Config, exclude=MODEL_EXCLUDE, size='mu/4', dtype='float32')
  return config



def _read_dataset_info(path: str) -> tuple[tuple[str, ...], int]:
  """(class names, channels) from a workdir's dataset.json, which is refused
  naming it unless it holds a list of names and a channel count."""
  try:
    info = json.loads(storage.read_text(path))
  except (UnicodeDecodeError, json.JSONDecodeError):
    info = None  # refused below, as other damage
  if not (isinstance(info, dict) and isinstance(info.get('classes'), list)
          and info['classes'] and info.get('channels') in CHANNELS):
    raise ValueError(
        f'{path} is damaged: it must hold {{"classes": [names...], '
        f'"channels": 1 or 3}} as training wrote it. Restore it (the class '
        f'order is the one the checkpoints were trained with).')
  return tuple(info['classes']), info['channels']


# Classes and channels of the sources that need no reading to know them.
_KNOWN_CLASSES = {'offline': (len(image_data.SHAPES), 3), 'mnist': (10, 1)}


def _configured_classes(data: ml_collections.ConfigDict
                        ) -> tuple[tuple[str, ...], int]:
  """(class names, channels) of a `shapes_only` task: config.data's
  num_classes and channels, or the source's own where it is known."""
  count, channels = _KNOWN_CLASSES.get(data.source, (0, 0))
  count, channels = data.num_classes or count, data.channels or channels
  if not count or channels not in CHANNELS:
    raise ValueError(
        f'The classes of config.data.source={data.source!r} come from its '
        f'data, which a plan does not read: set --config.data.num_classes=N '
        f'and --config.data.channels=1 or 3.')
  return tuple(str(i) for i in range(count)), channels


class ImageClassificationTask(base.Task):
  """The `transformer.tasks.Task` for image classification."""

  unit = 'images'

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *,
               batch_divisor: int = 1, shapes_only: bool = False):
    self.config, self.workdir = config, workdir
    self.batch_divisor = batch_divisor
    data = config.data
    if data.crop not in CROPS:
      raise ValueError(f'config.data.crop={data.crop!r}; choose one of '
                       f'{CROPS}.')
    if config.train.loss not in LOSSES:
      raise ValueError(f'config.train.loss={config.train.loss!r}; choose one '
                       f'of {LOSSES}.')
    if data.load_size and data.load_size < data.image_size:
      raise ValueError(f'config.data.load_size={data.load_size} is below '
                       f'image_size={data.image_size}; images are cropped, '
                       f'never padded, to the model size.')
    base.check_batch_sizes(data, batch_divisor)
    source = (image_batches.StreamedImages if data.stream
              else image_batches.InMemoryImages)
    self.images = source(data, seed=config.seed, row_multiple=batch_divisor)
    self.class_names, self.num_channels = (
        _configured_classes(data) if shapes_only else self._dataset_info())
    self.model_config = vit.config_for(
        config.model.size, image_size=data.image_size,
        num_channels=self.num_channels, num_classes=len(self.class_names),
        dtype=jnp.dtype(config.model.dtype),
        **configs.model_overrides(config.model, vit.Config, MODEL_EXCLUDE))
    self.model = vit.build(self.model_config)

  def _dataset_info(self) -> tuple[tuple[str, ...], int]:
    """Class names and channels: from the workdir, or from the training
    data (then written to the workdir)."""
    path = storage.join(self.workdir, DATASET_FILE)
    if storage.exists(path):
      return _read_dataset_info(path)
    names, channels = self.images.classes()
    data = self.config.data
    for field, wanted, found in (('num_classes', data.num_classes,
                                  len(names)),
                                 ('channels', data.channels, channels)):
      if wanted and wanted != found:
        raise ValueError(f'config.data.{field}={wanted}, but the training '
                         f'data has {found}: set {found}, or 0 to take the '
                         f"data's.")
    if jax.process_index() == 0:
      storage.write_atomically(path, json.dumps(
          {'classes': list(names), 'channels': channels}))
    return tuple(names), channels

  def adapt_pretrained(self, loaded: dict[str, Any], params: dict[str, Any],
                       source: base.Task) -> dict[str, Any]:
    """Pretrained parameters made to fit this model: position embeddings
    resampled to this resolution's patch grid, the patch embedding adapted
    to this model's colour channels (`vit.adapt_channels`), and the
    classifier left out (so it starts at zero) when the classes differ."""
    if source.config.task != 'image_classification':
      raise ValueError(f'config.train.init_from={source.workdir} trained a '
                       f'{source.config.task!r} task; fine-tune from an '
                       f'image_classification workdir.')
    loaded = dict(loaded)
    if 'embedding' in loaded and source.num_channels != self.num_channels:
      loaded['embedding'] = dict(loaded['embedding'])
      loaded['embedding']['kernel'] = vit.adapt_channels(
          loaded['embedding']['kernel'], source.num_channels,
          self.model_config)
      print(f'Patch embedding adapted from {source.num_channels} to '
            f'{self.num_channels} input channels.', flush=True)
    if ('pos_embedding' in loaded and 'pos_embedding' in params and
        loaded['pos_embedding'].shape != params['pos_embedding'].shape):
      old = loaded['pos_embedding'].shape
      loaded['pos_embedding'] = vit.resize_position_embedding(
          jnp.asarray(loaded['pos_embedding']), self.model_config.grid_size,
          has_class_token=self.model_config.pooling == 'token')
      print(f'Position embeddings resized from {old} to '
            f'{loaded["pos_embedding"].shape}.', flush=True)
    if 'head' in loaded and source.class_names != self.class_names:
      print(f'The classifier starts at zero: classes {list(self.class_names)}'
            f' here, {list(source.class_names)} in the pretrained model.',
            flush=True)
      del loaded['head']
    return loaded

  def init(self, rng: jax.Array) -> Any:
    c = self.model_config
    images = jnp.zeros((1, c.image_size, c.image_size, c.num_channels))
    return self.model.init({'params': rng}, images,
                           deterministic=True)['params']

  def train_iter(self, start_step: int) -> Iterator[dict[str, np.ndarray]]:
    return self.images.train_batches(start_step, self.class_names)

  def eval_batches(self) -> Iterable[dict[str, np.ndarray]]:
    return self.images.eval_batches(self.class_names)

  def train_batch_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
    """uint8 images at the side they are stored at (cropped on the device)
    and int32 labels."""
    data = self.config.data
    side = data.image_size if data.stream else (data.load_size or
                                                data.image_size)
    return base.batch_shapes(
        data.batch_size, images=((side, side, self.num_channels), 'uint8'),
        labels=((), 'int32'))

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

  @functools.partial(jax.jit, static_argnums=(0,),
                     static_argnames=('with_weights',))
  def _logits(self, params, inputs, *, with_weights: bool):
    """Compiled (op by op, a forward pass compiles each op apart)."""
    if not with_weights:
      return self.model.apply({'params': params}, inputs,
                              deterministic=True), None
    logits, state = self.model.apply({'params': params}, inputs,
                                     deterministic=True,
                                     mutable=['intermediates'])
    return logits, [w for name, w in layers.attention_weights(
        state['intermediates']).items() if name.startswith('encoder/')]

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
    logits, weights = multihost_utils.process_allgather(
        self._logits(params, self.inputs(pictures), with_weights=with_weights),
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

  def patch_attention(self, params: Any, picture: np.ndarray
                      ) -> tuple[np.ndarray, list[str], np.ndarray]:
    """For one uint8 picture at the stored size: every layer's and head's
    self-attention over the patches (and the class token) [L, N, T, T],
    the T labels, and the picture the model saw ([H, W, C] in [0, 1])."""
    c = self.model_config
    _, weights = self._forward(params, picture[None], with_weights=True)
    stacked = np.stack([np.asarray(w[0]) for w in weights])
    first = 1 if c.pooling == 'token' else 0
    labels = ['[CLS]'] * first + [f'patch {row},{column}'
                                  for row in range(c.grid_size)
                                  for column in range(c.grid_size)]
    if len(labels) != stacked.shape[-1]:
      raise ValueError(f'{stacked.shape[-1]} tokens for {len(labels)} '
                       f'patches and class token: not a plain ViT.')
    image = augment.center_crop(augment.to_unit(picture[None]),
                                c.image_size)[0]
    return stacked, labels, np.asarray(image)

  def evaluate(self, params: Any, *, label: str) -> dict[str, float]:
    """Accuracy comes from the evaluation batches; the figure is the
    class token's attention for the first held-out image."""
    if self.model_config.pooling == 'token':
      self.write_figures(params, label, picture=self.images.first_eval_image(
          self.class_names))
    return {}


TASK = ImageClassificationTask
