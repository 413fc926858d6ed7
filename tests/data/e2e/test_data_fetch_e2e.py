"""The data commands: `tools.data fetch` from a local mirror and `list`,
and a run whose dataset is missing naming the command that fetches it."""

import os
import subprocess
import sys

import pytest

from conftest import REPO
from conftest import SHARED_DATA as SHARED


def command(*args, data_dir):
  return subprocess.run(
      [sys.executable, '-m', 'transformer.tools.data', *args], cwd=REPO,
      capture_output=True, text=True, check=False,
      env={**os.environ, 'TRANSFORMER_DATA': str(data_dir)})


@pytest.mark.skipif(not os.path.isdir(SHARED), reason='no ../shared/data')
def test_the_command_fetches_from_a_mirror_and_lists(server, tmp_path):
  base, folder = server
  (folder / 'ptb').mkdir()
  for name in ('ptb.train.txt', 'ptb.valid.txt', 'ptb.test.txt'):
    with open(os.path.join(SHARED, 'ptb', name), 'rb') as f:
      (folder / 'ptb' / name).write_bytes(f.read())
  data = tmp_path / 'data'
  run = command('fetch', 'ptb', f'--mirror={base}', data_dir=data)
  assert run.returncode == 0, run.stderr[-2000:]
  assert f'3 file(s) fetched into {data}.' in run.stdout
  listed = command('list', data_dir=data).stdout
  assert f'Data folder: {data}' in listed
  assert [line.split()[:3] for line in listed.splitlines()
          if line.split()[:1] == ['ptb']] == [['ptb', 'ptb/', 'complete']]
  assert 'mnist/            0 of 4 files' in listed


def test_a_missing_dataset_names_the_command_that_fetches_it(tmp_path):
  run = subprocess.run(
      [sys.executable, '-m', 'transformer.main',
       '--config=' + os.path.join(REPO, 'experiments', 'ptb.py:runlocal'),
       f'--workdir={tmp_path / "run"}'], cwd=REPO, capture_output=True,
      text=True, check=False,
      env={**os.environ, 'TRANSFORMER_DATA': str(tmp_path / 'data'),
           'JAX_PLATFORMS': 'cpu'})
  assert run.returncode == 66, run.stderr[-2000:]
  assert f'{tmp_path}/data/ptb/ptb.train.txt' in run.stderr
  assert 'python -m transformer.tools.data fetch ptb' in run.stderr
  assert 'Traceback' not in run.stderr
