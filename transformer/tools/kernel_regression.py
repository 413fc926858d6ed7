"""Attention without learning: Nadaraya-Watson kernel regression, the
lecture's demo.

    python -m transformer.tools.kernel_regression [--output_dir=DIR]

Fits f(x) = 2 sin(x) + x^0.8 from 50 noisy samples on [0, 5] (noise
N(0, 0.5^2)) three ways and scores each against f on 50 test points:
average pooling (every training y weighted alike), Nadaraya-Watson pooling
with a fixed Gaussian kernel (`attention.nadaraya_watson`, bandwidth
--bandwidth), and the same with its bandwidth learned
(`attention.KernelRegression`) by minimising the leave-one-out squared
error on the training points (each point predicted from the others: with
itself among the keys, h -> 0 would fit the noise exactly). Prints each
method's test error, bandwidth and mean attention entropy, and writes
DIR/kernel_regression.png: the fitted curves and each kernel's weights
(test points x training points); a figure already there is refused before
any work unless --overwrite.
"""

from __future__ import annotations

import os
import sys

from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from transformer import attention
from transformer.insight import plots
from transformer.tools import cli

NUM_TRAIN = 50


def define_flags() -> None:
  """The command's flags, defined when it runs (`run`)."""
  flags.DEFINE_string('output_dir', '/tmp/kernel_regression',
                      'Where the figure is written.')
  flags.DEFINE_float('bandwidth', 1.0, 'The fixed kernel\'s bandwidth h '
                     f'({BANDWIDTH_RANGE[0]:g} to {BANDWIDTH_RANGE[1]:g}).')
  flags.DEFINE_integer('steps', 200, 'Adam steps learning the bandwidth.')
  flags.DEFINE_integer('seed', 0, 'Seed of the training sample.')
  cli.define_overwrite_flag()


def target(x: np.ndarray) -> np.ndarray:
  return 2 * np.sin(x) + x ** 0.8


def sample(seed: int) -> tuple[np.ndarray, ...]:
  """(x_train sorted, y_train noisy, x_test, f(x_test)), float32."""
  rng = np.random.default_rng(seed)
  x_train = np.sort(rng.uniform(0, 5, NUM_TRAIN)).astype(np.float32)
  y_train = (target(x_train) + rng.normal(0, 0.5, NUM_TRAIN)).astype(
      np.float32)
  x_test = np.arange(0, 5, 0.1, dtype=np.float32)
  return x_train, y_train, x_test, target(x_test).astype(np.float32)


def learn_bandwidth(x_train: np.ndarray, y_train: np.ndarray, init: float,
                    steps: int) -> tuple[float, list[float]]:
  """The bandwidth minimising the leave-one-out error; and the loss before
  each step."""
  model = attention.KernelRegression(init_bandwidth=init)
  points, values = jnp.asarray(x_train)[:, None], jnp.asarray(y_train)[:, None]
  others = ~jnp.eye(len(x_train), dtype=bool)  # leave each point out

  def loss_fn(params):
    predicted, _ = model.apply({'params': params}, points, points, values,
                               others)
    return jnp.mean((predicted - values) ** 2)

  optimizer = optax.adam(0.05)
  params = model.init(jax.random.key(0), points, points, values, others)[
      'params']

  @jax.jit
  def step(params, state):
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, state = optimizer.update(grads, state)
    return optax.apply_updates(params, updates), state, loss

  state, losses = optimizer.init(params), []
  for _ in range(steps):
    params, state, loss = step(params, state)
    losses.append(float(loss))
  return float(jnp.exp(params['log_bandwidth'])), losses


def entropy(weights: np.ndarray) -> float:
  """Mean entropy in nats of the rows of [T, S] weights."""
  return float(-np.sum(weights * np.log(np.maximum(weights, 1e-12)),
                       -1).mean())


# The bandwidths worth trying: at 1e-3 the kernel already returns the
# nearest training point's value, at 1e4 the mean of all (to float32
# precision, on [0, 5]); far beyond, float32 overflows: the learned kernel's
# gradient is NaN from h = 1e-18, and 1e308 is inf in float32.
BANDWIDTH_RANGE = (1e-6, 1e6)


def _check_flags(bandwidth: float, steps: int, seed: int = 0) -> None:
  cli.check_flag('steps', steps, at_least=1)
  cli.check_flag('seed', seed, at_least=0)
  cli.check_flag('bandwidth', bandwidth, at_least=BANDWIDTH_RANGE[0],
                 at_most=BANDWIDTH_RANGE[1])


def fit(*, bandwidth: float = 1.0, steps: int = 200, seed: int = 0
        ) -> dict[str, dict]:
  """Each method's curve, weights, bandwidth and test error."""
  _check_flags(bandwidth, steps, seed)
  x_train, y_train, x_test, truth = sample(seed)
  learned, losses = learn_bandwidth(x_train, y_train, bandwidth, steps)
  results = {}
  uniform = np.full((len(x_test), len(x_train)), 1 / len(x_train))
  results['average pooling'] = dict(bandwidth=float('inf'), weights=uniform,
                                    curve=uniform @ y_train)
  for name, h in ((f'fixed kernel, h={bandwidth:g}', bandwidth),
                  (f'learned kernel, h={learned:.3f}', learned)):
    curve, weights = attention.nadaraya_watson(
        jnp.asarray(x_test)[:, None], jnp.asarray(x_train)[:, None],
        jnp.asarray(y_train)[:, None], h)
    results[name] = dict(bandwidth=h, weights=np.asarray(weights),
                         curve=np.asarray(curve)[:, 0])
  for result in results.values():
    result['test_mse'] = float(np.mean((result['curve'] - truth) ** 2))
    result['entropy'] = entropy(result['weights'])
  results['learned'] = dict(losses=losses, sample=(x_train, y_train, x_test,
                                                   truth))
  return results


def main(argv):
  cli.no_arguments(argv)
  args = flags.FLAGS
  figure = os.path.join(args.output_dir, 'kernel_regression.png')
  outputs = [cli.Output('--output_dir', figure)]
  _check_flags(args.bandwidth, args.steps, args.seed)
  cli.check_outputs(outputs, overwrite=args.overwrite)
  with cli.Writing(outputs, overwrite=args.overwrite) as writing:
    _report(fit(bandwidth=args.bandwidth, steps=args.steps, seed=args.seed),
            writing.path(figure))
  print(f'Written: {figure}', file=sys.stderr)


def _report(results: dict[str, dict], figure: str) -> None:
  """Prints each method's scores and plots them into `figure`."""
  training = results.pop('learned')
  x_train, y_train, x_test, _ = training['sample']
  print(f'{"method":<30} {"test MSE":>9} {"entropy (nats)":>15}')
  for name, result in results.items():
    print(f'{name:<30} {result["test_mse"]:>9.4f} '
          f'{result["entropy"]:>15.3f}')
  losses = training['losses']
  print(f'leave-one-out training MSE {losses[0]:.4f} -> {losses[-1]:.4f} '
        f'over {len(losses)} steps')
  plots.plot_kernel_regression(
      x_train, y_train, x_test,
      {'truth': target(x_test), **{n: r['curve'] for n, r in results.items()}},
      {n: r['weights'] for n, r in results.items() if 'kernel' in n},
      figure)


def run() -> None:
  """The `transformer-kernel-regression` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
