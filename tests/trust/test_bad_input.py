"""Bad input across config, data and commands: each is refused (or counted)
with a message that names the problem, before anything compiles."""

import gzip
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import load_experiment
from conftest import prepare_translation_dataset
from conftest import REPO
from conftest import write_idx
from transformer import configs
from transformer import train
from transformer import workdir as workdir_lib
from transformer.data import captions
from transformer.data import glue
from transformer.data import images
from transformer.data import parallel_text
from transformer.data import sources
from transformer.data import text
from transformer.data import tokenization
from transformer.tools import cli
from transformer.tools import generate
from transformer.tools import predict
from transformer.tools import translate


def mt(**changes):
  return configs.override(load_experiment('mt_offline', 'runlocal'), changes)


def vit(**changes):
  return configs.override(load_experiment('vit_offline', 'runlocal'), changes)


def lm(**changes):
  return configs.override(load_experiment('lm_offline', 'runlocal'), changes)


CONFIG_CASES = {
    'zero steps': (mt(**{'train.num_steps': 0}), 'train.num_steps=0'),
    'unknown schedule': (mt(**{'optimizer.schedule': 'exponential'}),
                         "choose 'rsqrt', 'constant', 'cosine' or 'linear'"),
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
    'offline pairs split that does not exist': (
        mt(**{'data.eval_split': 'dev'}),
        "splits ('train', 'validation', 'test'), not 'dev'"),
    'offline documents split that does not exist': (
        lm(**{'data.eval_split': 'test'}),
        "splits ('train', 'validation'), not 'test'"),
    'zero images per batch': (vit(**{'data.batch_size': 0}),
                              'config.data.batch_size=0 must be >= 1'),
    'zero sentences per evaluation batch': (
        mt(**{'data.eval_batch_size': 0}),
        'config.data.eval_batch_size=0 must be >= 1'),
    'negative seed': (mt(seed=-1), 'config.seed=-1 must be >= 0'),
    'sequences of one token': (lm(**{'data.max_length': 1}),
                               'config.data.max_length=1 must be >= 2'),
    'no offline training images': (vit(**{'data.num_train': 0}),
                                   'config.data.num_train=0 must be >= 1'),
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


# -- Files that cannot be trusted (headers, metadata, vocabularies): each
# refused in one line naming the file, what is wrong and the fix.


def test_idx_file_longer_than_its_header_says(tmp_path):
  path = tmp_path / 'train-labels-idx1-ubyte'
  path.write_bytes(bytes([0, 0, 8, 1]) + (5).to_bytes(4, 'big') + bytes(9))
  with pytest.raises(ValueError, match=r'train-labels-idx1-ubyte: 4 bytes '
                     r'follow the \(5,\) array its header announces'):
    images._read_idx(str(path))  # pylint: disable=protected-access


def test_mnist_images_and_labels_swapped(tmp_path):
  write_idx(tmp_path / 'train-images-idx3-ubyte.gz', np.arange(4))
  write_idx(tmp_path / 'train-labels-idx1-ubyte.gz', np.zeros((4, 28, 28)))
  with pytest.raises(ValueError, match=r'train-images-idx3-ubyte.gz holds '
                     r'an array of shape \(4,\).*3-dimensional.*swapped'):
    images.read_mnist(str(tmp_path), 'train')


def test_mnist_label_that_is_not_a_digit(tmp_path):
  write_idx(tmp_path / 't10k-images-idx3-ubyte.gz', np.zeros((4, 28, 28)))
  write_idx(tmp_path / 't10k-labels-idx1-ubyte.gz', np.array([1, 2, 12, 3]))
  with pytest.raises(ValueError, match=r't10k-labels-idx1-ubyte.gz: label 12 '
                     r'at position 2 is not a digit 0-9'):
    images.read_mnist(str(tmp_path), 'test')


def save_image(path, side=8):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  path.parent.mkdir(parents=True, exist_ok=True)
  Image.fromarray(np.zeros((side, side, 3), np.uint8)).save(path)


def test_decompression_bomb_is_refused_naming_the_file(tmp_path,
                                                       monkeypatch):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  save_image(tmp_path / 'bomb.png', side=64)
  # 4,096 pixels, past twice the limit: PIL's DecompressionBombError.
  monkeypatch.setattr(Image, 'MAX_IMAGE_PIXELS', 1_000)
  with pytest.raises(images.BadImageError, match=r'bomb.png is not decoded: '
                     r'.*decompression bomb'):
    images.read_image(str(tmp_path / 'bomb.png'), 8)


def test_training_class_folder_without_images(tmp_path):
  save_image(tmp_path / 'train' / 'cat' / 'a.png')
  (tmp_path / 'train' / 'dog').mkdir()
  (tmp_path / 'train' / 'dog' / 'notes.txt').write_text('to do')
  with pytest.raises(ValueError, match=r"train/dog holds no images .*class "
                     r"'dog'"):
    images.read_folder(str(tmp_path), 'train', image_size=8)
  # A held-out split may lack a class.
  save_image(tmp_path / 'test' / 'cat' / 'a.png')
  (tmp_path / 'test' / 'dog').mkdir()
  _, labels, _ = images.read_folder(str(tmp_path), 'test', image_size=8,
                                    class_names=('cat', 'dog'))
  assert labels.tolist() == [0]


@pytest.mark.parametrize('where', ['parent', 'absolute'])
def test_captions_naming_a_file_outside_their_folder(tmp_path, where):
  save_image(tmp_path / 'secret.png')
  save_image(tmp_path / 'train' / 'a.png')
  name = '../secret.png' if where == 'parent' else str(
      tmp_path / 'secret.png')
  (tmp_path / 'train' / 'captions.tsv').write_text(
      f'a.png\ta dog\n{name}\ta cat\n')
  with pytest.raises(ValueError, match=r'captions.tsv line 2 names .*secret'
                     r'.png.*, outside'):
    captions.read_caption_folder(str(tmp_path), 'train', image_size=8)


@pytest.mark.parametrize('damage', ['cut short', 'garbled', 'empty'])
def test_damaged_sentencepiece_model_is_named(tmp_path, damage):
  path = tmp_path / 'spm.model'
  tokenization.train_sentencepiece(['a b c d', 'e f g h'] * 20, str(path), 20)
  data = path.read_bytes()
  path.write_bytes({'cut short': data[:len(data) // 2],
                    'garbled': b'\x07junk' * 50, 'empty': b''}[damage])
  with pytest.raises(ValueError, match=r'spm.model is not a SentencePiece '
                     r'model: the file is damaged.*Restore it'):
    tokenization.SentencePieceTokenizer(str(path))


@pytest.mark.parametrize('content,message', [
    (b'{"characters": "abc', 'is not a vocabulary file'),
    (b'{"characters": "caf\xe9"}', 'is not a vocabulary file'),
    (b'{"words": ["a"]}', "holds no 'characters' key"),
    (b'["a", "b"]', "holds no 'characters' key"),
])
def test_damaged_character_vocabulary_is_named(tmp_path, content, message):
  (tmp_path / 'chars.json').write_bytes(content)
  with pytest.raises(ValueError, match=f'chars.json {message}.*Restore it'):
    tokenization.CharTokenizer(str(tmp_path / 'chars.json'))


@pytest.mark.parametrize('content', ['{"classes": ["a", "b"', '[]',
                                     '{"classes": ["a", "b"]}',
                                     '{"classes": [], "channels": 3}'])
def test_damaged_dataset_file_is_named(tmp_path, content):
  (tmp_path / 'dataset.json').write_text(content)
  with pytest.raises(ValueError, match=r'dataset.json is damaged: it must '
                     r'hold .*Restore it'):
    train.Trainer(vit(), str(tmp_path))


def sst2_tsv(folder):
  config = load_experiment('sst2', 'runlocal')
  config.data.update(dict(source='tsv', path=str(folder)))
  return config.data


def test_labelled_sentences_not_utf8_name_file_line_and_byte(tmp_path):
  (tmp_path / 'train.tsv').write_bytes(b'good\t1\ncaf\xe9\t0\n')
  with pytest.raises(ValueError, match=r'train.tsv is not valid UTF-8: byte '
                     r'0xe9 at line 2'):
    sources.read('labelled_text', sst2_tsv(tmp_path), 'train')


def test_labelled_sentences_bad_line_is_counted_from_the_top(tmp_path):
  (tmp_path / 'train.tsv').write_text(
      'sentence\tlabel\n\ngood\t1\n\nno label here\n')
  with pytest.raises(ValueError, match=r'train.tsv: line 5 is not '
                     r'"text<TAB>label"'):
    sources.read('labelled_text', sst2_tsv(tmp_path), 'train')


def local_text(path, **changes):
  config = lm(**{'data.source': 'local', 'data.path': str(path),
                 'data.per': 'line', **changes})
  return config.data


def test_local_text_with_no_text_is_refused(tmp_path):
  (tmp_path / 'corpus.txt').write_text('\n   \n\t\n')
  with pytest.raises(ValueError, match=r'corpus.txt holds no text: every '
                     r'line is empty'):
    sources.read('documents', local_text(tmp_path / 'corpus.txt'),
                                     'train')


@pytest.mark.parametrize('fraction,message', [
    (1.0, r'train_fraction=1.0 must be in \(0, 1\)'),
    (1.5, r'train_fraction=1.5 must be in \(0, 1\)'),
    (0.1, r'train_fraction=0.1 of its 5 lines leaves a split empty')])
def test_train_fraction_leaving_a_split_empty(tmp_path, fraction, message):
  (tmp_path / 'corpus.txt').write_text('one\ntwo\nthree\nfour\nfive\n')
  data = local_text(tmp_path / 'corpus.txt',
                    **{'data.train_fraction': fraction})
  with pytest.raises(ValueError, match=message):
    sources.read('documents', data, 'validation')


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


@pytest.mark.parametrize('name,damage,error,message', [
    ('dataset_info.json', 'cut short', ValueError,
     "The metadata of TFDS dataset 'toy_pairs/de-en' in .*tfds/toy_pairs/"
     "de-en .* is damaged"),
    ('features.json', 'cut short', ValueError,
     "The metadata of TFDS dataset 'toy_pairs/de-en' in .* is damaged"),
    ('toy_pairs-train.tfrecord-00000-of-00001', 'cut short', ValueError,
     "TFDS dataset 'toy_pairs/de-en' split 'train': a prepared file is "
     "damaged or missing"),
    ('toy_pairs-train.tfrecord-00000-of-00001', 'removed', FileNotFoundError,
     "TFDS dataset 'toy_pairs/de-en' split 'train': a prepared file is "
     "damaged or missing .*No such file"),
])
def test_damaged_tfds_dataset_names_it_and_how_to_prepare_it(
    toy_tfds, tmp_path, name, damage, error, message):
  from transformer.data import tfds_reader  # pylint: disable=g-import-not-at-top
  data_dir = tmp_path / 'tfds'
  shutil.copytree(toy_tfds, data_dir)
  damage_file(data_dir / 'toy_pairs' / 'de-en' / '1.0.0' / name, damage)
  with pytest.raises(error, match=f'{message}.*; prepare it again: tfds '
                     f'build toy_pairs/de-en --data_dir={data_dir}$'):
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
                     b'a house\n', 'is not a training workdir',
                     MISSING_INPUT),
      'empty input': (('tools.translate', f'--workdir={trained}'), b'',
                      'No sentences to translate', USER_ERROR),
      'invalid UTF-8 input': (
          ('tools.translate', f'--workdir={trained}'), b'caf\xe9\n',
          'standard input is not valid UTF-8: byte 0xe9 at line 1',
          USER_ERROR),
      'url workdir': (('main', '--workdir=s3://bucket/run'), b'',
                      'only gs:// URLs', USER_ERROR),
      'generate without prompts': (
          ('tools.generate', f'--workdir={trained}'), b'', 'Give --prompt',
          USER_ERROR),
      'predict with a translation workdir': (
          ('tools.predict', f'--workdir={trained}', str(not_image)), b'',
          "task, not 'image_classification'", USER_ERROR),
      'missing image': (
          ('tools.predict', f'--workdir={trained}', str(tmp_path / 'no.png')),
          b'', f'{tmp_path}/no.png: no such file; give PNG or JPEG image '
          'files', MISSING_INPUT),
      'unknown flag field': (
          ('main', '--config=' + os.path.join(
              REPO, 'experiments', 'mt_offline.py:runlocal'),
           f'--workdir={tmp_path}', '--config.train.num_step=3'), b'',
          'Did you mean "num_steps"', USER_ERROR),
      'positional argument': (
          ('tools.translate', f'--workdir={trained}', 'beam_size=2'), b'',
          'Unexpected arguments', USER_ERROR),
      'translate with a language-model workdir': (
          ('tools.translate', f'--workdir={lm_workdir}'), b'a dog\n',
          f"{lm_workdir} trained a 'language_modeling' task, not "
          f"'translation': python -m transformer.tools.generate "
          f'--workdir={lm_workdir} reads it', USER_ERROR),
      'generate with a translation workdir': (
          ('tools.generate', f'--workdir={trained}', '--prompt=a'), b'',
          "trained a 'translation' task, not 'language_modeling': python -m "
          'transformer.tools.translate', USER_ERROR),
      'damaged SentencePiece model': (
          ('tools.translate', f'--workdir={damaged}'), b'a dog\n',
          f'{damaged}/vocab/spm.model is not a SentencePiece model: the file '
          f'is damaged', USER_ERROR),
      'output into a folder': (
          ('tools.translate', f'--workdir={trained}', f'--output={tmp_path}'),
          b'a dog\n', f'--output={tmp_path} is a folder; give the path of '
          f'the file', USER_ERROR),
      'input file a folder': (
          ('tools.translate', f'--workdir={trained}', f'--input={tmp_path}'),
          b'', f'--input={tmp_path} is a folder; give a UTF-8 text file',
          USER_ERROR),
      'prompts file missing': (
          ('tools.generate', f'--workdir={trained}',
           f'--prompts_file={tmp_path}/no.txt'), b'',
          f'--prompts_file={tmp_path}/no.txt: no such file', MISSING_INPUT),
      'predict a folder': (
          ('tools.predict', f'--workdir={trained}', str(tmp_path)), b'',
          f'{tmp_path} is a folder; give PNG or JPEG image files (a '
          "folder's files: FOLDER/*)", USER_ERROR),
      'predict batch of zero': (
          ('tools.predict', f'--workdir={trained}', '--batch_size=0',
           str(not_image)), b'', '--batch_size=0 must be >= 1', USER_ERROR),
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
    (lambda w: translate.translate(w, ['a dog'], length_penalty=float('inf')),
     '--length_penalty=inf must be >= 0 (a finite number)'),
    (lambda w: generate.generate(w, ['a'], temperature=float('nan')),
     '--temperature=nan must be > 0 (a finite number)'),
    (lambda w: generate.generate(w, ['a'], top_p=1.5),
     '--top_p=1.5 must be in (0, 1]'),
    (lambda w: generate.generate(w, ['a'], top_k=-1),
     '--top_k=-1 must be >= 0'),
])
def test_command_flags_out_of_range_are_refused_before_work(call, message,
                                                            trained):
  with pytest.raises(ValueError) as error:
    call(str(trained))
  assert message in str(error.value)


@pytest.mark.parametrize('case', ['argument typo', 'syntax error',
                                  'missing file', 'no get_config'])
def test_experiment_file_errors_are_one_line(case, tmp_path):
  experiments = os.path.join(REPO, 'experiments')
  (tmp_path / 'broken.py').write_text('def get_config(:\n')
  (tmp_path / 'empty.py').write_text('CONFIG = {}\n')
  spec, message, code = {
      'argument typo': (
          f'{experiments}/mt_offline.py:runlokal',
          "mt_offline.py:runlokal: Unknown argument 'runlokal'; use '' or "
          "'runlocal'", USER_ERROR),
      'syntax error': (f'{tmp_path}/broken.py',
                       'broken.py line 1: invalid syntax', USER_ERROR),
      'missing file': (f'{experiments}/mt_ofline.py:runlocal',
                       'no experiment file', MISSING_INPUT),
      'no get_config': (f'{tmp_path}/empty.py', 'defines no get_config()',
                        USER_ERROR),
  }[case]
  run = command('main', f'--config={spec}', f'--workdir={tmp_path / "w"}')
  stderr = run.stderr.decode()
  assert run.returncode == code, stderr[-2000:]
  assert f'Error: --config={spec}: ' in stderr and message in stderr, stderr
  assert len(stderr.strip().splitlines()) == 1, stderr
  assert not (tmp_path / 'w').exists()


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


# -- Issue 38: flags, data and the files commands write.


def test_glue_scores_that_are_no_finite_number_name_file_and_line(tmp_path):
  header = ('index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\t'
            'sentence1\tsentence2\tscore')
  for score, message in (('nan', "label 'nan' is not a finite number"),
                         ('inf', "label 'inf' is not a finite number"),
                         ('-1', "score '-1' is outside 0..5")):
    path = tmp_path / f'{score}.tsv'
    path.write_text(f'{header}\n0\tg\tf\ty\t0\tn\tn\ta dog\ta cat\t3.2\n'
                    f'1\tg\tf\ty\t0\tn\tn\ta dog\ta cat\t{score}\n')
    with pytest.raises(ValueError, match=f'{path} line 3: {message}; fix '):
      glue.read_tsv('stsb', str(path))


def test_init_from_a_workdir_of_another_task_names_its_task(tmp_path):
  source = tmp_path / 'mt'
  source.mkdir()
  (source / 'config.json').write_text(mt().to_json_best_effort())
  config = load_experiment('sst2', 'runlocal')
  config.train.init_from = str(source)
  with pytest.raises(ValueError, match=f"init_from={source} trained a "
                     f"'translation' task; fine-tune from a "
                     f"masked_language_modeling"):
    train.Trainer(config, str(tmp_path / 'run'))


@pytest.mark.parametrize('args,message', [
    (('tools.generate', '--prompt=a', f'--seed={2**70}'),
     f'--seed={2**70} does not fit in 64 bits; give a number from'),
    (('tools.translate', f'--beam_size={-2**64}'),
     f'--beam_size={-2**64} does not fit in 64 bits'),
    (('tools.generate', '--prompt=a', r'--stop=\x4'),
     r'--stop=\x4: the escape \x4 cannot be read (truncated \xXX escape); '
     r'write a backslash as \\'),
    (('tools.generate', '--prompt=a', '--stop=a\\'),
     '--stop=a\\: the escape \\ cannot be read'),
])
def test_flags_that_cannot_be_read_are_named_in_one_line(args, message,
                                                        tmp_path):
  run = command(args[0], f'--workdir={tmp_path}', *args[1:])
  stderr = run.stderr.decode()
  assert run.returncode == USER_ERROR, stderr[-2000:]
  assert f'Error: {message}' in stderr and 'Traceback' not in stderr, stderr


def test_seed_beyond_64_bits_from_python_is_refused_before_work(tmp_path):
  with pytest.raises(ValueError, match=r'--seed=\d+ must be in \[0, '
                     r'9223372036854775807\]'):
    generate.generate(str(tmp_path), ['a'], seed=2**64)


@pytest.mark.parametrize('flag,message', [
    ('--alignment_layer=7', '--alignment_layer=7 is out of range: the '
     'model has 1 decoder layers, numbered 0 to 0; give one of them, or '
     'leave --alignment_layer out for their mean.'),
    ('--alignment_head=9', '--alignment_head=9 is out of range: the model '
     'has 4 heads per layer, numbered 0 to 3'),
])
def test_alignment_layer_or_head_out_of_range_names_the_flag(
    flag, message, trained, tmp_path):
  run = command('tools.translate', f'--workdir={trained}',
                f'--alignments={tmp_path / "a.jsonl"}', flag,
                stdin=b'a dog\n')
  stderr = run.stderr.decode()
  assert run.returncode == USER_ERROR, stderr[-2000:]
  assert f'Error: {message}' in stderr and 'Traceback' not in stderr, stderr
  assert not (tmp_path / 'a.jsonl').exists()


@pytest.fixture(scope='module')
def old_workdirs(tmp_path_factory):
  """Small image-classification and language-model workdirs with a
  checkpoint, built without training (tests/train/test_old_workdirs.py)."""
  # The helper lives with the old-workdir tests, in tests/train, which is
  # on the path only when that folder is collected too.
  if os.path.join(REPO, 'tests', 'train') not in sys.path:
    sys.path.insert(0, os.path.join(REPO, 'tests', 'train'))
  from test_old_workdirs import rebuild  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp('old')
  return {name: rebuild(name, root) for name in ('vit', 'lm')}


def test_generation_past_the_context_is_said(old_workdirs, capsys):
  samples, _, _ = generate.generate(old_workdirs['lm'], ['a'],
                                    max_new_tokens=40, greedy=True)
  assert len(samples) == 1
  assert ("--max_new_tokens=40 runs past the model's context of 32 tokens "
          "(with the prompt): from there each sample continues from its "
          "last 16 tokens only; --max_new_tokens=" in capsys.readouterr().err)


def test_images_of_one_name_in_two_folders_get_maps_of_their_own(
    old_workdirs, tmp_path):
  pictures, _, _ = images.offline_shapes(2, 99, image_size=16)
  paths = []
  for folder, picture in zip(('a', 'b'), pictures):
    (tmp_path / folder).mkdir()
    paths.append(str(tmp_path / folder / 'cat.png'))
    from PIL import Image  # pylint: disable=g-import-not-at-top
    Image.fromarray(picture).save(paths[-1])
  maps = tmp_path / 'maps'
  predict.classify(old_workdirs['vit'], paths, top_k=1,
                   attention_dir=str(maps))
  written = sorted(str(p.relative_to(maps)) for p in maps.rglob('*.png'))
  assert written == ['a/cat_attention.png', 'a/cat_layer_0.png',
                     'b/cat_attention.png', 'b/cat_layer_0.png']
  assert (maps / 'a' / 'cat_attention.png').read_bytes() != (
      maps / 'b' / 'cat_attention.png').read_bytes()
  # Again: refused before any work, until --overwrite says so.
  before = (maps / 'a' / 'cat_layer_0.png').stat().st_mtime_ns
  with pytest.raises(FileExistsError, match=r'maps/a/cat_attention.png is '
                     r'already there \(and 3 more of its files\).*give '
                     r'--overwrite to replace them, or another '
                     r'--attention_dir'):
    predict.classify(old_workdirs['vit'], paths, attention_dir=str(maps))
  assert (maps / 'a' / 'cat_layer_0.png').stat().st_mtime_ns == before
  predict.classify(old_workdirs['vit'], paths, attention_dir=str(maps),
                   overwrite=True)
  assert (maps / 'a' / 'cat_layer_0.png').stat().st_mtime_ns != before


def test_output_names_are_distinct_for_distinct_inputs():
  names = cli.output_names(['x/a/cat.png', 'x/b/cat.png', 'x/a/dog.jpg',
                            'x/a/dog.png', 'x/a/dog.png.gif', 'x/a/cat.png'])
  assert names == ['a/cat', 'b/cat', 'a/dog.jpg', 'a/dog.png',
                   'a/dog.png.gif', 'a/cat']
  assert cli.output_names(['/p/q/cat.png']) == ['cat']


def test_outputs_are_checked_by_one_rule(tmp_path):
  out = lambda flag, name, **kw: cli.Output(flag, str(tmp_path / name), **kw)
  (tmp_path / 'src.txt').write_text('a\n')
  (tmp_path / 'folder').mkdir()
  (tmp_path / 'maps_layer_3.png').write_text('old')
  cases = [
      ([out('--output', 'o.txt'), out('--alignments', 'o.txt')], {},
       ValueError, '--output and --alignments would both write'),
      ([out('--output', 'src.txt')], {'inputs': [str(tmp_path / 'src.txt')],
                                      'overwrite': True},
       ValueError, 'is an input of this command'),
      ([out('--output', 'folder')], {}, ValueError, 'is a folder'),
      ([out('--attention_dir', 'src.txt/x/cat.png')], {}, ValueError,
       'src.txt is a file, not a folder to write'),
      ([out('--attention_dir', 'maps_layer_.png', numbered=True)], {},
       FileExistsError, 'maps_layer_3.png is already there'),
  ]
  for outputs, options, error, message in cases:
    with pytest.raises(error, match=message):
      cli.check_outputs(outputs, **options)
  cli.check_outputs([out('--attention_dir', 'maps_layer_.png',
                         numbered=True), out('--output', 'new/o.txt')],
                    overwrite=True)


def fake_workdir(path, task):
  """A workdir with the config of `task` and nothing else: enough for what
  commands check before they restore a checkpoint."""
  from transformer import tasks  # pylint: disable=g-import-not-at-top
  path.mkdir()
  config = tasks.default_config(task)
  (path / 'config.json').write_text(config.to_json_best_effort())
  return str(path)


@pytest.mark.parametrize('tool', ['predict', 'generate', 'ask', 'figure'])
def test_files_already_there_are_refused_before_any_work(tool, tmp_path):
  from transformer.tools import ask  # pylint: disable=g-import-not-at-top
  from transformer.tools import figure  # pylint: disable=g-import-not-at-top
  image = tmp_path / 'scene.png'
  save_image(image)
  maps = tmp_path / 'maps'
  maps.mkdir()
  existing, call = {
      'predict': ('scene_attention.png', lambda: predict.classify(
          fake_workdir(tmp_path / 'w', 'image_classification'), [str(image)],
          attention_dir=str(maps))),
      'generate': ('sample_1_layer_0.png', lambda: generate.generate(
          fake_workdir(tmp_path / 'w', 'language_modeling'), ['a', 'b'],
          attention_dir=str(maps))),
      'ask': ('scene_question0_regions.png', lambda: ask.ask(
          fake_workdir(tmp_path / 'w', 'visual_question_answering'),
          str(image), ['what colour?'], attention_dir=str(maps))),
      'figure': ('f.png', lambda: figure.figure(
          str(tmp_path / 'w'), str(maps / 'f.png'), text='a')),
  }[tool]
  (maps / existing).write_bytes(b'kept')
  with pytest.raises(FileExistsError, match=f'{maps / existing} is already '
                     f'there: this command does not replace files; give '
                     f'--overwrite'):
    call()
  assert (maps / existing).read_bytes() == b'kept'


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
  assert f'Error: {kept} is already there' in stderr, stderr
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
  assert ('Error: gs://no-such-bucket-38/run/config.json: no Google Cloud '
          'credentials were found' in stderr), stderr[-2000:]
  assert ('run `gcloud auth application-default login`, or set '
          'GOOGLE_APPLICATION_CREDENTIALS' in stderr)
  assert 'Traceback' not in stderr


def test_storage_failures_are_one_line(monkeypatch):
  """The same failure with credentials found: what to check instead."""
  errors = pytest.importorskip('tensorflow.python.framework.errors_impl')
  from transformer import storage  # pylint: disable=g-import-not-at-top
  error = errors.FailedPreconditionError(
      None, None, "Error executing an HTTP request: libcurl code 6\n\t when "
      "reading metadata of gs://bucket/run/config.json")
  monkeypatch.setattr(storage, '_credentials_found', lambda: True)
  failure = storage.storage_failure(error)
  assert str(failure) == (
      'gs://bucket/run/config.json: cloud storage failed (Error executing '
      'an HTTP request: libcurl code 6); check the bucket name, your access '
      'to it and the network.')
  monkeypatch.setattr(storage, '_credentials_found', lambda: False)
  assert 'no Google Cloud credentials' in str(storage.storage_failure(error))
  assert storage.storage_failure(ValueError('gs://bucket is wrong')) is None
