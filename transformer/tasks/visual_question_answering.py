"""Visual question answering on generated scenes, with ViLBERT.

Questions about colour, shape, count, relative position and existence
('what colour is the shape left of the square?', 'how many triangles are
there?'; `data.scenes.questions`), answered by classification over the
answer vocabulary (`scenes.ANSWERS`) from the joint vector, as ViLBERT's
VQA head. Each question has one true answer, so VQA accuracy is the share
answered exactly; `evaluate` reports it per question type. The generator
draws answers first, so a question-only model stays at each type's prior:
`config.data.blind=True` trains that model (no regions reach the visual
stream, so the text stream is plain BERT).

Fine-tune from a pretraining workdir with `config.train.init_from` (the
vocabulary of the scenes is the same in both tasks: every word of their
grammar).
"""

from __future__ import annotations

import functools
from typing import Any, Iterable, Iterator

import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import ml_collections
import numpy as np

from transformer import configs
from transformer import losses
from transformer.data import batching
from transformer.data import scenes
from transformer.models import vilbert
from transformer.tasks import base
from transformer.tasks import vision_language
from transformer.tasks import vocabularies


def default_config() -> ml_collections.ConfigDict:
  """Every setting of a visual question answering experiment."""
  config = vision_language.default_config()
  config.task = 'visual_question_answering'
  config.optimizer.update(dict(learning_rate=2e-4, warmup_steps=100))
  config.data = ml_collections.ConfigDict(dict(
      source='offline', train_split='train', eval_split='test',
      num_train=20_000, num_eval=2_000, seed=0, max_objects=4,
      image_size=48, patch_size=12, tokenizer='word', max_length=16,
      batch_size=64, eval_batch_size=128,
      blind=False))  # True: a question-only model (no regions)
  return config


def _read_split(data: ml_collections.ConfigDict,
                split: str) -> scenes.Questions:
  if data.source not in vision_language.SOURCES:
    raise ValueError(f'config.data.source={data.source!r}; choose one of '
                     f'{vision_language.SOURCES}.')
  offsets = {'train': 0, 'validation': 1, 'test': 2}
  base.check_split(split, tuple(offsets), 'offline questions')
  count = data.num_train if split == 'train' else data.num_eval
  return scenes.questions(count, 3 * data.seed + offsets[split],
                          image_size=data.image_size,
                          max_objects=data.max_objects)


class VisualQuestionAnsweringTask(base.Task):
  """The `transformer.tasks.Task` for VQA with ViLBERT."""

  unit = 'questions'

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *,
               batch_divisor: int = 1):
    self.config, self.workdir = config, workdir
    self.batch_divisor = batch_divisor
    data = config.data
    base.check_batch_sizes(data, batch_divisor)
    vision_language.check_patches(data)
    self.tokenizer = vocabularies.text_tokenizer(
        data, workdir, scenes.vocabulary_text)
    self.boxes = vision_language.region_boxes(data.image_size,
                                              data.patch_size)
    # One id past the vocabulary is pretraining's [MASK]: the embedding
    # keeps its shape, so a pretrained one loads.
    self.model_config = vilbert.config_for(
        config.model.size, vocab_size=self.tokenizer.vocab_size + 1,
        max_length=data.max_length, feature_dim=3 * data.patch_size**2,
        num_region_classes=scenes.NUM_CLASSES,
        answer_classes=len(scenes.ANSWERS),
        dtype=jnp.dtype(config.model.dtype),
        **configs.model_overrides(config.model, vilbert.Config,
                                  vision_language.MODEL_EXCLUDE))
    self.model = vilbert.ViLBERT(self.model_config)

  @functools.cache
  def split(self, split: str) -> tuple[scenes.Questions, np.ndarray,
                                       np.ndarray]:
    """(questions, token ids [N, max_length] with [CLS] first, answer ids
    [N] into scenes.ANSWERS)."""
    questions = _read_split(self.config.data, split)
    tokens = vision_language.with_cls(
        self.tokenizer.encode_batch(questions.questions),
        self.config.data.max_length)
    answers = np.asarray([scenes.ANSWERS.index(a) for a in questions.answers])
    return questions, tokens, answers

  def _batch(self, split: str, rows: np.ndarray,
             filler: int = 0) -> dict[str, np.ndarray]:
    questions, tokens, answers = self.split(split)
    pad = lambda x: np.concatenate([x, np.zeros((filler, *x.shape[1:]),
                                                x.dtype)])
    return {'tokens': pad(tokens[rows]),
            'images': pad(questions.scenes.images[rows]),
            'answers': pad(answers[rows] + 1)}  # 0: a filler row

  def logits(self, params: Any, batch: dict[str, jax.Array], *,
             deterministic: bool = True, rng: jax.Array | None = None):
    data = self.config.data
    features = vision_language.image_regions(batch['images'],
                                             data.patch_size)
    real = batch['tokens'][:, 0] > 0
    region_mask = jnp.broadcast_to(real[:, None] & (not data.blind),
                                   features.shape[:2])
    boxes = jnp.broadcast_to(jnp.asarray(self.boxes),
                             (*features.shape[:2], 4))
    return self.model.apply(
        {'params': params}, batch['tokens'], features, boxes, region_mask,
        deterministic=deterministic, method='answer_logits',
        rngs=None if rng is None else {'dropout': rng})

  # -- Task interface -------------------------------------------------------

  def init(self, rng: jax.Array) -> Any:
    r = len(self.boxes)
    return self.model.init(
        {'params': rng}, jnp.ones((1, 4), jnp.int32),
        jnp.zeros((1, r, self.model_config.feature_dim)),
        jnp.asarray(self.boxes)[None], jnp.ones((1, r), bool),
        deterministic=True, method='answer_logits')['params']

  def train_iter(self, start_step: int) -> Iterator[dict[str, np.ndarray]]:
    data = self.config.data
    _, tokens, _ = self.split(data.train_split)
    self.split(data.eval_split)  # a wrong split fails now, not later
    print(f'Training data: {len(tokens):,} questions, '
          f'{len(tokens) / data.batch_size:,.1f} batches of '
          f'{data.batch_size} per epoch.', flush=True)
    for rows in batching.epoch_indices(len(tokens),
                                       batch_size=data.batch_size,
                                       seed=self.config.seed,
                                       start_step=start_step):
      yield self._batch(data.train_split, rows)

  def eval_batches(self) -> Iterable[dict[str, np.ndarray]]:
    data = self.config.data
    _, tokens, _ = self.split(data.eval_split)
    for begin in range(0, len(tokens), data.eval_batch_size):
      rows = np.arange(begin, min(begin + data.eval_batch_size, len(tokens)))
      yield self._batch(data.eval_split, rows,
                        filler=-len(rows) % self.batch_divisor)

  def loss(self, params: Any, batch: dict[str, jax.Array],
           rng: jax.Array | None, *, deterministic: bool):
    logits = self.logits(params, batch, deterministic=deterministic, rng=rng)
    weights = (batch['answers'] > 0).astype(jnp.float32)
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits),
                               jnp.maximum(batch['answers'] - 1, 0)[:, None],
                               -1)[:, 0]
    correct = logits.argmax(-1) == batch['answers'] - 1
    sums = {'loss': ((nll * weights).sum(), weights.sum()),
            'accuracy': ((correct * weights).sum(), weights.sum())}
    return losses.mean(sums), sums

  @functools.partial(jax.jit, static_argnums=(0,))
  def _predict(self, params, batch):
    return self.logits(params, batch).argmax(-1)

  def predict(self, params: Any, split: str) -> np.ndarray:
    """Answer ids of every question of a split."""
    data = self.config.data
    _, tokens, _ = self.split(split)
    outputs = []
    for begin in range(0, len(tokens), data.eval_batch_size):
      rows = np.arange(begin, min(begin + data.eval_batch_size, len(tokens)))
      filler = -len(rows) % self.batch_divisor
      batch = self._batch(split, rows, filler=filler)
      predicted = self._predict(params, batch)
      outputs.append(np.asarray(multihost_utils.process_allgather(
          predicted, tiled=True))[:len(rows)])
    return np.concatenate(outputs)

  def evaluate(self, params: Any, *, label: str) -> dict[str, float]:
    """VQA accuracy per question type on the evaluation split."""
    del label
    questions, _, answers = self.split(self.config.data.eval_split)
    correct = self.predict(params, self.config.data.eval_split) == answers
    kinds = np.asarray(questions.kinds)
    result = {f'accuracy_{kind}': float(correct[kinds == kind].mean())
              for kind in scenes.QUESTION_TYPES if (kinds == kind).any()}
    print('VQA accuracy by question type: ' + ', '.join(
        f'{k[9:]} {v:.1%}' for k, v in result.items()), flush=True)
    return result


TASK = VisualQuestionAnsweringTask
