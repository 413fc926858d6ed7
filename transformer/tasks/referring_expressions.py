"""Referring expressions on generated scenes, with ViLBERT.

Which region does 'the blue square' or 'the circle below the triangle'
refer to? Each scene comes with box proposals (every object's box and
random boxes, as a detector's; `data.scenes.referring`), each proposal's
pixels pooled to `patch_size` x `patch_size` as its features (the size of
pretraining's patches, so a pretrained region projection applies) and its
box as its location. ViLBERT scores every proposal from its visual output
(`region_scores`); training is a softmax over the proposals with the named
object's box as the target, and the accuracy is the share of expressions
whose top-scoring proposal overlaps the true box with IoU >= 0.5. Each
scene holds a confuser (the same shape in another colour, or the same
shape in the wrong place), so the whole expression is needed.

Fine-tune from a pretraining workdir with `config.train.init_from`.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from transformer.core import losses
from transformer.data import sources
from transformer.data.generated import scenes
from transformer.tasks import base
from transformer.tasks import vision_language

# The kind of examples the task reads (`data.sources`).
DATA_KIND = 'scenes'
# Fine-tuned from a pretraining run (`tasks.check_init_from`).
STARTS_FROM = ('vision_language', 'referring_expressions')


def default_config() -> ml_collections.ConfigDict:
  """Every setting of a referring-expressions experiment."""
  config = vision_language.default_config()
  config.task = 'referring_expressions'
  config.optimizer.update(dict(learning_rate=2e-4, warmup_steps=100))
  config.data = ml_collections.ConfigDict(dict(
      source='offline', train_split='train', eval_split='test',
      num_train=20_000, num_eval=2_000, seed=0, max_objects=4,
      image_size=48, patch_size=16, proposals=10, tokenizer='word',
      max_length=16, batch_size=64, eval_batch_size=128))
  config.eval.retrieval_images = 0
  return config


class ReferringExpressionsTask(vision_language.SceneTask):
  """The `transformer.tasks.Task` for referring expressions."""

  unit = 'expressions'
  head = 'region_scores'

  @functools.cache
  def split(self, split: str) -> tuple[scenes.Referring, np.ndarray,
                                       np.ndarray]:
    """(the expressions, token ids [N, max_length] with [CLS] first, the
    proposals' features uint8 [N, P, p, p, 3])."""
    data = self.config.data
    referring = sources.read(
        'scenes', data, split, generate=functools.partial(
            scenes.referring, proposals=data.proposals),
        what='offline referring expressions')
    tokens = vision_language.with_cls(
        self.tokenizer.encode_batch(referring.expressions), data.max_length)
    crops = scenes.crop_regions(referring.scenes.images,
                                referring.proposals, data.patch_size)
    return referring, tokens, crops

  def _batch(self, split: str, rows: np.ndarray,
             filler: int = 0) -> dict[str, np.ndarray]:
    referring, tokens, crops = self.split(split)
    pad = lambda x: np.concatenate([x, np.zeros((filler, *x.shape[1:]),
                                                x.dtype)])
    true_boxes = referring.scenes.boxes[rows, referring.targets[rows]]
    return {'tokens': pad(tokens[rows]), 'crops': pad(crops[rows]),
            'proposals': pad(referring.proposals[rows]),
            'target': pad(referring.target_proposals[rows]),
            'true_box': pad(true_boxes)}

  def train_batch_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
    """Expressions, each proposal's crop and box, the proposal meant and
    the true object's box."""
    data, p = self.config.data, self.config.data.patch_size
    return base.batch_shapes(
        data.batch_size, tokens=((data.max_length,), 'int32'),
        crops=((data.proposals, p, p, 3), 'uint8'),
        proposals=((data.proposals, 4), 'float32'), target=((), 'int64'),
        true_box=((4,), 'float32'))

  def scores(self, params: Any, batch: dict[str, jax.Array], *,
             deterministic: bool = True, rng: jax.Array | None = None):
    """[B, P] float32 scores of the proposals."""
    crops = jnp.asarray(batch['crops'], jnp.float32) / 127.5 - 1.0
    features = crops.reshape(*crops.shape[:2], -1)
    real = batch['tokens'][:, 0] > 0
    region_mask = jnp.broadcast_to(real[:, None], features.shape[:2])
    return self.model.apply(
        {'params': params}, batch['tokens'], features, batch['proposals'],
        region_mask, deterministic=deterministic, method='region_scores',
        rngs=None if rng is None else {'dropout': rng})

  def init(self, rng: jax.Array) -> Any:
    p = self.config.data.proposals
    return self.model.init(
        {'params': rng}, jnp.ones((1, 4), jnp.int32),
        jnp.zeros((1, p, self.model_config.feature_dim)),
        jnp.zeros((1, p, 4)), jnp.ones((1, p), bool), deterministic=True,
        method=self.head)['params']

  def loss(self, params: Any, batch: dict[str, jax.Array],
           rng: jax.Array | None, *, deterministic: bool):
    """Softmax cross-entropy over the proposals; the accuracy counts a top
    proposal with IoU >= 0.5 with the named object's box."""
    scores = self.scores(params, batch, deterministic=deterministic, rng=rng)
    weights = (batch['tokens'][:, 0] > 0).astype(jnp.float32)
    nll = -jnp.take_along_axis(jax.nn.log_softmax(scores),
                               batch['target'][:, None], -1)[:, 0]
    best = jnp.take_along_axis(batch['proposals'],
                               scores.argmax(-1)[:, None, None], 1)[:, 0]
    hit = scenes.box_iou(best, batch['true_box'], jnp) >= 0.5
    sums = {'loss': ((nll * weights).sum(), weights.sum()),
            'accuracy': ((hit * weights).sum(), weights.sum()),
            'exact_proposal': (((scores.argmax(-1) == batch['target'])
                                * weights).sum(), weights.sum())}
    return losses.mean(sums), sums

  def evaluate(self, params: Any, *, label: str) -> dict[str, float]:
    del params, label  # the metrics come from the evaluation batches
    return {}


TASK = ReferringExpressionsTask
