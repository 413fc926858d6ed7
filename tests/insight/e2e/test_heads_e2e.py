"""Head importance (Michel et al. 2019) and pruning on a trained workdir:
the score is |dL/d xi| of a gate on each head's output, a pruned head no
longer reaches the output, and the command writes its table and plots, all
of it (the pruned evaluations' reports too) under --output_dir: a workdir
is only read."""

import os
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import REPO
from transformer import layers
from transformer import sharding
from transformer import workdir as workdir_lib
from transformer.insight import heads
from transformer.tools import heads as heads_command


@pytest.fixture(scope='module')
def restored(trained, tmp_path_factory):
  # A copy: pruning runs the task's evaluation, which writes reports.
  copy = tmp_path_factory.mktemp('heads') / 'run'
  shutil.copytree(trained, copy)
  return workdir_lib.restore(str(copy))


def _batch(restored):
  return sharding.global_batch(next(iter(restored.task.eval_batches())),
                               restored.mesh)


def _gated_loss(restored, batch, paths, gates):
  """The loss with head h of the layer at paths[l] scaled by gates[l, h]."""
  params = jax.tree.map(lambda x: x, restored.params)
  for path, layer_gates in zip(paths, gates):
    node = params
    for name in path:
      node = node[name]
    node['out']['kernel'] = node['out']['kernel'] * layer_gates[:, None,
                                                                None]
  return restored.task.loss(params, batch, None, deterministic=True)[0]


def test_importance_is_the_gradient_of_a_gate_on_each_head(restored):
  names, importance = heads.head_importance(restored, batches=1)
  paths = heads.attention_layers(restored.params)
  assert names == ['/'.join(p) for p in paths] and len(paths) == 3
  batch = _batch(restored)
  with restored.active():
    gates = np.abs(np.asarray(jax.grad(
        lambda g: _gated_loss(restored, batch, paths, g))(
            jnp.ones(importance.shape))))
  expected = gates / np.linalg.norm(gates, axis=1, keepdims=True)
  np.testing.assert_allclose(importance, expected, rtol=1e-4, atol=1e-6)
  # Heads differ: a ranking is there to be had.
  assert importance.std() > 0.01


def test_a_pruned_head_no_longer_reaches_the_output(restored):
  paths = heads.attention_layers(restored.params)
  pruned = np.zeros((len(paths), 4), bool)
  pruned[0, 1] = True  # head 1 of the first layer
  cut = heads.without_heads(restored.params, pruned)
  batch = _batch(restored)
  loss = lambda p: float(restored.task.loss(p, batch, None,
                                            deterministic=True)[0])

  def with_values(params, head, scale):
    params = jax.tree.map(lambda x: x, params)
    node = params
    for name in paths[0]:
      node = node[name]
    node['value']['kernel'] = node['value']['kernel'].at[:, head].multiply(
        scale)
    return params

  with restored.active():
    base = loss(cut)
    assert loss(with_values(cut, 1, 3.0)) == pytest.approx(base, abs=1e-6)
    assert abs(loss(with_values(cut, 0, 3.0)) - base) > 1e-4
    assert abs(base - loss(restored.params)) > 1e-5
  # The original parameters are untouched.
  node = restored.params
  for name in paths[0]:
    node = node[name]
  assert jnp.abs(node['out']['kernel'][1]).sum() > 0


def test_pruning_table_and_plots(restored, tmp_path):
  names, importance = heads.head_importance(restored, batches=1)
  rows = heads_command.prune_heads(restored, importance, steps=2)
  assert [(r['pruned'], r['heads']) for r in rows] == [(0.0, 12), (0.5, 6)]
  assert 'bleu' in rows[0] and 'loss' in rows[0]
  patterns = heads.head_patterns(restored, batches=1)
  text = heads.write_report(names, importance, rows, str(tmp_path),
                            patterns)
  assert '| 50% | 6 |' in text and names[0] in text
  assert 'Mean entropy' in text and 'Mean distance' in text
  for name in ('heads.md', 'importance.png', 'pruning.png', 'entropy.png',
               'distance.png'):
    assert (tmp_path / name).stat().st_size > 500


def test_entropy_and_distance_of_real_queries(restored):
  patterns = heads.head_patterns(restored, batches=1)
  assert list(patterns) == ['encoder/layer_0/self_attention',
                            'decoder/layer_0/self_attention',
                            'decoder/layer_0/cross_attention']
  assert 'distance' not in patterns['decoder/layer_0/cross_attention']
  # The same statistics from the hook, with the padding read off the batch.
  batch = next(iter(restored.task.eval_batches()))
  _, state = restored.task.model.apply(
      {'params': restored.params}, batch['inputs'], batch['targets'],
      deterministic=True, mutable=['intermediates'])
  weights = layers.attention_weights(state['intermediates'])
  for name, tokens in (('encoder/layer_0/self_attention', batch['inputs']),
                       ('decoder/layer_0/self_attention', batch['targets']),
                       ('decoder/layer_0/cross_attention', batch['targets'])):
    w = np.asarray(weights[name], np.float64)  # [B, N, T, S]
    real = np.broadcast_to((tokens > 0)[:, None, :], w.shape[:3])
    logs = np.log(np.where(w > 0, w, 1.0))
    entropy = -(w * logs).sum(-1)
    np.testing.assert_allclose(patterns[name]['entropy'],
                               [entropy[:, h][real[:, h]].mean()
                                for h in range(w.shape[1])], rtol=1e-4)
    if 'distance' in patterns[name]:
      t = np.arange(w.shape[-1])
      distance = (w * np.abs(t[:, None] - t[None])).sum(-1)
      np.testing.assert_allclose(patterns[name]['distance'],
                                 [distance[:, h][real[:, h]].mean()
                                  for h in range(w.shape[1])], rtol=1e-4)


def _files(folder):
  """Every file under `folder` with its size and modification time."""
  stat = lambda path: (os.stat(path).st_size, os.stat(path).st_mtime_ns)
  return {os.path.join(root, name): stat(os.path.join(root, name))
          for root, _, names in os.walk(folder) for name in names}


def _heads(*args):
  return subprocess.run(
      [sys.executable, '-m', 'transformer.tools.heads', '--steps=2',
       '--batches=1', *args], capture_output=True, text=True, timeout=900,
      check=False, cwd=REPO,
      env={**os.environ, 'JAX_PLATFORMS': 'cpu'})


@pytest.mark.slow  # a process of its own, 10 s; CI runs it
@pytest.mark.ci
def test_the_command_writes_only_under_its_output_dir(trained, tmp_path):
  workdir = tmp_path / 'run'
  shutil.copytree(trained, workdir)
  before = _files(workdir)
  out = tmp_path / 'heads'
  run = _heads(f'--workdir={workdir}', f'--output_dir={out}')
  assert run.returncode == 0, run.stderr[-2000:]
  assert _files(workdir) == before
  written = sorted(os.path.relpath(p, out) for p in _files(out))
  assert {'heads.md', 'importance.png', 'pruning.png'} <= set(written)
  assert [p for p in written if p.startswith('reports/')] == [
      'reports/test_heads_pruned0.txt', 'reports/test_heads_pruned6.txt']
  assert not [p for p in written if '.writing-' in p or p.endswith('.tmp')]
  # What the evaluations printed names where their reports ended up.
  assert f'translations: {out}/reports/test_heads_pruned0.txt' in run.stdout
  assert '.writing-' not in run.stdout + run.stderr


def test_a_read_only_workdir_fails_before_any_work(trained, tmp_path):
  """Its default --output_dir, WORKDIR/heads, cannot be written: said at
  once, naming the folder and the flag (a bind mount makes it read-only:
  root ignores file modes)."""
  workdir = tmp_path / 'run'
  shutil.copytree(trained, workdir)
  if subprocess.run(['mount', '--bind', '-o', 'ro', str(workdir),
                     str(workdir)], capture_output=True,
                    check=False).returncode:
    pytest.skip('a read-only bind mount needs root')
  try:
    if os.access(workdir, os.W_OK) and not _read_only(workdir):
      pytest.skip('the bind mount is not read-only here')
    run = _heads(f'--workdir={workdir}')
  finally:
    subprocess.run(['umount', '-l', str(workdir)], check=False)
  assert run.returncode == 2, run.stderr[-2000:]
  assert f'{workdir}/heads/heads.md' in run.stderr, run.stderr
  assert 'Read-only file system' in run.stderr, run.stderr
  assert '--output_dir' in run.stderr, run.stderr
  assert 'pruned' not in run.stdout + run.stderr  # before any evaluation


def _read_only(folder) -> bool:
  try:
    with open(os.path.join(folder, 'probe'), 'w'):
      pass
  except OSError:
    return True
  os.remove(os.path.join(folder, 'probe'))
  return False
