"""Bad input across config, data and commands: each is refused (or counted)
with a message that names the problem, before anything compiles."""

import gzip
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import load_experiment
from conftest import REPO
from conftest import write_idx
from transformer import configs
from transformer import train
from transformer.data import images
from transformer.data import parallel_text
from transformer.data import text
from transformer.tools import generate
from transformer.tools import predict
from transformer.tools import translate


def mt(**changes):
  return configs.override(load_experiment('mt_offline', 'runlocal'), changes)


def vit(**changes):
  return configs.override(load_experiment('vit_offline', 'runlocal'), changes)


CONFIG_CASES = {
    'zero steps': (mt(**{'train.num_steps': 0}), 'train.num_steps=0'),
    'unknown schedule': (mt(**{'optimizer.schedule': 'linear'}),
                         "choose 'rsqrt', 'constant' or 'cosine'"),
    'unknown optimizer': (mt(**{'optimizer.name': 'lamb'}),
                          "optimizer.name='lamb'"),
    'warmup past the end': (
        mt(**{'optimizer.schedule': 'cosine',
              'optimizer.warmup_steps': 100}),
        'warmup_steps=100 must be below'),
    'averaging more than kept': (
        mt(**{'eval.average_checkpoints': 30}),
        'average_checkpoints=30 exceeds'),
    'mesh larger than the devices': (mt(**{'mesh.data': 3}),
                                     'needs 3 devices but 1 are available'),
    'two open mesh axes': (mt(**{'mesh.fsdp': -1}),
                           'Only one mesh axis may be -1'),
    'width not divisible by heads': (
        mt(**{'model.d_model': 30, 'model.num_heads': 4}),
        'd_model=30 is not divisible by num_heads=4'),
    'query heads not a multiple of kv heads': (
        mt(**{'model.num_kv_heads': 3}),
        'num_heads=4 is not a multiple of num_kv_heads=3'),
    'unknown positions': (mt(**{'model.positional_encoding': 'relative'}),
                          "positional_encoding='relative'"),
    'unknown activation': (mt(**{'model.activation': 'tanh'}),
                           "activation='tanh'"),
    'unknown remat policy': (mt(**{'model.remat': 'some'}), "remat='some'"),
    'unknown attention kernel': (
        mt(**{'model.attention_implementation': 'flash'}),
        "attention_implementation='flash'"),
    'unknown task': (mt(task='summarization'),
                     "Unknown config.task 'summarization'"),
    'vocabulary smaller than the special tokens': (
        mt(**{'data.vocab_size': 2}), 'vocab_size=2 leaves no room'),
    'unknown non-finite policy': (mt(**{'train.nonfinite': 'ignore'}),
                                  "nonfinite='ignore'"),
    'zero micro-batches': (mt(**{'train.microbatches': 0}),
                           'microbatches=0 must be >= 1'),
    'unknown optimizer-state dtype': (mt(**{'optimizer.mu_dtype': 'float16'}),
                                      "mu_dtype='float16'"),
    'unknown image crop': (vit(**{'data.crop': 'random'}),
                           "config.data.crop='random'"),
    'batch not divisible into micro-batches': (
        vit(**{'train.microbatches': 3}),
        'batch_size=8 is not a multiple of 3'),
    'stored images smaller than the model input': (
        vit(**{'data.load_size': 8}), 'load_size=8 is below image_size'),
    'dropout above 1': (mt(**{'model.dropout_rate': 1.5}),
                        'dropout_rate=1.5 must be in [0, 1)'),
    'zero heads': (mt(**{'model.num_heads': 0}), 'num_heads=0 must be >= 1'),
    'zero layers': (vit(**{'model.num_layers': 0}),
                    'num_layers=0 must be >= 1'),
    'negative epsilon': (mt(**{'model.layer_norm_epsilon': -1e-6}),
                         'layer_norm_epsilon=-1e-06 must be > 0'),
    'negative learning rate': (mt(**{'optimizer.learning_rate': -0.1}),
                               'learning_rate=-0.1 must be in (0.0, inf)'),
    'Adam beta2 of 1': (mt(**{'optimizer.b2': 1.0}),
                        'optimizer.b2=1.0 must be in [0.0, 1.0)'),
    'label smoothing of 1': (mt(**{'train.label_smoothing': 1.0}),
                             'label_smoothing=1.0 must be in [0, 1)'),
    'RNN with no hidden units': (
        mt(**{'model.family': 'rnn', 'model.size': 'tiny',
              'model.hidden_dim': 0}), 'hidden_dim=0 must be >= 1'),
    'unknown RNN attention': (
        mt(**{'model.family': 'rnn', 'model.size': 'tiny',
              'model.attention': 'cosine'}), 'cosine'),
}


@pytest.mark.parametrize('name', sorted(CONFIG_CASES))
def test_bad_config_is_refused_before_compiling(name, tmp_path):
  config, message = CONFIG_CASES[name]
  with pytest.raises(ValueError) as error:
    trainer = train.Trainer(config, str(tmp_path))
    next(trainer.task.train_iter(0))  # data settings are read here
  assert message in str(error.value)


def test_unknown_config_field_is_refused():
  with pytest.raises(configs.UnknownField, match='train.num_step'):
    configs.override(load_experiment('mt_offline', 'runlocal'),
                     'train.num_step=3')


def test_masked_lm_with_nothing_masked_is_refused(tmp_path):
  config = load_experiment('bert_mlm', 'runlocal')
  config.data.mask_rate = 0.0
  with pytest.raises(ValueError, match=r'mask_rate=0.0 must be in \(0, 1\)'):
    train.Trainer(config, str(tmp_path))


def test_too_long_policy_is_checked(tmp_path):
  trainer = train.Trainer(mt(**{'data.too_long': 'cut'}), str(tmp_path))
  with pytest.raises(ValueError, match="too_long='cut'"):
    next(trainer.task.train_iter(0))


def write_lines(path, lines, encoding='utf-8'):
  opener = gzip.open if str(path).endswith('.gz') else open
  with opener(path, 'wb') as f:
    f.write(''.join(line + '\n' for line in lines).encode(encoding))


def test_parallel_corpus_with_different_line_counts(tmp_path):
  write_lines(tmp_path / 'train.en', ['a', 'b', 'c'])
  write_lines(tmp_path / 'train.de.gz', ['x', 'y'])
  with pytest.raises(ValueError, match=r'Line counts differ: 3 in .*train.en'
                     r' and 2 in .*train.de.gz'):
    parallel_text.read_parallel(str(tmp_path), 'train', 'en', 'de')


def test_parallel_corpus_empty_files(tmp_path):
  write_lines(tmp_path / 'train.en', [])
  write_lines(tmp_path / 'train.de', [])
  with pytest.raises(ValueError, match='are empty'):
    parallel_text.read_parallel(str(tmp_path), 'train', 'en', 'de')


@pytest.mark.parametrize('damage', ['cut short', 'not gzip'])
def test_a_damaged_gzip_file_is_named(tmp_path, damage):
  write_lines(tmp_path / 'train.en', ['a house'] * 200)
  write_lines(tmp_path / 'train.de.gz', ['ein Haus'] * 200)
  data = (tmp_path / 'train.de.gz').read_bytes()
  (tmp_path / 'train.de.gz').write_bytes(
      data[:len(data) // 2] if damage == 'cut short' else b'plain text')
  with pytest.raises(ValueError, match=r'train.de.gz is not a complete gzip '
                     r'file .*fetch it again'):
    parallel_text.read_parallel(str(tmp_path), 'train', 'en', 'de')
  write_idx(tmp_path / 'train-labels-idx1-ubyte.gz', np.arange(600) % 10)
  data = (tmp_path / 'train-labels-idx1-ubyte.gz').read_bytes()
  (tmp_path / 'train-labels-idx1-ubyte.gz').write_bytes(data[:-20])
  with pytest.raises(ValueError, match='labels-idx1-ubyte.gz is not a '
                     'complete gzip file'):
    images._read_idx(str(tmp_path / 'train-labels-idx1-ubyte.gz'))  # pylint: disable=protected-access


def test_parallel_corpus_empty_lines_are_dropped_and_counted(tmp_path,
                                                             caplog):
  write_lines(tmp_path / 'train.en', ['a', '', 'c'])
  write_lines(tmp_path / 'train.de', ['x', 'y', ''])
  pairs = parallel_text.read_parallel(str(tmp_path), 'train', 'en', 'de')
  assert pairs == [('a', 'x')]
  assert 'Dropped 2 of 3 pairs' in caplog.text


def test_invalid_utf8_names_file_line_and_byte(tmp_path):
  write_lines(tmp_path / 'train.en', ['fine', 'caf\xe9'], encoding='latin-1')
  write_lines(tmp_path / 'train.de', ['gut', 'Kaffee'])
  with pytest.raises(ValueError, match=r'train.en is not valid UTF-8: byte '
                     r'0xe9 at line 2'):
    parallel_text.read_parallel(str(tmp_path), 'train', 'en', 'de')
  with pytest.raises(ValueError, match='not valid UTF-8'):
    text.read_documents(str(tmp_path / 'train.en'), per='line')


def test_missing_corpus_folder(tmp_path):
  with pytest.raises(FileNotFoundError, match='does not exist'):
    parallel_text.read_parallel(str(tmp_path / 'nowhere'), 'train', 'en',
                                'de')


def test_text_path_without_text_files(tmp_path):
  with pytest.raises(FileNotFoundError):
    text.read_documents(str(tmp_path), per='file')


def test_undecodable_images_are_refused_or_skipped_and_counted(tmp_path,
                                                               caplog):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  folder = tmp_path / 'train' / 'cat'
  folder.mkdir(parents=True)
  Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(folder / 'good.png')
  (folder / 'broken.png').write_bytes(b'\x89PNG not really')
  with pytest.raises(images.BadImageError, match=r'broken.png cannot be '
                     r'decoded.*bad_images=skip'):
    images.read_folder(str(tmp_path), 'train', image_size=8)
  pictures, labels, _ = images.read_folder(str(tmp_path), 'train',
                                           image_size=8, bad_images='skip')
  assert len(pictures) == len(labels) == 1
  assert 'skipped 1 image files that do not decode: broken.png' in caplog.text
  with pytest.raises(ValueError, match="bad_images='ignore'"):
    images.read_folder(str(tmp_path), 'train', image_size=8,
                       bad_images='ignore')


def test_truncated_mnist_file_is_reported(tmp_path):
  write_idx(tmp_path / 'train-images-idx3-ubyte.gz',
            np.zeros((4, 28, 28)))
  path = tmp_path / 'train-images-idx3-ubyte.gz'
  data = gzip.decompress(path.read_bytes())[:-100]
  path.write_bytes(gzip.compress(data))
  write_idx(tmp_path / 'train-labels-idx1-ubyte.gz', np.zeros(4))
  with pytest.raises(ValueError, match='train-images-idx3-ubyte'):
    images.read_mnist(str(tmp_path), 'train')


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
    'missing image', 'unknown flag field', 'positional argument'])
def test_commands_refuse_bad_input_without_a_traceback(case, trained,
                                                        tmp_path):
  not_image = tmp_path / 'notes.png'
  not_image.write_text('hello')
  runs = {
      'no workdir': (('tools.translate', f'--workdir={tmp_path}'),
                     b'a house\n', 'is not a training workdir',
                     MISSING_INPUT),
      'empty input': (('tools.translate', f'--workdir={trained}'), b'',
                      'No sentences to translate', USER_ERROR),
      'invalid UTF-8 input': (
          ('tools.translate', f'--workdir={trained}'), b'caf\xe9\n',
          'standard input is not valid UTF-8: byte 0xe9 at line 1',
          USER_ERROR),
      'url workdir': (('main', '--workdir=gs://bucket/run'), b'',
                      'mount the bucket', USER_ERROR),
      'generate without prompts': (
          ('tools.generate', f'--workdir={trained}'), b'', 'Give --prompt',
          USER_ERROR),
      'predict with a translation workdir': (
          ('tools.predict', f'--workdir={trained}', str(not_image)), b'',
          "task, not 'image_classification'", USER_ERROR),
      'missing image': (
          ('tools.predict', f'--workdir={trained}', str(tmp_path / 'no.png')),
          b'', 'No such files', MISSING_INPUT),
      'unknown flag field': (
          ('main', '--config=' + os.path.join(
              REPO, 'experiments', 'mt_offline.py:runlocal'),
           f'--workdir={tmp_path}', '--config.train.num_step=3'), b'',
          'Did you mean "num_steps"', USER_ERROR),
      'positional argument': (
          ('tools.translate', f'--workdir={trained}', 'beam_size=2'), b'',
          'Unexpected arguments', USER_ERROR),
  }
  args, stdin, message, code = runs[case]
  run = command(*args, stdin=stdin)
  stderr = run.stderr.decode()
  assert run.returncode == code, stderr[-2000:]
  assert message in stderr, stderr[-2000:]
  assert 'Traceback' not in stderr


@pytest.mark.parametrize('call,message', [
    (lambda w: translate.translate(w, ['a dog'], average=-3),
     '--average=-3 must be >= 1'),
    (lambda w: translate.translate(w, ['a dog'], length_penalty=float('nan')),
     '--length_penalty=nan must be >= 0'),
    (lambda w: translate.translate(w, ['a dog'], max_length_offset=-1),
     '--max_length_offset=-1 must be >= 0'),
    (lambda w: generate.generate(w, ['a'], max_new_tokens=-5),
     '--max_new_tokens=-5 must be >= 1'),
    (lambda w: predict.classify(w, [__file__], top_k=0),
     '--top_k=0 must be >= 1'),
])
def test_command_flags_out_of_range_are_refused_before_work(call, message,
                                                            trained):
  with pytest.raises(ValueError) as error:
    call(str(trained))
  assert message in str(error.value)


def test_translate_output_into_a_missing_folder_fails_first(trained,
                                                            tmp_path):
  run = command('tools.translate', f'--workdir={trained}',
                f'--output={tmp_path / "missing" / "out.txt"}',
                stdin=b'a dog\n')
  assert run.returncode == MISSING_INPUT
  assert 'does not exist; create it first' in run.stderr.decode()
  assert 'Translated' not in run.stderr.decode()


def test_long_and_unknown_input_translates(trained):
  long_sentence = ' '.join(['the red house'] * 100)
  run = command('tools.translate', f'--workdir={trained}',
                stdin=f'{long_sentence}\n☃ ∮ ★\n'.encode())
  assert run.returncode == 0, run.stderr.decode()[-2000:]
  assert len(run.stdout.decode().splitlines()) == 2
  assert 'Truncated 1 of 2 source sentences' in run.stderr.decode()
