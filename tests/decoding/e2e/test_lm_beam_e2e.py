"""The generate command searches with --beam_size on a trained language
model and refuses what a beam cannot mean."""

import os
import subprocess
import sys

import pytest

from conftest import load_experiment
from conftest import REPO
from transformer import train


@pytest.fixture(scope='module')
def lm_workdir(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp('lm'))
  train.train_and_evaluate(load_experiment('lm_offline', 'runlocal'),
                           workdir)
  return workdir


def generate(*args):
  return subprocess.run(
      [sys.executable, '-m', 'transformer.tools.generate', *args],
      cwd=REPO, capture_output=True, text=True, check=False,
      env={**os.environ, 'JAX_PLATFORMS': 'cpu'})


def test_the_command_searches_with_a_beam(lm_workdir):
  run = generate(f'--workdir={lm_workdir}', '--prompt=the', '--prompt=a red',
                 '--beam_size=4', '--length_penalty=0.6',
                 '--max_new_tokens=8')
  assert run.returncode == 0, run.stderr[-2000:]
  assert run.stdout.startswith('the') and '\na red' in run.stdout


@pytest.mark.parametrize('flag,message', [
    ('--temperature=0.7', ('--temperature', '--beam_size', 'leave them out')),
    ('--top_k=5', ('--top_k', '--beam_size', 'leave them out')),
    ('--greedy', ('--greedy', '--beam_size', 'leave them out')),
    ('--beam_size=0', ('--beam_size=0', '>= 1')),
    ('--length_penalty=-1', ('--length_penalty=-1.0', '>= 0')),
    ('--max_new_tokens=500', ('context', '--max_new_tokens is at most')),
])
def test_the_command_refuses_what_a_beam_cannot_mean(lm_workdir, flag,
                                                     message):
  args = [f'--workdir={lm_workdir}', '--prompt=the', '--max_new_tokens=4']
  if not flag.startswith('--beam_size'):
    args.append('--beam_size=2')
  run = generate(*args, flag)
  assert run.returncode == 2, run.stderr[-2000:]
  for part in message:
    assert part in run.stderr, run.stderr
  assert 'Traceback' not in run.stderr


def test_the_context_advice_can_be_followed(lm_workdir):
  """The --max_new_tokens the refusal proposes is accepted; a prompt past
  the context gets no impossible count (0) but how to shorten it."""
  import re  # pylint: disable=g-import-not-at-top
  args = [f'--workdir={lm_workdir}', '--prompt=the', '--beam_size=2']
  run = generate(*args, '--max_new_tokens=500')
  assert run.returncode == 2, run.stderr[-2000:]
  [fits] = re.findall(r'--max_new_tokens is at most (\d+)', run.stderr)
  assert int(fits) >= 1
  run = generate(*args, f'--max_new_tokens={fits}')
  assert run.returncode == 0, run.stderr[-2000:]
  long_prompt = '--prompt=' + ' '.join(['the red'] * 200)
  run = generate(f'--workdir={lm_workdir}', long_prompt, '--beam_size=2',
                 '--max_new_tokens=1')
  assert run.returncode == 2, run.stderr[-2000:]
  assert 'shorten it to at most' in run.stderr
  assert 'at most 0' not in run.stderr and 'Traceback' not in run.stderr
  run = generate(f'--workdir={lm_workdir}', long_prompt, '--greedy',
                 '--max_new_tokens=1')
  assert run.returncode == 0, run.stderr[-2000:]
  assert 'is read whole' in run.stderr and 'stays within' not in run.stderr
