"""Hostile or damaged published files are refused in one line naming the
file, never read outside the model folder, never a library traceback."""

import json
import os
import struct

import numpy as np
import pytest

from conftest import raises_naming
from transformer.interop import files

safetensors_numpy = pytest.importorskip('safetensors.numpy')


def write_safetensors(path, header, data=b'\0' * 8, length=None):
  """A safetensors file: 8-byte little-endian header length, the JSON
  header, the data."""
  text = json.dumps(header).encode()
  with open(path, 'wb') as f:
    f.write(struct.pack('<Q', len(text) if length is None else length) +
            text + data)


TENSOR = {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]}


@pytest.mark.parametrize('case,message', [
    ('header length beyond the file', 'invalid header length'),
    ('offsets outside the data', 'not fully covered'),
    ('unknown dtype', 'Q99'),
    ('not a safetensors file', 'header too small'),
])
def test_malformed_safetensors_are_refused_naming_the_file(tmp_path, case,
                                                           message):
  path = tmp_path / 'model.safetensors'
  if case == 'header length beyond the file':
    write_safetensors(path, {'w': TENSOR}, length=10**6)
  elif case == 'offsets outside the data':
    write_safetensors(path, {'w': {**TENSOR, 'shape': [200],
                                   'data_offsets': [0, 800]}})
  elif case == 'unknown dtype':
    write_safetensors(path, {'w': {**TENSOR, 'dtype': 'Q99'}})
  else:
    path.write_bytes(b'<html>')
  with pytest.raises(ValueError) as error:
    files.read_safetensors(str(tmp_path))
  assert str(path) in str(error.value) and message in str(error.value)
  assert 'download it again' in str(error.value)


def test_a_valid_file_reads(tmp_path):
  write_safetensors(tmp_path / 'model.safetensors', {'w': TENSOR},
                    data=np.asarray([1.5, -2.0], '<f4').tobytes())
  np.testing.assert_array_equal(
      files.read_safetensors(str(tmp_path))['w'], [1.5, -2.0])


def test_a_pickled_checkpoint_is_refused_with_the_rewrite_to_run(tmp_path):
  (tmp_path / 'pytorch_model.bin').write_bytes(b'not read')
  with pytest.raises(FileNotFoundError) as error:
    files.read_safetensors(str(tmp_path))
  message = str(error.value)
  assert 'pickled .bin checkpoints can run code' in message
  assert (f"torch.load('{tmp_path}/pytorch_model.bin', weights_only=True)"
          in message)
  assert f"'{tmp_path}/model.safetensors'" in message
  (tmp_path / 'pytorch_model.bin').unlink()  # nothing to rewrite: no command
  with pytest.raises(FileNotFoundError) as error:
    files.read_safetensors(str(tmp_path))
  assert 'torch.load' not in str(error.value)


def test_a_shard_outside_the_model_folder_is_refused(tmp_path):
  model = tmp_path / 'model'
  model.mkdir()
  outside = tmp_path / 'secret.safetensors'
  safetensors_numpy.save_file({'w': np.ones(2, np.float32)}, str(outside))
  for shard in ('../secret.safetensors', str(outside), 'sub/../../secret'
                '.safetensors'):
    (model / 'model.safetensors.index.json').write_text(
        json.dumps({'weight_map': {'w': shard}}))
    with raises_naming(ValueError, 'model.safetensors.index.json',
                       f"'{shard}'", f'not a file of {model}'):
      files.read_safetensors(str(model))
  safetensors_numpy.save_file({'w': np.ones(2, np.float32)},
                              str(model / 'model-1.safetensors'))
  (model / 'model.safetensors.index.json').write_text(
      json.dumps({'weight_map': {'w': 'model-1.safetensors'}}))
  assert list(files.read_safetensors(str(model))) == ['w']


def test_missing_shards_and_garbled_json_name_the_file(tmp_path):
  (tmp_path / 'model.safetensors.index.json').write_text(
      json.dumps({'weight_map': {'w': 'model-1.safetensors'}}))
  with raises_naming(FileNotFoundError, str(tmp_path / 'model-1.safetensors'),
                     'download it again'):
    files.read_safetensors(str(tmp_path))
  (tmp_path / 'model.safetensors.index.json').write_text('{"weight_map": ')
  with raises_naming(ValueError, 'model.safetensors.index.json', 'JSON',
                     'download it again'):
    files.read_safetensors(str(tmp_path))
  (tmp_path / 'config.json').write_text('[1, 2]')
  with raises_naming(ValueError, str(tmp_path / 'config.json'), 'a list',
                     'JSON object'):
    files.read_config(str(tmp_path))
  with raises_naming(FileNotFoundError,
                     str(tmp_path / 'nowhere' / 'config.json'),
                     'download the whole model repository'):
    files.read_config(str(tmp_path / 'nowhere'))
  os.remove(tmp_path / 'model.safetensors.index.json')
  with raises_naming(FileNotFoundError, 'model.safetensors.index.json',
                     str(tmp_path), 'only safetensors'):
    files.read_safetensors(str(tmp_path))


def _cache_repository(root, shards):
  """A Hugging Face cache repository as `from_pretrained` leaves it:
  models--org--tiny/{blobs/HASH, snapshots/REV/NAME -> ../../blobs/HASH,
  refs/main}; `shards`: name -> tensors."""
  repository = root / 'models--org--tiny'
  blobs, snapshot = repository / 'blobs', repository / 'snapshots' / 'abc123'
  blobs.mkdir(parents=True)
  snapshot.mkdir(parents=True)
  (repository / 'refs').mkdir()
  (repository / 'refs' / 'main').write_text('abc123')

  def link(name, write):
    blob = blobs / f'blob{len(os.listdir(blobs))}'
    write(str(blob))
    os.symlink(os.path.relpath(blob, snapshot), snapshot / name)

  weight_map = {}
  for name, tensors in shards.items():
    link(name, lambda path, t=tensors: safetensors_numpy.save_file(t, path))
    weight_map.update({k: name for k in tensors})
  link('model.safetensors.index.json', lambda path: open(path, 'w').write(
      json.dumps({'weight_map': weight_map})))
  return repository, snapshot


def test_the_hugging_face_cache_layout_is_read(tmp_path):
  """Snapshot files are symlinks into the repository's blobs: read, and
  the repository itself leads to its current snapshot; a link leaving the
  repository is still refused."""
  repository, snapshot = _cache_repository(tmp_path, {
      'model-00001-of-00002.safetensors': {'a': np.ones(2, np.float32)},
      'model-00002-of-00002.safetensors': {'b': np.zeros(3, np.float32)}})
  assert sorted(files.read_safetensors(str(snapshot))) == ['a', 'b']
  assert files.snapshot(str(repository)) == str(snapshot)
  assert files.snapshot(str(snapshot)) == str(snapshot)
  outside = tmp_path / 'elsewhere.safetensors'
  safetensors_numpy.save_file({'a': np.ones(2, np.float32)}, str(outside))
  shard = snapshot / 'model-00001-of-00002.safetensors'
  os.remove(shard)
  os.symlink(outside, shard)
  with raises_naming(ValueError, 'model.safetensors.index.json',
                     "'model-00001-of-00002.safetensors'",
                     f'not a file of {snapshot}'):
    files.read_safetensors(str(snapshot))
  (repository / 'refs' / 'main').write_text('../../etc')
  with raises_naming(FileNotFoundError, 'refs/main', "'../../etc'",
                     'download the model again'):
    files.snapshot(str(repository))


def test_a_cache_repository_converts(tmp_path):
  """`convert --input=models--org--tiny` reads the snapshot refs/main
  names: a GPT-2 of ours in the cache layout becomes a workdir."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import linen as nn  # pylint: disable=g-import-not-at-top
  tokenizers_lib = pytest.importorskip('tokenizers')
  from transformer.data import text  # pylint: disable=g-import-not-at-top
  from transformer.interop import gpt2  # pylint: disable=g-import-not-at-top
  from transformer.interop import workdirs  # pylint: disable=g-import-not-at-top
  from transformer.models import decoder  # pylint: disable=g-import-not-at-top
  bpe = tokenizers_lib.ByteLevelBPETokenizer()
  bpe.train_from_iterator(text.offline_splits(50, 0, seed=0)['train'],
                          vocab_size=280, show_progress=False)
  bpe.add_tokens(['<|endoftext|>'])
  size = bpe.get_vocab_size()
  config = decoder.config_for('tiny', vocab_size=size, max_length=16)
  params = nn.unbox(decoder.Decoder(config).init(
      jax.random.key(0), jnp.ones((1, 4), jnp.int32),
      deterministic=True)['params'])
  hf, tensors = gpt2.to_hf(params, config)
  repository, snapshot = _cache_repository(tmp_path, {
      'model-00001-of-00001.safetensors': tensors})
  (snapshot / 'config.json').write_text(json.dumps(
      {**hf, 'eos_token_id': size - 1}))
  bpe.save(str(snapshot / 'tokenizer.json'))
  written = workdirs.convert('hf', str(repository), str(tmp_path / 'out'))
  assert 'GPT-2' in written


@pytest.mark.parametrize('fields,named', [
    ({'n_layer': '2'}, "n_layer='2' is not an integer"),
    ({'layer_norm_epsilon': 'small'}, "layer_norm_epsilon='small' is not a "
                                      'number'),
    ({'activation_function': 3}, 'activation_function=3 is not a string'),
    ({'scale_attn_weights': 1}, 'scale_attn_weights=1 is not true or false'),
    ({'n_embd': True}, 'n_embd=True is not an integer'),
])
def test_config_fields_of_the_wrong_type_are_named(fields, named):
  from transformer.interop import gpt2  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError) as error:
    gpt2.config_from_hf({'model_type': 'gpt2', **fields})
  assert named in str(error.value) and '\n' not in str(error.value)


def test_a_model_type_that_is_not_a_name_is_refused(tmp_path):
  from transformer.interop import workdirs  # pylint: disable=g-import-not-at-top
  (tmp_path / 'config.json').write_text(json.dumps({'model_type': ['gpt2']}))
  with raises_naming(ValueError, str(tmp_path / 'config.json'),
                     "model_type=['gpt2']"):
    workdirs.convert('hf', str(tmp_path), str(tmp_path / 'out'))


def test_a_config_without_its_sizes_names_the_omitted_fields(tmp_path):
  """A GPT-2 of 2 layers of width 32 whose config.json lost its sizes:
  transformers' defaults (12 layers of 768) stand in, the tensors do not
  fit, and the message says which fields config.json omits."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import linen as nn  # pylint: disable=g-import-not-at-top
  from transformer.interop import gpt2  # pylint: disable=g-import-not-at-top
  from transformer.models import decoder  # pylint: disable=g-import-not-at-top
  config = decoder.config_for('tiny', vocab_size=50, max_length=16)
  params = nn.unbox(decoder.Decoder(config).init(
      jax.random.key(0), jnp.ones((1, 4), jnp.int32),
      deterministic=True)['params'])
  gpt2.save_hf(str(tmp_path), params, config)
  (tmp_path / 'config.json').write_text(json.dumps({'model_type': 'gpt2'}))
  with pytest.raises(ValueError) as error:
    gpt2.load(str(tmp_path))
  message = str(error.value)
  assert 'does not match' in message and '\n' not in message
  assert 'config.json omits' in message and 'n_layer=12' in message


def test_garbage_tokenizer_files_are_named(tmp_path):
  """Each file is named when it is the one damaged (with its line), both
  when they do not fit together."""
  pytest.importorskip('tokenizers')
  from transformer.data import published_tokenizers  # pylint: disable=g-import-not-at-top
  (tmp_path / 'vocab.json').write_text('not json at all')
  (tmp_path / 'merges.txt').write_bytes(b'\xff\xfe garbage')
  with raises_naming(ValueError, str(tmp_path / 'vocab.json'),
                     'line 1 column 1', 'download it again') as error:
    published_tokenizers.published_bpe(str(tmp_path), 'gpt2')
  assert 'merges.txt' not in str(error.value)
  (tmp_path / 'vocab.json').write_text('{"a": 0}')
  with raises_naming(ValueError, str(tmp_path / 'merges.txt'), 'UTF-16'):
    published_tokenizers.published_bpe(str(tmp_path), 'gpt2')
  (tmp_path / 'merges.txt').write_text('#version: 0.2\na b\n')
  with raises_naming(ValueError, str(tmp_path / 'vocab.json'),
                     str(tmp_path / 'merges.txt'), 'download them again'):
    published_tokenizers.published_bpe(str(tmp_path), 'gpt2')
  (tmp_path / 'tokenizer.json').write_text('{"model": 3}')
  with raises_naming(ValueError, str(tmp_path / 'tokenizer.json'),
                     'download it again'):
    published_tokenizers.published_bpe(str(tmp_path), 'gpt2')
  os.remove(tmp_path / 'tokenizer.json')
  os.remove(tmp_path / 'merges.txt')
  with raises_naming(FileNotFoundError, str(tmp_path), 'tokenizer.json',
                     'merges.txt', 'download the tokenizer files'):
    published_tokenizers.published_bpe(str(tmp_path), 'gpt2')


def _tiny_gpt2(directory, vocab_size, tokens):
  """Our tiny GPT-2 of `vocab_size` ids in the Hugging Face layout, with a
  byte-level tokenizer.json of about `tokens` tokens (<|endoftext|> last)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import linen as nn  # pylint: disable=g-import-not-at-top
  tokenizers_lib = pytest.importorskip('tokenizers')
  from transformer.data import text  # pylint: disable=g-import-not-at-top
  from transformer.interop import gpt2  # pylint: disable=g-import-not-at-top
  from transformer.models import decoder  # pylint: disable=g-import-not-at-top
  bpe = tokenizers_lib.ByteLevelBPETokenizer()
  bpe.train_from_iterator(text.offline_splits(200, 0, seed=0)['train'],
                          vocab_size=tokens - 1, show_progress=False)
  bpe.add_tokens(['<|endoftext|>'])
  config = decoder.config_for('tiny', vocab_size=vocab_size, max_length=16)
  params = nn.unbox(decoder.Decoder(config).init(
      jax.random.key(0), jnp.ones((1, 4), jnp.int32),
      deterministic=True)['params'])
  hf, tensors = gpt2.to_hf(params, config)
  os.makedirs(directory, exist_ok=True)
  files.save_hf(str(directory), {**hf, 'eos_token_id': vocab_size - 1},
                tensors)
  bpe.save(str(directory / 'tokenizer.json'))
  return bpe.get_vocab_size()


def test_a_tokenizer_larger_than_the_embedding_is_refused(tmp_path):
  """Its ids past the table would read other tokens' rows (gathers clamp)
  silently; a table padded past the tokenizer is fine."""
  from transformer.interop import workdirs  # pylint: disable=g-import-not-at-top
  size = _tiny_gpt2(tmp_path / 'big', 300, 400)
  with raises_naming(ValueError, f'{size} tokens', 'vocab_size=300',
                     'correct vocab_size'):
    workdirs.convert('hf', str(tmp_path / 'big'), str(tmp_path / 'out'))
  assert not (tmp_path / 'out').exists()


def test_a_unigram_tokenizer_beside_gpt2_weights_is_refused_first(tmp_path):
  """Reported: it ended in KeyError: '▁' while the workdir was written;
  it is refused by name, and nothing is written."""
  tokenizers_lib = pytest.importorskip('tokenizers')
  from transformer.data import text  # pylint: disable=g-import-not-at-top
  from transformer.interop import workdirs  # pylint: disable=g-import-not-at-top
  _tiny_gpt2(tmp_path / 'gpt2', 260, 250)
  unigram = tokenizers_lib.SentencePieceUnigramTokenizer()
  unigram.train_from_iterator(text.offline_splits(50, 0, seed=0)['train'],
                              vocab_size=100, show_progress=False)
  unigram.save(str(tmp_path / 'gpt2' / 'tokenizer.json'))
  with raises_naming(ValueError, str(tmp_path / 'gpt2' / 'tokenizer.json'),
                     'is a Unigram model', 'byte-level BPE'):
    workdirs.convert('hf', str(tmp_path / 'gpt2'), str(tmp_path / 'out'))
  assert sorted(os.listdir(tmp_path)) == ['gpt2']


def test_convert_names_what_is_missing_or_left_behind(tmp_path, capsys):
  """A mistyped --input names the folder; a dangling link of the Hugging
  Face cache names the link; the staging folder of a killed convert is
  removed by the next one."""
  from transformer.interop import workdirs  # pylint: disable=g-import-not-at-top
  with raises_naming(FileNotFoundError, f'--input={tmp_path / "nope"}',
                     'model directory'):
    workdirs.convert('hf', str(tmp_path / 'nope'), str(tmp_path / 'out'))
  model = tmp_path / 'model'
  model.mkdir()
  os.symlink(tmp_path / 'blobs' / 'missing', model / 'model.safetensors')
  with raises_naming(FileNotFoundError, str(model / 'model.safetensors'),
                     str(tmp_path / 'blobs' / 'missing'),
                     'download the model again'):
    files.read_safetensors(str(model))
  _tiny_gpt2(tmp_path / 'gpt2', 260, 250)
  abandoned = tmp_path / '.out.converting-999999999'  # no such process
  (abandoned / 'checkpoints').mkdir(parents=True)
  workdirs.convert('hf', str(tmp_path / 'gpt2'), str(tmp_path / 'out'))
  assert not abandoned.exists()
  assert 'left by a convert that was killed' in capsys.readouterr().out


def test_a_width_that_does_not_split_into_heads_is_named_as_published():
  from transformer.interop import gpt2  # pylint: disable=g-import-not-at-top
  with raises_naming(ValueError, 'n_embd=33', 'n_head=4'):
    gpt2.config_from_hf({'model_type': 'gpt2', 'n_embd': 33, 'n_head': 4})
