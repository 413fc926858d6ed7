"""Matmul FLOPs of a traced program, counted on its jaxpr.

XLA's own count (`Compiled.cost_analysis`) visits a loop's body once, so
for a model whose layers are scanned it counts one layer. The jaxpr knows
every scan's length: each `dot_general` and convolution counts 2 x
multiply-adds, a scan's body `length` times, the cheaper branch of a
`cond` (the count bounds the step's time from below), and every nested call (jit, remat, custom derivatives) in full. The
optimizer's and the softmax's elementwise work is left out, as in every MFU
figure, and masked attention counts in full, as the kernels compute it.
"""

from __future__ import annotations

import math
from typing import Any

import jax
from jax.extend import core


def _dot_flops(eqn) -> float:
  (contract, _), _ = eqn.params['dimension_numbers']
  lhs = eqn.invars[0].aval.shape
  out = eqn.outvars[0].aval.shape
  return 2.0 * math.prod(out) * math.prod(lhs[d] for d in contract)


def _conv_flops(eqn) -> float:
  rhs = eqn.invars[1].aval.shape
  numbers = eqn.params['dimension_numbers']
  out_features = rhs[numbers.rhs_spec[0]]
  # Every output element: the kernel's window over its input features.
  per_output = math.prod(rhs) / out_features
  return 2.0 * math.prod(eqn.outvars[0].aval.shape) * per_output


def _jaxprs(value: Any):
  """The jaxprs inside an equation parameter (a jaxpr, a closed jaxpr, or
  a tuple of them: cond's branches)."""
  if isinstance(value, core.ClosedJaxpr):
    yield value.jaxpr
  elif isinstance(value, core.Jaxpr):
    yield value
  elif isinstance(value, (tuple, list)):
    for item in value:
      yield from _jaxprs(item)


def jaxpr_flops(jaxpr: core.Jaxpr) -> float:
  """Matmul FLOPs of one execution of `jaxpr` (module docstring)."""
  total = 0.0
  for eqn in jaxpr.eqns:
    name = eqn.primitive.name
    if name == 'dot_general':
      total += _dot_flops(eqn)
    elif name == 'conv_general_dilated':
      total += _conv_flops(eqn)
    elif name == 'cond':  # the cheaper branch: the count is a lower bound
      total += min(jaxpr_flops(branch.jaxpr)
                   for branch in eqn.params['branches'])
    elif name == 'scan':
      total += eqn.params['length'] * jaxpr_flops(eqn.params['jaxpr'].jaxpr)
    else:
      # pjit, remat, custom_jvp/vjp calls, while (its body once: its trip
      # count is not static; the models here loop with scan).
      for value in eqn.params.values():
        for inner in _jaxprs(value):
          total += jaxpr_flops(inner)
  return total


def traced_flops(traced: jax.stages.Traced) -> float:
  """Matmul FLOPs of a `jax.jit(f).trace(...)`."""
  return jaxpr_flops(traced.jaxpr.jaxpr)
