"""Tests of launch/gke.py: the JobSet it writes from a plan, its refusals,
and that it hands the manifest to `kubectl apply -f -`. No cluster: a fake
`kubectl` on PATH records its arguments and what it read on stdin."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import REPO

GKE = os.path.join(REPO, 'launch', 'gke.py')

V5E = {'config': 'experiments/lm1b.py',
       'flags': ['--config.mesh.data=1', '--config.mesh.fsdp=64',
                 '--config.model.remat=dots'],
       'topology': 'v5e:16x16', 'generation': 'v5e', 'chips': 256,
       'hosts': 64, 'chips_per_host': 4, 'fits': True}
V4 = {**V5E, 'config': 'experiments/wmt14.py:ende_big',
      'flags': ['--config.mesh.fsdp=16'], 'topology': 'v4:2x2x4',
      'generation': 'v4', 'chips': 16, 'hosts': 4}
REQUIRED = ('--name=lm1b-v5e', '--image=example.com/transformer:1',
            '--workdir=gs://bucket/lm1b')


@pytest.fixture
def bin_dir(tmp_path):
  """A PATH folder whose kubectl writes its arguments to `called` and its
  stdin to `stdin`, and exits with $KUBECTL_RC (default 0)."""
  folder = tmp_path / 'bin'
  folder.mkdir()
  kubectl = folder / 'kubectl'
  # PATH holds only this folder, so cat is named by its full path.
  kubectl.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/called\n'
                     f'{shutil.which("cat")} > {tmp_path}/stdin\n'
                     'exit ${KUBECTL_RC:-0}\n')
  kubectl.chmod(0o755)
  return folder


def called(bin_dir):
  path = bin_dir.parent / 'called'
  return path.read_text().splitlines() if path.exists() else []


def write_plan(tmp_path, plan, name='plan.json'):
  path = tmp_path / name
  path.write_text(json.dumps(plan))
  return str(path)


def run(*args, bin_dir, env=None):
  """Runs launch/gke.py with PATH holding only bin_dir (so no real kubectl
  is ever found) and without the caller's DRY_RUN."""
  base = {k: v for k, v in os.environ.items() if k != 'DRY_RUN'}
  base['PATH'] = str(bin_dir)
  base.update(env or {})
  return subprocess.run([sys.executable, GKE, *args], capture_output=True,
                        text=True, env=base, timeout=20, check=False)


def refused(result, *names):
  """The one-line refusal of a plan or a value, naming each of `names`,
  before anything ran."""
  assert result.returncode == 2, result.stdout
  for name in names:
    assert name in result.stderr, result.stderr
  assert len(result.stderr.splitlines()) == 1, result.stderr
  assert not result.stdout


def test_help(bin_dir):
  result = run('--help', bin_dir=bin_dir)
  assert result.returncode == 0
  assert result.stdout.startswith('Usage:')
  for flag in ('--plan', '--name', '--image', '--workdir', '--dry_run',
               '--output'):
    assert flag in result.stdout
  assert not called(bin_dir)


@pytest.mark.parametrize('plan, accelerator, topology', [
    (V5E, 'tpu-v5-lite-podslice', '16x16'),
    (V4, 'tpu-v4-podslice', '2x2x4'),
], ids=['v5e', 'v4'])
def test_dry_run_prints_the_jobset(tmp_path, bin_dir, plan, accelerator,
                                   topology):
  result = run(f'--plan={write_plan(tmp_path, plan)}', *REQUIRED, '--dry_run',
               bin_dir=bin_dir)
  assert result.returncode == 0, result.stderr
  assert not called(bin_dir)
  jobset = yaml.safe_load(result.stdout)
  assert jobset['apiVersion'] == 'jobset.x-k8s.io/v1alpha2'
  assert jobset['kind'] == 'JobSet'
  assert jobset['metadata']['name'] == 'lm1b-v5e'
  assert jobset['metadata']['annotations'] == {
      'alpha.jobset.sigs.k8s.io/exclusive-topology':
          'cloud.google.com/gke-nodepool'}
  [replicated] = jobset['spec']['replicatedJobs']
  assert replicated['replicas'] == 1
  job = replicated['template']['spec']
  assert job['parallelism'] == job['completions'] == plan['hosts']
  assert job['backoffLimit'] == 0
  assert job['completionMode'] == 'Indexed'
  pod = job['template']['spec']
  assert pod['nodeSelector'] == {
      'cloud.google.com/gke-tpu-accelerator': accelerator,
      'cloud.google.com/gke-tpu-topology': topology}
  assert pod['hostNetwork'] is True
  assert pod['dnsPolicy'] == 'ClusterFirstWithHostNet'
  assert pod['restartPolicy'] == 'Never'
  [container] = pod['containers']
  assert container['image'] == 'example.com/transformer:1'
  tpus = {'google.com/tpu': plan['chips_per_host']}
  assert container['resources'] == {'limits': tpus, 'requests': tpus}
  assert container['command'] == [
      'python', '-m', 'transformer.main', f'--config={plan["config"]}',
      '--workdir=gs://bucket/lm1b', *plan['flags']]


def test_command_line_flags_replace_the_plans(tmp_path, bin_dir):
  result = run(f'--plan={write_plan(tmp_path, V5E)}', *REQUIRED,
               '--config.mesh.fsdp=32', '--config.train.num_steps=10',
               bin_dir=bin_dir, env={'DRY_RUN': '1'})
  assert result.returncode == 0, result.stderr
  assert not called(bin_dir)
  [container] = yaml.safe_load(result.stdout)['spec']['replicatedJobs'][0][
      'template']['spec']['template']['spec']['containers']
  assert container['command'][3:] == [
      '--config=experiments/lm1b.py', '--workdir=gs://bucket/lm1b',
      '--config.mesh.data=1', '--config.model.remat=dots',
      '--config.mesh.fsdp=32', '--config.train.num_steps=10']


@pytest.mark.parametrize('rc', [0, 3])
def test_applies_the_manifest_with_kubectl(tmp_path, bin_dir, rc):
  plan = write_plan(tmp_path, V5E)
  dry = run(f'--plan={plan}', *REQUIRED, '--dry_run', bin_dir=bin_dir)
  result = run(f'--plan={plan}', *REQUIRED, bin_dir=bin_dir,
               env={'KUBECTL_RC': str(rc)})
  assert result.returncode == rc, result.stderr
  assert called(bin_dir) == ['apply -f -']
  assert (tmp_path / 'stdin').read_text() == dry.stdout
  assert ('kubectl logs' in result.stderr) == (rc == 0)


def test_output_writes_the_manifest_and_applies_nothing(tmp_path, bin_dir):
  plan = write_plan(tmp_path, V4)
  output = tmp_path / 'jobset.yaml'
  result = run(f'--plan={plan}', *REQUIRED, f'--output={output}',
               bin_dir=bin_dir)
  assert result.returncode == 0, result.stderr
  assert not called(bin_dir)
  dry = run(f'--plan={plan}', *REQUIRED, '--dry_run', bin_dir=bin_dir)
  assert output.read_text() == dry.stdout


def test_without_kubectl(tmp_path):
  empty = tmp_path / 'empty'
  empty.mkdir()
  result = run(f'--plan={write_plan(tmp_path, V5E)}', *REQUIRED,
               bin_dir=empty)
  assert result.returncode == 1
  assert 'gcloud components install kubectl' in result.stderr
  assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize('args, names', [
    ((), ('--plan', '--name', '--image', '--workdir')),
    (('--plan=p.json', '--name=n', '--image=i'), ('--workdir',)),
    (('--plan=p.json', '--workdir=gs://b', '--image=i'), ('--name',)),
    (('--name=n', '--workdir=gs://b', '--plan=p.json'), ('--image',)),
])
def test_missing_flags_are_named(bin_dir, args, names):
  result = run(*args, '--dry_run', bin_dir=bin_dir)
  assert result.returncode == 2
  assert 'missing required flags' in result.stderr
  named = result.stderr.splitlines()[0].split(': ')[-1].split()
  assert sorted(named) == sorted(names)
  assert 'Usage:' in result.stderr
  assert not result.stdout


@pytest.mark.parametrize('arg', ['--plan', '--config=experiments/lm1b.py',
                                 '--zone=us-central2-b', 'plan.json'])
def test_bad_arguments_exit_2(tmp_path, bin_dir, arg):
  result = run(f'--plan={write_plan(tmp_path, V5E)}', *REQUIRED, arg,
               '--dry_run', bin_dir=bin_dir)
  assert result.returncode == 2
  assert arg in result.stderr
  assert 'Usage:' in result.stderr
  assert not result.stdout


@pytest.mark.parametrize('change, names', [
    ({'generation': 'v3'}, ("generation 'v3'", 'v5e')),
    ({'fits': False}, ('v5e:16x16', 'transformer-plan', '--search')),
    ({'hosts': 32}, ('chips (256)', 'hosts (32)', 'chips_per_host (4)',
                     'transformer-plan')),
    ({'chips_per_host': 8}, ('chips (256)', 'hosts (64)',
                             'chips_per_host (8)', 'transformer-plan')),
    ({'topology': '16x16'}, ("topology '16x16'", 'GENERATION:AxB',
                             'transformer-plan')),
])
def test_refuses_a_bad_plan(tmp_path, bin_dir, change, names):
  result = run(f'--plan={write_plan(tmp_path, {**V5E, **change})}',
               *REQUIRED, bin_dir=bin_dir)
  refused(result, *names)
  assert not called(bin_dir)


@pytest.mark.parametrize('field', ['config', 'flags', 'hosts', 'fits'])
def test_refuses_a_plan_without_a_field(tmp_path, bin_dir, field):
  plan = {k: v for k, v in V5E.items() if k != field}
  result = run(f'--plan={write_plan(tmp_path, plan)}', *REQUIRED,
               '--dry_run', bin_dir=bin_dir)
  refused(result, f'lacks {field}', 'transformer-plan')


def test_refuses_a_missing_or_broken_plan_file(tmp_path, bin_dir):
  missing = tmp_path / 'nowhere.json'
  refused(run(f'--plan={missing}', *REQUIRED, '--dry_run', bin_dir=bin_dir),
          str(missing), 'transformer-plan', f'--json_out={missing}')
  broken = tmp_path / 'broken.json'
  broken.write_text('chips: 256\n')
  refused(run(f'--plan={broken}', *REQUIRED, '--dry_run', bin_dir=bin_dir),
          str(broken), 'not JSON', f'--json_out={broken}')


@pytest.mark.parametrize('workdir', ['/tmp/lm1b', 'workdirs/lm1b',
                                     's3://bucket/lm1b'])
def test_refuses_a_workdir_off_gcs(tmp_path, bin_dir, workdir):
  result = run(f'--plan={write_plan(tmp_path, V5E)}', '--name=n', '--image=i',
               f'--workdir={workdir}', '--dry_run', bin_dir=bin_dir)
  refused(result, f'--workdir={workdir}', 'GCS')
  assert 'gs://BUCKET/DIR' in result.stderr


@pytest.mark.parametrize('name, valid', [
    ('lm1b-v5e', True), ('a' * 40, True), ('a', True),
    ('a' * 41, False), ('Lm1b', False), ('1-lm', False), ('lm_1b', False),
    ('lm1b-', False), ('lm.1b', False),
])
def test_names_follow_the_kubernetes_rule(tmp_path, bin_dir, name, valid):
  result = run(f'--plan={write_plan(tmp_path, V5E)}', f'--name={name}',
               '--image=i', '--workdir=gs://b/w', '--dry_run',
               bin_dir=bin_dir)
  if valid:
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)['metadata']['name'] == name
  else:
    refused(result, f'--name={name}')
    assert 'at most 40 characters' in result.stderr
