"""BERT's next-sentence prediction: the pairs cut from rows of text keep A
and B from the right rows, the labels say which, token types split at the
first [SEP], and its head starts near chance. Pretraining with it:
e2e/test_next_sentence_e2e.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import load_experiment
from transformer.models import encoder
from transformer.tasks import masked_language_modeling

EOS = 1


def rows(seed=0, count=64, width=24):
  rng = np.random.default_rng(seed)
  tokens = np.zeros((count, width), np.int32)
  for r in range(count):
    length = rng.integers(2, width + 1)
    tokens[r, 0] = EOS
    tokens[r, 1:length] = 100 * (r + 1) + np.arange(1, length)  # row-unique
  return tokens


def segments(pair):
  """A and B of a [CLS] A [SEP] B [SEP] row."""
  seps = np.flatnonzero(pair == EOS)
  return pair[1:seps[1]], pair[seps[1] + 1:seps[2]]


def test_pairs_take_b_from_their_own_row_or_the_next():
  tokens = rows()
  pairs, labels, valid = jax.jit(
      lambda t, k: encoder.next_sentence_pairs(t, k, sep_id=EOS))(
          jnp.asarray(tokens), jax.random.key(3))
  pairs, labels, valid = map(np.asarray, (pairs, labels, valid))
  lengths = (tokens > 0).sum(1)
  np.testing.assert_array_equal(valid, lengths >= 4)
  assert 0.3 < labels[valid].mean() < 0.7 and not labels[~valid].any()
  np.testing.assert_array_equal(pairs[~valid], tokens[~valid])
  for r in np.flatnonzero(valid):
    a, b = segments(pairs[r])
    assert len(a) >= 1 and (pairs[r] > 0).sum() <= tokens.shape[1]
    # A starts the row; B is the rest of its own row or a piece of the next.
    np.testing.assert_array_equal(a, tokens[r, 1:1 + len(a)])
    source = r if labels[r] == 0 else (r + 1) % len(tokens)
    if labels[r] == 0:
      np.testing.assert_array_equal(b, tokens[r, 1 + len(a):1 + len(a)
                                              + len(b)])
    else:
      assert len(b) == 0 or (b // 100 == source + 1).all()
    types = np.asarray(encoder.pair_token_types(pairs[r:r + 1], EOS, EOS))[0]
    assert (types[:len(a) + 2] == 0).all() and (
        types[len(a) + 2:len(a) + 3 + len(b)] == 1).all()


def test_next_sentence_head_starts_near_chance(tmp_path):
  # BERT's 0.02 initialisation of the pooler and the head: a next-sentence
  # loss that starts at ln 2 with small gradients, rather than one whose
  # noise swamps the masked-LM gradient early in pretraining.
  config = load_experiment('bert_mlm', 'nsp,runlocal')
  task = masked_language_modeling.MaskedLanguageModelingTask(
      config, str(tmp_path))
  params = task.init(jax.random.key(0))
  for name in ('pooler', 'next_sentence'):
    assert np.std(params[name]['kernel']) == pytest.approx(0.02, rel=0.2)
  batch = next(task.train_iter(0))
  _, sums = task.loss(params, batch, None, deterministic=True)
  nsp = sums['nsp_loss'][0] / sums['nsp_loss'][1]
  assert abs(float(nsp) - np.log(2)) < 0.02
