"""The encoder-only model (BERT): sizes, masking, heads."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import conftest
from transformer.models import encoder

# Tracing and compiling dominate, not arithmetic: `init` and `apply` run
# compiled (from the persistent cache, faster than eager calls).
_STATIC = ('deterministic', 'method')
init = jax.jit(lambda model, *args, **kwargs: model.init(*args, **kwargs),
               static_argnums=0, static_argnames=_STATIC)
apply = conftest.jit_apply()


@pytest.mark.parametrize('size,expected', [('bert-base', 109_482_240),
                                           ('bert-large', 335_141_888)])
def test_bert_parameter_counts_equal_the_reference(size, expected):
  assert encoder.param_count(encoder.config_for(size)) == expected


def test_mlm_masking_proportions():
  tokens = np.random.default_rng(0).integers(3, 1000, (400, 500))
  tokens[:, 450:] = 0  # padding is never chosen
  inputs, targets = jax.jit(lambda t, k: encoder.mask_tokens(
      t, k, vocab_size=1000, mask_id=2))(tokens, jax.random.key(0))
  inputs, targets = np.asarray(inputs), np.asarray(targets)
  chosen = targets > 0
  assert not chosen[:, 450:].any()
  assert chosen[:, :450].mean() == pytest.approx(0.15, abs=0.003)
  np.testing.assert_array_equal(targets[chosen], tokens[chosen])
  masked = (inputs == 2) & chosen
  kept = (inputs == tokens) & chosen
  replaced = chosen & ~masked & ~kept
  assert masked.sum() / chosen.sum() == pytest.approx(0.8, abs=0.01)
  # A random replacement equals the original 1 time in 997: close to 10%.
  assert kept.sum() / chosen.sum() == pytest.approx(0.1, abs=0.01)
  assert replaced.sum() / chosen.sum() == pytest.approx(0.1, abs=0.01)
  np.testing.assert_array_equal(inputs[~chosen], tokens[~chosen])


def test_padding_does_not_change_real_tokens_and_heads_have_shapes():
  config = encoder.config_for('tiny', vocab_size=50, max_length=16,
                              dropout_rate=0.0)
  model = encoder.Bert(config)
  tokens = jnp.asarray([[5, 6, 7, 8, 0, 0], [9, 10, 11, 12, 13, 14]])
  params = nn.unbox(init(model, jax.random.key(0), tokens,
                         deterministic=True, method='mlm_logits'))
  logits = apply(model, params, tokens, deterministic=True,
                 method='mlm_logits')
  assert logits.shape == (2, 6, 50)
  short = apply(model, params, tokens[:1, :4], deterministic=True,
                method='mlm_logits')
  np.testing.assert_allclose(short[0], logits[0, :4], rtol=1e-5, atol=1e-5)
  # Bidirectional: a later token changes earlier states (unlike GPT).
  changed = apply(model, params, tokens.at[1, 5].set(3), deterministic=True,
                  method='mlm_logits')
  assert np.abs(np.asarray(changed[1, 0] - logits[1, 0])).max() > 1e-4
  # The classifier starts as BERT's: normal with std 0.02, zero bias.
  classifier = nn.unbox(init(model, jax.random.key(0), tokens,
                             deterministic=True, method='classify'))
  head = classifier['params']['classifier']
  assert 0.01 < float(np.std(head['kernel'])) < 0.03
  np.testing.assert_array_equal(head['bias'], 0)
