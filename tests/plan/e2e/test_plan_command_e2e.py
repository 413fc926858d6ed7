"""`transformer-plan` as a user runs it: the report, its JSON for
launch/gke.py, the exit status of a plan that does not fit, and bad input
refused in one line before anything compiles; the bytes a plan gives each
chip against a real state's on 8 simulated devices."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import REPO
from transformer.plan import topology

pytestmark = pytest.mark.skipif(
    not topology.libtpu_installed(),
    reason=f'libtpu (the TPU compiler) is not installed: {topology.INSTALL}')

ENV = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'TF_CPP_MIN_LOG_LEVEL': '2'}


def command(*args, env=None):
  return subprocess.run(
      [sys.executable, '-m', 'transformer.tools.plan', *args],
      capture_output=True, text=True, cwd=REPO, env=env or ENV, check=False,
      timeout=600)


def test_a_plan_prints_its_report_and_writes_what_gke_launches(tmp_path):
  plan_file = tmp_path / 'plan.json'
  done = command('--config=experiments/lm_offline.py:runlocal',
                 '--topology=v5e:2x2', '--config.mesh.fsdp=2',
                 '--config.mesh.data=2', f'--json_out={plan_file}')
  assert done.returncode == 0, done.stderr
  for part in ('on v5e:2x2: 4 TPU v5 lite chips', 'mesh data=2 fsdp=2',
               'Memory per chip', '=> fits', 'all-gather',
               'Step time bound per chip', 'MFU at most', 'Search'):
    assert part in done.stdout, part
  assert 'libtpu' not in done.stderr and 'WARNING' not in done.stderr
  record = json.loads(plan_file.read_text())
  assert record['flags'] == ['--config.mesh.fsdp=2', '--config.mesh.data=2']
  assert record['fits'] and record['step_seconds_bound'] > 0
  launched = subprocess.run(
      [sys.executable, os.path.join(REPO, 'launch', 'gke.py'),
       f'--plan={plan_file}', '--name=lm-plan', '--image=IMAGE',
       '--workdir=gs://bucket/lm', '--dry_run'],
      capture_output=True, text=True, check=False)
  assert launched.returncode == 0, launched.stderr
  job = yaml.safe_load(launched.stdout)['spec']['replicatedJobs'][0]
  pod = job['template']['spec']['template']['spec']
  assert pod['nodeSelector']['cloud.google.com/gke-tpu-topology'] == '2x2'
  assert pod['containers'][0]['command'][-2:] == record['flags']


def test_a_plan_that_does_not_fit_exits_1_naming_its_terms():
  done = command('--config=experiments/lm_offline.py:runlocal',
                 '--topology=v5e:2x2', '--config.model.num_layers=2',
                 '--config.model.d_model=8192', '--config.model.num_heads=8',
                 '--config.model.d_ff=32768', '--config.data.vocab_size=512')
  assert done.returncode == 1, done.stderr
  assert 'does not fit' in done.stdout and 'optimizer state' in done.stdout
  assert '--config.mesh.fsdp=N (now 1' in done.stdout


@pytest.mark.parametrize('args,message', [
    (('--topology=v9:2x2',), "'v9'"),
    # Bad shapes, meshes and batches: test_planner.py, in this process.
    (('--topology=v5e:2x2', '--config.train.num_steps=many'),
     'num_steps'),
    ((), '--topology'),
])
def test_bad_input_is_refused_in_one_line(args, message):
  if not any(arg.startswith('--config=') for arg in args):
    args = ('--config=experiments/lm_offline.py:runlocal', *args)
  done = command(*args)
  assert done.returncode == 2, (done.stdout, done.stderr)
  assert message in done.stderr
  assert 'Traceback' not in done.stderr
  assert 'compiled' not in done.stdout


def test_planned_bytes_are_a_real_states_on_8_devices(tmp_path):
  env = {**ENV, 'XLA_FLAGS': '--xla_force_host_platform_device_count=8'}
  done = subprocess.run(
      [sys.executable, os.path.join(REPO, 'tests', 'plan',
                                    'planned_state.py'), str(tmp_path)],
      capture_output=True, text=True, env=env, check=False, timeout=600)
  assert done.returncode == 0, done.stderr[-2000:]
  rows = [json.loads(line) for line in done.stdout.splitlines()
          if line.startswith('{')]
  assert len(rows) == 2
  for row in rows:
    assert row['planned'] == row['real'] > 0, row
    # XLA's own count on CPU devices: the state, the step counter and the
    # batch arrays the loss reads (jit drops those it does not).
    fixed = row['real'] + row['real_step']
    assert fixed < row['simulated_arguments'] <= fixed + row['real_batch']
  assert rows[0]['real'] < rows[1]['real']  # fsdp=4 shards more than 2


def test_commands_run_on_the_cpu_quietly_where_libtpu_has_no_tpu():
  """The tpu extra on a machine without a TPU: a command starts no TPU
  backend (whose failure libtpu would print), a bare jax does."""
  env = {k: v for k, v in ENV.items() if k != 'JAX_PLATFORMS'}
  code = ('from transformer.tools import cli; {}import jax; '
          'print(jax.devices()[0].platform)')
  said = [subprocess.run([sys.executable, '-c', code.format(call)],
                         capture_output=True, text=True, env=env, cwd=REPO,
                         check=True, timeout=120)
          for call in ('cli.skip_absent_tpu(); ', '')]
  assert said[0].stdout.strip() == 'cpu' and 'TPU' not in said[0].stderr
  assert 'TPU' in said[1].stderr  # the test can fail: libtpu does print
