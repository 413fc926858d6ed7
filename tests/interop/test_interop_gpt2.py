"""A converted GPT-2 workdir: a randomly initialised transformers GPT-2 with
a byte-level BPE vocabulary, converted by the command, tokenizes, scores
(logits, label-smoothed loss) as the reference does (the generate command:
e2e/test_interop_gpt2_e2e.py), and exports back to the same tensors.
Skipped without `transformers` and `torch` (`pip install -e ".[interop]"`).
"""

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import PROMPTS
from conftest import publish_gpt2
from conftest import published_and_converted
from transformer.core import losses
from transformer.interop import files
from transformer.interop import gpt2

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')
tokenizers_lib = pytest.importorskip('tokenizers')


published, converted = published_and_converted(publish_gpt2)


def test_tokenization_matches_the_reference(published, converted):
  _, reference, _ = published
  ours = converted[0].task.tokenizer
  for prompt in PROMPTS + ['naïve ✓ text\n']:
    expected = reference(prompt)['input_ids']
    ids = ours.encode(prompt, add_eos=False)
    np.testing.assert_array_equal(ours.ids.to_published(ids), expected)
    assert ours.decode(ids + [1, 5]) == prompt
    assert b''.join(ours.token_bytes(i) for i in ids) == prompt.encode()
  assert ours.encode('')[-1] == 1 and 0 not in ours.encode(PROMPTS[1])


def test_logits_and_smoothed_loss_match_the_reference(published, converted):
  model, reference, _ = published
  trainer, params, _ = converted
  tokenizer = trainer.task.tokenizer
  ids = reference(PROMPTS[1])['input_ids']
  eos = model.config.eos_token_id
  with torch.no_grad():
    hf_logits = model(torch.tensor([[eos] + ids])).logits
    hf_loss = torch.nn.functional.cross_entropy(
        hf_logits[0], torch.tensor(ids + [eos]), label_smoothing=0.1)
  ours = np.asarray(trainer.task.model.apply(
      {'params': params},
      jnp.asarray([[1] + tokenizer.ids.to_ours(ids).tolist()]),
      deterministic=True))
  gpt2_ids = tokenizer.ids.to_published(np.arange(1, tokenizer.vocab_size))
  expected = hf_logits.numpy()[..., gpt2_ids]
  error = np.abs(ours[..., 1:] - expected).max() / np.abs(expected).max()
  assert error < 1e-5
  assert (ours[..., 0] < -1e8).all()  # padding is never predicted
  targets = jnp.asarray([tokenizer.ids.to_ours(ids + [eos])])
  loss, _ = losses.smoothed_cross_entropy(jnp.asarray(ours), targets, 0.1)
  assert float(loss.mean()) == pytest.approx(float(hf_loss), rel=1e-5)


def test_export_gives_back_the_published_tensors(published, converted,
                                                 tmp_path):
  _, _, directory = published
  trainer, params, _ = converted
  gpt2.save_hf(str(tmp_path), params, trainer.task.model_config,
               trainer.task.tokenizer.ids)
  exported = files.read_safetensors(str(tmp_path))
  original = files.read_safetensors(directory)
  assert set(exported) <= set(original) | {'transformer.' + k
                                           for k in original}
  for name, value in exported.items():
    np.testing.assert_array_equal(
        value, original.get(name, original.get(name.removeprefix(
            'transformer.'))), err_msg=name)
