"""The curves command in a process of its own: the table, the figure,
and files it keeps."""

import subprocess
import sys

from conftest import PNG
from conftest import REPO


def test_command_prints_the_table_writes_the_figure_and_keeps_files(
    tmp_path, two_runs):
  output = tmp_path / 'curves.png'
  args = [sys.executable, '-m', 'transformer.tools.curves',
          f'--workdirs={",".join(two_runs)}',
          '--labels="seed 0, 4,000 steps",seed 1', f'--output={output}']
  run = subprocess.run(args, cwd=REPO, capture_output=True, check=False,
                       timeout=300)
  assert run.returncode == 0, run.stderr.decode()[-2000:]
  assert 'eval/bleu' in run.stdout.decode()
  # A quoted label keeps its commas (the help and the mismatch error say so).
  assert 'seed 0, 4,000 steps' in run.stdout.decode()
  assert output.read_bytes()[:4] == PNG
  again = subprocess.run(args, cwd=REPO, capture_output=True, check=False,
                         timeout=300)
  assert again.returncode != 0
  assert str(output) in again.stderr.decode()
  assert '--overwrite' in again.stderr.decode()

