"""The package as `pip install .` gives it, not this checkout: a wheel,
installed into a fresh venv, runs the default experiment from another
directory."""

import os
import subprocess
import sys
import sysconfig

import pytest

from conftest import REPO


def _run(*args, **kwargs):
  done = subprocess.run(args, capture_output=True, text=True, check=False,
                        timeout=600, **kwargs)
  assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
  return done


# 24 s on 2 cores: out of the default run, which it would take past 10
# minutes; .ci/run runs it after the default run.
@pytest.mark.slow
@pytest.mark.ci
def test_a_wheel_trains_the_default_experiment_from_anywhere(tmp_path):
  _run(sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps',
       '--no-build-isolation', '-w', str(tmp_path / 'dist'), REPO)
  (wheel,) = (tmp_path / 'dist').iterdir()
  venv = tmp_path / 'venv'
  _run(sys.executable, '-m', 'venv', str(venv))
  python = venv / 'bin' / 'python'
  _run(str(python), '-m', 'pip', 'install', '-q', '--no-deps', '--no-index',
       str(wheel))
  # The dependencies are this environment's (a line of a .pth file adds
  # the folder itself, not the editable install of this checkout there).
  purelib = _run(str(python), '-c', 'import sysconfig; print(sysconfig.'
                 'get_paths()["purelib"])').stdout.strip()
  with open(os.path.join(purelib, 'deps.pth'), 'w') as f:
    f.write(sysconfig.get_paths()['purelib'] + '\n')
  elsewhere = tmp_path / 'elsewhere'
  elsewhere.mkdir()
  where = _run(str(python), '-c', 'import transformer; print(transformer.'
               '__file__)', cwd=elsewhere).stdout
  assert where.startswith(purelib), where
  done = _run(str(venv / 'bin' / 'transformer-train'),
              '--config.train.num_steps=2', '--config.data.num_train=1000',
              '--config.data.num_eval=20', '--config.data.num_test=20',
              f'--workdir={tmp_path / "w"}',
              cwd=elsewhere)
  assert 'Final evaluation' in done.stdout
  # An experiment by name, from anywhere.
  done = _run(str(python), '-c', 'from transformer import configs; print('
              'configs.load_experiment("lm_offline:runlocal").task)',
              cwd=elsewhere)
  assert done.stdout.strip() == 'language_modeling'

