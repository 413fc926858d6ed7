"""Vision-and-language pretraining (ViLBERT, Lu et al. 2019).

Image-caption pairs train the two-stream model (`models.vilbert`) on its
two proxy tasks:
- masked multi-modal modelling: 15% of the words masked as in BERT and
  predicted from both streams; 15% of the image regions masked (their
  features zeroed 90% of the time) and their content predicted as a
  distribution over object classes, with the KL divergence from the true
  distribution as the loss (the paper's detector class distribution; here
  the fraction of the region's pixels of each object class);
- multi-modal alignment: half the captions are swapped for another
  caption of the batch, and the model says from the joint vector (the
  product of the pooled IMG and CLS outputs) whether the caption describes
  the image.
As in the reference implementation's pretraining, the masked-modelling
losses count only aligned pairs. Masks are drawn on the device from the
step's key, so a resumed run masks exactly as an uninterrupted one;
evaluation uses one fixed masking. Swapped captions are drawn on the host
from (seed, step).

Data (`data.source`): generated scenes of coloured shapes ('offline',
`data.scenes`; no files): each image has two captions ('a red circle left
of a blue square'), and a swapped caption that happens to be true of the
image is labelled aligned. Or captioned images read as the captioning task
reads them: TFDS `coco_captions` ('tfds') or a folder of images with
captions.tsv ('folder'); these have no object classes, so a masked region's
features are regressed instead (squared error, the reference
implementation's other visual target), and a swapped caption is aligned
only if it belongs to the same image. Regions are the image's patches
(`patch_size`), each with its pixels as features and its cell as its box.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
from typing import Any, Iterable, Iterator

from absl import logging
import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import ml_collections
import numpy as np

from transformer import configs
from transformer.core import losses
from transformer.core import ranges
from transformer.data import batching
from transformer.data import sources
from transformer.data import tokenization
from transformer.data.generated import scenes
from transformer.models import encoder
from transformer.models import vilbert
from transformer.tasks import base
from transformer.tasks import vocabularies

# The kind of examples the task reads (`data.sources`).
DATA_KIND = 'captions'

# Set by the task from the data.
MODEL_EXCLUDE = ('vocab_size', 'max_length', 'feature_dim',
                 'num_region_classes', 'answer_classes')


def default_config() -> ml_collections.ConfigDict:
  """Every setting of a vision-and-language pretraining experiment."""
  config = configs.default_config()
  config.task = 'vision_language'
  config.train.label_smoothing = 0.0
  # BERT's optimiser (ViLBERT keeps it): AdamW, warmup then decay.
  config.optimizer.update(dict(schedule='cosine', learning_rate=5e-4,
                               warmup_steps=200, b2=0.999, eps=1e-6,
                               weight_decay=0.01, grad_clip_norm=1.0))
  config.data = ml_collections.ConfigDict(dict(
      source='offline',  # data.sources.names('captions'); VQA, referring: offline
      train_split='train', eval_split='test',
      num_train=20_000, num_eval=1_000, seed=0, max_objects=4,  # offline
      path='',  # folder: ROOT/SPLIT/*.png + ROOT/SPLIT/captions.tsv
      tfds_name='coco_captions', tfds_data_dir='', max_examples_per_split=0,
      # Regions: (48 / 16)^2 = 9 patches, one per slot of the scenes' 3x3 grid,
      # so that each object is one region, as a detector's boxes are.
      image_size=48, patch_size=16,
      # offline: 'word' (the scenes' grammar); else as the captioning task
      tokenizer='word', vocab_size=8_000, tokenizer_model_type='unigram',
      max_length=16,  # caption tokens with [CLS] and the final EOS
      batch_size=64, eval_batch_size=128,
      word_mask_rate=0.15, region_mask_rate=0.15,
      swap_rate=0.5,  # captions swapped for the alignment task
      # Of the swapped captions, this share are instead foils of the row's
      # own caption (one colour, shape or relation changed; generated
      # scenes only). 0: ViLBERT's in-batch swaps alone.
      hard_negative_rate=0.0))
  config.model = configs.model_section(
      vilbert.Config, exclude=MODEL_EXCLUDE, size='small', dtype='float32')
  # Retrieval among this many evaluation images at every evaluation (all
  # pairs scored: the cost grows with its square; 0 turns it off).
  config.eval.retrieval_images = 100
  return config


def image_regions(images: jax.Array, patch_size: int) -> jax.Array:
  """uint8 images [B, S, S, C] -> region features [B, R, p * p * C], the
  patches row by row, pixels in [-1, 1]."""
  b, s, _, c = images.shape
  g = s // patch_size
  x = jnp.asarray(images, jnp.float32) / 127.5 - 1.0
  x = x.reshape(b, g, patch_size, g, patch_size, c).transpose(0, 1, 3, 2, 4,
                                                                5)
  return x.reshape(b, g * g, patch_size * patch_size * c)


def region_boxes(image_size: int, patch_size: int) -> np.ndarray:
  """[R, 4] float32 boxes (x0, y0, x1, y1) of the patches, row by row."""
  g = image_size // patch_size
  row, column = np.divmod(np.arange(g * g), g)
  return np.stack([column, row, column + 1, row + 1], -1).astype(
      np.float32) / g


def region_classes(pixel_classes: jax.Array, patch_size: int,
                   num_classes: int) -> jax.Array:
  """[B, S, S] pixel classes -> [B, R, num_classes]: each patch's fraction
  of pixels of each class (background included)."""
  b, s, _ = pixel_classes.shape
  g = s // patch_size
  one_hot = jax.nn.one_hot(pixel_classes.astype(jnp.int32), num_classes)
  one_hot = one_hot.reshape(b, g, patch_size, g, patch_size, num_classes)
  return one_hot.mean(axis=(2, 4)).reshape(b, g * g, num_classes)


def mask_regions(region_mask: jax.Array, key: jax.Array, rate: float
                 ) -> tuple[jax.Array, jax.Array]:
  """ViLBERT's region masking: each real region chosen with probability
  `rate`; of those, 90% have their features zeroed and 10% are kept.

  Returns:
    chosen [B, R] bool (predicted), zeroed [B, R] bool.
  """
  choose, roll = jax.random.split(key)
  chosen = region_mask & jax.random.bernoulli(choose, rate,
                                               region_mask.shape)
  zeroed = chosen & (jax.random.uniform(roll, region_mask.shape) < 0.9)
  return chosen, zeroed


def with_cls(ids: list[list[int]], max_length: int) -> np.ndarray:
  """[N, max_length] int32 rows: [CLS] (the EOS id, as in masked language
  modelling), the ids (ending with EOS), zeros."""
  tokens = np.zeros((len(ids), max_length), np.int32)
  for row, sentence in enumerate(ids):
    if len(sentence) + 1 > max_length:
      raise ValueError(f'A text of {len(sentence)} tokens does not fit '
                       f'config.data.max_length={max_length} with [CLS]; '
                       f'raise max_length.')
    tokens[row, 0] = tokenization.EOS_ID
    tokens[row, 1:len(sentence) + 1] = sentence
  return tokens


class SceneTask(base.Task):
  """What the ViLBERT tasks on generated scenes share: the scenes' whole
  vocabulary (so that a task fine-tuned from another's workdir has its ids),
  patches as regions, and the model, whose `head` method the task trains."""

  head = 'encode'

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *,
               batch_divisor: int = 1, shapes_only: bool = False,
               **model_fields):
    self.config, self.workdir = config, workdir
    self.batch_divisor = batch_divisor
    data = config.data
    base.check_batch_sizes(data, batch_divisor)
    if data.image_size % data.patch_size:
      raise ValueError(f'config.data.image_size={data.image_size} is not a '
                       f'multiple of config.data.patch_size='
                       f'{data.patch_size}.')
    self.tokenizer = (self._stand_in() if shapes_only
                      else self._tokenizer())
    self.mask_id = self.tokenizer.vocab_size  # pretraining's [MASK]
    self.boxes = region_boxes(data.image_size, data.patch_size)
    # The embedding has the [MASK] row in every task, so that a pretrained
    # one loads.
    self.model_config = vilbert.config_for(
        config.model.size, vocab_size=self.tokenizer.vocab_size + 1,
        max_length=data.max_length, feature_dim=3 * data.patch_size**2,
        dtype=jnp.dtype(config.model.dtype),
        **{'num_region_classes': scenes.NUM_CLASSES, **model_fields},
        **configs.model_overrides(config.model, vilbert.Config,
                                  MODEL_EXCLUDE))
    self.model = vilbert.build(self.model_config)

  def _stand_in(self):
    """A `shapes_only` task's vocabulary: the words of the scenes' grammar,
    which need no data."""
    return tokenization.WordTokenizer.build(scenes.vocabulary_text())

  def _tokenizer(self) -> tokenization.WordTokenizer:
    """Words of the scenes' grammar; with `train.init_from`, that workdir's
    vocabulary, copied, so that the ids are those it was trained with."""
    if self.config.data.tokenizer != 'word':
      raise ValueError(f'config.data.tokenizer='
                       f'{self.config.data.tokenizer!r}: the scene tasks use '
                       f"'word' (the words of their grammar).")
    source = self.config.train.init_from

    def build(path: str) -> None:
      if source and not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.copyfile(os.path.join(source, 'vocab', 'words.json'), path)
      tokenization.WordTokenizer.load_or_build(path, scenes.vocabulary_text)

    return tokenization.WordTokenizer(vocabularies.in_workdir(
        self.workdir, 'words.json', build))

  def regions(self, images: jax.Array, real: jax.Array
              ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(features [B, R, F], boxes [B, R, 4], region mask [B, R]) of images
    uint8 [B, S, S, 3]; rows where `real` [B] is False have no regions."""
    features = image_regions(images, self.config.data.patch_size)
    region_mask = jnp.broadcast_to(real[:, None], features.shape[:2])
    boxes = jnp.broadcast_to(jnp.asarray(self.boxes),
                             (*features.shape[:2], 4))
    return features, boxes, region_mask

  # What a supervised scene task defines (VQA, referring expressions):
  # `split(name)` -> a tuple whose [1] is the [N, max_length] token ids, and
  # `_batch(split, rows, filler)`; then these batch it.

  def train_iter(self, start_step: int) -> Iterator[dict[str, np.ndarray]]:
    data = self.config.data
    count = len(self.split(data.train_split)[1])
    self.split(data.eval_split)  # a wrong split fails now, not later
    print(f'Training data: {count:,} {self.unit}, '
          f'{count / data.batch_size:,.1f} batches of {data.batch_size} per '
          f'epoch.', flush=True)
    for rows in batching.epoch_indices(count, batch_size=data.batch_size,
                                       seed=self.config.seed,
                                       start_step=start_step):
      yield self._batch(data.train_split, rows)

  def eval_batches(self) -> Iterable[dict[str, np.ndarray]]:
    """Every evaluation example once, filler rows (no tokens) last."""
    data = self.config.data
    count = len(self.split(data.eval_split)[1])
    for begin in range(0, count, data.eval_batch_size):
      rows = np.arange(begin, min(begin + data.eval_batch_size, count))
      yield self._batch(data.eval_split, rows,
                        filler=-len(rows) % self.batch_divisor)

  def init(self, rng: jax.Array) -> Any:
    r = len(self.boxes)
    return self.model.init(
        {'params': rng}, jnp.ones((1, 4), jnp.int32),
        jnp.zeros((1, r, self.model_config.feature_dim)),
        jnp.asarray(self.boxes)[None], jnp.ones((1, r), bool),
        deterministic=True, method=self.head)['params']


@dataclasses.dataclass(frozen=True)
class CaptionedImages:
  """Images read from files: no object classes, so no pixel classes."""
  images: np.ndarray  # uint8 [N, S, S, 3]
  pixel_classes: None = None


class VisionLanguageTask(SceneTask):
  """The `transformer.tasks.Task` for ViLBERT pretraining."""

  unit = 'pairs'
  head = 'pretraining_logits'

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *,
               batch_divisor: int = 1, shapes_only: bool = False):
    data = config.data
    for name in ('word_mask_rate', 'region_mask_rate', 'swap_rate'):
      ranges.check(f'config.data.{name}', data[name], low=0, high=1)
    ranges.check('config.data.hard_negative_rate',
                 data.get('hard_negative_rate', 0.0), low=0, high=1,
                 high_in=True)
    if data.source not in sources.names('captions'):
      raise ValueError(f'config.data.source={data.source!r}; choose one of '
                       f"{sources.names('captions')}.")
    if data.get('hard_negative_rate', 0.0) and data.source != 'offline':
      raise ValueError(
          f'config.data.hard_negative_rate={data.hard_negative_rate}: foils '
          "are made from the generated scenes' captions only; set it to 0 "
          f'for source {data.source!r}.')
    # Masked regions predict their class distribution where the data has
    # classes (the generated scenes), else their features.
    self.generated = data.source == 'offline'
    fields = {} if self.generated else {
        'num_region_classes': 3 * data.patch_size**2}
    super().__init__(config, workdir, batch_divisor=batch_divisor,
                     shapes_only=shapes_only, **fields)

  def _stand_in(self):
    return (super()._stand_in() if self.generated
            else vocabularies.stand_in(self.config.data))

  def _tokenizer(self):
    """The scenes' words; for captions read from files, the tokenizer
    `data.tokenizer` built from the training captions (or copied from
    `train.init_from`), as the captioning task builds it."""
    if self.generated:
      return super()._tokenizer()
    if self.config.train.init_from:
      vocabularies.copy_from(self.config.train.init_from, self.workdir)
    return vocabularies.text_tokenizer(
        self.config.data, self.workdir,
        lambda: [c for refs in self._read(self.config.data.train_split)[1]
                 for c in refs])

  @functools.cache
  def _read(self, split: str):
    """(images with pixel classes or CaptionedImages, per image its
    captions, per image its objects or None)."""
    data = self.config.data
    if self.generated:
      drawn, references = sources.read('scenes', data, split,
                                       generate=scenes.captioned,
                                       what='offline scenes')
      return drawn, references, [drawn.objects(i)
                                 for i in range(len(references))]
    images, references = sources.read('captions', data, split)
    if not len(images):
      raise ValueError(f'The {split!r} split has no captioned images.')
    return CaptionedImages(images), references, None

  @functools.cache
  def split(self, split: str):
    """(images, their objects or None, caption ids [P, max_length] with
    [CLS] first, image index [P] of each caption). Captions too long for
    max_length are cut (EOS kept) and counted."""
    drawn, references, objects = self._read(split)
    index = np.asarray([i for i, refs in enumerate(references)
                        for _ in refs], np.int64)
    ids = self.tokenizer.encode_batch([r for refs in references
                                       for r in refs])
    room = self.config.data.max_length - 1  # [CLS] first
    long = sum(len(t) > room for t in ids)
    if long:
      logging.warning('Truncated %d of %d %s captions to max_length=%d '
                      'tokens with [CLS].', long, len(ids), split, room + 1)
      ids = [batching.truncate_keeping_eos(t, room) for t in ids]
    return drawn, objects, with_cls(ids, self.config.data.max_length), index

  @functools.cache
  def foils(self, split: str) -> np.ndarray:
    """Per caption of `split` (in `split`'s order) one foil of it
    (`scenes.foil`), as ids [P, max_length] with [CLS] first; fixed by the
    data seed."""
    _, references, _ = self._read(split)
    rng = np.random.default_rng([self.config.data.seed, 3_517,
                                 split == self.config.data.train_split])
    return with_cls(self.tokenizer.encode_batch(
        [scenes.foil(r, rng) for refs in references for r in refs]),
                    self.config.data.max_length)

  def _batch(self, split: str, rows: np.ndarray, rng: np.random.Generator,
             filler: int = 0) -> dict[str, np.ndarray]:
    """Pairs `rows` of a split, a `swap_rate` share of their captions
    swapped for another row's; `filler` empty rows after them."""
    drawn, objects, tokens, index = self.split(split)
    images = index[rows]
    captions = rows.copy()
    swapped = rng.random(len(rows)) < self.config.data.swap_rate
    if len(rows) > 1:
      other = (np.arange(len(rows)) + rng.integers(1, len(rows),
                                                   len(rows))) % len(rows)
      captions = np.where(swapped, rows[other], rows)
    chosen = tokens[captions]
    hard_rate = self.config.data.get('hard_negative_rate', 0.0)
    # Drawn only when used: runs without foils keep their batches.
    hard = (swapped & (rng.random(len(rows)) < hard_rate) if hard_rate
            else np.zeros(len(rows), bool))
    if hard.any():  # foils exist for generated scenes only
      chosen[hard] = self.foils(split)[rows[hard]]
    # A swapped caption of the same image, or (scenes) one true of it, is
    # aligned.
    aligned = (index[captions] == images) & ~hard
    if objects is not None:
      sentences = [self.tokenizer.decode(t[1:]) for t in chosen]
      aligned |= np.asarray([scenes.describes(sentences[i], objects[images[i]])
                             for i in range(len(rows))], bool)
    pad = lambda x: np.concatenate([x, np.zeros((filler, *x.shape[1:]),
                                                x.dtype)])
    batch = {'tokens': pad(chosen),
             'images': pad(drawn.images[images]),
             'aligned': pad(aligned.astype(np.int32)),
             'real': pad(np.ones(len(rows), np.int32))}
    if drawn.pixel_classes is not None:
      batch['pixel_classes'] = pad(drawn.pixel_classes[images])
    return batch

  # -- Task interface -------------------------------------------------------

  def train_iter(self, start_step: int) -> Iterator[dict[str, np.ndarray]]:
    data = self.config.data
    _, _, tokens, _ = self.split(data.train_split)
    self.split(data.eval_split)  # a wrong split fails now, not later
    print(f'Training data: {len(tokens):,} image-caption pairs, '
          f'{len(tokens) / data.batch_size:,.1f} batches of '
          f'{data.batch_size} per epoch.', flush=True)
    for step, rows in enumerate(batching.epoch_indices(
        len(tokens), batch_size=data.batch_size, seed=self.config.seed,
        start_step=start_step), start_step):
      yield self._batch(data.train_split, rows, np.random.default_rng(
          [self.config.seed, step, 1]))

  def train_batch_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
    """Captions, images, whether each caption is its image's, real-row
    flags and, for the generated scenes, each pixel's class."""
    data, side = self.config.data, self.config.data.image_size
    pixels = {'pixel_classes': ((side, side), 'uint8')} if self.generated \
        else {}
    return base.batch_shapes(
        data.batch_size, tokens=((data.max_length,), 'int32'),
        images=((side, side, 3), 'uint8'), aligned=((), 'int32'),
        real=((), 'int32'), **pixels)

  def eval_batches(self) -> Iterable[dict[str, np.ndarray]]:
    """Every evaluation pair once, the same swaps every time."""
    data = self.config.data
    _, _, tokens, _ = self.split(data.eval_split)
    size = data.eval_batch_size
    for number, begin in enumerate(range(0, len(tokens), size)):
      rows = np.arange(begin, min(begin + size, len(tokens)))
      yield self._batch(data.eval_split, rows,
                        np.random.default_rng([self.config.seed, number, 2]),
                        filler=-len(rows) % self.batch_divisor)

  def loss(self, params: Any, batch: dict[str, jax.Array],
           rng: jax.Array | None, *, deterministic: bool):
    """The sum of the three objectives' means; metric sums of each."""
    data = self.config.data
    if rng is None:  # evaluation: the same masks every time
      word_key, region_key = jax.random.split(jax.random.key(
          self.config.seed))
      dropout_key = None
    else:
      word_key, region_key, dropout_key = jax.random.split(rng, 3)
    aligned = batch['aligned'].astype(bool)
    real = batch['real'].astype(bool)
    inputs, word_targets = encoder.mask_tokens(
        batch['tokens'], word_key, vocab_size=self.tokenizer.vocab_size,
        mask_id=self.mask_id, rate=data.word_mask_rate)
    original, boxes, region_mask = self.regions(batch['images'], real)
    chosen, zeroed = mask_regions(region_mask, region_key,
                                  data.region_mask_rate)
    features = jnp.where(zeroed[..., None], 0.0, original)
    out = self.model.apply(
        {'params': params}, inputs, features, boxes, region_mask,
        deterministic=deterministic, method='pretraining_logits',
        rngs=None if dropout_key is None else {'dropout': dropout_key})
    # Masked modelling counts aligned pairs only.
    word_sums = losses.token_sums(out['words'], jnp.where(
        aligned[:, None], word_targets, 0), 0.0)
    if self.generated:
      region_name = 'region_kl'
      targets = region_classes(batch['pixel_classes'], data.patch_size,
                               scenes.NUM_CLASSES)
      log_predicted = jax.nn.log_softmax(out['regions'])
      region_loss = (targets * (jnp.log(jnp.maximum(targets, 1e-12))
                                - log_predicted)).sum(-1)
    else:
      region_name = 'region_mse'
      region_loss = jnp.square(out['regions'] - original).mean(-1)
    counted = (chosen & aligned[:, None]).astype(jnp.float32)
    logit, label = out['aligned'], aligned.astype(jnp.float32)
    bce = jnp.logaddexp(0.0, logit) - label * logit
    weight = real.astype(jnp.float32)
    sums = {
        'mlm_loss': word_sums['loss'],
        'mlm_accuracy': word_sums['accuracy'],
        region_name: ((region_loss * counted).sum(), counted.sum()),
        'alignment_loss': ((bce * weight).sum(), weight.sum()),
        'alignment_accuracy': ((((logit > 0) == aligned) * weight).sum(),
                               weight.sum()),
    }
    total = sum(losses.mean(sums, name) for name in
                ('mlm_loss', region_name, 'alignment_loss'))
    sums['loss'] = (total * weight.sum(), weight.sum())  # counts pairs
    return total, sums

  @functools.partial(jax.jit, static_argnums=(0,))
  def _alignment(self, params, tokens, images):
    features, boxes, region_mask = self.regions(images, tokens[:, 0] > 0)
    return self.model.apply(
        {'params': params}, tokens, features, boxes, region_mask,
        deterministic=True, method='pretraining_logits')['aligned']

  def alignment_scores(self, params: Any, tokens: np.ndarray,
                       images: np.ndarray) -> np.ndarray:
    """[C, I] alignment logits of every caption (rows of `tokens`) with
    every image, in batches of eval_batch_size pairs."""
    captions, pictures = np.meshgrid(np.arange(len(tokens)),
                                     np.arange(len(images)), indexing='ij')
    captions, pictures = captions.ravel(), pictures.ravel()
    size, scores = self.config.data.eval_batch_size, []
    for begin in range(0, len(captions), size):
      rows = slice(begin, begin + size)
      filler = size - len(captions[rows])
      pad = lambda x: np.concatenate([x, np.zeros((filler, *x.shape[1:]),
                                                  x.dtype)])
      logits = self._alignment(params, pad(tokens[captions[rows]]),
                               pad(images[pictures[rows]]))
      scores.append(np.asarray(multihost_utils.process_allgather(
          logits, tiled=True))[:size - filler])
    return np.concatenate(scores).reshape(len(tokens), len(images))

  def evaluate(self, params: Any, *, label: str) -> dict[str, float]:
    """Caption-based image retrieval and image-based caption retrieval
    among the first `eval.retrieval_images` evaluation images (each with
    its first caption), ranked by the alignment score: recall at 1, 5, 10
    (the masked-modelling and alignment metrics come from the evaluation
    batches)."""
    del label
    count = self.config.eval.retrieval_images
    if not count:
      return {}
    drawn, _, tokens, index = self.split(self.config.data.eval_split)
    count = min(count, len(drawn.images))
    first = np.searchsorted(index, np.arange(count))  # each's first caption
    scores = self.alignment_scores(params, tokens[first],
                                   drawn.images[:count])
    result = {}
    for name, matrix in (('image', scores), ('caption', scores.T)):
      # The rank of the true match in each row (0 = first); a tie counts
      # against it, so that a constant score recalls nothing early.
      true = np.diag(matrix)[:, None]
      ranks = (matrix >= true).sum(1) - 1
      for k in (1, 5, 10):
        result[f'{name}_retrieval_r{k}'] = float((ranks < k).mean())
    print(f'Retrieval among {count} images: caption -> image R@1/5/10 '
          f'{result["image_retrieval_r1"]:.1%} / '
          f'{result["image_retrieval_r5"]:.1%} / '
          f'{result["image_retrieval_r10"]:.1%}; image -> caption '
          f'{result["caption_retrieval_r1"]:.1%} / '
          f'{result["caption_retrieval_r5"]:.1%} / '
          f'{result["caption_retrieval_r10"]:.1%}.', flush=True)
    return result


TASK = VisionLanguageTask
