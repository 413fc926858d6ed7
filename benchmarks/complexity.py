"""Vaswani et al. 2017, Table 1, measured: self-attention, recurrence,
convolution and restricted self-attention as one layer of width d over n
positions.

    python benchmarks/complexity.py [--d=512 --lengths=64,...,4096 --plot=FILE]

For each layer: the paper's per-layer complexity, sequential operations and
maximum path length; the measured reach of one layer (the input positions
s whose gradient d y_t / d x_s is not zero, for an output t in the middle:
a path length of 1 to each of them), hence the layers a path between the
first and last of n positions needs; and the measured time of one forward
pass (jitted, median of --repeats) at every length. Layers:
  self-attention             8 heads of d / 8 (`attention.MultiHeadAttention`)
  recurrent                  one LSTM layer of d units (`nn.RNN`), in order
  convolution                kernel --kernel, 2d channels and a GLU (ConvS2S)
  restricted self-attention  each block of --window queries attends to its
                             own block and the previous one (r = window)
"""

import math

from absl import app
from absl import flags
import flax.linen as nn
import jax
import jax.numpy as jnp
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
import numpy as np

import timing
from transformer import attention

_D = flags.DEFINE_integer('d', 512, 'Representation width d.')
_LENGTHS = flags.DEFINE_list('lengths', [str(2**i) for i in range(6, 13)],
                             'Sequence lengths n.')
_KERNEL = flags.DEFINE_integer('kernel', 3, 'Convolution kernel width k.')
_WINDOW = flags.DEFINE_integer('window', 64, 'Restricted attention block r.')
_BATCH = flags.DEFINE_integer('batch', 1, 'Sequences per call.')
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Timed calls (median).')
_PLOT = flags.DEFINE_string('plot', None, 'Write the time plot here (PNG).')

PAPER = {  # Table 1: complexity per layer, sequential ops, max path length
    'self-attention': ('O(n^2 d)', 'O(1)', 'O(1)'),
    'recurrent': ('O(n d^2)', 'O(n)', 'O(n)'),
    'convolution': ('O(k n d^2)', 'O(1)', 'O(log_k n) dilated, O(n/k)'),
    'restricted self-attention': ('O(r n d)', 'O(1)', 'O(n/r)'),
}


class SelfAttention(nn.Module):
  d: int

  @nn.compact
  def __call__(self, x):
    return attention.MultiHeadAttention(
        num_heads=8, implementation='einsum')(x, x, deterministic=True)


class Recurrent(nn.Module):
  d: int

  @nn.compact
  def __call__(self, x):
    return nn.RNN(nn.OptimizedLSTMCell(self.d))(x)


class Convolution(nn.Module):
  d: int
  kernel: int

  @nn.compact
  def __call__(self, x):
    return nn.glu(nn.Conv(2 * self.d, (self.kernel,), padding='SAME')(x),
                  axis=-1)


class RestrictedSelfAttention(nn.Module):
  """Blocks of r queries over their own and the previous block's keys."""
  d: int
  window: int

  @nn.compact
  def __call__(self, x):
    b, n, d = x.shape
    r = self.window
    if n % r:
      raise ValueError(f'n={n} must be a multiple of --window={r}.')
    heads, h = 8, d // 8
    project = lambda name: nn.DenseGeneral((heads, h), name=name)(x).reshape(
        b, n // r, r, heads, h)
    q, k, v = project('query'), project('key'), project('value')
    shift = lambda t: jnp.concatenate([jnp.zeros_like(t[:, :1]), t[:, :-1]],
                                      axis=1)
    k = jnp.concatenate([shift(k), k], axis=2)  # [B, n/r, 2r, N, H]
    v = jnp.concatenate([shift(v), v], axis=2)
    first = jnp.arange(n // r)[None, :, None, None] > 0  # block 0 has no past
    keep = jnp.concatenate([jnp.broadcast_to(first, (1, n // r, 1, r)),
                            jnp.ones((1, n // r, 1, r), bool)], axis=-1)
    scores = jnp.einsum('bcqnh,bcknh->bcnqk', q, k) / math.sqrt(h)
    weights = jax.nn.softmax(jnp.where(keep[:, :, None], scores, -1e9), -1)
    out = jnp.einsum('bcnqk,bcknh->bcqnh', weights, v).reshape(b, n, heads, h)
    return nn.DenseGeneral(d, axis=(-2, -1), name='out')(out)


def layers_of(d: int, kernel: int, window: int) -> dict[str, nn.Module]:
  return {'self-attention': SelfAttention(d), 'recurrent': Recurrent(d),
          'convolution': Convolution(d, kernel),
          'restricted self-attention': RestrictedSelfAttention(d, window)}


def reach(layer: nn.Module, params, x: jax.Array) -> tuple[int, int]:
  """(furthest input before, furthest after) output t = n // 2 depends
  on: where the gradient of y_t with respect to x_s is not zero."""
  t = x.shape[1] // 2
  grad = jax.jit(jax.grad(lambda x: layer.apply(params, x)[0, t].sum()))(x)
  reached = np.flatnonzero(np.abs(np.asarray(grad[0])).sum(-1) > 0)
  return t - int(reached.min()), int(reached.max()) - t


def layers_to_join(before: int, after: int, n: int) -> int:
  """Stacked layers for position n - 1 to depend on position 0 (or the
  reverse, for a causal layer): 1 if one layer reaches that far."""
  span = max(before, after)
  return 1 if span >= n - 1 - n // 2 and before >= n // 2 else math.ceil(
      (n - 1) / span)


def _fitting(lengths: list[int]) -> int:
  """The largest power of two up to 64 that divides every length."""
  return max(r for r in (1, 2, 4, 8, 16, 32, 64)
             if all(n % r == 0 for n in lengths if n > 0))


def measure(d: int, lengths: list[int], kernel: int, window: int,
            batch: int, repeats: int) -> dict[str, dict]:
  results = {}
  for name, layer in layers_of(d, kernel, window).items():
    times, reaches = [], []
    for n in lengths:
      x = jax.random.normal(jax.random.key(1), (batch, n, d))
      params = jax.jit(layer.init)(jax.random.key(0), x)
      reaches.append(reach(layer, params, x))
      times.append(timing.median_seconds(jax.jit(layer.apply), params, x,
                                         repeats=repeats))
    results[name] = dict(reach=reaches, times=times, path=[
        layers_to_join(*r, n) for r, n in zip(reaches, lengths)])
  return results


def main(argv):
  del argv
  d, lengths = _D.value, [int(n) for n in _LENGTHS.value]
  misfits = [n for n in lengths if n < 1 or n % _WINDOW.value]
  if _WINDOW.value < 1 or misfits:  # before anything compiles
    raise app.UsageError(
        f'--window={_WINDOW.value} must be >= 1 and divide every --lengths '
        f'value (not {", ".join(map(str, misfits))}): restricted attention '
        f'works in blocks of r queries; e.g. --window={_fitting(lengths)}.')
  results = measure(d, lengths, _KERNEL.value, _WINDOW.value, _BATCH.value,
                    _REPEATS.value)
  print(f'One layer, d={d}, batch {_BATCH.value}, k={_KERNEL.value}, '
        f'r={_WINDOW.value}, float32, {jax.devices()[0].device_kind}; '
        f'reach of output t = n/2 (inputs s with d y_t / d x_s != 0) and '
        f'the layers a path between positions 1 and n needs, at '
        f'n={lengths[-1]} (the recurrent layer joins them in one layer '
        f'through n - 1 sequential steps)')
  header = (f'{"layer":<27}{"complexity":>12}{"sequential":>11}'
            f'{"max path":>28}{"reach":>14}{"layers":>8}')
  print(header)
  print('-' * len(header))
  vanished = False
  for name, r in results.items():
    complexity, sequential, path = PAPER[name]
    before, after = r['reach'][-1]
    reached = f'-{before}..+{after}'
    # The recurrence reaches every earlier input; a shorter measured reach
    # is its gradient vanishing (exactly 0 in float32), worth showing.
    if name == 'recurrent' and before < lengths[-1] // 2:
      reached, vanished = reached + '*', True
    print(f'{name:<27}{complexity:>12}{sequential:>11}{path:>28}'
          f'{reached:>14}{r["path"][-1]:>8}')
  if vanished:
    print('* every earlier input is on the recurrent path, but at this '
          'initialisation the gradient through more steps underflows to 0 '
          'in float32 (vanishing gradients); layers counts layers of the '
          'measured reach.')
  print()
  header = f'{"ms per layer":<27}' + ''.join(f'{n:>9,}' for n in lengths)
  print(header)
  print('-' * len(header))
  for name, r in results.items():
    print(f'{name:<27}' + ''.join(f'{1e3 * t:>9.2f}' for t in r['times']))
  if _PLOT.value:
    figure = Figure(figsize=(5.5, 4), layout='constrained')
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for name, r in results.items():
      axes.loglog(lengths, [1e3 * t for t in r['times']], 'o-', label=name)
    axes.set_xlabel('sequence length n')
    axes.set_ylabel(f'ms per layer (d={d})')
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3, which='both')
    figure.savefig(_PLOT.value, dpi=100)
    print(f'Plot: {_PLOT.value}')


if __name__ == '__main__':
  app.run(main)
