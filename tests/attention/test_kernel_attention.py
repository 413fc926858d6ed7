"""Nadaraya-Watson kernel regression as attention pooling: the weights are
the Gaussian kernel normalised over the keys, the bandwidth moves it from
nearest-neighbour to average pooling, and learning it helps (the lecture's
demo)."""

import jax
import jax.numpy as jnp
import numpy as np

from conftest import raises_naming
from transformer import attention
from transformer.tools import kernel_regression


def test_weights_are_the_normalised_gaussian_kernel():
  rng = np.random.default_rng(0)
  query, key = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 6, 3))
  value = rng.normal(size=(2, 6, 5))
  out, weights = attention.nadaraya_watson(query, key, value, bandwidth=0.7)
  distances = ((query[:, :, None] - key[:, None]) ** 2).sum(-1)
  kernel = np.exp(-distances / (2 * 0.7 ** 2))
  expected = kernel / kernel.sum(-1, keepdims=True)
  np.testing.assert_allclose(weights, expected, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, rtol=1e-6)
  np.testing.assert_allclose(out, expected @ value, rtol=1e-5, atol=1e-6)


def test_bandwidth_moves_from_nearest_key_to_the_average():
  key = np.linspace(0, 4, 5, dtype=np.float32)[:, None]
  value = np.array([[1.], [5.], [2.], [8.], [3.]], np.float32)
  query = np.array([[0.9], [3.2]], np.float32)
  near, _ = attention.nadaraya_watson(query, key, value, bandwidth=0.05)
  np.testing.assert_allclose(near[:, 0], [5., 8.], rtol=1e-4)
  far, weights = attention.nadaraya_watson(query, key, value, bandwidth=1e4)
  np.testing.assert_allclose(far[:, 0], value.mean(), rtol=1e-4)
  np.testing.assert_allclose(weights, 0.2, rtol=1e-4)


def test_masked_keys_get_no_weight():
  key = np.arange(4, dtype=np.float32)[:, None]
  mask = ~np.eye(4, dtype=bool)  # leave one out
  _, weights = attention.nadaraya_watson(key, key, key, 1.0, mask)
  np.testing.assert_array_equal(np.diagonal(weights), 0.0)
  np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, rtol=1e-6)


def test_shapes_are_checked():
  with raises_naming(ValueError, '(3,)', 'feature axis of 1'):
    attention.nadaraya_watson(np.zeros(3), np.zeros(3), np.zeros(3))
  with raises_naming(ValueError, 'same features', '(3, 2)', '(4, 1)'):
    attention.nadaraya_watson(np.zeros((3, 2)), np.zeros((4, 1)),
                              np.zeros((4, 1)))


def test_learned_bandwidth_is_differentiable():
  model = attention.KernelRegression(init_bandwidth=2.0)
  x = jnp.linspace(0, 1, 6)[:, None]
  params = model.init(jax.random.key(0), x, x, x)['params']
  np.testing.assert_allclose(jnp.exp(params['log_bandwidth']), 2.0)
  grad = jax.grad(lambda p: model.apply({'params': p}, x, x, x ** 2)[0].sum())(
      params)
  assert float(grad['log_bandwidth']) != 0.0


def test_demo_learning_the_bandwidth_beats_the_fixed_kernel_and_averaging():
  results = kernel_regression.fit(bandwidth=1.0, steps=100)
  training = results.pop('learned')
  losses = training['losses']
  assert losses[-1] < 0.6 * losses[0]  # leave-one-out error falls
  (average, fixed, learned) = results.values()
  assert learned['bandwidth'] < fixed['bandwidth']
  assert learned['test_mse'] < fixed['test_mse'] < average['test_mse']
  # A narrower kernel attends to fewer training points.
  assert learned['entropy'] < fixed['entropy'] < average['entropy']
  with raises_naming(ValueError, '--bandwidth=0.0', '1e-06'):
    kernel_regression.fit(bandwidth=0.0, steps=1)
