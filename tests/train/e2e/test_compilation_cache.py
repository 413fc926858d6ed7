"""The commands keep compiled programs on disk: by default in
~/.cache/transformer/jax, where a second start of the same run compiles
nothing new (every program it needs is there); 'off' keeps none."""

import os
import subprocess
import sys

import pytest

from conftest import REPO


def train(workdir, home, **settings):
  """A two-step run with HOME=home and the environment `settings` (None:
  unset), JAX's 1 s threshold for what is kept."""
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'HOME': str(home)}
  for name in ('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS',
               'JAX_COMPILATION_CACHE_DIR', 'TRANSFORMER_COMPILATION_CACHE'):
    env.pop(name, None)
  env.update({k: str(v) for k, v in settings.items()})
  run = subprocess.run(
      [sys.executable, '-m', 'transformer.main',
       '--config=' + os.path.join(REPO, 'experiments',
                                  'mt_offline.py:runlocal'),
       f'--workdir={workdir}', '--config.train.num_steps=2',
       '--config.train.eval_every=2', '--config.train.checkpoint_every=2',
       '--config.eval.num_bleu_examples=2'], cwd=REPO, env=env,
      capture_output=True, text=True, check=False)
  assert run.returncode == 0, run.stderr[-3000:]


# 19 s on 2 cores: out of the default run's 10 minutes; CI
# runs it (`ci`).
@pytest.mark.slow
@pytest.mark.ci
def test_a_second_start_finds_every_program_in_the_cache(tmp_path):
  cache = tmp_path / 'home' / '.cache' / 'transformer' / 'jax'
  # Every program kept: with JAX's 1 s threshold, one that compiles in
  # about a second is kept by one run and not the other, as the machine's
  # load goes (the beam search's program did so in a loaded full run).
  everything = dict(JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0)
  train(tmp_path / 'first', tmp_path / 'home', **everything)
  kept = set(os.listdir(cache))
  assert kept, 'nothing kept'
  train(tmp_path / 'second', tmp_path / 'home', **everything)
  assert set(os.listdir(cache)) == kept


# 12 s on 2 cores: out of the default run's 10 minutes; CI
# runs it (`ci`).
@pytest.mark.slow
@pytest.mark.ci
def test_off_keeps_nothing_even_where_jax_is_told_to(tmp_path):
  train(tmp_path / 'run', tmp_path / 'home',
        TRANSFORMER_COMPILATION_CACHE='off',
        JAX_COMPILATION_CACHE_DIR=tmp_path / 'jax')
  assert not (tmp_path / 'jax').exists()
  assert not (tmp_path / 'home' / '.cache' / 'transformer' / 'jax').exists()
