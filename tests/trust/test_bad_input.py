"""Bad input across config, data and commands: each is refused (or counted)
with a message that names the problem, before anything compiles. (The
commands run in processes, against a trained workdir, and prepared TFDS
datasets: e2e/test_bad_input_e2e.py.)"""

import gzip
import os
import re
import sys

import numpy as np
import pytest

from conftest import load_experiment
from conftest import raises_naming
from conftest import REPO
from conftest import write_idx
from transformer import configs
from transformer import train
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


def mt(**changes):
  return configs.override(load_experiment('mt_offline', 'runlocal'), changes)


def vit(**changes):
  return configs.override(load_experiment('vit_offline', 'runlocal'), changes)


def lm(**changes):
  return configs.override(load_experiment('lm_offline', 'runlocal'), changes)


# Each bad setting and what its message names: the field and its value, and
# the bound, the choices or the fix.
CONFIG_CASES = {
    'zero steps': (mt(**{'train.num_steps': 0}), ('train.num_steps=0',
                                                  '>= 1')),
    'unknown schedule': (mt(**{'optimizer.schedule': 'exponential'}),
                         ("schedule='exponential'", "'rsqrt'", "'constant'",
                          "'cosine'", "'linear'")),
    'unknown optimizer': (mt(**{'optimizer.name': 'lamb'}),
                          ("optimizer.name='lamb'", "'adam'", "'sgd'")),
    'warmup past the end': (
        mt(**{'optimizer.schedule': 'cosine',
              'optimizer.warmup_steps': 100}),
        ('warmup_steps=100', 'num_steps=20')),
    'averaging more than kept': (
        mt(**{'eval.average_checkpoints': 30}),
        ('average_checkpoints=30', 'keep_checkpoints=5')),
    'mesh larger than the devices': (mt(**{'mesh.data': 3}),
                                     ("'data': 3", '3 devices',
                                      '-1')),
    'two open mesh axes': (mt(**{'mesh.fsdp': -1}),
                           ("'data': -1", "'fsdp': -1", 'one mesh axis')),
    'width not divisible by heads': (
        mt(**{'model.d_model': 30, 'model.num_heads': 4}),
        ('d_model=30', 'num_heads=4', 'head_dim')),
    'query heads not a multiple of kv heads': (
        mt(**{'model.num_kv_heads': 3}),
        ('num_heads=4', 'num_kv_heads=3')),
    'unknown positions': (mt(**{'model.positional_encoding': 'relative'}),
                          ("positional_encoding='relative'", "'rotary'")),
    'unknown activation': (mt(**{'model.activation': 'tanh'}),
                           ("activation='tanh'", "'gelu'")),
    'unknown remat policy': (mt(**{'model.remat': 'some'}),
                             ("remat='some'", "'dots'")),
    'unknown attention kernel': (
        mt(**{'model.attention_implementation': 'flash'}),
        ("attention_implementation='flash'", "'xla'")),
    'unknown task': (mt(task='summarization'),
                     ("config.task 'summarization'", "'translation'")),
    'vocabulary smaller than the special tokens': (
        mt(**{'data.vocab_size': 2}), ('vocab_size=2', 'at least 4')),
    'unknown non-finite policy': (mt(**{'train.nonfinite': 'ignore'}),
                                  ("nonfinite='ignore'", "'stop', 'skip'")),
    'zero micro-batches': (mt(**{'train.microbatches': 0}),
                           ('microbatches=0', '>= 1')),
    'unknown optimizer-state dtype': (mt(**{'optimizer.mu_dtype': 'float16'}),
                                      ("mu_dtype='float16'", "'bfloat16'")),
    'unknown image crop': (vit(**{'data.crop': 'random'}),
                           ("config.data.crop='random'", "'resized'")),
    'batch not divisible into micro-batches': (
        vit(**{'train.microbatches': 3}),
        ('batch_size=8', 'multiple of 3')),
    'stored images smaller than the model input': (
        vit(**{'data.load_size': 8}), ('load_size=8', 'image_size=16')),
    'dropout above 1': (mt(**{'model.dropout_rate': 1.5}),
                        ('dropout_rate=1.5', '[0, 1)')),
    'zero heads': (mt(**{'model.num_heads': 0}), ('num_heads=0', '>= 1')),
    'zero layers': (vit(**{'model.num_layers': 0}), ('num_layers=0', '>= 1')),
    'negative epsilon': (mt(**{'model.layer_norm_epsilon': -1e-6}),
                         ('layer_norm_epsilon=-1e-06', '> 0')),
    'negative learning rate': (mt(**{'optimizer.learning_rate': -0.1}),
                               ('learning_rate=-0.1', '(0.0, inf)')),
    'Adam beta2 of 1': (mt(**{'optimizer.b2': 1.0}),
                        ('optimizer.b2=1.0', '[0.0, 1.0)')),
    'label smoothing of 1': (mt(**{'train.label_smoothing': 1.0}),
                             ('label_smoothing=1.0', '[0, 1)')),
    'RNN with no hidden units': (
        mt(**{'model.family': 'rnn', 'model.size': 'tiny',
              'model.hidden_dim': 0}), ('hidden_dim=0', '>= 1')),
    'unknown RNN attention': (
        mt(**{'model.family': 'rnn', 'model.size': 'tiny',
              'model.attention': 'cosine'}), ("attention='cosine'",
                                              "'additive'")),
    'offline pairs split that does not exist': (
        mt(**{'data.eval_split': 'dev'}),
        ("not 'dev'", "('train', 'validation', 'test')",
         'config.data.train_split')),
    'offline documents split that does not exist': (
        lm(**{'data.eval_split': 'test'}),
        ("not 'test'", "('train', 'validation')", 'config.data.train_split')),
    'zero images per batch': (vit(**{'data.batch_size': 0}),
                              ('config.data.batch_size=0', '>= 1')),
    'zero sentences per evaluation batch': (
        mt(**{'data.eval_batch_size': 0}),
        ('config.data.eval_batch_size=0', '>= 1')),
    'negative seed': (mt(seed=-1), ('config.seed=-1', '>= 0')),
    'sequences of one token': (lm(**{'data.max_length': 1}),
                               ('config.data.max_length=1', '>= 2')),
    'no offline training images': (vit(**{'data.num_train': 0}),
                                   ('config.data.num_train=0', '>= 1')),
}


@pytest.mark.parametrize('name', sorted(CONFIG_CASES))
def test_bad_config_is_refused_before_compiling(name, tmp_path):
  config, names = CONFIG_CASES[name]
  with raises_naming(ValueError, *names):
    trainer = train.Trainer(config, str(tmp_path))
    next(trainer.task.train_iter(0))  # data settings are read here


def test_unknown_config_field_is_refused():
  with pytest.raises(configs.UnknownField, match='train.num_step'):
    configs.override(load_experiment('mt_offline', 'runlocal'),
                     'train.num_step=3')


def test_masked_lm_with_nothing_masked_is_refused(tmp_path):
  config = load_experiment('bert_mlm', 'runlocal')
  config.data.mask_rate = 0.0
  with raises_naming(ValueError, 'mask_rate=0.0', '(0, 1)'):
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
  with raises_naming(ValueError, f'3 in {tmp_path}/train.en',
                     f'2 in {tmp_path}/train.de.gz', 'realign'):
    parallel_text.read_parallel(str(tmp_path), 'train', 'en', 'de')


def test_parallel_corpus_empty_files(tmp_path):
  write_lines(tmp_path / 'train.en', [])
  write_lines(tmp_path / 'train.de', [])
  with raises_naming(ValueError, f'{tmp_path}/train.en',
                     f'{tmp_path}/train.de', 'empty'):
    parallel_text.read_parallel(str(tmp_path), 'train', 'en', 'de')


@pytest.mark.parametrize('damage', ['cut short', 'not gzip'])
def test_a_damaged_gzip_file_is_named(tmp_path, damage):
  write_lines(tmp_path / 'train.en', ['a house'] * 200)
  write_lines(tmp_path / 'train.de.gz', ['ein Haus'] * 200)
  data = (tmp_path / 'train.de.gz').read_bytes()
  (tmp_path / 'train.de.gz').write_bytes(
      data[:len(data) // 2] if damage == 'cut short' else b'plain text')
  with raises_naming(ValueError, f'{tmp_path}/train.de.gz',
                     'not a complete gzip file', 'fetch it again'):
    parallel_text.read_parallel(str(tmp_path), 'train', 'en', 'de')
  write_idx(tmp_path / 'train-labels-idx1-ubyte.gz', np.arange(600) % 10)
  data = (tmp_path / 'train-labels-idx1-ubyte.gz').read_bytes()
  (tmp_path / 'train-labels-idx1-ubyte.gz').write_bytes(data[:-20])
  with raises_naming(ValueError, 'train-labels-idx1-ubyte.gz',
                     'not a complete gzip file', 'fetch it again'):
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
  with raises_naming(ValueError, f'{tmp_path}/train.en', 'UTF-8',
                     'byte 0xe9', 'line 2', 'iconv'):
    parallel_text.read_parallel(str(tmp_path), 'train', 'en', 'de')
  with pytest.raises(ValueError, match='not valid UTF-8'):
    text.read_documents(str(tmp_path / 'train.en'), per='line')


def test_missing_corpus_folder(tmp_path):
  with raises_naming(FileNotFoundError, str(tmp_path / 'nowhere'),
                     '{split}.{lang}'):
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
  with raises_naming(images.BadImageError, f'{folder}/broken.png',
                     '--config.data.bad_images=skip'):
    images.read_folder(str(tmp_path), 'train', image_size=8)
  pictures, labels, _ = images.read_folder(str(tmp_path), 'train',
                                           image_size=8, bad_images='skip')
  assert len(pictures) == len(labels) == 1
  assert 'skipped 1 ' in caplog.text and 'broken.png' in caplog.text
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
  with raises_naming(ValueError, f'{path}:', '4 bytes', '(5,)',
                     'Fetch it again'):
    images._read_idx(str(path))  # pylint: disable=protected-access


def test_mnist_images_and_labels_swapped(tmp_path):
  write_idx(tmp_path / 'train-images-idx3-ubyte.gz', np.arange(4))
  write_idx(tmp_path / 'train-labels-idx1-ubyte.gz', np.zeros((4, 28, 28)))
  with raises_naming(ValueError, f'{tmp_path}/train-images-idx3-ubyte.gz',
                     'shape (4,)', '3-dimensional', 'swapped'):
    images.read_mnist(str(tmp_path), 'train')


def test_mnist_label_that_is_not_a_digit(tmp_path):
  write_idx(tmp_path / 't10k-images-idx3-ubyte.gz', np.zeros((4, 28, 28)))
  write_idx(tmp_path / 't10k-labels-idx1-ubyte.gz', np.array([1, 2, 12, 3]))
  with raises_naming(ValueError, f'{tmp_path}/t10k-labels-idx1-ubyte.gz',
                     'label 12', 'position 2', '0-9', 'Fetch it again'):
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
  with raises_naming(images.BadImageError, f'{tmp_path}/bomb.png',
                     'decompression bomb'):
    images.read_image(str(tmp_path / 'bomb.png'), 8)


def test_training_class_folder_without_images(tmp_path):
  save_image(tmp_path / 'train' / 'cat' / 'a.png')
  (tmp_path / 'train' / 'dog').mkdir()
  (tmp_path / 'train' / 'dog' / 'notes.txt').write_text('to do')
  with raises_naming(ValueError, f'{tmp_path}/train/dog', "class 'dog'",
                     'remove the folder'):
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
  with raises_naming(ValueError, f'{tmp_path}/train/captions.tsv line 2',
                     f"'{name}'", f'outside {tmp_path}/train'):
    captions.read_caption_folder(str(tmp_path), 'train', image_size=8)


@pytest.mark.parametrize('damage', ['cut short', 'garbled', 'empty'])
def test_damaged_sentencepiece_model_is_named(tmp_path, damage):
  path = tmp_path / 'spm.model'
  tokenization.train_sentencepiece(['a b c d', 'e f g h'] * 20, str(path), 20)
  data = path.read_bytes()
  path.write_bytes({'cut short': data[:len(data) // 2],
                    'garbled': b'\x07junk' * 50, 'empty': b''}[damage])
  with raises_naming(ValueError, str(path), 'SentencePiece', 'damaged',
                     'Restore it'):
    tokenization.SentencePieceTokenizer(str(path))


@pytest.mark.parametrize('content,problem', [
    (b'{"characters": "abc', 'vocabulary file'),
    (b'{"characters": "caf\xe9"}', 'vocabulary file'),
    (b'{"words": ["a"]}', "'characters'"),
    (b'["a", "b"]', "'characters'"),
])
def test_damaged_character_vocabulary_is_named(tmp_path, content, problem):
  (tmp_path / 'chars.json').write_bytes(content)
  with raises_naming(ValueError, f'{tmp_path}/chars.json', problem,
                     'Restore it'):
    tokenization.CharTokenizer(str(tmp_path / 'chars.json'))


@pytest.mark.parametrize('content', ['{"classes": ["a", "b"', '[]',
                                     '{"classes": ["a", "b"]}',
                                     '{"classes": [], "channels": 3}'])
def test_damaged_dataset_file_is_named(tmp_path, content):
  (tmp_path / 'dataset.json').write_text(content)
  with raises_naming(ValueError, f'{tmp_path}/dataset.json', '"classes"',
                     '"channels"', 'Restore it'):
    train.Trainer(vit(), str(tmp_path))


def sst2_tsv(folder):
  config = load_experiment('sst2', 'runlocal')
  config.data.update(dict(source='tsv', path=str(folder)))
  return config.data


def test_labelled_sentences_not_utf8_name_file_line_and_byte(tmp_path):
  (tmp_path / 'train.tsv').write_bytes(b'good\t1\ncaf\xe9\t0\n')
  with raises_naming(ValueError, f'{tmp_path}/train.tsv', 'UTF-8',
                     'byte 0xe9', 'line 2', 'iconv'):
    sources.read('labelled_text', sst2_tsv(tmp_path), 'train')


def test_labelled_sentences_bad_line_is_counted_from_the_top(tmp_path):
  (tmp_path / 'train.tsv').write_text(
      'sentence\tlabel\n\ngood\t1\n\nno label here\n')
  with raises_naming(ValueError, f'{tmp_path}/train.tsv', 'line 5',
                     '"text<TAB>label"'):
    sources.read('labelled_text', sst2_tsv(tmp_path), 'train')


def local_text(path, **changes):
  config = lm(**{'data.source': 'local', 'data.path': str(path),
                 'data.per': 'line', **changes})
  return config.data


def test_local_text_with_no_text_is_refused(tmp_path):
  (tmp_path / 'corpus.txt').write_text('\n   \n\t\n')
  with raises_naming(ValueError, f'{tmp_path}/corpus.txt', 'no text',
                     'config.data.path'):
    sources.read('documents', local_text(tmp_path / 'corpus.txt'),
                                     'train')


@pytest.mark.parametrize('fraction,names', [
    (1.0, ('train_fraction=1.0', '(0, 1)')),
    (1.5, ('train_fraction=1.5', '(0, 1)')),
    (0.1, ('train_fraction=0.1', '5 lines', 'split empty'))])
def test_train_fraction_leaving_a_split_empty(tmp_path, fraction, names):
  (tmp_path / 'corpus.txt').write_text('one\ntwo\nthree\nfour\nfive\n')
  data = local_text(tmp_path / 'corpus.txt',
                    **{'data.train_fraction': fraction})
  with raises_naming(ValueError, *names, 'config.data.eval_path'):
    sources.read('documents', data, 'validation')


# -- Issue 38: flags, data and the files commands write.


def test_glue_scores_that_are_no_finite_number_name_file_and_line(tmp_path):
  header = ('index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\t'
            'sentence1\tsentence2\tscore')
  for score, names in (('nan', ("label 'nan'", 'finite number')),
                       ('inf', ("label 'inf'", 'finite number')),
                       ('-1', ("score '-1'", '0..5'))):
    path = tmp_path / f'{score}.tsv'
    path.write_text(f'{header}\n0\tg\tf\ty\t0\tn\tn\ta dog\ta cat\t3.2\n'
                    f'1\tg\tf\ty\t0\tn\tn\ta dog\ta cat\t{score}\n')
    with raises_naming(ValueError, f'{path} line 3', *names,
                       'delete that line'):
      glue.read_tsv('stsb', str(path))


def test_init_from_a_workdir_of_another_task_names_its_task(tmp_path):
  source = tmp_path / 'mt'
  source.mkdir()
  (source / 'config.json').write_text(mt().to_json_best_effort())
  config = load_experiment('sst2', 'runlocal')
  config.train.init_from = str(source)
  with raises_naming(ValueError, f'init_from={source}', "'translation'",
                     'masked_language_modeling'):
    train.Trainer(config, str(tmp_path / 'run'))


def test_seed_beyond_64_bits_from_python_is_refused_before_work(tmp_path):
  with raises_naming(ValueError, f'--seed={2**64}',
                     '[0, 9223372036854775807]'):
    generate.generate(str(tmp_path), ['a'], seed=2**64)


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
  err = capsys.readouterr().err
  assert '--max_new_tokens=40' in err and 'context of 32 tokens' in err
  assert 'last 16 tokens' in err
  assert re.search(r'--max_new_tokens=(?!40\b)\d+', err), err  # the fix


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
  with raises_naming(FileExistsError, f'{maps}/a/cat_attention.png',
                     '3 more', '--overwrite', '--attention_dir'):
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
       ValueError, ('--output', '--alignments', f'{tmp_path}/o.txt',
                    'different files')),
      ([out('--output', 'src.txt')], {'inputs': [str(tmp_path / 'src.txt')],
                                      'overwrite': True},
       ValueError, (f'--output={tmp_path}/src.txt', 'input',
                    'another file')),
      ([out('--output', 'folder')], {}, ValueError,
       ('--output', f'{tmp_path}/folder', 'path of the file')),
      ([out('--attention_dir', 'src.txt/x/cat.png')], {}, ValueError,
       ('--attention_dir', f'{tmp_path}/src.txt', 'not a folder',
        'another place')),
      ([out('--attention_dir', 'maps_layer_.png', numbered=True)], {},
       FileExistsError, (f'{tmp_path}/maps_layer_3.png', '--overwrite',
                         '--attention_dir')),
  ]
  for outputs, options, error, names in cases:
    with raises_naming(error, *names):
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
  with raises_naming(FileExistsError, str(maps / existing), '--overwrite'):
    call()
  assert (maps / existing).read_bytes() == b'kept'
