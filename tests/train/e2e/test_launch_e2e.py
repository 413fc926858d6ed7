"""Tests of the launch scripts: argument checks and the commands a dry run
prints. No cloud and no cluster: fake `gcloud` and `srun` on PATH record a
call (which a dry run must never make), a fake `scontrol` lists hosts."""

import os
import shlex
import shutil
import subprocess
import time

import pytest

from conftest import REPO
from conftest import SLURM_SCRIPT as SLURM

LOCAL = os.path.join(REPO, 'launch', 'local.sh')
TPU = os.path.join(REPO, 'launch', 'tpu_vm.sh')
SCRIPTS = (LOCAL, TPU, SLURM)

TPU_FLAGS = ('--name=lm-pod', '--zone=us-central2-b', '--project=proj')
SLURM_ENV = {'SLURM_JOB_ID': '1234', 'SLURM_JOB_NODELIST': 'gpu[017-018]',
             'SLURM_NNODES': '2', 'SLURM_NTASKS': '16'}


def _fake(folder, name, body):
  path = folder / name
  path.write_text('#!/bin/sh\n' + body + '\n')
  path.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path):
  """A PATH folder whose gcloud and srun leave a mark when called."""
  folder = tmp_path / 'bin'
  folder.mkdir()
  for name in ('gcloud', 'srun'):
    _fake(folder, name, f'echo "$@" >> {tmp_path}/called; exit 1')
  # Hosts in the order scontrol gives them; the first is not the last.
  _fake(folder, 'scontrol', '[ "$1 $2" = "show hostnames" ] || exit 1\n'
        'printf "gpu017\\ngpu018\\n"')
  return folder


def run(script, *args, bin_dir=None, env=None):
  """Runs a script with bash in a clean environment (no DRY_RUN, PYTHONPATH
  or SLURM variables from the caller); returns the completed process."""
  base = {k: v for k, v in os.environ.items()
          if k not in ('DRY_RUN', 'PYTHONPATH')
          and not k.startswith(('SLURM_', 'JAX_'))}
  if bin_dir is not None:
    base['PATH'] = f'{bin_dir}{os.pathsep}{base["PATH"]}'
  base.update(env or {})
  return subprocess.run(['bash', script, *args], capture_output=True,
                        text=True, env=base, timeout=20, check=False)


def commands(result):
  """The command lines of a dry run, each split as a shell would."""
  assert result.returncode == 0, result.stderr
  return [shlex.split(line[2:]) for line in result.stdout.splitlines()
          if line.startswith('+ ')]


def not_called(bin_dir):
  return not (bin_dir.parent / 'called').exists()


@pytest.mark.parametrize('script', SCRIPTS, ids=os.path.basename)
def test_help(script):
  result = run(script, '--help')
  assert result.returncode == 0
  assert result.stdout.startswith('Usage:')
  assert '--dry_run' in result.stdout


@pytest.mark.parametrize('script, args, names', [
    (LOCAL, (), ('--config', '--workdir')),
    (LOCAL, ('--config=c',), ('--workdir',)),
    (TPU, ('run',), ('--name', '--zone', '--config', '--workdir')),
    (TPU, ('create', '--name=n', '--zone=z'), ('--accelerator_type',)),
    (TPU, ('up', '--name=n', '--zone=z', '--config=c', '--workdir=gs://b'),
     ('--accelerator_type',)),
    (SLURM, ('--workdir=w',), ('--config',)),
])
def test_missing_flags_are_named(script, args, names):
  result = run(script, '--dry_run', *args)
  assert result.returncode == 2
  assert 'missing required flags' in result.stderr
  for name in names:
    assert name in result.stderr
  assert 'Usage:' in result.stderr
  assert not result.stdout


@pytest.mark.parametrize('script, args', [
    (LOCAL, ('--config=c', '--workdir=w', '--processes=0')),
    (LOCAL, ('--config=c', '--workdir=w', '--cpu_devices=two')),
    (LOCAL, ('--config', 'c', '--workdir=w')),
    (TPU, ()),
    (TPU, ('resize', '--name=n', '--zone=z')),
    (TPU, ('logs', '--name=n', '--zone=z', '--worker=first')),
    (TPU, ('setup', '--name=n', '--zone=z', '--git_ref=main')),
])
def test_bad_arguments_exit_2(script, args):
  result = run(script, '--dry_run', *args)
  assert result.returncode == 2, result.stdout
  assert 'Usage:' in result.stderr


def test_local_one_process():
  result = run(LOCAL, '--dry_run', '--config=experiments/mt_offline.py',
               '--workdir=/tmp/w b', '--config.train.num_steps=7')
  [command] = commands(result)
  assert command[0] == 'env'
  assert f'PYTHONPATH={REPO}' in command
  assert command[-6:] == ['python', '-m', 'transformer.main',
                          '--config=experiments/mt_offline.py',
                          '--workdir=/tmp/w b', '--config.train.num_steps=7']
  assert not any(word.startswith('JAX_') for word in command)


def test_local_two_processes_with_cpu_devices():
  result = run(LOCAL, '--config=c', '--workdir=w', '--processes=2',
               '--cpu_devices=4', '--port=9999', env={'DRY_RUN': '1'})
  lines = commands(result)
  assert len(lines) == 2
  for i, command in enumerate(lines):
    assert f'JAX_PROCESS_ID={i}' in command
    assert 'JAX_NUM_PROCESSES=2' in command
    assert 'JAX_COORDINATOR_ADDRESS=localhost:9999' in command
    assert 'XLA_FLAGS=--xla_force_host_platform_device_count=4' in command
    assert 'JAX_PLATFORMS=cpu' in command


def test_local_devices_per_process():
  lines = commands(run(LOCAL, '--dry_run', '--config=c', '--workdir=w',
                       '--processes=2', '--devices_per_process=2'))
  assert 'JAX_LOCAL_DEVICE_IDS=0,1' in lines[0]
  assert 'JAX_LOCAL_DEVICE_IDS=2,3' in lines[1]


def test_local_runs_processes_and_stops_them_on_failure(tmp_path):
  """Not a dry run: a fake python stands in for transformer.main."""
  python = tmp_path / 'python'
  python.write_text('#!/bin/sh\necho "id $JAX_PROCESS_ID args $*"\n'
                    '[ "$JAX_PROCESS_ID" = 1 ] && exit 3\nsleep 30\n')
  python.chmod(0o755)
  start = time.time()
  result = run(LOCAL, '--config=c', '--workdir=w', '--processes=2',
               env={'PYTHON': str(python)})
  assert time.time() - start < 15  # process 0 was stopped, not awaited
  assert result.returncode == 1
  assert ('[process 0] id 0 args -m transformer.main --config=c --workdir=w'
          in result.stdout)
  assert '[process 1] id 1' in result.stdout
  assert 'a process failed' in result.stderr


def test_tpu_up_commands(bin_dir):
  result = run(TPU, 'up', *TPU_FLAGS, '--accelerator_type=v4-32', '--spot',
               '--config=experiments/lm1b.py', '--workdir=gs://bucket/lm1b',
               '--config.train.num_steps=10', '--dry_run', bin_dir=bin_dir)
  lines = commands(result)
  assert not_called(bin_dir)
  [pack] = [c for c in lines if c[0] == 'git']  # the tree, not local runs
  assert ':(exclude)workdirs' in pack and '--exclude-standard' in pack
  gcloud = [c for c in lines if c[0] == 'gcloud']
  assert [c[4] for c in gcloud] == ['describe', 'create', 'scp', 'ssh', 'ssh']
  for command in gcloud:
    assert '--zone=us-central2-b' in command
    assert '--project=proj' in command
  create = gcloud[1]
  assert create[5] == 'lm-pod'
  assert '--accelerator-type=v4-32' in create
  assert '--version=tpu-ubuntu2204-base' in create
  assert '--spot' in create
  for command in gcloud[2:]:  # the copy, the setup and the run
    assert '--worker=all' in command
  setup, train = (c[-1] for c in gcloud[3:])
  assert 'pip install -q -e "$HOME/transformer[tpu]"' in setup
  assert train.startswith('--command=')
  # Every worker writes to the bucket itself.
  main = ('transformer.main --config=experiments/lm1b.py '
          '--workdir=gs://bucket/lm1b --config.train.num_steps=10')
  assert main in train and 'gcsfuse' not in train


def test_tpu_workdirs_are_quoted_for_the_remote_shell(bin_dir):
  result = run(TPU, 'up', *TPU_FLAGS, '--accelerator_type=v4-8',
               '--config=c', '--workdir=gs://b;touch pwned/run', '--dry_run',
               bin_dir=bin_dir)
  train = commands(result)[-1][-1]
  assert "'--workdir=gs://b;touch pwned/run'" in train


@pytest.mark.parametrize('command, expected', [
    ('delete', ['delete', 'lm-pod', '--quiet']),
    ('stop', ['stop', 'lm-pod']),
    ('kill', ['ssh', 'lm-pod', '--worker=all']),
    ('logs', ['ssh', 'lm-pod', '--worker=0']),
])
def test_tpu_cleanup_and_logs(bin_dir, command, expected):
  [line] = commands(run(TPU, command, *TPU_FLAGS, '--dry_run',
                        bin_dir=bin_dir))
  assert line[:4] == ['gcloud', 'compute', 'tpus', 'tpu-vm']
  assert all(word in line for word in expected), line
  assert line[4] == expected[0]
  assert '--zone=us-central2-b' in line
  assert not_called(bin_dir)


def test_tpu_git_setup_and_runtime_version(bin_dir):
  lines = commands(run(TPU, 'setup', *TPU_FLAGS, '--dry_run',
                       '--git_url=https://example.com/t.git',
                       '--git_ref=v1', bin_dir=bin_dir))
  [ssh] = lines  # no archive, no scp
  assert ('git clone https://example.com/t.git $HOME/transformer && '
          'git -C $HOME/transformer checkout v1') in ssh[-1]
  [_, create] = commands(run(TPU, 'create', *TPU_FLAGS, '--dry_run',
                             '--accelerator_type=v5litepod-16'))
  assert '--version=v2-alpha-tpuv5-lite' in create


def test_tpu_warns_about_a_local_workdir():
  result = run(TPU, 'run', *TPU_FLAGS, '--config=c', '--workdir=/tmp/w',
               '--dry_run')
  assert result.returncode == 0
  assert 'not on GCS' in result.stderr


def test_slurm_one_process_per_gpu(bin_dir):
  result = run(SLURM, '--config=experiments/wmt14.py:ende_big',
               '--workdir=/shared/w', '--config.mesh.fsdp=8', '--dry_run',
               bin_dir=bin_dir, env=SLURM_ENV)
  [command] = commands(result)
  assert not_called(bin_dir)
  assert command[:2] == ['srun', '--kill-on-bad-exit=1']
  # The first host scontrol lists; the port is jax's formula for job 1234.
  assert 'JAX_COORDINATOR_ADDRESS=gpu017:62674' in command
  assert command[-4:] == ['transformer.main',
                          '--config=experiments/wmt14.py:ende_big',
                          '--workdir=/shared/w', '--config.mesh.fsdp=8']
  assert not any(w.startswith('JAX_LOCAL_DEVICE_IDS') for w in command)


def test_slurm_one_process_per_node(bin_dir):
  result = run(SLURM, '--config=c', '--workdir=w', '--one_process_per_node',
               '--port=5000', bin_dir=bin_dir,
               env={**SLURM_ENV, 'SLURM_GPUS_ON_NODE': '4', 'DRY_RUN': '1'})
  [command] = commands(result)
  assert '--ntasks=2' in command and '--ntasks-per-node=1' in command
  assert 'JAX_LOCAL_DEVICE_IDS=0,1,2,3' in command
  assert 'JAX_COORDINATOR_ADDRESS=gpu017:5000' in command


def test_slurm_outside_a_job(bin_dir):
  result = run(SLURM, '--config=c', '--workdir=w', '--dry_run',
               bin_dir=bin_dir)
  assert result.returncode == 2
  assert 'SLURM_JOB_NODELIST' in result.stderr
  per_node = run(SLURM, '--config=c', '--workdir=w', '--dry_run',
                 '--one_process_per_node', bin_dir=bin_dir, env=SLURM_ENV)
  assert per_node.returncode == 2
  assert '--gpus_per_node' in per_node.stderr


@pytest.mark.skipif(shutil.which('shellcheck') is None,
                    reason='shellcheck is not installed')
def test_shellcheck():
  # -x follows the sourced launch/common.sh.
  result = subprocess.run(['shellcheck', '-x', *SCRIPTS],
                          capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stdout
