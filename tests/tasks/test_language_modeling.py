"""The language-modelling task's data: windows of a long text, word and
token lengths, a validation split too small to measure. Training, metrics
and generation: e2e/test_language_modeling_e2e.py."""

import numpy as np
import pytest

from conftest import load_experiment
from conftest import raises_naming
from transformer import train


@pytest.mark.parametrize('shift', [False, True])
def test_shift_chunks_reads_a_long_text_in_other_windows_each_epoch(
    tmp_path, shift):
  rng = np.random.default_rng(0)
  path = tmp_path / 'text.txt'
  path.write_text(''.join(rng.choice(list('abcdefgh \n'), 3_000)))
  config = load_experiment('shakespeare_char', f'path={path},runlocal')
  config.data.shift_chunks = shift
  batches = train.Trainer(config, str(tmp_path / 'run')).task.train_iter(0)
  epochs = 3
  windows = []  # every packed example's inputs over three epochs
  for _ in range(int(epochs * batches.batches_per_epoch)):
    batch = next(batches)
    for row, segments in zip(batch['inputs'], batch['inputs_segmentation']):
      for segment in set(segments[segments > 0].tolist()):
        windows.append(tuple(row[segments == segment].tolist()))
  distinct = len(set(windows))
  if shift:  # other cuts each epoch: most windows are new
    assert distinct > 2 * batches.examples_per_epoch
  else:  # the same windows every epoch
    assert distinct == batches.examples_per_epoch


def test_word_tokenizer_round_trip_and_unknowns(tmp_path):
  from transformer.data import tokenization  # pylint: disable=g-import-not-at-top
  tokenizer = tokenization.WordTokenizer.build(['a b b c', 'c c c'])
  assert tokenizer.words == ['c', 'b', 'a']  # by frequency
  assert tokenizer.decode(tokenizer.encode('a  c b')) == 'a c b'
  lines = tokenization.WordTokenizer.build([' a b\n c a\n'])
  assert lines.decode(lines.encode(' a b\n c a\n')) == 'a b\nc a\n'
  assert tokenizer.encode('a zebra', add_eos=False) == [5, 2]
  tokenizer.save(str(tmp_path / 'words.json'))
  assert tokenization.WordTokenizer(str(tmp_path / 'words.json')).words == [
      'c', 'b', 'a']


def test_token_lengths_count_raw_text():
  from transformer.data import tokenization  # pylint: disable=g-import-not-at-top
  from transformer.tasks import language_modeling  # pylint: disable=g-import-not-at-top
  chars = tokenization.CharTokenizer.build(['a\né'])
  lengths = language_modeling._token_lengths(chars)  # pylint: disable=protected-access
  for c, n_bytes in (('\n', 1), ('a', 1), ('é', 2)):
    i = chars.encode(c, add_eos=False)[0]
    assert tuple(lengths[:, i]) == (n_bytes, 1, n_bytes, 1)
  byte = language_modeling._token_lengths(tokenization.ByteTokenizer())  # pylint: disable=protected-access
  first, continuation = 3 + 0xC3, 3 + 0xA9  # 'é' is C3 A9
  assert tuple(byte[:, first]) == (1, 1, 1, 1)
  assert tuple(byte[:, continuation]) == (1, 0, 1, 0)


def test_a_validation_split_too_small_to_measure_is_refused(tmp_path):
  """'Hi\\n' splits into 'Hi' and '\\n', a character the tokenizer never
  saw in training: bits per byte would be a division by ~0 (reported as
  4.7e9 before)."""
  from transformer import tasks  # pylint: disable=g-import-not-at-top
  path = tmp_path / 'tiny.txt'
  path.write_text('Hi\n')
  config = load_experiment('shakespeare_char', f'path={path},runlocal')
  task = tasks.build(config, str(tmp_path / 'w'))
  named = ("'validation'", 'config.data.path', 'config.data.train_fraction',
           'config.data.eval_path')
  with raises_naming(ValueError, *named):
    next(iter(task.eval_batches()))
  with raises_naming(ValueError, *named):  # before training
    task.train_iter(0)
