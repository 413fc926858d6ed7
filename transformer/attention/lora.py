"""Low-rank adapters (LoRA, Hu et al. 2021) on the attention projections,
as peft's LoRA lays them out.

A projection y = x W gains y += (alpha / r) dropout(x) A B, with A [in, r]
drawn as peft draws it (Kaiming-uniform) and B [r, out] zero, so a model
starts as its base model. Only A and B train (`is_adapter` labels them
for the optimizer); `merged` folds them into the kernels, W + (alpha / r)
A B, for export and fast generation.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import flax.linen as nn
from flax import traverse_util
import jax
import jax.numpy as jnp

# The projections that take adapters: those of `MultiHeadAttention`.
TARGETS = ('query', 'key', 'value', 'out')
# The names of an adapter's parameters inside a projection.
A, B = 'lora_a', 'lora_b'


@dataclasses.dataclass(frozen=True)
class Lora:
  """Adapters of rank `rank` on the projections named in `targets`."""
  rank: int
  alpha: float = 16.0
  dropout: float = 0.0
  targets: tuple[str, ...] = ('query', 'value')

  @property
  def scale(self) -> float:
    return self.alpha / self.rank


def from_fields(rank: int, alpha: float, dropout: float, targets: str,
                width: int) -> Lora | None:
  """The adapters a model config's `lora_*` fields ask for (None for rank
  0), checked: a rank in [1, width], a positive alpha, a dropout in [0, 1),
  and targets among `TARGETS`.

  Raises:
    ValueError: naming the field, its value and the choices.
  """
  if rank == 0:
    return None
  if not 0 < rank <= width:
    raise ValueError(f'model.lora_rank={rank} must be in [1, d_model={width}]'
                     f' (0 turns adapters off): a rank above the width '
                     f'adds nothing a full update lacks.')
  if not alpha > 0:
    raise ValueError(f'model.lora_alpha={alpha} must be positive (the '
                     f'adapters are scaled by alpha / rank).')
  if not 0 <= dropout < 1:
    raise ValueError(f'model.lora_dropout={dropout} must be in [0, 1).')
  names = tuple(t.strip() for t in targets.split(',') if t.strip())
  unknown = [t for t in names if t not in TARGETS]
  if unknown or not names:
    raise ValueError(f"model.lora_targets={targets!r} names no projection "
                     f"{unknown or ''}: choose among {', '.join(TARGETS)}, "
                     f"comma-separated (peft's default: 'query,value').")
  return Lora(rank, alpha, dropout, names)


def update(module: nn.Module, x, num_in_axes: int, out_shape, lora: Lora,
           deterministic: bool, dtype):
  """(alpha / r) dropout(x) A B for the projection `module` (which holds
  A and B as its parameters) of x [..., *in] -> [..., *out]."""
  in_shape = x.shape[-num_in_axes:]
  fan_in = math.prod(in_shape)

  def init_a(key, shape, dtype=jnp.float32):
    # torch's kaiming_uniform_(a=sqrt(5)), peft's draw: U(+-1/sqrt(fan_in)).
    bound = 1.0 / math.sqrt(fan_in)
    return nn.initializers.uniform(2 * bound)(key, shape, dtype) - bound

  a = module.param(A, init_a, (*in_shape, lora.rank))
  b = module.param(B, nn.initializers.zeros, (lora.rank, *out_shape))
  if lora.dropout and not deterministic:
    x = nn.Dropout(lora.dropout)(x, deterministic=False)
  low = jnp.tensordot(x.astype(dtype), a.astype(dtype), axes=num_in_axes)
  return lora.scale * jnp.tensordot(low, b.astype(dtype), axes=1)


def is_adapter(path: tuple[str, ...]) -> bool:
  """Whether a parameter path (a flattened tree's key) is an adapter's."""
  return path[-1] in (A, B)


def adapters(params: Any) -> Any:
  """The adapters of a parameter tree alone (what a LoRA checkpoint holds:
  the base weights are those it started from)."""
  flat = traverse_util.flatten_dict(params)
  return traverse_util.unflatten_dict(
      {path: leaf for path, leaf in flat.items() if is_adapter(path)})


def with_adapters(base: Any, trained: Any) -> Any:
  """`base` (a tree with adapters, e.g. freshly initialised ones) with the
  adapters of `trained` in their places.

  Raises:
    ValueError: when the two trees do not hold the same adapters.
  """
  flat = traverse_util.flatten_dict(base)
  given = traverse_util.flatten_dict(trained)
  expected = {path for path in flat if is_adapter(path)}
  if set(given) != expected:
    odd = sorted('/'.join(p) for p in set(given) ^ expected)
    raise ValueError(f'The adapters saved are not those of this model '
                     f'(lora_rank or lora_targets changed?): {odd[:3]}')
  for path, leaf in given.items():
    if leaf.shape != flat[path].shape:
      raise ValueError(f'The adapter {"/".join(path)} is {leaf.shape}, '
                       f'this model\'s {flat[path].shape} (lora_rank '
                       f'changed?).')
  flat.update(given)
  return traverse_util.unflatten_dict(flat)


def merged(params: Any, lora: Lora) -> Any:
  """`params` with each adapter folded into its kernel, W + (alpha / r) A
  B, and the adapters removed: the base model's tree, computing what the
  adapted model computes."""
  flat = traverse_util.flatten_dict(params)
  for path in [p for p in flat if p[-1] == A]:
    a, b = flat.pop(path), flat.pop(path[:-1] + (B,))
    kernel = path[:-1] + ('kernel',)
    product = lambda a, b: jnp.tensordot(a, b, axes=1)  # over the rank
    # Scanned layers stack every parameter on leading axes.
    for _ in range(a.ndim + b.ndim - 2 - flat[kernel].ndim):
      product = jax.vmap(product)
    flat[kernel] = flat[kernel] + (lora.scale * product(a, b)).astype(
        flat[kernel].dtype)
  return traverse_util.unflatten_dict(flat)
