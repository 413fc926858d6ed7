"""Marian export of translation Transformers built here (`convert --to=hf`,
`interop.marian.to_hf`): a post-LN Transformer with one tied embedding and
fixed sinusoids (interleaved, as the paper lays them out, or concatenated,
as Marian does) exports to a MarianMTModel that transformers loads with
nothing missing and whose logits are ours, with MarianTokenizer files that
give our tokenizer's ids; what Marian cannot compute is refused by name,
before anything is written. (The round trip of a converted OPUS-MT model:
test_interop_marian.py.) Skipped without `transformers` and `torch`
(`pip install -e ".[interop]"`)."""

import os

import flax.linen as nn
import jax
import numpy as np
import pytest

from conftest import MARIAN_SENTENCES as SENTENCES
from conftest import raises_naming
from transformer import workdir as workdir_lib
from transformer.data import tokenization
from transformer.data.generated import offline_mt
from transformer.interop import export
from transformer.interop import marian
from transformer.interop import workdirs
from transformer.models import convs2s
from transformer.models import encoder_decoder
from transformer.models import rnn
from transformer.tasks import translation

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')

MAX_LENGTH = 32
# Largest logit difference from ours allowed.
TOLERANCE = 1e-4


@pytest.fixture(scope='module', name='spm_model')
def spm_model_fixture(tmp_path_factory):
  """A SentencePiece model trained as the translation task trains one
  (padding 0, EOS 1, unknown 2), on both sides of the offline pairs."""
  path = str(tmp_path_factory.mktemp('spm') / 'spm.model')
  pairs = offline_mt.splits(300, 10, 10, seed=0)['train']
  tokenization.train_sentencepiece([s for pair in pairs for s in pair], path,
                                   vocab_size=150)
  return path


def _translation_workdir(path, spm_model: str, **model) -> str:
  """A translation workdir of a 'tiny' Transformer (`model` settings) with
  the SentencePiece vocabulary `spm_model` and randomised parameters at
  step 0, as training leaves one."""
  experiment = translation.default_config()
  experiment.model.size = 'tiny'
  experiment.model.update(model)
  experiment.data.max_length = MAX_LENGTH
  vocab_size = tokenization.SentencePieceTokenizer(spm_model).vocab_size
  config = encoder_decoder.config_for('tiny', vocab_size=vocab_size,
                                      max_length=MAX_LENGTH, **model)
  tokens = np.ones((1, 4), np.int32)
  params = nn.unbox(encoder_decoder.Transformer(config).init(
      jax.random.PRNGKey(0), tokens, tokens, deterministic=True)['params'])
  rng = np.random.default_rng(0)
  params = jax.tree.map(lambda x: rng.normal(0, 0.2, x.shape).astype(
      np.float32), params)

  def vocabulary(folder):
    os.makedirs(os.path.join(folder, 'vocab'))
    with open(spm_model, 'rb') as f, open(
        os.path.join(folder, 'vocab', 'spm.model'), 'wb') as g:
      g.write(f.read())

  workdirs.write_workdir(str(path), experiment, params, vocabulary)
  return str(path)


def _largest_difference(model, restored, sources, targets) -> float:
  """Max |MarianMTModel's logits - ours| at the real target positions of
  teacher-forced padded batches (the ids are the same: ours)."""
  width = max(map(len, sources + targets))
  pad = lambda rows: np.asarray([r + [0] * (width - len(r)) for r in rows])
  inputs, outputs = pad(sources), pad(targets)
  ours = np.asarray(restored.task.model.apply(
      {'params': restored.params}, inputs, outputs, deterministic=True))
  with torch.no_grad():
    theirs = model(
        input_ids=torch.tensor(inputs),
        attention_mask=torch.tensor(inputs > 0),
        decoder_input_ids=torch.tensor(np.pad(outputs, ((0, 0), (1, 0)))[
            :, :-1])).logits.numpy()
  real = outputs > 0
  return float(np.abs(ours[real] - theirs[real]).max())


@pytest.mark.parametrize('settings', [
    {},  # the paper's: interleaved sinusoids, ReLU, epsilon 1e-6
    dict(sinusoidal_layout='concatenated', activation='swish',
         final_logits_bias=True, scale_embeddings=False,
         layer_norm_epsilon=1e-5, num_layers=2, scan_layers=True),
])
def test_a_transformer_built_here_exports_to_marian(tmp_path, spm_model,
                                                    settings):
  workdir = _translation_workdir(tmp_path / 'workdir', spm_model, **settings)
  written = export.export(workdir, str(tmp_path / 'out'))
  assert written.startswith('Marian (MarianMTModel)')
  assert 'built here, our ids' in written
  model, info = transformers.AutoModelForSeq2SeqLM.from_pretrained(
      tmp_path / 'out', output_loading_info=True)
  assert not any(info.values()), info
  assert (model.config.pad_token_id, model.config.eos_token_id,
          model.config.decoder_start_token_id) == (0, 1, 0)
  restored = workdir_lib.restore(workdir)
  ours = restored.task.tokenizer
  theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / 'out')
  assert type(theirs).__name__ == 'MarianTokenizer'
  for sentence in SENTENCES:
    assert theirs(sentence)['input_ids'] == ours.encode(sentence)
  # Known pieces decode alike (SentencePiece shows an unknown one as ' ⁇ ',
  # which transformers skips as a special token).
  for sentence in SENTENCES[:3]:
    assert theirs.decode(ours.encode(sentence), skip_special_tokens=True
                         ) == ours.decode(ours.encode(sentence)) == sentence
  assert tokenization.UNK_ID in ours.encode(SENTENCES[3])
  sources = [ours.encode(s) for s in SENTENCES[:3]]
  targets = [ours.encode(s) for s in ('el perro', 'la casa roja es', 'un')]
  assert _largest_difference(model.eval(), restored, sources,
                             targets) < TOLERANCE


def test_a_refused_transformer_leaves_no_output(tmp_path, spm_model):
  workdir = _translation_workdir(tmp_path / 'workdir', spm_model,
                                 norm_position='pre')
  with raises_naming(ValueError, "norm_position='pre'",
                     'Marian cannot compute'):
    export.export(workdir, str(tmp_path / 'out'))
  assert sorted(p.name for p in tmp_path.iterdir()) == ['workdir']


@pytest.mark.parametrize('change,named', [
    (dict(norm_position='pre'), "norm_position='pre'"),
    (dict(positional_encoding='learned'), "positional_encoding='learned'"),
    (dict(tie_embeddings=False), 'tie_embeddings=False'),
    (dict(norm='rms'), "norm='rms'"),
    (dict(activation='swiglu'), "activation='swiglu'"),
    (dict(num_kv_heads=2), 'num_kv_heads=2'),
    (dict(layer_norm_epsilon=1e-3), 'layer_norm_epsilon=0.001'),
])
def test_what_marian_cannot_compute_is_refused(change, named):
  config = encoder_decoder.config_for('tiny', vocab_size=20, **change)
  with raises_naming(ValueError, named, 'Marian cannot compute'):
    marian.to_hf({}, config)


@pytest.mark.parametrize('config', [rnn.config_for('tiny', vocab_size=20),
                                    convs2s.config_for('tiny', vocab_size=20)])
def test_other_translation_families_are_refused(config):
  with raises_naming(ValueError, type(config).__module__,
                     'Marian cannot compute'):
    marian.to_hf({}, config)
