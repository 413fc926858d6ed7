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
from typing import Any

import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import ml_collections
import numpy as np

from transformer import layers
from transformer.core import losses
from transformer.data import sources
from transformer.data.generated import scenes
from transformer.models import vilbert
from transformer.tasks import base
from transformer.tasks import vision_language

# The kind of examples the task reads (`data.sources`).
DATA_KIND = 'scenes'
# Fine-tuned from a pretraining run (`tasks.check_init_from`).
STARTS_FROM = ('vision_language', 'visual_question_answering')


def default_config() -> ml_collections.ConfigDict:
  """Every setting of a visual question answering experiment."""
  config = vision_language.default_config()
  config.task = 'visual_question_answering'
  config.optimizer.update(dict(learning_rate=2e-4, warmup_steps=100))
  config.data = ml_collections.ConfigDict(dict(
      source='offline', train_split='train', eval_split='test',
      num_train=20_000, num_eval=2_000, seed=0, max_objects=4,
      image_size=48, patch_size=16, tokenizer='word', max_length=16,
      batch_size=64, eval_batch_size=128,
      blind=False))  # True: a question-only model (no regions)
  config.eval.num_plots = 2  # questions whose co-attention is drawn
  return config


def question_words(question: str) -> str:
  """A question as the words the vocabulary has: without its '?'."""
  return question.strip().rstrip('?').strip()


class VisualQuestionAnsweringTask(vision_language.SceneTask):
  """The `transformer.tasks.Task` for VQA with ViLBERT."""

  unit = 'questions'
  head = 'answer_logits'

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *,
               batch_divisor: int = 1, shapes_only: bool = False):
    super().__init__(config, workdir, batch_divisor=batch_divisor,
                     shapes_only=shapes_only,
                     answer_classes=len(scenes.ANSWERS))

  def train_batch_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
    data, side = self.config.data, self.config.data.image_size
    return base.batch_shapes(
        data.batch_size, tokens=((data.max_length,), 'int32'),
        images=((side, side, 3), 'uint8'), answers=((), 'int64'))

  @functools.cache
  def split(self, split: str) -> tuple[scenes.Questions, np.ndarray,
                                       np.ndarray]:
    """(questions, token ids [N, max_length] with [CLS] first, answer ids
    [N] into scenes.ANSWERS)."""
    questions = sources.read('scenes', self.config.data, split,
                             generate=scenes.questions,
                             what='offline questions')
    tokens = vision_language.with_cls(
        self.tokenizer.encode_batch(
            [question_words(q) for q in questions.questions]),
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

  def _regions_seen(self, images, tokens):
    """The regions of the real rows' images, none for a question-only
    model (`config.data.blind`), which never sees them."""
    real = tokens[:, 0] > 0
    return self.regions(images, real & (not self.config.data.blind))

  def logits(self, params: Any, batch: dict[str, jax.Array], *,
             deterministic: bool = True, rng: jax.Array | None = None):
    features, boxes, region_mask = self._regions_seen(batch['images'],
                                                      batch['tokens'])
    return self.model.apply(
        {'params': params}, batch['tokens'], features, boxes, region_mask,
        deterministic=deterministic, method='answer_logits',
        rngs=None if rng is None else {'dropout': rng})

  # -- Task interface -------------------------------------------------------

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
    """VQA accuracy per question type on the evaluation split, and the
    co-attention figures of the first few questions."""
    split = self.config.data.eval_split
    questions, _, answers = self.split(split)
    predicted = self.predict(params, split)
    correct = predicted == answers
    kinds = np.asarray(questions.kinds)
    result = {f'accuracy_{kind}': float(correct[kinds == kind].mean())
              for kind in scenes.QUESTION_TYPES if (kinds == kind).any()}
    print('VQA accuracy by question type: ' + ', '.join(
        f'{k[9:]} {v:.1%}' for k, v in result.items()), flush=True)
    self.write_figures(params, label, split=split, predicted=predicted)
    return result

  def encode_questions(self, questions: list[str]) -> np.ndarray:
    """[Q, max_length] ids of questions, refused naming a word the
    vocabulary lacks (it would be read as unknown)."""
    texts = [question_words(q.lower()) for q in questions]
    known = set(self.tokenizer.words)
    unknown = sorted({w for t in texts for w in t.split()} - known)
    if unknown:
      raise ValueError(
          f'Words this model never saw: {unknown}. Ask with the words of its '
          f'training questions: {" ".join(sorted(known - {chr(10)}))}.')
    return vision_language.with_cls(self.tokenizer.encode_batch(texts),
                                    self.config.data.max_length)

  def answer(self, params: Any, image: np.ndarray,
             questions: list[str]) -> np.ndarray:
    """[Q, len(scenes.ANSWERS)] answer probabilities of questions about
    one image uint8 [S, S, 3]."""
    tokens = self.encode_questions(questions)
    filler = -len(tokens) % self.batch_divisor
    batch = {'tokens': np.concatenate(
        [tokens, np.zeros((filler, tokens.shape[1]), np.int32)]),
             'images': np.repeat(image[None], len(tokens) + filler, 0)}
    probabilities = self._probabilities(params, batch)
    return np.asarray(multihost_utils.process_allgather(
        probabilities, tiled=True))[:len(tokens)]

  @functools.partial(jax.jit, static_argnums=(0,))
  def _probabilities(self, params, batch):
    return jax.nn.softmax(self.logits(params, batch))

  @functools.partial(jax.jit, static_argnums=(0,))
  def attention_weights(self, params, tokens, images):
    """Every attention layer's weights while the model reads the question
    `tokens` about `images`: {path: [B, N, T, S]}."""
    features, boxes, region_mask = self._regions_seen(images, tokens)
    _, state = self.model.apply(
        {'params': params}, tokens, features, boxes, region_mask,
        deterministic=True, method='encode', mutable=['intermediates'])
    return layers.attention_weights(state['intermediates'])

  @functools.partial(jax.jit, static_argnums=(0,))
  def co_attention(self, params, tokens, images):
    """Each co-attentional layer's word-over-region and region-over-word
    weights, ([K, B, N, T, R], [K, B, N, R, T]) (`vilbert.co_attention`)."""
    features, boxes, region_mask = self._regions_seen(images, tokens)
    return vilbert.co_attention(self.model, params, tokens, features, boxes,
                                region_mask)



TASK = VisualQuestionAnsweringTask
