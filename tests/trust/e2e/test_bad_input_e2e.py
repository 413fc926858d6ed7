"""Bad input to the commands, run in processes against a trained workdir,
and to prepared TFDS datasets: each is refused with a message that names the
problem, before anything compiles. (Config and data: ../test_bad_input.py.)
"""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import load_experiment
from conftest import prepare_translation_dataset
from conftest import raises_naming
from conftest import REPO
from transformer import train
from transformer import workdir as workdir_lib
from transformer.tools import generate
from transformer.tools import predict
from transformer.tools import translate


# -- Prepared TFDS datasets (importing TensorFlow starts a process: its h5py
# asks `uname -p` for the processor).


@pytest.fixture(name='toy_tfds', scope='module')
def fixture_toy_tfds(tmp_path_factory):
  """A tiny translation dataset prepared by TFDS, as `tfds build` leaves
  one: its data_dir."""
  pytest.importorskip('tensorflow_datasets')
  data_dir = tmp_path_factory.mktemp('tfds')
  prepare_translation_dataset(
      'ToyPairs', str(data_dir),
      {'train': [('ein Hund', 'a dog'), ('zwei Katzen', 'two cats')]})
  return data_dir


def damage_file(path, damage):
  data = path.read_bytes()
  if damage == 'removed':
    path.unlink()
  else:
    path.write_bytes(data[:len(data) // 2])


@pytest.mark.parametrize('name,damage,error,names', [
    ('dataset_info.json', 'cut short', ValueError,
     ("'toy_pairs/de-en'", 'tfds/toy_pairs/de-en', 'metadata', 'damaged')),
    ('features.json', 'cut short', ValueError,
     ("'toy_pairs/de-en'", 'metadata', 'damaged')),
    ('toy_pairs-train.tfrecord-00000-of-00001', 'cut short', ValueError,
     ("'toy_pairs/de-en'", "split 'train'", 'damaged or missing')),
    ('toy_pairs-train.tfrecord-00000-of-00001', 'removed', FileNotFoundError,
     ("'toy_pairs/de-en'", "split 'train'", 'damaged or missing',
      'No such file')),
])
def test_damaged_tfds_dataset_names_it_and_how_to_prepare_it(
    toy_tfds, tmp_path, name, damage, error, names):
  from transformer.data import tfds_reader  # pylint: disable=g-import-not-at-top
  data_dir = tmp_path / 'tfds'
  shutil.copytree(toy_tfds, data_dir)
  damage_file(data_dir / 'toy_pairs' / 'de-en' / '1.0.0' / name, damage)
  with raises_naming(error, *names,
                     f'tfds build toy_pairs/de-en --data_dir={data_dir}'):
    tfds_reader.load_translation('toy_pairs/de-en', 'train', 'en', 'de',
                                 str(data_dir))


# -- Commands: a clean message and the exit code of tools/cli.py, no
# traceback. The process boundary is the point here.


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('mt')
  config = load_experiment('mt_offline', 'runlocal')
  config.train.update(dict(num_steps=2, eval_every=100, checkpoint_every=2))
  config.eval.num_bleu_examples = 2
  train.train_and_evaluate(config, str(workdir))
  return workdir


def command(module, *args, stdin=b''):
  return subprocess.run([sys.executable, '-m', f'transformer.{module}',
                         *args], cwd=REPO, input=stdin, capture_output=True,
                        check=False, env={**os.environ,
                                          'JAX_PLATFORMS': 'cpu'})


USER_ERROR, MISSING_INPUT = 2, 66


@pytest.mark.parametrize('case', [
    'no workdir', 'empty input', 'invalid UTF-8 input', 'url workdir',
    'generate without prompts', 'predict with a translation workdir',
    'missing image', 'unknown flag field', 'positional argument',
    'translate with a language-model workdir',
    'generate with a translation workdir', 'damaged SentencePiece model',
    'output into a folder', 'input file a folder', 'prompts file missing',
    'predict a folder', 'predict batch of zero'])
def test_commands_refuse_bad_input_without_a_traceback(case, trained,
                                                        tmp_path):
  not_image = tmp_path / 'notes.png'
  not_image.write_text('hello')
  lm_workdir = tmp_path / 'lm'  # a whole language model's config
  workdir_lib.save_config(load_experiment('lm_offline', 'runlocal'),
                          str(lm_workdir))
  damaged = tmp_path / 'damaged'
  if case == 'damaged SentencePiece model':
    shutil.copytree(trained, damaged)
    model = damaged / 'vocab' / 'spm.model'
    model.write_bytes(model.read_bytes()[:1000])
  runs = {
      'no workdir': (('tools.translate', f'--workdir={tmp_path}'),
                     b'a house\n', (str(tmp_path), 'not a training workdir',
                                     f'transformer.main --workdir={tmp_path}'),
                     MISSING_INPUT),
      'empty input': (('tools.translate', f'--workdir={trained}'), b'',
                      ('No sentences', 'standard input', '--input'),
                      USER_ERROR),
      'invalid UTF-8 input': (
          ('tools.translate', f'--workdir={trained}'), b'caf\xe9\n',
          ('standard input', 'UTF-8', 'byte 0xe9', 'line 1', 'iconv'),
          USER_ERROR),
      'url workdir': (('main', '--workdir=s3://bucket/run'), b'',
                      ('s3://bucket/run', 'gs://'), USER_ERROR),
      'generate without prompts': (
          ('tools.generate', f'--workdir={trained}'), b'',
          ('--prompt', '--prompts_file'), USER_ERROR),
      'predict with a translation workdir': (
          ('tools.predict', f'--workdir={trained}', str(not_image)), b'',
          (str(trained), "'translation'", "'image_classification'",
           f'transformer.tools.translate --workdir={trained}'), USER_ERROR),
      'missing image': (
          ('tools.predict', f'--workdir={trained}', str(tmp_path / 'no.png')),
          b'', (f'{tmp_path}/no.png', 'no such file', 'PNG or JPEG'),
          MISSING_INPUT),
      'unknown flag field': (
          ('main', '--config=' + os.path.join(
              REPO, 'experiments', 'mt_offline.py:runlocal'),
           f'--workdir={tmp_path}', '--config.train.num_step=3'), b'',
          ("'num_step'", '"num_steps"'), USER_ERROR),
      'positional argument': (
          ('tools.translate', f'--workdir={trained}', 'beam_size=2'), b'',
          ("['beam_size=2']", '--name=value'), USER_ERROR),
      'translate with a language-model workdir': (
          ('tools.translate', f'--workdir={lm_workdir}'), b'a dog\n',
          (str(lm_workdir), "'language_modeling'", "'translation'",
           f'transformer.tools.generate --workdir={lm_workdir}'), USER_ERROR),
      'generate with a translation workdir': (
          ('tools.generate', f'--workdir={trained}', '--prompt=a'), b'',
          (str(trained), "'translation'", "'language_modeling'",
           f'transformer.tools.translate --workdir={trained}'), USER_ERROR),
      'damaged SentencePiece model': (
          ('tools.translate', f'--workdir={damaged}'), b'a dog\n',
          (f'{damaged}/vocab/spm.model', 'SentencePiece', 'damaged',
           'Restore it'), USER_ERROR),
      'output into a folder': (
          ('tools.translate', f'--workdir={trained}', f'--output={tmp_path}'),
          b'a dog\n', (f'--output={tmp_path}', 'is a folder',
                       'path of the file'), USER_ERROR),
      'input file a folder': (
          ('tools.translate', f'--workdir={trained}', f'--input={tmp_path}'),
          b'', (f'--input={tmp_path}', 'is a folder', 'UTF-8 text file'),
          USER_ERROR),
      'prompts file missing': (
          ('tools.generate', f'--workdir={trained}',
           f'--prompts_file={tmp_path}/no.txt'), b'',
          (f'--prompts_file={tmp_path}/no.txt', 'no such file'),
          MISSING_INPUT),
      'predict a folder': (
          ('tools.predict', f'--workdir={trained}', str(tmp_path)), b'',
          (str(tmp_path), 'is a folder', 'PNG or JPEG', 'FOLDER/*'),
          USER_ERROR),
      'predict batch of zero': (
          ('tools.predict', f'--workdir={trained}', '--batch_size=0',
           str(not_image)), b'', ('--batch_size=0', '>= 1'), USER_ERROR),
  }
  args, stdin, names, code = runs[case]
  run = command(*args, stdin=stdin)
  stderr = run.stderr.decode()
  assert run.returncode == code, stderr[-2000:]
  for name in names:
    assert name in stderr, stderr[-2000:]
  assert 'Traceback' not in stderr


@pytest.mark.parametrize('call,names', [
    (lambda w: translate.translate(w, ['a dog'], average=-3),
     ('--average=-3', '>= 1')),
    (lambda w: translate.translate(w, ['a dog'], length_penalty=float('nan')),
     ('--length_penalty=nan', '>= 0')),
    (lambda w: translate.translate(w, ['a dog'], max_length_offset=-1),
     ('--max_length_offset=-1', '>= 0')),
    (lambda w: generate.generate(w, ['a'], max_new_tokens=-5),
     ('--max_new_tokens=-5', '>= 1')),
    (lambda w: predict.classify(w, [__file__], top_k=0),
     ('--top_k=0', '>= 1')),
    (lambda w: translate.translate(w, ['a dog'], length_penalty=float('inf')),
     ('--length_penalty=inf', '>= 0', 'finite number')),
    (lambda w: generate.generate(w, ['a'], temperature=float('nan')),
     ('--temperature=nan', '> 0', 'finite number')),
    (lambda w: generate.generate(w, ['a'], top_p=1.5),
     ('--top_p=1.5', '(0, 1]')),
    (lambda w: generate.generate(w, ['a'], top_k=-1),
     ('--top_k=-1', '>= 0')),
])
def test_command_flags_out_of_range_are_refused_before_work(call, names,
                                                            trained):
  with raises_naming(ValueError, *names):
    call(str(trained))


@pytest.mark.parametrize('case', ['argument typo', 'syntax error',
                                  'missing file', 'no get_config'])
def test_experiment_file_errors_are_one_line(case, tmp_path):
  experiments = os.path.join(REPO, 'experiments')
  (tmp_path / 'broken.py').write_text('def get_config(:\n')
  (tmp_path / 'empty.py').write_text('CONFIG = {}\n')
  spec, names, code = {
      'argument typo': (
          f'{experiments}/mt_offline.py:runlokal',
          ("'runlokal'", "'runlocal'"), USER_ERROR),
      'syntax error': (f'{tmp_path}/broken.py',
                       ('broken.py line 1', 'syntax'), USER_ERROR),
      'missing file': (f'{experiments}/mt_ofline.py:runlocal',
                       ('mt_offline', '--config=mt_offline:runlocal'),
                       MISSING_INPUT),
      'no get_config': (f'{tmp_path}/empty.py', ('get_config',),
                        USER_ERROR),
  }[case]
  run = command('main', f'--config={spec}', f'--workdir={tmp_path / "w"}')
  stderr = run.stderr.decode()
  assert run.returncode == code, stderr[-2000:]
  assert stderr.startswith('Error: '), stderr
  for name in (f'--config={spec}', *names):
    assert name in stderr, stderr
  assert len(stderr.strip().splitlines()) == 1, stderr
  assert not (tmp_path / 'w').exists()


def test_translate_output_into_a_missing_folder_fails_first(trained,
                                                            tmp_path):
  run = command('tools.translate', f'--workdir={trained}',
                f'--output={tmp_path / "missing" / "out.txt"}',
                stdin=b'a dog\n')
  assert run.returncode == MISSING_INPUT
  stderr = run.stderr.decode()
  assert f'--output={tmp_path / "missing" / "out.txt"}' in stderr, stderr
  assert f'{tmp_path / "missing"} ' in stderr and 'create it' in stderr
  assert 'Translated' not in run.stderr.decode()


def test_long_and_unknown_input_translates(trained):
  long_sentence = ' '.join(['the red house'] * 100)
  run = command('tools.translate', f'--workdir={trained}',
                stdin=f'{long_sentence}\n☃ ∮ ★\n'.encode())
  assert run.returncode == 0, run.stderr.decode()[-2000:]
  assert len(run.stdout.decode().splitlines()) == 2
  assert 'Truncated 1 of 2 source sentences' in run.stderr.decode()


@pytest.mark.parametrize('args,names', [
    (('tools.generate', '--prompt=a', f'--seed={2**70}'),
     (f'--seed={2**70}', '64 bits', '9223372036854775807')),
    (('tools.translate', f'--beam_size={-2**64}'),
     (f'--beam_size={-2**64}', '64 bits', '9223372036854775807')),
    (('tools.generate', '--prompt=a', r'--stop=\x4'),
     (r'--stop=\x4', 'truncated', r'\\', r'\xHH')),
    (('tools.generate', '--prompt=a', '--stop=a\\'),
     ('--stop=a\\', 'at end', r'\\', r'\xHH')),
])
def test_flags_that_cannot_be_read_are_named_in_one_line(args, names,
                                                        tmp_path):
  run = command(args[0], f'--workdir={tmp_path}', *args[1:])
  stderr = run.stderr.decode()
  assert run.returncode == USER_ERROR, stderr[-2000:]
  assert 'Error: ' in stderr and 'Traceback' not in stderr, stderr
  for name in names:
    assert name in stderr, stderr


@pytest.mark.parametrize('flag,names', [
    ('--alignment_layer=7', ('1 decoder layers', '0 to 0',
                             'leave --alignment_layer out')),
    ('--alignment_head=9', ('4 heads', '0 to 3',
                            'leave --alignment_head out')),
])
def test_alignment_layer_or_head_out_of_range_names_the_flag(
    flag, names, trained, tmp_path):
  run = command('tools.translate', f'--workdir={trained}',
                f'--alignments={tmp_path / "a.jsonl"}', flag,
                stdin=b'a dog\n')
  stderr = run.stderr.decode()
  assert run.returncode == USER_ERROR, stderr[-2000:]
  assert 'Error: ' in stderr and 'Traceback' not in stderr, stderr
  for name in (flag, *names):
    assert name in stderr, stderr
  assert not (tmp_path / 'a.jsonl').exists()


@pytest.mark.parametrize('tool', ['translate', 'heads', 'kernel_regression'])
def test_commands_refuse_files_already_there(tool, trained, tmp_path):
  kept = tmp_path / {'translate': 'hyp.txt', 'heads': 'heads.md',
                     'kernel_regression': 'kernel_regression.png'}[tool]
  kept.write_text('kept')
  args = {'translate': (f'--workdir={trained}', f'--output={kept}'),
          'heads': (f'--workdir={trained}', f'--output_dir={tmp_path}',
                    '--steps=1', '--batches=1'),
          'kernel_regression': (f'--output_dir={tmp_path}', '--steps=2')}
  run = command(f'tools.{tool}', *args[tool], stdin=b'a dog\n')
  stderr = run.stderr.decode()
  assert run.returncode == USER_ERROR, stderr[-2000:]
  assert 'Error: ' in stderr and str(kept) in stderr, stderr
  assert '--overwrite' in stderr, stderr
  assert kept.read_text() == 'kept'
  if tool == 'translate':  # --overwrite says so
    run = command(f'tools.{tool}', *args[tool], '--overwrite',
                  stdin=b'a dog\n')
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    assert kept.read_text() != 'kept'


def test_gs_workdir_without_credentials_says_how_to_provide_them(tmp_path):
  env = {k: v for k, v in os.environ.items()
         if k not in ('GOOGLE_APPLICATION_CREDENTIALS',
                      'STORAGE_EMULATOR_HOST')}
  env.update(HOME=str(tmp_path), CLOUDSDK_CONFIG=str(tmp_path / 'gcloud'),
             JAX_PLATFORMS='cpu')
  run = subprocess.run(
      [sys.executable, '-m', 'transformer.tools.translate',
       '--workdir=gs://no-such-bucket-38/run'], cwd=REPO, input=b'a dog\n',
      capture_output=True, check=False, env=env, timeout=300)
  stderr = run.stderr.decode()
  assert run.returncode == USER_ERROR, stderr[-2000:]
  assert 'Error: gs://no-such-bucket-38/run/config.json' in stderr, (
      stderr[-2000:])
  assert 'credentials' in stderr
  assert 'gcloud auth application-default login' in stderr
  assert 'GOOGLE_APPLICATION_CREDENTIALS' in stderr
  assert 'Traceback' not in stderr


# Imports TensorFlow, which starts a process (`uname -p`, from h5py).
def test_storage_failures_are_one_line(monkeypatch):
  """The same failure with credentials found: what to check instead."""
  errors = pytest.importorskip('tensorflow.python.framework.errors_impl')
  from transformer import storage  # pylint: disable=g-import-not-at-top
  error = errors.FailedPreconditionError(
      None, None, "Error executing an HTTP request: libcurl code 6\n\t when "
      "reading metadata of gs://bucket/run/config.json")
  monkeypatch.setattr(storage, '_credentials_found', lambda: True)
  failure = storage.storage_failure(error)
  message = str(failure)
  assert '\n' not in message, message  # its first line only
  for name in ('gs://bucket/run/config.json',
               'Error executing an HTTP request: libcurl code 6',
               'bucket name', 'network'):
    assert name in message, message
  monkeypatch.setattr(storage, '_credentials_found', lambda: False)
  assert 'no Google Cloud credentials' in str(storage.storage_failure(error))
  assert storage.storage_failure(ValueError('gs://bucket is wrong')) is None
