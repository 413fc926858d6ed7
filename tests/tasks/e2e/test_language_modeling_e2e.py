"""The language-modelling task end to end: training, metrics, generation,
and the experiments that train."""

import math
import os

import numpy as np
import pytest

from conftest import load_experiment
from conftest import raises_naming
from conftest import REPO
from transformer import layers
from transformer import metrics
from transformer import sharding
from transformer import train
from transformer import workdir as workdir_lib
from transformer.data import sources
from transformer.data import text
from transformer.insight import attention_views
from transformer.tools import generate

SHAKESPEARE = os.path.join(REPO, '..', 'shared', 'data', 'tinyshakespeare',
                           'input.txt')


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  config = load_experiment('lm_offline', 'runlocal')
  config.train.num_steps = 12
  config.train.eval_every = 12
  workdir = str(tmp_path_factory.mktemp('lm'))
  result = train.train_and_evaluate(config, workdir)
  return config, workdir, result


def eval_sums(trainer, params):
  sums = None
  with sharding.active(trainer.mesh, trainer.rules):
    for batch in trainer.task.eval_batches():
      sums = metrics.add(sums, trainer.eval_step(
          params, sharding.global_batch(batch, trainer.mesh)))
  return {k: (float(s), float(n)) for k, (s, n) in sums.items()}


def test_training_lowers_loss_and_metrics_are_consistent(trained):
  config, workdir, result = trained
  trainer = train.Trainer(config, workdir)
  initial = eval_sums(trainer, trainer.initialise().params)
  assert result['loss'] < initial['loss'][0] / initial['loss'][1] - 0.1
  assert result['perplexity'] == pytest.approx(math.exp(result['nll']),
                                               rel=1e-6)
  # Every eval token is predicted once, plus one EOS per document; the
  # bytes are exactly those of the documents' text.
  params = workdir_lib.restore(workdir).params
  sums = eval_sums(trainer, params)
  documents = trainer.task.documents('validation')
  ids = trainer.task.tokenizer.encode_batch(documents, add_eos=False)
  assert sums['nll'][1] == sum(len(i) + 1 for i in ids)
  assert sums['bits_per_byte'][1] == text.count_bytes(documents)
  assert sums['bits_per_character'][1] == text.count_characters(documents)
  assert result['bits_per_byte'] == pytest.approx(
      sums['nll'][0] / math.log(2) / text.count_bytes(documents), rel=1e-5)
  assert os.path.exists(os.path.join(workdir, 'reports', 'samples_step12.txt'))


def test_batched_prompts_of_any_length_equal_one_at_a_time(trained):
  _, workdir, _ = trained
  restored = workdir_lib.restore(workdir)
  task, params = restored.task, restored.params
  prompts = ['The red', 'Three big dogs see', '']
  with restored.active():
    batched = task.generate(params, prompts, max_new_tokens=6, greedy=True)
    alone = [task.generate(params, [p], max_new_tokens=6, greedy=True)[0]
             for p in prompts]
  assert batched == alone
  # Greedy with the cache equals recomputing the whole sequence each step.
  ids = [1] + task.tokenizer.encode(prompts[1], add_eos=False)
  generated = []
  for _ in range(6):
    logits = task.model.apply({'params': params},
                              np.asarray([ids + generated]),
                              deterministic=True)
    generated.append(int(np.argmax(logits[0, -1])))
    if generated[-1] == 1:
      break
  assert alone[1] == task.tokenizer.decode(generated)


def test_generation_continues_past_the_context(trained):
  _, workdir, _ = trained
  restored = workdir_lib.restore(workdir)
  task, params = restored.task, restored.params
  context = task.model_config.max_length
  with restored.active():
    short = task.generate(params, ['The'], max_new_tokens=10, greedy=True)[0]
    long = task.generate(params, ['The'], max_new_tokens=3 * context,
                         greedy=True)[0]
    with raises_naming(ValueError, 'top_p=0.0', '(0, 1]'):
      task.generate(params, ['The'], max_new_tokens=2, top_p=0.0)
  assert long.startswith(short)


def test_generate_tool(trained, tmp_path):
  _, workdir, _ = trained
  samples, step, figures = generate.generate(
      workdir, ['The red', 'A'], max_new_tokens=5, seed=3,
      attention_dir=str(tmp_path / 'maps'), attention_tokens=6)
  assert step == 12 and len(samples) == 2
  layers_ = workdir_lib.restore(workdir).task.model_config.num_layers
  assert figures == [str(tmp_path / 'maps' / f'sample_{i}_layer_{k}.png')
                     for i in range(2) for k in range(layers_)]
  assert all(os.path.getsize(f) > 5_000 for f in figures)
  again, _, none = generate.generate(workdir, ['The red', 'A'],
                                     max_new_tokens=5, seed=3)
  assert samples == again and none == []  # seeded; figures only when asked
  with raises_naming(ValueError, '--prompt', '--prompts_file'):
    generate.generate(workdir, [])


def test_self_attention_maps_are_causal_and_the_models_own(trained):
  _, workdir, _ = trained
  restored = workdir_lib.restore(workdir)
  task, params = restored.task, restored.params
  with restored.active():
    pieces, maps = task.self_attention_maps(params, 'The red house', last=4)
    all_pieces, full = task.self_attention_maps(params, 'The red house',
                                                last=1_000)
    [view] = attention_views.of(task, params, 'The red house')
  # The explorer's view is every layer of the whole text.
  assert view.queries == view.keys == all_pieces
  np.testing.assert_array_equal(view.weights, np.stack(full))
  assert len(maps) == task.model_config.num_layers
  assert pieces == all_pieces[-4:] and len(all_pieces) > 4
  # Every token from the start token on: rows sum to 1, nothing ahead.
  for heads in full:
    np.testing.assert_allclose(heads.sum(-1), 1.0, atol=1e-5)
    assert (np.triu(heads, 1) == 0).all()
  # The window is the same weights, cut; the padded batch (to a multiple of
  # 8) gives what the model gives the text alone.
  np.testing.assert_array_equal(maps[0], full[0][:, -4:, -4:])
  ids = np.asarray([[1] + task.tokenizer.encode('The red house',
                                                add_eos=False)])
  _, state = task.model.apply({'params': params}, ids, deterministic=True,
                              mutable=['intermediates'])
  alone = layers.attention_weights(state['intermediates'])
  np.testing.assert_allclose(full[-1], list(alone.values())[-1][0],
                             atol=1e-6)


@pytest.mark.skipif(not os.path.exists(SHAKESPEARE),
                    reason='tiny Shakespeare not available')
def test_shakespeare_character_experiment_runs(tmp_path):
  config = load_experiment('shakespeare_char', f'path={SHAKESPEARE},runlocal')
  result = train.train_and_evaluate(config, str(tmp_path))
  assert result['bits_per_character'] == pytest.approx(
      result['bits_per_byte'], rel=1e-3)  # the text is ASCII
  assert 'perplexity' in result


PTB = os.path.join(REPO, '..', 'shared', 'data', 'ptb')


@pytest.mark.skipif(not os.path.isdir(PTB), reason='PTB not available')
@pytest.mark.slow  # reads the whole real corpus, 14 s; CI runs it
@pytest.mark.ci
def test_ptb_word_level_counts_tokens_as_the_literature(tmp_path):
  config = load_experiment('ptb', f'path={PTB},runlocal')
  trainer = train.Trainer(config, str(tmp_path))
  task = trainer.task
  # The literature's 10,000 types: 9,999 words and end-of-sentence ('\n').
  assert len(task.tokenizer.words) == 10_000 and '\n' in task.tokenizer.words
  for split, tokens in (('train', 929_589), ('validation', 73_760)):
    # Every token is predicted once, plus the end of the document.
    assert sum(len(inputs) for inputs, _ in task.examples(split)) == tokens + 1
  assert 'perplexity' in train.train_and_evaluate(config, str(tmp_path))


def test_lm1b_experiment_with_mock_tfds(tmp_path, monkeypatch):
  tfds = pytest.importorskip('tensorflow_datasets')
  config = load_experiment('lm1b', 'runlocal')
  # The real TFDS reading code under mock_data; training outside it, whose
  # fake file system would also catch the checkpoint writes.
  with tfds.testing.mock_data(num_examples=16):
    splits = {split: sources.read('documents', config.data, split)
              for split in ('train', 'test')}
  assert all(isinstance(d, str) for docs in splits.values() for d in docs)
  monkeypatch.setattr(sources, 'read', lambda kind, data, split: splits[split])
  result = train.train_and_evaluate(config, str(tmp_path))
  assert math.isfinite(result['loss'])
