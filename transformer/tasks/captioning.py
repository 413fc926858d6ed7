"""Image captioning: Show, Attend and Tell, and a Transformer captioner.

Data: generated scenes of two coloured shapes whose captions say which is
where ('a red circle left of a blue square'; `data.captions`), a local
folder (images and captions.tsv), or TFDS `coco_captions`. Every reference
caption of a training image is a training pair. Evaluation: the loss on the
evaluation pairs, then captions decoded (greedy or beam search) for the
evaluation images, BLEU-1..4 against all their references (sacreBLEU),
exact match, and for a few images a figure of the attention over the image
for each generated word.
"""

from __future__ import annotations

import functools
from typing import Any, Iterable, Iterator

from absl import logging
import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import ml_collections
import numpy as np

from transformer import configs
from transformer import decoding
from transformer import layers
from transformer import metrics
from transformer.core import losses
from transformer.data import batching
from transformer.data import sources
from transformer.data import tokenization
from transformer.models import captioning
from transformer.tasks import base
from transformer.tasks import vocabularies

# The kind of examples the task reads (`data.sources`).
DATA_KIND = 'captions'

# Set by the task from the data.
MODEL_EXCLUDE = ('vocab_size', 'max_length', 'image_size', 'num_channels')


def default_config() -> ml_collections.ConfigDict:
  """Every setting of a captioning experiment."""
  config = configs.default_config()
  config.task = 'captioning'
  config.train.label_smoothing = 0.0
  # lambda of Xu et al.'s doubly stochastic attention (Show, Attend and Tell
  # only; 0 turns it off).
  config.train.doubly_stochastic = 1.0
  config.optimizer.update(dict(schedule='cosine', learning_rate=1e-3,
                               warmup_steps=200, b2=0.999, eps=1e-8,
                               grad_clip_norm=1.0,
                               end_learning_rate_ratio=0.01))
  config.data = ml_collections.ConfigDict(dict(
      source='offline',  # data.sources.names('captions')
      train_split='train', eval_split='test',
      num_train=10_000, num_eval=500, seed=0,  # offline scenes
      path='',  # folder: ROOT/SPLIT/*.png + ROOT/SPLIT/captions.tsv
      tfds_name='coco_captions', tfds_data_dir='', max_examples_per_split=0,
      image_size=32,
      tokenizer='word',  # 'word' | 'sentencepiece' | 'char' | 'byte'
      vocab_size=8_000, tokenizer_model_type='unigram',  # sentencepiece
      max_length=24,  # caption tokens, EOS included; longer ones truncated
      batch_size=64, eval_batch_size=128))
  config.model = configs.model_section(
      captioning.Config, exclude=MODEL_EXCLUDE, size='small', dtype='float32')
  config.eval.update(dict(beam_size=1, length_penalty=0.6,
                          num_examples=0,  # captioned images; 0: all
                          num_print=3, num_plots=2))
  return config


class CaptioningTask(base.Task):
  """The `transformer.tasks.Task` for image captioning."""

  unit = 'tokens'

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *,
               batch_divisor: int = 1, shapes_only: bool = False):
    self.config, self.workdir = config, workdir
    self.batch_divisor = batch_divisor
    data = config.data
    base.check_batch_sizes(data, batch_divisor)
    self.tokenizer = vocabularies.stand_in(data) if shapes_only else (
        vocabularies.text_tokenizer(
            data, workdir, lambda: [caption for refs in
                                    self.split(data.train_split)[1]
                                    for caption in refs]))
    self.model_config = captioning.config_for(
        config.model.size, vocab_size=self.tokenizer.vocab_size,
        max_length=data.max_length, image_size=data.image_size,
        dtype=jnp.dtype(config.model.dtype),
        **configs.model_overrides(config.model, captioning.Config,
                                  MODEL_EXCLUDE))
    self.model = captioning.build(self.model_config)
    self.decoder = captioning.build(self.model_config, decode=True)

  @functools.cache
  def split(self, split: str) -> tuple[np.ndarray, list[list[str]]]:
    images, references = sources.read('captions', self.config.data, split)
    if not len(images):
      raise ValueError(f'The {split!r} split has no captioned images.')
    return images, references

  @functools.cache
  def pairs(self, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(image index [P], caption ids [P, max_length]) for every reference;
    longer captions are cut (EOS kept) and counted."""
    _, references = self.split(split)
    limit = self.config.data.max_length
    index = np.asarray([i for i, refs in enumerate(references)
                        for _ in refs], np.int64)
    ids = self.tokenizer.encode_batch([r for refs in references
                                       for r in refs])
    long = sum(len(t) > limit for t in ids)
    if long:
      logging.warning('Truncated %d of %d %s captions to max_length=%d '
                      'tokens.', long, len(ids), split, limit)
    targets = np.zeros((len(ids), limit), np.int32)
    for row, tokens in enumerate(ids):
      tokens = batching.truncate_keeping_eos(tokens, limit)
      targets[row, :len(tokens)] = tokens
    return index, targets

  # -- Task interface -------------------------------------------------------

  def init(self, rng: jax.Array) -> Any:
    c = self.model_config
    images = jnp.zeros((1, c.image_size, c.image_size, c.num_channels))
    return self.model.init({'params': rng}, images,
                           jnp.ones((1, 4), jnp.int32),
                           deterministic=True)['params']

  def train_iter(self, start_step: int) -> Iterator[dict[str, np.ndarray]]:
    """Batches of (image, caption) pairs (`batching.epoch_indices`: each
    epoch a fresh permutation of all pairs, any step restarts exactly)."""
    images, _ = self.split(self.config.data.train_split)
    index, targets = self.pairs(self.config.data.train_split)
    size, count = self.config.data.batch_size, len(index)
    print(f'Training data: {len(images):,} images, {count:,} captions, '
          f'{count / size:,.1f} batches of {size} per epoch.', flush=True)
    for rows in batching.epoch_indices(count, batch_size=size,
                                       seed=self.config.seed,
                                       start_step=start_step):
      yield {'images': images[index[rows]], 'targets': targets[rows]}

  def train_batch_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
    data = self.config.data
    return base.batch_shapes(
        data.batch_size,
        images=((data.image_size, data.image_size, 3), 'uint8'),
        targets=((data.max_length,), 'int32'))

  def eval_batches(self) -> Iterable[dict[str, np.ndarray]]:
    """Every evaluation pair once; filler rows have no target tokens."""
    images, _ = self.split(self.config.data.eval_split)
    index, targets = self.pairs(self.config.data.eval_split)
    size = self.config.data.eval_batch_size
    for begin in range(0, len(index), size):
      rows = np.arange(begin, min(begin + size, len(index)))
      filler = -len(rows) % self.batch_divisor
      batch_images = images[index[rows]]
      batch_targets = targets[rows]
      if filler:
        batch_images = np.concatenate(
            [batch_images, np.zeros((filler, *images.shape[1:]), np.uint8)])
        batch_targets = np.concatenate(
            [batch_targets, np.zeros((filler, targets.shape[1]), np.int32)])
      yield {'images': batch_images, 'targets': batch_targets}

  def loss(self, params: Any, batch: dict[str, jax.Array],
           rng: jax.Array | None, *, deterministic: bool):
    """Mean token cross-entropy (plus Xu et al.'s attention penalty for
    Show, Attend and Tell), and metric sums."""
    images, targets = _pixels(batch['images']), batch['targets']
    logits, state = self.model.apply(
        {'params': params}, images, targets, deterministic=deterministic,
        rngs=None if rng is None else {'dropout': rng},
        mutable=['intermediates'])
    sums = losses.token_sums(logits, targets,
                             self.config.train.label_smoothing)
    total, count = sums.pop('loss')
    weights = (targets > 0).astype(jnp.float32)
    strength = self.config.train.doubly_stochastic
    if self.model_config.model == 'show_attend_tell':
      # sum_i (1 - sum_t a_{t,i})^2 per caption, over its real words.
      alphas = state['intermediates']['attention_weights'][0]
      coverage = (alphas * weights[..., None]).sum(axis=1)
      penalty = ((1.0 - coverage)**2).sum(-1) * (weights.sum(-1) > 0)
      sums['attention_penalty'] = (penalty.sum(),
                                   (weights.sum(-1) > 0).sum())
      total = total + strength * penalty.sum()
    sums['loss'] = (total, count)
    return losses.mean(sums), sums

  # -- Captioning -------------------------------------------------------------

  @functools.partial(jax.jit, static_argnums=(0,),
                     static_argnames=('beam_size',))
  def _search(self, params, images, *, beam_size: int, length_penalty: float):
    state = captioning.init_decoding(self.decoder, params, _pixels(images),
                                     beam_size)
    step_fn = functools.partial(captioning.decoding_step, self.decoder,
                                params)
    batch, length = images.shape[0], self.config.data.max_length
    if beam_size == 1:
      return decoding.greedy_search(step_fn, state, batch_size=batch,
                                    max_length=length,
                                    eos_id=tokenization.EOS_ID)[0]
    sequences, _ = decoding.beam_search(
        step_fn, state, batch_size=batch, beam_size=beam_size,
        max_length=length, eos_id=tokenization.EOS_ID, alpha=length_penalty)
    return sequences[:, 0]

  def search_program(self):
    """Beam search over an evaluation batch of images (`_search`)."""
    data, cfg = self.config.data, self.config.eval
    rows = batching.round_up(data.eval_batch_size, self.batch_divisor)
    search = functools.partial(self._search, beam_size=cfg.beam_size,
                               length_penalty=cfg.length_penalty)
    return search, base.batch_shapes(
        rows, images=((data.image_size, data.image_size, 3), 'uint8'))

  def caption(self, params: Any, images: np.ndarray, *, beam_size: int,
              length_penalty: float) -> np.ndarray:
    """Token ids [N, max_length] of captions for images uint8 [N, S, S, 3].
    Every process passes the same images."""
    count = len(images)
    outputs = []
    size = self.config.data.eval_batch_size
    for begin in range(0, count, size):
      chunk = images[begin:begin + size]
      filler = -len(chunk) % self.batch_divisor
      if filler:
        chunk = np.concatenate([chunk, np.repeat(chunk[:1], filler, 0)])
      tokens = self._search(params, chunk, beam_size=beam_size,
                            length_penalty=length_penalty)
      # Rows may live on other hosts' devices.
      outputs.append(np.asarray(multihost_utils.process_allgather(
          tokens, tiled=True))[:len(chunk) - filler])
    return np.concatenate(outputs)

  @functools.partial(jax.jit, static_argnums=(0,))
  def attention_weights(self, params, images, tokens):
    """Every attention layer's weights while the model reads the caption
    `tokens` of `images` (teacher forcing): {path: [B, N, T, S]}."""
    _, state = self.model.apply({'params': params}, _pixels(images), tokens,
                                deterministic=True, mutable=['intermediates'])
    return layers.attention_weights(state['intermediates'])

  def evaluate(self, params: Any, *, label: str) -> dict[str, float]:
    """BLEU-1..4 and exact match of captions of the evaluation images,
    and attention figures for the first few."""
    cfg = self.config.eval
    images, references = self.split(self.config.data.eval_split)
    limit = cfg.num_examples or len(images)
    images, references = images[:limit], references[:limit]
    tokens = self.caption(params, images, beam_size=cfg.beam_size,
                          length_penalty=cfg.length_penalty)
    hypotheses = [self.tokenizer.decode(t) for t in tokens]
    result = metrics.multi_reference_bleu(hypotheses, references)
    result['exact_match'] = float(np.mean(
        [h in refs for h, refs in zip(hypotheses, references)]))
    print(f'BLEU-1..4 {result["bleu1"]:.1f} / {result["bleu2"]:.1f} / '
          f'{result["bleu3"]:.1f} / {result["bleu4"]:.1f}; exact match '
          f'{result["exact_match"]:.1%} on {len(images)} images.', flush=True)
    for hypothesis, refs in list(zip(hypotheses, references))[:cfg.num_print]:
      print(f'  HYP {hypothesis}\n  REF {" | ".join(refs)}')
    self.write_figures(params, label, images=images[:cfg.num_plots],
                       tokens=tokens[:cfg.num_plots])
    return result

  def word_attention(self, params: Any, images: np.ndarray,
                     tokens: np.ndarray) -> np.ndarray:
    """The attention of each caption position over the image grid, [B, T,
    g, g], for uint8 images [B, S, S, 3] and their captions [B, T]."""
    weights = captioning.word_attention(
        self.model, params, _pixels(images), jnp.asarray(tokens))
    return np.asarray(multihost_utils.process_allgather(weights,
                                                        tiled=True))

def _pixels(images: jax.Array) -> jax.Array:
  """uint8 [0, 255] -> float32 [-1, 1]."""
  return jnp.asarray(images, jnp.float32) / 127.5 - 1.0


TASK = CaptioningTask
