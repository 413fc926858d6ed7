"""The benchmarks as scripts, each in a process of its own: what they
print."""

import os
import re
import sys

import pytest

from conftest import REPO


def run_benchmark(name, *flags):
  import subprocess  # pylint: disable=g-import-not-at-top
  out = subprocess.run([sys.executable, os.path.join(REPO, 'benchmarks',
                                                     name), *flags],
                       capture_output=True, text=True, check=True, cwd=REPO)
  return out.stdout


def test_decoding_benchmark_prints_every_search():
  out = run_benchmark(
      'decoding.py', '--size=tiny', '--vocab=64', '--batch=2',
      '--source_length=4', '--max_length=3', '--gpt_sizes=tiny',
      '--gpt_batch_sizes=1', '--prompt_length=4', '--new_tokens=256',
      '--repeats=5')  # enough tokens that their time stands above the noise
  for row in ('greedy', 'beam 4', 'tiny      1'):
    assert row in out, out


def test_profile_names_op_families_and_ranks_the_step_ops(tmp_path):
  # In its own process, as the flags of train_throughput.py (which it
  # imports) clash with generation.py's, imported above.
  out = run_benchmark('profile_step.py', '--size=mini', '--rows=2',
                      '--length=16', '--profiled_steps=1', '--top=40',
                      f'--trace_dir={tmp_path}')
  families, ops = ([row.split()[-1] for row in table.splitlines()[1:]]
                   for table in out.split('\n\n')[1:])
  times = [float(row.split()[0])
           for row in out.split('\n\n')[-1].splitlines()[1:]]
  assert len(times) >= 3 and times == sorted(times, reverse=True), out
  assert len(set(ops)) == len(ops), out  # one row per op
  # A family is an op's name without XLA's instance number.
  assert not any(re.search(r'[._]\d+$', name) for name in families), out
  numbered = [op for op in ops if re.search(r'[._]\d+$', op)]
  assert numbered and all(re.sub(r'[._]\d+$', '', op) in families
                          for op in numbered[:3]), out


def test_input_pipeline_benchmark_reads_its_cache_in_a_fresh_process(
    tmp_path):
  out = run_benchmark(
      'input_pipeline.py', '--parts=pairs', '--pairs=400', '--batches=2',
      '--resume_step=3', '--max_length=32', '--tokens_per_batch=256',
      f'--folder={tmp_path}')
  row = [line for line in out.splitlines() if line.split()[:2] == [
      'pairs', '400']]
  assert row, out
  assert not os.listdir(tmp_path)  # its own folder removed without --keep


def test_table1_window_that_does_not_fit_the_lengths_is_a_flag_error():
  import subprocess  # pylint: disable=g-import-not-at-top
  run = subprocess.run([sys.executable, os.path.join(REPO, 'benchmarks',
                                                     'complexity.py'),
                        '--lengths=8,16', '--d=8'],  # the default window 64
                       capture_output=True, text=True, check=False, cwd=REPO)
  assert run.returncode == 1 and 'Traceback' not in run.stderr, run.stderr
  for part in ('--window=64', '--lengths', '8, 16', 'e.g. --window=8'):
    assert part in run.stderr, run.stderr


def test_table1_layers_reach_what_the_paper_says():
  # In its own process: the benchmark's flags (--repeats, ...) would clash
  # with another benchmark's imported into this one.
  out = run_benchmark('complexity.py', '--d=16', '--lengths=32,64',
                      '--kernel=3', '--window=8', '--repeats=1')
  table = out.split('\n\n')[0]  # the reach table, before the timings
  rows = {line[:27].strip(): line[27:].split() for line in table.splitlines()}
  # Reach of output t = 32 of n = 64 and the layers joining positions 1..n:
  # everything in one layer; the past in order (through 63 steps); (k-1)/2
  # a side, so n - 1 layers; its own block of r and the previous one, n / r.
  assert rows['self-attention'][-2:] == ['-32..+31', '1'], out
  assert rows['recurrent'][-2:] == ['-32..+0', '1'], out
  assert rows['convolution'][-2:] == ['-1..+1', '63'], out
  assert rows['restricted self-attention'][-2:] == ['-8..+7', '8'], out



def test_fine_tuning_beside_transformers_starts_from_the_same_loss():
  import pytest  # pylint: disable=g-import-not-at-top
  pytest.importorskip('torch')
  pytest.importorskip('transformers')
  # Llama only: the script's two families share every line but the
  # model's construction, which the converters' tests cover.
  for family in ('llama',):
    out = run_benchmark('finetune_against_transformers.py',
                        f'--family={family}', '--layers=1', '--width=64',
                        '--vocab=50', '--rows=2', '--length=8',
                        '--repeats=2')
    ours, theirs = re.search(r'loss ours ([\d.]+), transformers ([\d.]+)',
                             out).groups()
    assert float(ours) == pytest.approx(float(theirs), rel=1e-5), out
    assert '| transformers |' in out and 'rounds' in out, out


# 22 s on 2 cores: kept out of the default run's 10 minutes.
@pytest.mark.slow
def test_fine_tuning_on_text_runs_the_users_flow_and_learns(tmp_path):
  """Publish, convert, fine-tune (benchmarks/finetune_shakespeare.py),
  tiny: the validation loss after the steps is below the loss before (at
  the recipe's 3e-5 it moves little in 12 steps)."""
  pytest.importorskip('torch')
  pytest.importorskip('transformers')
  from transformer.data import text  # pylint: disable=g-import-not-at-top
  corpus = tmp_path / 'input.txt'
  corpus.write_text('\n'.join(text.offline_splits(300, 10, seed=0)['train']))
  out = run_benchmark('finetune_shakespeare.py', '--family=llama',
                      f'--text={corpus}', f'--out={tmp_path / "out"}',
                      '--layers=1', '--width=64', '--vocab=300',
                      '--length=32', '--rows=4', '--steps=12')
  before, after = map(float, re.search(
      r'\| llama_full \| ([\d.]+) -> ([\d.]+) \|', out).groups())
  assert after < before, out
