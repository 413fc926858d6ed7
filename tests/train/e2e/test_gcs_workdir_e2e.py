"""Workdirs on cloud storage: training, resuming and translating with
--workdir=gs://bucket/path against a GCS emulator on 127.0.0.1
(`gcs_emulator_url` in conftest.py; skipped with the reason when the
emulator or gcsfs is missing or cannot start). The run is slow (three processes); the storage
layer is tested in this process in ../test_gcs_workdir.py."""

import os
import subprocess
import sys

import pytest

from conftest import REPO

gcsfs = pytest.importorskip('gcsfs')
gcs_emulator = pytest.importorskip(
    'gcs_emulator', reason='needs gcp-storage-emulator (the test extra)')

TRAIN = ['--config=' + os.path.join(REPO, 'experiments',
                                    'mt_offline.py:runlocal'),
         '--config.train.checkpoint_every=2', '--config.train.log_every=2',
         '--config.eval.num_bleu_examples=4']


def run(env, *args, stdin=None):
  return subprocess.run([sys.executable, '-m', *args], cwd=REPO, env=env,
                        input=stdin, capture_output=True, text=True,
                        timeout=600)


def objects(url, prefix):
  os.environ['STORAGE_EMULATOR_HOST'] = url
  fs = gcsfs.GCSFileSystem(token='anon', skip_instance_cache=True)
  return {path.removeprefix(prefix + '/') for path in fs.find(prefix)}


@pytest.mark.slow
def test_train_resume_and_translate_on_gs(gcs_emulator_url):
  env = gcs_emulator.environment(gcs_emulator_url)
  workdir = 'gs://bucket/runs/mt'
  first = run(env, 'transformer.main', f'--workdir={workdir}', *TRAIN,
              '--config.train.num_steps=4', '--config.train.eval_every=4')
  assert first.returncode == 0, first.stderr[-3000:]
  # Library chatter (gcsfs, orbax) stays off the console.
  assert 'gcsfs' not in first.stderr and 'Traceback' not in first.stderr
  assert f'Checkpoints: {workdir}/checkpoints' in first.stdout
  stored = objects(gcs_emulator_url, 'bucket/runs/mt')
  for name in ('config.json', 'progress.json', 'vocab/spm.model',
               'checkpoints/2/checksums.json', 'checkpoints/4/checksums.json',
               'checkpoints/4/progress/metadata', 'logs/train.log',
               'reports/test_step4.txt',
               'plots/cross_attention_step4_layer_0.png'):
    assert name in stored, sorted(stored)
  assert any(n.startswith('events.out.tfevents') for n in stored)
  assert 'run.lock' not in stored  # released when the run ended

  resumed = run(env, 'transformer.main', f'--workdir={workdir}', *TRAIN,
                '--config.train.num_steps=6', '--config.train.eval_every=6')
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert 'step 6/6' in resumed.stdout and 'step 2/6' not in resumed.stdout
  assert 'checkpoints/6/checksums.json' in objects(gcs_emulator_url, 'bucket/runs/mt')

  translated = run(env, 'transformer.tools.translate', f'--workdir={workdir}',
                   stdin='the dog sees the cat\n')
  assert translated.returncode == 0, translated.stderr[-3000:]
  assert 'checkpoint of step 6' in translated.stderr + translated.stdout
