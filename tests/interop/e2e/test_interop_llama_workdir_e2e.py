"""A converted Llama workdir: a randomly initialised transformers
LlamaForCausalLM (grouped-query attention, an untied output layer,
rope_theta 500,000 with llama3 scaling) with a SentencePiece BPE vocabulary
(byte fallback) trained on the offline corpus, published either as Llama 2
publishes it (tokenizer.json) or as a tokenizer.model alone, converted by
the command: it tokenizes, computes logits and generates (greedy, BOS
first) as the reference does, training goes on in it, and it exports back
to the published tensors. Skipped without `transformers`, `torch` and
`tokenizers` (`pip install -e ".[interop]"`)."""

import json
import os
import shutil
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
import sentencepiece as spm

from conftest import convert_command
from conftest import LLAMA_TEXTS as TEXTS
from conftest import llama_sentencepiece_model
from conftest import publish_llama
from conftest import PROMPTS
from conftest import raises_naming
from transformer import train
from transformer import workdir as workdir_lib
from transformer.data import text
from transformer.interop import files
from transformer.interop import llama

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')
tokenizers_lib = pytest.importorskip('tokenizers')

KINDS = ('tokenizer.json', 'tokenizer.model')
def _convert_command(source, output):
  return convert_command('--from=hf', f'--input={source}',
                         f'--output={output}')


def _published_and_converted(tmp_path_factory, kind: str):
  """(model, transformers' tokenizer, directory, restored workdir, its
  parameters, the workdir): the directory converted by the command."""
  name = kind.replace('.', '_')
  published = publish_llama(tmp_path_factory.mktemp(name), kind)
  workdir = str(tmp_path_factory.mktemp(f'{name}_converted') / 'workdir')
  result = _convert_command(published[-1], workdir)
  assert result.returncode == 0, result.stderr[-2000:]
  assert '300 tokens (+ padding at id 0)' in result.stdout
  restored = workdir_lib.restore(workdir)
  assert restored.step == 0
  return (*published, restored, restored.params, workdir)


@pytest.fixture(scope='module')
def from_json(tmp_path_factory):
  return _published_and_converted(tmp_path_factory, 'tokenizer.json')


@pytest.fixture(scope='module')
def from_spm(tmp_path_factory):
  return _published_and_converted(tmp_path_factory, 'tokenizer.model')


@pytest.fixture(params=KINDS)
def converted(request):
  return request.getfixturevalue(
      {'tokenizer.json': 'from_json', 'tokenizer.model': 'from_spm'}[
          request.param])


def test_workdir_keeps_the_published_vocabulary_and_rope(converted):
  *_, directory, restored, _, workdir = converted
  kept = sorted(os.listdir(os.path.join(workdir, 'vocab')))
  assert kept == sorted(['llama_ids.json', 'llama_tokenizer.json' if
                         os.path.exists(os.path.join(directory,
                                                     'tokenizer.json'))
                         else 'llama.model'])
  config = restored.task.model_config
  assert (config.vocab_size, config.mask_padding) == (301, True)
  assert (config.num_kv_heads, config.tie_embeddings) == (2, False)
  assert (config.rope_theta, config.rope_scaling, config.rope_factor,
          config.rope_original_max_positions) == (500_000.0, 'llama3', 8.0,
                                                   16)
  assert restored.config.data.max_length == 64


def test_tokenization_matches_the_reference(converted):
  _, reference, directory, restored, *_ = converted
  ours = restored.task.tokenizer
  assert ours.vocab_size == 301 and ours.start_id == int(
      ours.ids.to_ours(1))
  assert [ours.id_to_piece(i) for i in range(3)] == ['<pad>', '</s>',
                                                     '<unk>']
  for sample in TEXTS:
    expected = reference(sample)['input_ids']  # <s> first
    ids = ours.encode(sample, add_eos=False)
    assert expected[0] == 1
    np.testing.assert_array_equal(
        ours.ids.to_published(ids).reshape(-1), expected[1:])
    assert ours.decode(ids + [1, 5]) == sample
    # The dummy space SentencePiece puts before a text is a byte of the
    # first piece.
    assert b''.join(map(ours.token_bytes, ids)) == (
        (' ' + sample).encode() if sample else b'')
  assert ours.encode('')[-1] == 1 and 0 not in ours.encode(TEXTS[2])
  # A leading space: SentencePiece (as the published tokenizer.json) keeps
  # it beside the dummy one; transformers 5 rebuilds Llama's pre-tokenizer
  # and merges them, so the reference is the SentencePiece model here.
  model = spm.SentencePieceProcessor(model_proto=llama_sentencepiece_model())
  np.testing.assert_array_equal(
      ours.ids.to_published(ours.encode(' two', add_eos=False)),
      model.encode(' two'))


def test_logits_match_the_reference_with_padding_masked(converted):
  model, reference, _, restored, params, _ = converted
  tokenizer = restored.task.tokenizer
  rows = [reference(p)['input_ids'] for p in PROMPTS]  # <s> first
  width = max(map(len, rows))
  llama_ids = np.asarray([r + [0] * (width - len(r)) for r in rows])
  real = np.asarray([[j < len(r) for j in range(width)] for r in rows])
  with torch.no_grad():
    hf_logits = model(torch.tensor(llama_ids),
                      attention_mask=torch.tensor(real)).logits.numpy()
  tokens = np.where(real, tokenizer.ids.to_ours(llama_ids), 0)
  ours = np.asarray(restored.task.model.apply(
      {'params': params}, jnp.asarray(tokens), deterministic=True))
  expected = hf_logits[..., tokenizer.ids.order[1:]]
  error = (np.abs(ours[..., 1:][real] - expected[real]).max()
           / np.abs(expected[real]).max())
  assert error < 2e-5
  assert (ours[..., 0] < -1e8).all()  # padding is never predicted


def test_generate_command_matches_reference_greedy_search(converted):
  model, reference, _, _, _, workdir = converted
  result = subprocess.run(
      [sys.executable, '-m', 'transformer.tools.generate',
       f'--workdir={workdir}', '--greedy', '--max_new_tokens=12'] +
      [f'--prompt={p}' for p in PROMPTS],
      capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  eos = model.config.eos_token_id
  expected = []
  for prompt in PROMPTS:
    ids = reference(prompt)['input_ids']  # [<s>] + the prompt
    with torch.no_grad():
      output = model.generate(torch.tensor([ids]), max_new_tokens=12,
                              do_sample=False, pad_token_id=eos,
                              eos_token_id=eos)[0, len(ids):].tolist()
    if eos in output:
      output = output[:output.index(eos)]
    assert output  # something to compare
    expected.append(reference.decode(ids + output, skip_special_tokens=True))
  assert result.stdout == ''.join(f'{e}\n' + '-' * 40 + '\n'
                                  for e in expected)


def test_training_goes_on_in_the_converted_workdir(from_spm, tmp_path):
  """Two steps on local text in a copy of the workdir (its config, a
  corpus of its own): the parameters move from the converted ones."""
  *_, converted_params, workdir = from_spm
  copy = tmp_path / 'workdir'
  shutil.copytree(workdir, copy)
  corpus = tmp_path / 'corpus.txt'
  corpus.write_text('\n'.join(text.offline_splits(40, 0, seed=1)['train']))
  config = workdir_lib.load_config(str(copy))
  config.data.update(dict(path=str(corpus), per='line',
                          tokens_per_batch=256, eval_rows=4))
  config.train.update(dict(num_steps=2, checkpoint_every=2, eval_every=2,
                           log_every=1))
  config.optimizer.update(dict(learning_rate=1e-3, warmup_steps=1))
  config.eval.update(dict(max_new_tokens=4))
  train.train_and_evaluate(config, str(copy))
  restored = workdir_lib.restore(str(copy))
  assert restored.step == 2
  before = np.asarray(converted_params['lm_head']['kernel'])
  after = np.asarray(restored.params['lm_head']['kernel'])
  moved = np.abs(after - before).max()
  assert 0 < moved < 0.01  # trained, from the converted weights
  np.testing.assert_array_equal(after[:, 0], 0)  # padding stays out


def test_export_gives_back_the_published_tensors(converted, tmp_path):
  _, _, directory, restored, params, _ = converted
  config = restored.task.model_config
  with raises_naming(ValueError, 'mask_padding',
                     'task.tokenizer.ids'):
    llama.to_hf(params, config)
  llama.save_hf(str(tmp_path), params, config,
                restored.task.tokenizer.ids)
  exported = files.read_safetensors(str(tmp_path))
  original = files.read_safetensors(directory)
  assert set(exported) == set(original)
  for name, value in exported.items():
    np.testing.assert_array_equal(value, original[name], err_msg=name)
  assert llama.load(str(tmp_path))[0] == llama.load(directory)[0]


def test_convert_refuses_a_vocabulary_of_another_size(from_spm, tmp_path):
  """config.json's vocab_size and the tokenizer disagree: exit 2, one line
  naming both sizes, no workdir; a directory without a tokenizer: exit 66,
  naming the files."""
  *_, directory, _, _, _ = from_spm
  source = tmp_path / 'llama'
  shutil.copytree(directory, source)
  hf = json.loads((source / 'config.json').read_text())
  (source / 'config.json').write_text(json.dumps({**hf, 'vocab_size': 256}))
  tensors = files.read_safetensors(str(source))
  for name in ('model.embed_tokens.weight', 'lm_head.weight'):
    tensors[name] = tensors[name][:256]
  files.save_hf(str(source), {**hf, 'vocab_size': 256}, tensors)
  result = _convert_command(source, tmp_path / 'out')
  assert result.returncode == 2, result.stderr[-2000:]
  error = result.stderr.strip().splitlines()[-1]
  assert '300 tokens' in error and 'vocab_size=256' in error, error
  assert 'correct vocab_size' in error, error
  (source / 'tokenizer.model').unlink()
  result = _convert_command(source, tmp_path / 'out')
  assert result.returncode == 66, result.stderr[-2000:]  # missing input
  for part in (str(source), 'tokenizer.json', 'tokenizer.model',
               'download the tokenizer files'):
    assert part in result.stderr, result.stderr[-2000:]
  assert sorted(os.listdir(tmp_path)) == ['llama']


def test_convert_to_hf_gives_back_what_transformers_loads(converted,
                                                          tmp_path):
  """The converted workdir exported (`convert --to=hf`): the published
  tensors exactly, a tokenizer that gives the published ids, and the
  special ids of config.json."""
  model, reference, directory, *_, workdir = converted
  output = tmp_path / 'exported'
  result = convert_command('--to=hf', f'--workdir={workdir}',
                           f'--output={output}')
  assert result.returncode == 0, result.stderr[-2000:]
  assert 'Llama' in result.stdout and 'published tokenizer' in result.stdout
  loaded, info = transformers.AutoModelForCausalLM.from_pretrained(
      output, output_loading_info=True)
  assert not any(info.values()), info
  exported = files.read_safetensors(str(output))
  for name, value in files.read_safetensors(directory).items():
    np.testing.assert_array_equal(exported[name], value, err_msg=name)
  assert (loaded.config.bos_token_id, loaded.config.eos_token_id) == (
      model.config.bos_token_id, model.config.eos_token_id)
  tokenizer = transformers.AutoTokenizer.from_pretrained(output)
  for sample in TEXTS:
    assert tokenizer(sample)['input_ids'] == reference(sample)['input_ids']
