"""Fine-tuning a converted model trains as transformers trains it, step for
step: a GPT-2 and a Llama (tiny, random, saved by transformers), the same
50 batches, AdamW with the same learning rate, linear warmup and decay,
weight decay on matrices only (nanoGPT's groups), gradients clipped at 1,
no dropout, float32. Ours is the converted workdir's own `Trainer` step;
theirs a plain torch loop with transformers' scheduler. Skipped without
`transformers` and `torch` (`pip install -e ".[interop]"`)."""

import jax
import numpy as np
import pytest

from conftest import convert_and_restore
from conftest import publish_gpt2
from conftest import publish_llama
from conftest import published_and_converted
from transformer import sharding
from transformer import train
from transformer import workdir as workdir_lib

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')

STEPS, WARMUP, LEARNING_RATE, WEIGHT_DECAY, CLIP = 50, 5, 3e-3, 0.1, 1.0
ROWS, LENGTH = 4, 16

published, converted = published_and_converted(publish_gpt2)


def _batches(vocab_size: int) -> np.ndarray:
  """[STEPS, ROWS, LENGTH + 1] published ids: 5 random batches in turn, so
  that the loss falls as they are learnt."""
  distinct = np.random.default_rng(0).integers(
      0, vocab_size, (5, ROWS, LENGTH + 1))
  return distinct[np.arange(STEPS) % 5]


def _torch_losses(model, batches):
  """Losses of each step of a torch AdamW loop and the trained model."""
  decay = [p for p in model.parameters() if p.dim() >= 2]
  others = [p for p in model.parameters() if p.dim() < 2]
  optimizer = torch.optim.AdamW(
      [{'params': decay, 'weight_decay': WEIGHT_DECAY},
       {'params': others, 'weight_decay': 0.0}],
      lr=LEARNING_RATE, betas=(0.9, 0.999), eps=1e-8)
  schedule = transformers.get_linear_schedule_with_warmup(optimizer, WARMUP,
                                                          STEPS)
  model.eval()  # no dropout; gradients flow as in training
  losses = []
  for rows in batches:
    rows = torch.tensor(rows)
    logits = model(rows[:, :-1]).logits
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    optimizer.step()
    schedule.step()
    losses.append(loss.item())
  return losses


def _our_losses(workdir, batches, tmp_path):
  """Losses of each step of the converted workdir's trainer, and its
  parameters after the last."""
  restored = workdir_lib.restore(workdir)
  config = restored.config
  config.optimizer.update(dict(
      name='adam', schedule='linear', learning_rate=LEARNING_RATE,
      warmup_steps=WARMUP, b1=0.9, b2=0.999, eps=1e-8,
      weight_decay=WEIGHT_DECAY, grad_clip_norm=CLIP))
  config.model.update(dict(dropout_rate=0.0, attention_dropout_rate=0.0))
  config.train.update(dict(num_steps=STEPS, label_smoothing=0.0,
                           init_from=workdir))
  trainer = train.Trainer(config, str(tmp_path / 'ours'))
  ids = trainer.task.tokenizer.ids
  state = trainer.initialise()
  state = state.replace(params=restored.params)
  losses = []
  with sharding.active(trainer.mesh, trainer.rules):
    for rows in batches:
      rows = ids.to_ours(rows).astype(np.int32)
      batch = {'inputs': rows[:, :-1], 'targets': rows[:, 1:],
               'inputs_position': np.broadcast_to(
                   np.arange(LENGTH, dtype=np.int32), (ROWS, LENGTH)),
               'inputs_segmentation': np.ones((ROWS, LENGTH), np.int32)}
      state, sums, _ = trainer.train_step(
          state, sharding.global_batch(batch, trainer.mesh))
      total, count = jax.device_get(sums['loss'])
      losses.append(float(total / count))
  return losses, jax.device_get(state.params), ids


def _trains_alike(model, workdir, tmp_path):
  """Both sides' losses at steps 1, 10 and 50 agree and fall; returns our
  parameters after the last step and the tokenizer's ids."""
  batches = _batches(model.config.vocab_size)
  ours, params, ids = _our_losses(workdir, batches, tmp_path)
  theirs = _torch_losses(model, batches)
  for step in (1, 10, 50):
    assert ours[step - 1] == pytest.approx(theirs[step - 1], rel=1e-4), step
  assert theirs[-1] < theirs[0] - 0.3  # it did learn the batches
  return params, ids


def _assert_close(mine, torch_weight):
  """An updated matrix. Adam moves a weight by up to the learning rate a
  step, whatever its gradient's size (0.15 over these steps), so float32
  rounding in tiny gradients shows as up to ~1e-4 after 50 steps."""
  difference = np.abs(np.asarray(mine) - torch_weight.detach().numpy())
  assert difference.max() < 2e-4
  assert np.median(difference) < 2e-5


def test_gpt2_fine_tunes_as_transformers_does(published, converted,
                                              tmp_path):
  model, _, _ = published
  _, _, workdir = converted
  params, ids = _trains_alike(model, workdir, tmp_path)
  # Block 1's MLP input kernel (Conv1D: [in, out]) and the embedding.
  _assert_close(params['blocks']['layer_1']['mlp']['wi']['kernel'],
                model.transformer.h[1].mlp.c_fc.weight)
  _assert_close(ids.published_rows(params['embed']['embed']['embedding']),
                model.transformer.wte.weight)


@pytest.fixture(scope='module')
def llama_converted(tmp_path_factory):
  """(transformers' Llama, the converted workdir)."""
  model, _, directory = publish_llama(tmp_path_factory.mktemp('llama'),
                                      'tokenizer.model')
  _, _, workdir = convert_and_restore(
      directory, str(tmp_path_factory.mktemp('converted') / 'workdir'))
  return model, workdir


def test_llama_fine_tunes_as_transformers_does(llama_converted, tmp_path):
  """Grouped-query attention, rotary positions with llama3 scaling, an
  untied output layer."""
  model, workdir = llama_converted
  params, ids = _trains_alike(model, workdir, tmp_path)
  # The output layer ([D, V] here, [V, D] there), in Llama's ids.
  _assert_close(ids.published_rows(params['lm_head']['kernel'], axis=1).T,
                model.lm_head.weight)
