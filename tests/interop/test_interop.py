"""Published checkpoints: a randomly initialised reference model saved in
its published format, converted, computes the same logits (and greedy
continuations). Skipped without `transformers` and `torch`
(`pip install -e ".[interop]"`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import raises_naming
from conftest import randomised
from transformer.interop import files
from transformer.interop import gpt2
from transformer.models import decoder

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')


@pytest.fixture(scope='module')
def hf_gpt2(tmp_path_factory):
  torch.manual_seed(0)
  config = transformers.GPT2Config(vocab_size=97, n_positions=32, n_embd=48,
                                   n_layer=2, n_head=4)
  model = randomised(transformers.GPT2LMHeadModel(config))
  directory = tmp_path_factory.mktemp('gpt2')
  model.save_pretrained(directory)  # safetensors
  return model, str(directory)


def test_gpt2_logits_match_the_reference(hf_gpt2):
  reference, directory = hf_gpt2
  config, params = gpt2.load(directory)
  tokens = np.random.default_rng(0).integers(0, 97, (3, 20))
  with torch.no_grad():
    expected = reference(torch.tensor(tokens)).logits.numpy()
  ours = decoder.Decoder(config).apply({'params': params},
                                       jnp.asarray(tokens),
                                       deterministic=True)
  error = np.abs(np.asarray(ours) - expected).max() / np.abs(expected).max()
  assert error < 1e-5


def test_gpt2_greedy_generation_matches_token_for_token(hf_gpt2):
  reference, directory = hf_gpt2
  config, params = gpt2.load(directory)
  prompt = np.array([[5, 17, 42, 8]])
  with torch.no_grad():
    expected = reference.generate(torch.tensor(prompt), max_new_tokens=12,
                                  do_sample=False, pad_token_id=0).numpy()
  model = decoder.Decoder(config)
  apply = jax.jit(lambda t: model.apply({'params': params}, t,
                                        deterministic=True))
  tokens = prompt
  for _ in range(12):
    next_token = np.asarray(apply(jnp.asarray(tokens)))[:, -1].argmax(-1)
    tokens = np.concatenate([tokens, next_token[:, None]], axis=1)
  np.testing.assert_array_equal(tokens, expected)


def test_mismatched_checkpoints_list_every_problem(hf_gpt2):
  _, directory = hf_gpt2
  config, _ = gpt2.load(directory)
  tensors = files.read_safetensors(directory)
  del tensors['transformer.h.1.mlp.c_fc.bias']
  tensors['transformer.h.0.ln_1.weight'] = np.zeros(7, np.float32)
  tensors['transformer.extra.weight'] = np.zeros(2, np.float32)
  with pytest.raises(ValueError) as error:
    gpt2.params_from_hf(tensors, config)
  message = str(error.value)
  assert 'missing h.1.mlp.c_fc.bias (192,)' in message
  assert 'h.0.ln_1.weight: expected (48,), found (7,)' in message
  assert 'unexpected extra.weight (2,)' in message


def test_only_safetensors_are_read(tmp_path):
  (tmp_path / 'pytorch_model.bin').write_bytes(b'pickle')
  with raises_naming(FileNotFoundError, 'model.safetensors', str(tmp_path),
                     'pytorch_model.bin', 'safetensors.torch'):
    files.read_safetensors(str(tmp_path))


def test_vit_logits_match_the_reference(tmp_path):
  from transformer.interop import vit as vit_interop  # pylint: disable=g-import-not-at-top
  from transformer.models import vit  # pylint: disable=g-import-not-at-top
  torch.manual_seed(0)
  config = transformers.ViTConfig(
      image_size=32, patch_size=8, hidden_size=48, num_hidden_layers=2,
      num_attention_heads=4, intermediate_size=96, num_labels=5)
  reference = randomised(transformers.ViTForImageClassification(config))
  reference.save_pretrained(tmp_path)
  ours_config, params = vit_interop.load(str(tmp_path))
  images = np.random.default_rng(0).standard_normal((2, 32, 32, 3)).astype(
      np.float32)
  with torch.no_grad():
    expected = reference(torch.tensor(images.transpose(0, 3, 1, 2))
                         ).logits.numpy()
  ours = vit.VisionTransformer(ours_config).apply(
      {'params': params}, jnp.asarray(images), deterministic=True)
  error = np.abs(np.asarray(ours) - expected).max() / np.abs(expected).max()
  assert error < 1e-5


def _tiny_bert(kind, seed):
  """A small randomly initialised BERT of the reference implementation."""
  torch.manual_seed(seed)
  return randomised(kind(transformers.BertConfig(
      vocab_size=60, hidden_size=32, num_hidden_layers=2,
      num_attention_heads=4, intermediate_size=64,
      max_position_embeddings=24)), seed)


def test_bert_mlm_logits_and_pooled_output_match_the_reference(tmp_path):
  from transformer.interop import bert  # pylint: disable=g-import-not-at-top
  from transformer.models import encoder  # pylint: disable=g-import-not-at-top
  reference = _tiny_bert(transformers.BertForPreTraining, seed=0)
  reference.save_pretrained(tmp_path)
  ours_config, params = bert.load(str(tmp_path))
  tokens = np.random.default_rng(0).integers(1, 60, (2, 10))
  tokens[1, 7:] = 0  # padding
  types = np.zeros_like(tokens)
  types[:, 5:] = 1
  with torch.no_grad():
    output = reference(torch.tensor(tokens),
                       attention_mask=torch.tensor(tokens > 0),
                       token_type_ids=torch.tensor(types),
                       output_hidden_states=True)
  expected = output.prediction_logits.numpy()
  model = encoder.Bert(ours_config)
  ours = model.apply({'params': params}, jnp.asarray(tokens),
                     token_types=jnp.asarray(types), deterministic=True,
                     method='mlm_logits')
  real = tokens > 0
  error = (np.abs(np.asarray(ours) - expected)[real].max() /
           np.abs(expected[real]).max())
  assert error < 1e-5
  _, pooled = model.apply({'params': params}, jnp.asarray(tokens),
                          token_types=jnp.asarray(types), deterministic=True,
                          method='encode')
  with torch.no_grad():
    expected_pooled = reference.bert(
        torch.tensor(tokens), attention_mask=torch.tensor(tokens > 0),
        token_type_ids=torch.tensor(types)).pooler_output.numpy()
  np.testing.assert_allclose(pooled, expected_pooled, atol=1e-5)


def test_bert_exports_back_to_the_hugging_face_layout(tmp_path):
  from transformer.interop import bert  # pylint: disable=g-import-not-at-top
  reference = _tiny_bert(transformers.BertForMaskedLM, seed=1)
  reference.save_pretrained(tmp_path / 'published')
  ours_config, params = bert.load(str(tmp_path / 'published'))
  bert.save_hf(str(tmp_path / 'exported'), params, ours_config)
  exported = transformers.BertForMaskedLM.from_pretrained(
      tmp_path / 'exported').eval()
  tokens = torch.tensor(np.random.default_rng(1).integers(1, 60, (2, 9)))
  with torch.no_grad():
    np.testing.assert_allclose(exported(tokens).logits.numpy(),
                               reference(tokens).logits.numpy(), atol=1e-5)
  _, again = bert.load(str(tmp_path / 'exported'))
  jax.tree.map(np.testing.assert_array_equal, again, params)


def test_gpt2_exports_back_to_the_hugging_face_layout(hf_gpt2, tmp_path):
  reference, directory = hf_gpt2
  config, params = gpt2.load(directory)
  gpt2.save_hf(str(tmp_path), params, config)
  exported = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
  tokens = torch.tensor(np.random.default_rng(1).integers(0, 97, (2, 12)))
  with torch.no_grad():
    np.testing.assert_allclose(exported(tokens).logits.numpy(),
                               reference(tokens).logits.numpy(), atol=1e-5)
  _, again = gpt2.load(str(tmp_path))  # and round-trips exactly
  for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(params)):
    np.testing.assert_array_equal(a, b)
