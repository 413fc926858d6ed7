"""The trainer's parts without a training run: configs saved before a
setting existed, the log's time remaining, the train step's non-finite
checks, configs refused before the workdir is written. (The real
train_and_evaluate on tiny configs: e2e/test_train_e2e.py.)"""

import jax
import numpy as np
import pytest

from conftest import load_experiment
from conftest import raises_naming
from conftest import tiny_training_config as tiny_config
from transformer import configs
from transformer import metrics
from transformer import train
from transformer import workdir as workdir_lib


def test_load_config_fills_settings_added_after_training(tmp_path):
  config = load_experiment('mt_offline', 'runlocal')
  saved = config.to_dict()
  del saved['data']['packing']  # as if trained before this setting existed
  saved['train']['num_steps'] = 123
  (tmp_path / 'config.json').write_text(__import__('json').dumps(saved))
  loaded = workdir_lib.load_config(str(tmp_path))
  assert loaded.data.packing is True and loaded.train.num_steps == 123
  with raises_naming(FileNotFoundError,
                     str(tmp_path / 'missing' / 'config.json'),
                     f'--workdir={tmp_path / "missing"}'):
    workdir_lib.load_config(str(tmp_path / 'missing'))


def test_time_remaining_follows_the_recent_rate(tmp_path, monkeypatch):
  # A run slowed by other work (5 s a step) that then has the machine to
  # itself (1 s a step): once the recent windows are all fast, the time
  # remaining is the fast rate's, not the whole run's mean.
  clock = [0.0]
  monkeypatch.setattr(train.time, 'time', lambda: clock[0])
  shown = []
  line = type('Line', (), {'show': lambda self, text: shown.append(text)})()
  writer = metrics.MetricWriter(str(tmp_path))
  log = train._TrainLog(str(tmp_path), writer, 'tokens', start=0,
                        num_steps=1_000, schedule=lambda step: 1e-3,
                        progress=None, line=line)
  batch = {'inputs': np.zeros((2, 3))}
  sums = {'loss': (np.float32(2.0), np.float32(4.0))}
  step = 0
  for seconds_a_step in [5.0] * 20 + [1.0] * train.RECENT_WINDOWS:
    for _ in range(10):
      log.add(sums, batch)
      step += 1
    clock[0] += 10 * seconds_a_step
    log.write(step)
  writer.close()
  # 700 steps left at 1 s (at the whole run's mean, 3.67 s: 0:42:46).
  assert shown[-1].endswith('remaining 0:11:40'), shown[-1]
  assert shown[19].endswith('remaining 1:06:40'), shown[19]  # 800 at 5 s


@pytest.mark.parametrize('skip_nonfinite', [True, False])
@pytest.mark.parametrize('case', ['finite', 'gradients', 'loss', 'update',
                                  'overflow', 'finite_bf16', 'update_bf16'])
def test_a_nonfinite_step_is_flagged_and_kept_out_when_skipping(
    case, skip_nonfinite):
  """train_step finds a step non-finite when its gradients are not, when
  its loss is not though its gradients are, and when its new parameters are
  not though loss and gradients are (an optimizer scaling by infinity, or
  a huge update overflowing a parameter); bfloat16 parameters too. Such a
  step counts as skipped and its metrics are zero, its health keeps its
  loss and says which part failed; with `skip_nonfinite` parameters and
  Adam's moments stay as they were, without it (the 'stop' policy, whose
  run ends) the step is applied. The counter advances."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top

  def loss_fn(params, batch, rng, deterministic):
    del rng, deterministic
    w = params['w'].astype(jnp.float32)
    loss = (jnp.sum(batch['quadratic'] * (w - batch['x']) ** 2
                    - batch['linear'] * w) * batch['scale']
            + jax.lax.stop_gradient(batch['offset']))
    return loss, {'loss': (loss, 1.0), 'other': (loss * 2, 1.0)}

  dtype = jnp.bfloat16 if case.endswith('bf16') else jnp.float32
  # 'overflow': loss -w_0 - w_1 - w_2 = -(3e38 + 1), gradients -1, and
  # Adam's first update, learning rate x sign, takes w_0 past the largest
  # float32.
  overflow = case == 'overflow'
  tx = optax.chain(optax.adam(3e38 if overflow else 0.1),
                   optax.scale(jnp.inf if case.startswith('update') else 1.0))
  params = {'w': (jnp.asarray([3e38, 0.0, 1.0]) if overflow
                  else jnp.arange(3.0)).astype(dtype)}
  state = train.TrainState(step=jnp.zeros((), jnp.int32), params=params,
                           opt_state=tx.init(params))
  batch = {'x': params['w'].astype(jnp.float32) if overflow else jnp.ones(3),
           'quadratic': 0.0 if overflow else 1.0,
           'linear': 1.0 if overflow else 0.0,
           'scale': jnp.inf if case == 'gradients' else 1.0,
           'offset': jnp.inf if case == 'loss' else 0.0}
  new, sums, health = jax.jit(
      lambda s, b: train.train_step(s, b, loss_fn=loss_fn, tx=tx, seed=0,
                                    skip_nonfinite=skip_nonfinite))(
                                        state, batch)
  assert int(new.step) == 1
  nonfinite = not case.startswith('finite')
  assert bool(health['finite']) is not nonfinite
  assert float(sums['skipped'][0]) == float(nonfinite)
  if nonfinite:
    assert float(sums['other'][0]) == float(sums['loss'][1]) == 0.0
  assert bool(np.isfinite(float(health['loss'][0]))) is (
      case not in ('loss', 'gradients'))
  assert bool(health['params_finite']) is not (
      case.startswith('update') or overflow or case == 'gradients')
  assert new.params['w'].dtype == dtype
  kept = nonfinite and skip_nonfinite
  for before, after in zip(jax.tree.leaves((state.params, state.opt_state)),
                           jax.tree.leaves((new.params, new.opt_state))):
    if kept:
      np.testing.assert_array_equal(after, before)
  moved = not np.array_equal(new.params['w'], params['w'])
  assert moved is not kept


@pytest.mark.parametrize('field, value, names', [
    ('optimizer.name', '', ("optimizer.name=''", "'adam'", "'sgd'")),
    ('eval.beam_size', 0, ('beam_size=0', '>= 1')),
    ('model.num_heads', 3, ('num_heads=3', 'd_model=32', 'head_dim')),
    ('train.nonfinite', 'ignore', ("config.train.nonfinite='ignore'",
                                   "'stop', 'skip'")),
])
def test_a_refused_config_writes_nothing(tmp_path, field, value, names):
  """Every setting that can be checked without data is, before the workdir
  is created: a refused run left a trained vocabulary behind, which the
  corrected run then used."""
  config = configs.override(tiny_config(), {field: value})
  workdir = tmp_path / 'new'
  with raises_naming(ValueError, *names):
    train.train_and_evaluate(config, str(workdir))
  assert not workdir.exists()
