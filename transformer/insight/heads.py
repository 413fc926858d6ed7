"""Which attention heads matter: head importance as Michel et al. 2019
("Are Sixteen Heads Really Better than One?") define it, what each head
attends to, and the task's metrics as the least important heads are
pruned (`transformer.tools.heads` is the command).

A head's importance is the expected |dL/d xi_h| of a gate xi_h on its
output, at xi = 1, over the evaluation batches. Scaling head h's output by
xi scales its rows of the output projection W_O, so the gradient is
<W_O[h], dL/dW_O[h]> from the ordinary parameter gradient of the task's
loss: no gate in the model, any task and model family with multi-head
attention (MT encoder and decoder, GPT, BERT, ViT, ViLBERT). Scores are
normalised per layer (L2), as in the paper, and heads are then pruned
globally, least important first (pruning a head zeroes its rows of W_O:
exactly a gate of 0). `restored` arguments are `workdir.restore`'s.

Also what each head attends to (the lectures' "what does multi-head
attention learn"): the mean entropy of its weights and, for
self-attention, the mean distance between a query and the keys it attends
to (`head_patterns`).
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Callable, Sequence

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer import attention
from transformer import sharding
from transformer import storage
from transformer.insight import plots

_PROJECTIONS = ('query', 'key', 'value', 'out')
# What `write_report` writes (entropy and distance only with patterns).
REPORT_FILES = ('heads.md', 'importance.png', 'pruning.png', 'entropy.png',
                'distance.png')


def attention_layers(params: Any) -> list[tuple[str, ...]]:
  """Paths of the multi-head attention modules in a parameter tree (those
  with query, key, value and out projections), in the order the model
  created them."""
  found = []

  def walk(node: Any, path: tuple[str, ...]) -> None:
    if all(name in node for name in _PROJECTIONS):
      found.append(path)
      return
    for key, value in node.items():
      if hasattr(value, 'items'):
        walk(value, path + (key,))

  walk(params, ())
  return found


def _out_kernel(params: Any, path: tuple[str, ...]) -> Any:
  for name in path:
    params = params[name]
  return params['out']['kernel']  # [*stacked layers, N, H, D]


def _layer_names(params: Any, paths: Sequence[tuple[str, ...]]) -> list[str]:
  """One name per layer of heads: the module's path, with the index of a
  scanned layer (stacked kernels) spelled out."""
  names = []
  for path in paths:
    stack = _out_kernel(params, path).shape[:-3]
    name = '/'.join(path)
    names += [name] if not stack else [
        f'{name}[{",".join(map(str, i))}]' for i in np.ndindex(*stack)]
  return names


def _summed(restored: Any, fn: Any, batches: int) -> Any:
  """fn(params, batch) summed over the evaluation batches (the first
  `batches`; 0: all), or None when there are none."""
  total = None
  eval_batches = restored.task.eval_batches()
  if batches:
    eval_batches = itertools.islice(eval_batches, batches)
  with restored.active():
    for batch in eval_batches:
      found = fn(restored.params, sharding.global_batch(batch, restored.mesh))
      total = found if total is None else jax.tree.map(jnp.add, total, found)
  return total


def head_importance(restored: Any, *, batches: int = 0
                    ) -> tuple[list[str], np.ndarray]:
  """Layer names and [layers, heads] importance |<W_O[h], dL/dW_O[h]>|
  summed over the evaluation batches (the first `batches`; 0: all), each
  layer's scores divided by their L2 norm."""
  task, params = restored.task, restored.params
  paths = attention_layers(params)
  if not paths:
    family = restored.config.model.get('family', '')
    how = {'rnn': 'an RNN encoder-decoder attends with one additive or dot '
                  'head',
           'convs2s': 'ConvS2S attends with one dot-product head per '
                      'decoder layer'}.get(family, 'it has one head or none')
    raise ValueError(f'This model has no multi-head attention ({how}): no '
                     'heads to score or prune.')

  @jax.jit
  def scores(params, batch):
    grads = jax.grad(lambda p: task.loss(p, batch, None,
                                         deterministic=True)[0])(params)
    return [jnp.abs(jnp.sum(_out_kernel(params, path).astype(jnp.float32)
                            * _out_kernel(grads, path), axis=(-2, -1)))
            for path in paths]

  total = _summed(restored, scores, batches)
  if total is None:
    raise ValueError('The task has no evaluation batches to score heads '
                     'on.')
  # One row per layer of heads; layers with fewer heads (e.g. ViLBERT's
  # two streams) are padded with NaN, never pruned.
  rows = [row for s in total for row in np.asarray(s).reshape(
      -1, np.shape(s)[-1])]
  importance = np.full((len(rows), max(len(r) for r in rows)), np.nan)
  for i, row in enumerate(rows):
    importance[i, :len(row)] = row / max(float(np.linalg.norm(row)), 1e-30)
  return _layer_names(params, paths), importance


def head_patterns(restored: Any, *, batches: int = 0
                  ) -> dict[str, dict[str, np.ndarray]]:
  """What each head attends to ('what does multi-head attention learn'),
  over the evaluation batches as the task's loss runs the model: per
  attention layer, in the order the layers ran, the mean 'entropy' [N] (in
  nats) of its real queries' weights, and for self-attention the mean
  'distance' [N] in positions between a query and the keys it attends to,
  sum_s w_ts |t - s| (for a ViT, positions in the patch sequence). A query
  counts as real when it attends to anything and, in self-attention, to
  itself (a padding query's own key is masked); a causal decoder's
  self-attention masks no padding, so there the batch's 'targets' (or
  'inputs', 'tokens') > 0 tell its real queries, as 'targets' do for
  cross-attention from a decoder."""
  task = restored.task

  def record(captured):
    def intercept(next_fun, args, kwargs, context):
      if (not isinstance(context.module, attention.MultiHeadAttention)
          or context.method_name != '__call__'
          or kwargs.get('return_weights')):
        return next_fun(*args, **kwargs)
      out, weights = next_fun(*args, **{**kwargs, 'return_weights': True})
      self_attention = (len(args) < 2 or args[1] is None) and (
          kwargs.get('inputs_kv') is None)
      unmasked_causal = (kwargs.get('mask') is None
                         and bool(kwargs.get('causal')))
      captured.append(('/'.join(context.module.scope.path), weights,
                       self_attention, unmasked_causal))
      return out
    return intercept

  names = []  # in the order the layers ran, filled when `sums` traces

  @jax.jit
  def sums(params, batch):
    captured = []
    with nn.intercept_methods(record(captured)):
      task.loss(params, batch, None, deterministic=True)
    result = {}
    for name, weights, self_attention, unmasked_causal in captured:
      weights = weights.astype(jnp.float32)  # [B, N, T, S]
      b, _, t, s = weights.shape
      real = weights.sum(-1) > 0
      if self_attention:
        real &= jnp.diagonal(weights, axis1=-2, axis2=-1) > 0
      if unmasked_causal or not self_attention:
        keys = ('targets', 'inputs', 'tokens') if self_attention else (
            'targets',)
        tokens = next((batch[k] for k in keys
                       if k in batch and batch[k].shape == (b, t)), None)
        if tokens is not None:
          real &= (tokens > 0)[:, None, :]
      entropy = -jnp.sum(jnp.where(weights > 0, weights * jnp.log(
          jnp.where(weights > 0, weights, 1.0)), 0.0), -1)
      layer = {'count': real.sum((0, 2)),
               'entropy': jnp.where(real, entropy, 0).sum((0, 2))}
      if self_attention:
        gap = jnp.abs(jnp.arange(t)[:, None] - jnp.arange(s)[None])
        distance = jnp.sum(weights * gap, -1)
        layer['distance'] = jnp.where(real, distance, 0).sum((0, 2))
      # A layer run twice in one loss (e.g. shared) is summed.
      result[name] = (layer if name not in result else
                      jax.tree.map(jnp.add, result[name], layer))
    names[:] = list(result)
    return [result[name] for name in names]

  try:
    total = _summed(restored, sums, batches)
  except jax.errors.UnexpectedTracerError as e:
    raise ValueError(
        'Attention weights cannot be read layer by layer from a model with '
        'scanned or rematerialised layers (model.scan_layers, model.remat): '
        'they stay inside the transformation.') from e
  if total is None:
    raise ValueError('The task has no evaluation batches to look at.')
  return {name: {key: np.asarray(value) / np.maximum(
      np.asarray(layer['count']), 1) for key, value in layer.items()
                 if key != 'count'} for name, layer in zip(names, total)}


def without_heads(params: Any, pruned: np.ndarray) -> Any:
  """`params` with the heads where `pruned` [layers, heads] is True cut off:
  their rows of the output projection zeroed (the arrays of other
  parameters shared, not copied)."""
  params = flax.core.unfreeze(params)
  row = 0
  for path in attention_layers(params):
    node = params
    for name in path:
      node = node[name]
    kernel = node['out']['kernel']
    stack, heads = kernel.shape[:-3], kernel.shape[-3]
    count = int(np.prod(stack, dtype=int))
    keep = ~pruned[row:row + count, :heads].reshape(*stack, heads)
    node['out']['kernel'] = kernel * jnp.asarray(
        keep, kernel.dtype)[..., None, None]
    row += count
  return params


def prune_heads(params: Any, importance: np.ndarray,
                evaluate: Callable[[Any, str], dict[str, float]], *,
                steps: int = 10, label: str = 'heads'
                ) -> list[dict[str, float]]:
  """`evaluate(params, label)` (the trainer's: loss metrics, then the
  task's own) with k/steps of all heads pruned, least important first, for
  k = 0 .. steps - 1; each row also holds 'pruned' (fraction) and 'heads'
  (heads kept)."""
  real = np.flatnonzero(~np.isnan(importance))  # padding is no head
  order = real[np.argsort(importance.flat[real], kind='stable')]
  total = len(real)
  rows = []
  for k in range(steps):
    count = total * k // steps
    pruned = np.zeros(importance.size, bool)
    pruned[order[:count]] = True
    cut = without_heads(params, pruned.reshape(importance.shape))
    result = {'pruned': count / total, 'heads': total - count,
              **evaluate(cut, f'{label}_pruned{count}')}
    rows.append(result)
    print(f'{count} of {total} heads pruned: ' + '  '.join(
        f'{k} {v:.4g}' for k, v in result.items()
        if k not in ('pruned', 'heads')), flush=True)
  return rows


def write_report(names: Sequence[str], importance: np.ndarray,
                 rows: Sequence[dict[str, float]], folder: str,
                 patterns: dict[str, dict[str, np.ndarray]] | None = None
                 ) -> str:
  """heads.md, importance.png and pruning.png in `folder` (with `patterns`
  also their tables and patterns.png); the tables' text."""
  os.makedirs(folder, exist_ok=True)
  if patterns:  # the order the layers ran, not the parameters' (sorted)
    ran = {name: i for i, name in enumerate(patterns)}
    order = sorted(range(len(names)),
                   key=lambda i: (ran.get(names[i], len(ran)), i))
    names, importance = [names[i] for i in order], importance[order]
  heads = importance.shape[-1]
  lines = ['Head importance (Michel et al. 2019), normalised per layer:', '',
           '| layer | ' + ' | '.join(f'head {h}' for h in range(heads)) + ' |',
           '|---|' + '---|' * heads]
  lines += [f'| {name} | ' + ' | '.join(
      '-' if np.isnan(v) else f'{v:.3f}' for v in row) + ' |'
            for name, row in zip(names, importance)]
  keys = [k for k in rows[0] if k not in ('pruned', 'heads')]
  lines += ['', 'Pruning the least important heads first:', '',
            '| pruned | heads kept | ' + ' | '.join(keys) + ' |',
            '|---|---|' + '---|' * len(keys)]
  number = lambda v: f'{v:.4g}' if abs(v) >= 1e-6 else '0'
  lines += [f'| {row["pruned"]:.0%} | {row["heads"]} | ' + ' | '.join(
      number(row[k]) for k in keys) + ' |' for row in rows]
  for key, what in (('entropy', 'Mean entropy of the attention weights '
                                '(nats; low: a head looks at few keys):'),
                    ('distance', 'Mean distance attended over, in '
                                 'positions (self-attention):')):
    found = {n: p[key] for n, p in (patterns or {}).items() if key in p}
    if found:
      width = max(len(v) for v in found.values())
      lines += ['', what, '',
                '| layer | ' + ' | '.join(f'head {h}' for h in range(width))
                + ' |', '|---|' + '---|' * width]
      lines += [f'| {n} | ' + ' | '.join(f'{v:.2f}' for v in values) + ' |'
                for n, values in found.items()]
      grid = np.full((len(found), width), np.nan)
      for i, values in enumerate(found.values()):
        grid[i, :len(values)] = values
      top = max(float(np.nanmax(grid)), 1e-12)
      plots.plot_attention(grid / top, list(found),
                           [str(h) for h in range(width)],
                           os.path.join(folder, f'{key}.png'),
                           titles=[f'{key} per head (1 = {top:.2f})'])
  text = '\n'.join(lines) + '\n'
  storage.write_atomically(os.path.join(folder, 'heads.md'), text)
  plots.plot_attention(importance / max(float(np.nanmax(importance)), 1e-12),
                       names, [str(h) for h in range(heads)],
                       os.path.join(folder, 'importance.png'),
                       titles=['head importance (layer-normalised)'])
  plots.plot_curves([row['pruned'] for row in rows],
                    {k: [row[k] for row in rows] for k in keys},
                    os.path.join(folder, 'pruning.png'),
                    xlabel='fraction of heads pruned')
  return text
