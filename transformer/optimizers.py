"""Optimizers and learning-rate schedules, from `config.optimizer`.

Adam (AdamW with weight decay) as Vaswani et al. and nanoGPT, or SGD with
momentum (ViT fine-tuning); schedules 'rsqrt' (the paper's), 'constant' and
'cosine' (linear warmup, cosine decay); gradient clipping by global norm.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from transformer.attention import lora
from transformer.core import ranges


def rsqrt_schedule(learning_rate: float, warmup_steps: int) -> optax.Schedule:
  """lrate = learning_rate * min(step^-0.5, step * warmup^-1.5), step >= 1.

  With learning_rate = D^-0.5 this is the schedule of Vaswani et al. (5.3).
  """
  def schedule(count):
    step = jnp.maximum(count + 1, 1).astype(jnp.float32)
    return learning_rate * jnp.minimum(step**-0.5,
                                       step * warmup_steps**-1.5)
  return schedule


def decay_mask(params: Any, skip: tuple[str, ...]) -> Any:
  """Weight-decay mask: arrays of rank >= 2 (kernels, embedding and position
  tables, as nanoGPT), not biases or LayerNorm gains, and none whose path
  matches a pattern of `skip`."""
  return jax.tree_util.tree_map_with_path(
      lambda path, x: x.ndim >= 2 and not any(
          re.search(pattern, jax.tree_util.keystr(path)) for pattern in skip),
      params)


# (field, low, high, low included, high included) of config.optimizer.
_RANGES = (('learning_rate', 0.0, math.inf, False, False),
           ('warmup_steps', 0, math.inf, True, False),
           ('b1', 0.0, 1.0, True, False), ('b2', 0.0, 1.0, True, False),
           ('eps', 0.0, math.inf, False, False),
           ('weight_decay', 0.0, math.inf, True, False),
           ('grad_clip_norm', 0.0, math.inf, True, False),
           ('end_learning_rate_ratio', 0.0, 1.0, True, True))


def _check_ranges(config: ml_collections.ConfigDict) -> None:
  """Refuses numbers out of range (a negative learning rate, b2 = 1, ...),
  naming the field and the range."""
  for name, low, high, low_in, high_in in _RANGES:
    ranges.check(f'config.optimizer.{name}', config[name], low=low,
                 high=high, low_in=low_in, high_in=high_in)


def _schedule(config: ml_collections.ConfigDict, num_steps: int
              ) -> optax.Schedule:
  """The learning rate of each step (`build` lists the schedules)."""
  if config.schedule == 'rsqrt':
    return rsqrt_schedule(config.learning_rate, config.warmup_steps)
  if config.schedule == 'constant':
    return optax.constant_schedule(config.learning_rate)
  if config.schedule not in ('cosine', 'linear'):
    raise ValueError(f"optimizer.schedule={config.schedule!r}; choose "
                     f"'rsqrt', 'constant', 'cosine' or 'linear'.")
  if config.warmup_steps >= num_steps:
    raise ValueError(
        f'optimizer.warmup_steps={config.warmup_steps} must be below '
        f'train.num_steps={num_steps} for the {config.schedule} schedule.')
  if config.schedule == 'cosine':
    return optax.warmup_cosine_decay_schedule(
        0.0, config.learning_rate, config.warmup_steps, num_steps,
        end_value=config.learning_rate * config.end_learning_rate_ratio)
  return optax.join_schedules(
      [optax.linear_schedule(0.0, config.learning_rate, config.warmup_steps),
       optax.linear_schedule(config.learning_rate, 0.0,
                             num_steps - config.warmup_steps)],
      [config.warmup_steps])


def is_adapter_path(path) -> bool:
  """Whether a jax key path (`tree_flatten_with_path`) is an adapter's."""
  return lora.is_adapter(tuple(getattr(k, 'key', k) for k in path))


def adapter_labels(params: Any) -> Any:
  """'train' for low-rank adapters (`attention.lora`), 'frozen' for the
  rest: the labels of `build(adapters_only=True)`."""
  # A parameter boxed with its logical axes (as `init` returns them) is
  # labelled whole, so that the optimizer's state mirrors the boxes.
  return jax.tree_util.tree_map_with_path(
      lambda path, _: 'train' if is_adapter_path(path) else 'frozen', params,
      is_leaf=lambda x: isinstance(x, nn.meta.AxisMetadata))


def build(config: ml_collections.ConfigDict, num_steps: int, *,
          adapters_only: bool = False
          ) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """Adam (AdamW with weight_decay > 0), or SGD with momentum b1, with the
  config's schedule, and gradient clipping if configured.

  `adapters_only` (a model with low-rank adapters, `model.lora_rank`):
  the optimizer, clipping included, sees the adapters alone and holds
  state for them alone; every other parameter stays as it is.

  Schedules: 'rsqrt' (Vaswani et al.), 'constant', 'cosine': linear
  warmup to learning_rate, then cosine decay to learning_rate *
  end_learning_rate_ratio at the last training step, and 'linear': linear
  warmup, then linear decay to 0 at the last step (BERT's fine-tuning,
  Hugging Face's default).
  """
  _check_ranges(config)
  schedule = _schedule(config, num_steps)
  if config.mu_dtype not in ('float32', 'bfloat16'):
    raise ValueError(f"optimizer.mu_dtype={config.mu_dtype!r}; choose "
                     f"'float32' or 'bfloat16'.")
  if config.name == 'sgd':
    if config.weight_decay:
      raise ValueError('optimizer.weight_decay applies to Adam only; SGD '
                       'fine-tuning runs without it.')
    optimizer = optax.sgd(schedule, momentum=config.b1 or None)
  elif config.name != 'adam':
    raise ValueError(f"optimizer.name={config.name!r}; choose 'adam' or "
                     f"'sgd'.")
  elif config.weight_decay:
    optimizer = optax.adamw(schedule, b1=config.b1, b2=config.b2,
                            eps=config.eps, mu_dtype=config.mu_dtype,
                            weight_decay=config.weight_decay,
                            mask=functools.partial(
                                decay_mask, skip=config.weight_decay_skip))
  else:
    optimizer = optax.adam(schedule, b1=config.b1, b2=config.b2,
                           eps=config.eps, mu_dtype=config.mu_dtype)
  if config.grad_clip_norm:
    optimizer = optax.chain(optax.clip_by_global_norm(config.grad_clip_norm),
                            optimizer)
  if adapters_only:
    optimizer = optax.multi_transform(
        {'train': optimizer, 'frozen': optax.set_to_zero()}, adapter_labels)
  return optimizer, schedule
