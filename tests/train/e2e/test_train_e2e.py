"""End to end: the real train_and_evaluate on tiny configs, resume, translate."""

import os

import jax
import numpy as np
import pytest

from conftest import load_experiment
from conftest import raises_naming
from transformer import checkpoints
from transformer import metrics
from transformer import sharding
from transformer import train
from transformer import workdir as workdir_lib
from transformer.data import sources
from transformer.tasks import translation
from transformer.tools import translate


def eval_loss(trainer, params):
  sums = None
  for batch in trainer.task.eval_batches():
    sums = metrics.add(sums, trainer.eval_step(
        params, sharding.global_batch(batch, trainer.mesh)))
  return metrics.normalize(sums)['loss']


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """The offline runlocal experiment trained for 10 steps."""
  config = load_experiment('mt_offline', 'runlocal')
  config.train.num_steps = 10
  config.train.checkpoint_every = 5
  config.train.eval_every = 10
  workdir = str(tmp_path_factory.mktemp('offline'))
  result = train.train_and_evaluate(config, workdir)
  return config, workdir, result


def test_offline_training_lowers_loss_and_writes_everything(trained):
  config, workdir, result = trained
  trainer = train.Trainer(config, workdir)
  initial = eval_loss(trainer, trainer.initialise().params)
  assert result['loss'] < initial - 0.2
  for key in ('bleu', 'exact_match', 'perplexity', 'accuracy'):
    assert key in result
  assert sorted(checkpoints.manager(workdir, read_only=True).all_steps()) == [
      5, 10]
  assert os.path.exists(os.path.join(workdir, 'vocab', 'spm.model'))
  assert any(f.startswith('events.out.tfevents')
             for f in os.listdir(workdir))
  assert os.path.getsize(os.path.join(
      workdir, 'plots', 'cross_attention_step10_layer_0.png')) > 10_000
  report = os.path.join(workdir, 'reports', 'test_step10.txt')
  assert open(report).read().count('HYP ') == config.data.num_test


def read_scalars(workdir):
  """Scalar tags in the TensorBoard event files, read as TensorBoard does:
  TFRecord framing (length, crc, data, crc) around Event protos."""
  from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
  tags = set()
  for name in os.listdir(workdir):
    if not name.startswith('events.out.tfevents'):
      continue
    data = open(os.path.join(workdir, name), 'rb').read()
    offset = 0
    while offset < len(data):
      length = int.from_bytes(data[offset:offset + 8], 'little')
      event = event_pb2.Event.FromString(
          data[offset + 12:offset + 12 + length])
      tags.update(value.tag for value in event.summary.value)
      offset += 12 + length + 4
  return tags


def test_tensorboard_events_hold_train_and_eval_scalars(trained):
  _, workdir, _ = trained
  tags = read_scalars(workdir)
  for tag in ('train/loss', 'train/learning_rate', 'train/tokens_per_second',
              'eval/loss', 'eval/bleu', 'eval/perplexity'):
    assert tag in tags, sorted(tags)


# Resuming bitwise is in the default run through real processes
# (test_faults: SIGTERM and SIGKILL); this in-process variant is slow-only.
@pytest.mark.slow
def test_resume_continues_at_saved_step_with_identical_parameters(
    trained, tmp_path):
  config, full_workdir, _ = trained
  # Interrupted run: 5 steps, then the same config asked for 10 resumes.
  partial = config.copy_and_resolve_references()
  partial.train.num_steps = 5
  workdir = str(tmp_path)
  train.train_and_evaluate(partial, workdir)
  trainer = train.Trainer(config, workdir)
  saved, step = checkpoints.restore_params(workdir, trainer.abstract.params)
  assert step == 5
  reference = workdir_lib.restore(full_workdir).params
  # The uninterrupted run's step-5 checkpoint equals the interrupted one's.
  mngr = checkpoints.manager(full_workdir, read_only=True)
  at_five = checkpoints.restore(mngr, 5, {'params': trainer.abstract.params})
  jax.tree.map(np.testing.assert_array_equal, at_five['params'], saved)
  train.train_and_evaluate(config, workdir)
  resumed = workdir_lib.restore(workdir)
  assert resumed.step == 10
  jax.tree.map(np.testing.assert_array_equal, resumed.params, reference)


def test_translate_tool_matches_the_task(trained):
  config, workdir, _ = trained
  sentences = ['the red house eats a cat', 'those dogs see the old woman',
               'a small bird']
  translations, step, _ = translate.translate(workdir, sentences,
                                              beam_size=2)
  assert step == 10
  restored = workdir_lib.restore(workdir)
  with restored.active():
    expected = restored.task.translate(
        restored.params, sentences, beam_size=2,
        length_penalty=config.eval.length_penalty,
        max_length_offset=config.eval.max_length_offset)
  assert translations == expected and len(set(translations)) > 1


def test_checkpoint_averaging_is_the_mean(trained):
  config, workdir, _ = trained
  trainer = train.Trainer(config, workdir)
  averaged = workdir_lib.restore(workdir, average=2).params
  mngr = checkpoints.manager(workdir, read_only=True)
  five, ten = (checkpoints.restore(mngr, s, {'params': trainer.abstract.params}
                                   )['params'] for s in (5, 10))
  jax.tree.map(lambda a, x, y: np.testing.assert_allclose(
      a, (x + y) / 2, rtol=1e-6, atol=1e-7), averaged, five, ten)


def test_wmt_experiment_with_mock_tfds(tmp_path, monkeypatch):
  tfds = pytest.importorskip('tensorflow_datasets')
  config = load_experiment('wmt14', 'ende_base,runlocal')
  # The real TFDS reading code runs under mock_data; training runs outside
  # it, because mock_data's fake file system would also catch the
  # checkpoint writes.
  with tfds.testing.mock_data(num_examples=32):
    splits = {split: sources.read('pairs', config.data, split)
              for split in ('train', 'validation')}
  assert all(isinstance(s, str) and isinstance(t, str)
             for pairs in splits.values() for s, t in pairs)
  monkeypatch.setattr(sources, 'read', lambda kind, data, split: splits[split])
  result = train.train_and_evaluate(config, str(tmp_path))
  trainer = train.Trainer(config, str(tmp_path))
  assert result['loss'] < eval_loss(trainer, trainer.initialise().params)
  assert 0.0 <= result['bleu'] <= 100.0


# 22 s on 2 cores: out of the default run's 10 minutes; CI
# runs it (`ci`).
@pytest.mark.slow
@pytest.mark.ci
def test_local_corpus_experiment_with_averaging(tmp_path):
  from transformer.data.generated import offline_mt  # pylint: disable=g-import-not-at-top
  import gzip  # pylint: disable=g-import-not-at-top
  corpus = tmp_path / 'corpus'
  corpus.mkdir()
  splits = offline_mt.splits(300, 8, 8, seed=1)
  for split, pairs in (('train', splits['train']), ('val', splits['test'])):
    (corpus / f'{split}.en').write_text(''.join(s + '\n' for s, _ in pairs))
    with gzip.open(corpus / f'{split}.es.gz', 'wt') as f:
      f.write(''.join(t + '\n' for _, t in pairs))
  config = load_experiment('mt_local', f'path={corpus},src=en,tgt=es,runlocal')
  workdir = str(tmp_path / 'workdir')
  result = train.train_and_evaluate(config, workdir)
  # The last two checkpoints were averaged and evaluated under their own name.
  assert 'averaged_bleu' in result and 'bleu' in result
  assert os.path.exists(os.path.join(workdir, 'reports',
                                     'val_step6_average2.txt'))
  bad = config.copy_and_resolve_references()
  bad.data.eval_split = 'dev'
  with pytest.raises(FileNotFoundError, match='dev'):
    train.train_and_evaluate(bad, str(tmp_path / 'other'))


def test_a_workdir_with_checkpoints_but_no_vocabulary_is_refused(trained,
                                                                 tmp_path):
  import shutil  # pylint: disable=g-import-not-at-top
  config, workdir, _ = trained
  copy = str(tmp_path / 'copy')
  shutil.copytree(workdir, copy)
  os.remove(os.path.join(copy, 'vocab', 'spm.model'))
  with raises_naming(FileNotFoundError, f'{copy}/vocab/spm.model', copy,
                     'checkpoints', 'new workdir'):
    train.Trainer(config, copy)


def test_log_lines_count_the_compilations_of_new_batch_shapes(tmp_path,
                                                              capfd):
  # Bucketed batches (one example a row) come in several widths, each a
  # compilation of the step that lands in that log window's ms/step.
  config = load_experiment('rnn_vs_transformer', 'model=transformer,runlocal')
  config.train.update(dict(num_steps=6, log_every=1, eval_every=6,
                           checkpoint_every=6))
  train.train_and_evaluate(config, str(tmp_path / 'run'))
  lines = [line for line in capfd.readouterr().out.splitlines()
           if line.startswith('step ')]
  task = translation.TranslationTask(config, str(tmp_path / 'run'))
  batches = task.train_iter(0)
  seen, expected = set(), []
  for _ in range(6):
    batch = next(batches)
    shape = tuple(sorted((k, v.shape) for k, v in batch.items()))
    new = bool(seen) and shape not in seen
    seen.add(shape)
    expected.append(f'{len(seen)} so far' if new else None)
  assert len(seen) > 1  # else this config no longer tests anything
  assert len(lines) == 6, lines  # one log line per step
  for line, want in zip(lines, expected):
    assert (want in line) if want else ('new batch shape' not in line), line
  # Compiling stays out of rates and the time remaining: the first line's
  # window is the first step alone (no rate, nothing measured yet); the
  # time remaining comes once a window that compiled nothing is measured.
  assert 'ms/step' not in lines[0] and 'remaining -' in lines[0], lines
  measured = False
  for line, want in zip(lines[1:], expected[1:]):
    assert 'ms/step' in line, line
    measured = measured or want is None
    assert ('remaining -' in line) != measured, (line, lines)


def test_training_starts_from_a_checkpoint_at_step_0(tmp_path):
  """A converted checkpoint is written at step 0: training in its workdir
  goes on from those parameters instead of initialising new ones."""
  config = load_experiment('lm_offline', 'runlocal')
  config.train.update(num_steps=1, log_every=1, eval_every=1,
                      checkpoint_every=1)
  config.optimizer.update(learning_rate=1e-9, warmup_steps=0,
                          schedule='constant')
  workdir = str(tmp_path / 'converted')
  trainer = train.Trainer(config, workdir)
  workdir_lib.save_config(config, workdir)
  with sharding.active(trainer.mesh, trainer.rules):
    state = trainer.initialise()
    marked = jax.tree.map(lambda x: x + 0.5, state.params)
  mngr = checkpoints.manager(workdir)
  checkpoints.save(mngr, 0, marked, state.opt_state)
  mngr.wait_until_finished()
  mngr.close()
  train.train_and_evaluate(config, workdir)
  trained = workdir_lib.restore(workdir).params
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
               trained, marked)


@pytest.mark.parametrize('installed', [True, False])
def test_the_tensorboard_line_says_how_to_get_the_viewer(installed,
                                                         tmp_path):
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  if installed:  # a viewer on PATH, whatever it is
    viewer = tmp_path / 'tensorboard'
    viewer.write_text('#!/bin/sh\n')
    viewer.chmod(0o755)
  line = subprocess.run(
      [sys.executable, '-c', 'from transformer import main; '
       'print(main.tensorboard_command("/runs/my run"))'],
      capture_output=True, text=True, check=True,
      env={**os.environ, 'PATH': str(tmp_path)}).stdout.strip()
  command = "tensorboard --logdir='/runs/my run'"
  assert line == (command if installed else
                  f'pip install tensorboard, then {command}')
