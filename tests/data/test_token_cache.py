"""The token cache: built once, reused without a tokenizer, rebuilt when the
corpus changes or the cache is damaged; batches identical with and without
it; per-host packing equal to one process."""

import os

import numpy as np
import pytest

from conftest import load_experiment
from conftest import raises_naming
from transformer import tasks
from transformer.data import batching
from transformer.data import packing
from transformer.data import token_cache
from transformer.data.generated import offline_mt


def examples(count, seed=0, longest=9):
  rng = np.random.default_rng(seed)
  return [tuple(rng.integers(1, 50, rng.integers(1, longest)).astype(np.int32)
                for _ in range(2)) for _ in range(count)]


def build(root, data, key=None, calls=None):
  def chunks():
    if calls is not None:
      calls.append(1)
    for begin in range(0, len(data), 7):
      yield data[begin:begin + 7]
  return token_cache.load_or_build(str(root), 'test', key or {'k': 1},
                                   chunks, vocab_size=50,
                                   notes=lambda: {'dropped': 3})


def batches(sides_or_examples, steps, **kwargs):
  packed = packing.PackedTrainBatches(
      sides_or_examples, max_length=12, tokens_per_batch=48, seed=0,
      **kwargs)
  return [packed.batch_at(step) for step in steps]


def assert_same_batches(a, b):
  assert len(a) == len(b)
  for x, y in zip(a, b):
    assert x.keys() == y.keys()
    for key in x:
      np.testing.assert_array_equal(x[key], y[key])


def test_built_once_then_memory_mapped_with_the_same_batches(tmp_path):
  data, calls = examples(40), []
  source, target, meta = build(tmp_path, data, calls=calls)
  again_source, _, again = build(tmp_path, data, calls=calls)
  assert len(calls) == 1 and again['notes'] == {'dropped': 3}
  assert isinstance(again_source.tokens, np.memmap)
  assert again_source.tokens.dtype == np.uint16  # ids below 2**16
  steps = range(0, 30, 3)  # several epochs
  assert_same_batches(batches((again_source, target), steps),
                      batches(data, steps))
  assert meta['examples'] == 40


@pytest.mark.parametrize('damage', ['truncate', 'flip', 'meta', 'missing'])
def test_a_damaged_cache_is_rebuilt_with_a_message(tmp_path, damage, capsys):
  data, calls = examples(20), []
  build(tmp_path, data, calls=calls)
  (folder,) = [p for p in tmp_path.iterdir() if p.name.startswith('test-')]
  tokens = folder / 'target.tokens'
  if damage == 'truncate':
    tokens.write_bytes(tokens.read_bytes()[:-2])
  elif damage == 'flip':
    raw = bytearray(tokens.read_bytes())
    raw[0] ^= 1
    tokens.write_bytes(bytes(raw))
  elif damage == 'meta':
    (folder / 'meta.json').write_text('{"key": ')
  else:
    tokens.unlink()
  capsys.readouterr()
  source, target, _ = build(tmp_path, data, calls=calls)
  assert 'is damaged' in capsys.readouterr().out and len(calls) == 2
  assert_same_batches(batches((source, target), range(4)),
                      batches(data, range(4)))


def test_a_new_key_is_a_new_cache_and_bad_ids_are_refused(tmp_path):
  calls = []
  build(tmp_path, examples(10), calls=calls)
  build(tmp_path, examples(10, seed=1), key={'k': 2}, calls=calls)
  assert len(calls) == 2
  assert len([p for p in tmp_path.iterdir() if p.name.startswith('test-')]) \
      == 2
  with raises_naming(ValueError, '[1, 50)', 'source side', 'vocab_size=50'):
    build(tmp_path, [(np.array([3, 0]), np.array([4]))], key={'k': 3})
  with raises_naming(ValueError, 'Example 0', 'empty target'):
    build(tmp_path, [(np.array([3]), np.array([], np.int32))], key={'k': 4})
  assert not [p for p in tmp_path.iterdir() if p.name.startswith('.')]


@pytest.mark.parametrize('start', [0, 5])
def test_each_host_packs_its_block_of_the_one_process_batch(start):
  data = examples(60)
  steps = range(start, start + 12)
  whole = batches(data, steps, start_step=start, row_multiple=2)
  parts = [batches(data, steps, start_step=start, row_multiple=2,
                   host=(index, 2)) for index in range(2)]
  for step, full in enumerate(whole):
    for part in (parts[0][step], parts[1][step]):
      assert part.global_rows == len(full['inputs'])
    assert_same_batches(
        [full], [{k: np.concatenate([parts[0][step][k], parts[1][step][k]])
                  for k in full}])
  with raises_naming(ValueError, 'Host 0 of 3', '[4] rows',
                     'tokens_per_batch', 'row_multiple'):
    batches(data, [0], host=(0, 3))


@pytest.mark.parametrize('start', [0, 7])
def test_each_host_takes_its_block_of_the_one_process_bucketed_batch(
    start):
  data = examples(45, longest=12)
  source, target = batching.as_sides(data, 12)
  kwargs = dict(max_length=12, tokens_per_batch=40, seed=0,
                start_step=start, row_multiple=2)
  steps = range(start, start + 14)  # several epochs, part-filled batches
  whole = batching.BucketedTrainBatches(data, **kwargs)
  from_sides = batching.BucketedTrainBatches((source, target), **kwargs)
  parts = [batching.BucketedTrainBatches((source, target), host=(i, 2),
                                         **kwargs) for i in range(2)]
  filler_rows = 0
  for step in steps:
    full = whole.batch_at(step)
    assert_same_batches([full], [from_sides.batch_at(step)])
    blocks = [part.batch_at(step) for part in parts]
    assert all(b.global_rows == len(full['inputs']) for b in blocks)
    assert_same_batches(
        [full], [{k: np.concatenate([b[k] for b in blocks]) for k in full}])
    filler_rows += int((full['inputs'] == 0).all(axis=1).sum())
  assert filler_rows  # the epochs' last batches were among those compared
  with raises_naming(ValueError, 'Host 0 of 3', '[2, 4] rows',
                     'tokens_per_batch', 'row_multiple'):
    batching.BucketedTrainBatches(data, host=(0, 3), **kwargs)


def write_corpus(folder, seed, count=300):
  """Offline-grammar pairs as local files train.{en,es}, validation.{en,es}."""
  folder.mkdir(exist_ok=True)
  splits = offline_mt.splits(count, 20, 5, seed=seed)
  for split in ('train', 'validation'):
    for side, lang in ((0, 'en'), (1, 'es')):
      (folder / f'{split}.{lang}').write_text(
          ''.join(pair[side] + '\n' for pair in splits[split]))


@pytest.mark.parametrize('packed', [True, False])
def test_translation_reads_the_cache_and_notices_a_changed_corpus(
    tmp_path, monkeypatch, caplog, packed):
  corpus, workdir = tmp_path / 'corpus', str(tmp_path / 'workdir')
  write_corpus(corpus, seed=0)
  config = load_experiment('mt_offline', 'runlocal')
  config.data.update(dict(source='local', path=str(corpus),
                          source_lang='en', target_lang='es',
                          eval_split='validation', packing=packed,
                          max_length=32))  # some pairs are too long
  task = tasks.build(config, workdir)
  first = [next(iter_) for iter_ in [task.train_iter(0)] for _ in range(3)]
  batcher = (packing.PackedTrainBatches if packed
             else batching.BucketedTrainBatches)
  without_cache = batcher(
      task.examples('train'), max_length=32,
      tokens_per_batch=config.data.tokens_per_batch, seed=config.seed)
  assert_same_batches(first, [without_cache.batch_at(s) for s in range(3)])

  # A restart tokenises nothing, and still reports what was dropped.
  restarted = tasks.build(config, workdir)
  caplog.clear()
  read, encoded = [], []
  pairs, encode = restarted.pairs, restarted.tokenizer.encode_batch
  monkeypatch.setattr(restarted, 'pairs',
                      lambda split: read.append(split) or pairs(split))
  monkeypatch.setattr(restarted.tokenizer, 'encode_batch',
                      lambda texts: encoded.append(len(texts)) or encode(
                          texts))
  assert_same_batches(first, [next(iter_) for iter_ in
                              [restarted.train_iter(0)] for _ in range(3)])
  assert 'Dropped' in caplog.text  # counted when built, reported again
  # Only the small validation split is read (to fail early on a bad name).
  assert read == ['validation'] and max(encoded) == 20
  monkeypatch.undo()

  write_corpus(corpus, seed=1)  # same names, new text
  changed = tasks.build(config, workdir)
  batch = next(changed.train_iter(0))
  assert not np.array_equal(batch['targets'], first[0]['targets'])
  caches = os.listdir(os.path.join(workdir, 'cache'))
  assert len(caches) == 2, caches


def test_masked_lm_restarts_from_the_cache(tmp_path, monkeypatch):
  config = load_experiment('bert_mlm', 'runlocal')
  workdir = str(tmp_path)
  task = tasks.build(config, workdir)
  first = [next(iter_) for iter_ in [task.train_iter(0)] for _ in range(3)]
  without_cache = batching.BucketedTrainBatches(
      task.rows(config.data.train_split), max_length=config.data.max_length,
      tokens_per_batch=config.data.tokens_per_batch, seed=config.seed)
  assert_same_batches(first, [without_cache.batch_at(s) for s in range(3)])

  restarted = tasks.build(config, workdir)
  read, documents = [], restarted.documents
  monkeypatch.setattr(restarted, 'documents',
                      lambda split: read.append(split) or documents(split))
  again = restarted.train_iter(0)
  assert_same_batches(first, [next(again) for _ in range(3)])
  assert read == [config.data.eval_split]  # not the training text


def test_a_root_whose_cache_paths_are_too_long_is_named(tmp_path):
  """A workdir of 4,000 characters: its own folders fit the system's
  limit, its cache files' paths do not; that is said before a cache is
  built, not taken for a damaged cache."""
  most = os.pathconf(tmp_path, 'PC_PATH_MAX')
  root = str(tmp_path)
  while len(root) < most - 40:  # each folder of a name that fits
    root = os.path.join(root, 'd' * min(200, most - 40 - len(root)))
  os.makedirs(root)
  calls = []
  with raises_naming(ValueError, root, f'over the {most}', 'shorter path'):
    build(root, examples(5), calls=calls)
  assert not calls and os.listdir(root) == []
