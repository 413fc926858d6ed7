"""The counts a plan is made of: matmul FLOPs on the jaxpr (scans by their
length, recomputation included) and collectives read from HLO text (loops
by their trip count, bytes a chip sends by the ring algorithms)."""

import jax
import jax.numpy as jnp
import pytest

from transformer.plan import flops
from transformer.plan import hlo


def _flops(f, *shapes):
  return flops.traced_flops(jax.jit(f).trace(*shapes))


def test_a_matmul_counts_two_flops_a_multiply_add():
  a = jax.ShapeDtypeStruct((3, 5, 7), jnp.float32)
  b = jax.ShapeDtypeStruct((3, 7, 11), jnp.float32)
  assert _flops(jnp.matmul, a, b) == 2 * 3 * 5 * 7 * 11


def test_a_scan_counts_its_body_length_times_and_remat_recomputes():
  x = jax.ShapeDtypeStruct((4, 8), jnp.float32)
  w = jax.ShapeDtypeStruct((6, 8, 8), jnp.float32)
  one = 2 * 4 * 8 * 8

  def layers(x, w, policy=None):
    body = lambda h, wi: (jnp.tanh(h @ wi), None)
    if policy is not None:
      body = jax.checkpoint(body, policy=policy)
    return jax.lax.scan(body, x, w)[0].sum()

  assert _flops(layers, x, w) == 6 * one
  grad = lambda policy: _flops(jax.grad(lambda x, w: layers(x, w, policy),
                                        argnums=(0, 1)), x, w)
  # The backward pass: two matmuls a layer; full remat reruns the forward.
  assert grad(None) == 3 * 6 * one
  assert grad(jax.checkpoint_policies.nothing_saveable) == 4 * 6 * one


def test_a_convolution_counts_its_window_over_input_features():
  x = jax.ShapeDtypeStruct((2, 16, 16, 3), jnp.float32)
  k = jax.ShapeDtypeStruct((4, 4, 3, 8), jnp.float32)
  conv = lambda x, k: jax.lax.conv_general_dilated(
      x, k, (4, 4), 'VALID', dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
  assert _flops(conv, x, k) == 2 * (2 * 4 * 4 * 8) * (4 * 4 * 3)


# A loop of 12 trips whose body all-gathers a [4, 1024] float32 shard over
# groups of 4, beside an all-reduce of 1,000 bfloat16 over all 8 devices.
HLO = """HloModule m

%cond (p: (s32[], f32[4,1024])) -> pred[] {
  %p = (s32[], f32[4,1024]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(12)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (q: (s32[], f32[4,1024])) -> (s32[], f32[4,1024]) {
  %q = (s32[], f32[4,1024]) parameter(0)
  %x = f32[4,1024]{1,0} get-tuple-element(%q), index=1
  %g = f32[16,1024]{1,0} all-gather(%x), replica_groups=[2,4]<=[8], dimensions={0}
  %s = f32[4,1024]{1,0} slice(%g), slice={[0:4], [0:1024]}
  %i = s32[] get-tuple-element(%q), index=0
  ROOT %t = (s32[], f32[4,1024]) tuple(%i, %s)
}

ENTRY %main (a: bf16[1000], b: (s32[], f32[4,1024])) -> bf16[1000] {
  %a = bf16[1000]{0} parameter(0)
  %b = (s32[], f32[4,1024]) parameter(1)
  %w = (s32[], f32[4,1024]) while(%b), condition=%cond, body=%body
  ROOT %r = bf16[1000]{0} all-reduce(%a), replica_groups={{0,1,2,3,4,5,6,7}}, to_apply=%add
}
"""


@pytest.mark.parametrize('groups,size', [
    ('{{0,1,2,3},{4,5,6,7}}', 4), ('[2,4]<=[8]', 4), ('[4,2]<=[8]', 2),
    ("mesh['axis_0'=2,'axis_1'=4] {'axis_1'}", 4),
    ("mesh['axis_0'=2,'axis_1'=4], device_ids=([2,4]T(1,0)) {'axis_0'}", 2),
    ("mesh['a'=2,'b'=2,'c'=2] {'a','c'}", 4),
])
def test_replica_groups_in_every_format_give_the_group_size(groups, size):
  assert hlo._group_size(f'replica_groups={groups}, dimensions={{0}}',
                         devices=8) == size


@pytest.mark.parametrize('trips', ['condition', 'known'])
def test_collectives_count_loops_and_the_bytes_a_chip_sends(trips):
  text = HLO if trips == 'condition' else HLO.replace(
      '%n = s32[] constant(12)', '%n = s32[] constant(0)').replace(
          'body=%body', 'body=%body, backend_config={"known_trip_count":'
          '{"n":"12"}}')
  found = hlo.collectives(text, devices=8)
  assert found.count == {'all-gather': 12, 'all-reduce': 1}
  shard = 4 * 1024 * 4
  assert found.operand_bytes == {'all-gather': 12 * shard,
                                 'all-reduce': 2000}
  # Each chip receives the other 3 shards of its group; a ring all-reduce
  # sends 2 (n - 1) / n of the array.
  assert found.link_bytes['all-gather'] == 12 * 3 * shard
  assert found.link_bytes['all-reduce'] == pytest.approx(2 * 2000 * 7 / 8)


def test_every_operand_counts_a_called_computation_per_call_and_unknown_loops():
  # Six operands (XLA prints /*index=5*/ before the sixth), in a
  # computation called twice; and a loop whose condition names no bound.
  text = """HloModule m

%reduce (a: f32[10], b: f32[10], c: f32[10], d: f32[10], e: f32[10], f: f32[10]) -> f32[10] {
  %a = f32[10]{0} parameter(0)
  %b = f32[10]{0} parameter(1)
  %c = f32[10]{0} parameter(2)
  %d = f32[10]{0} parameter(3)
  %e = f32[10]{0} parameter(4)
  %f = f32[10]{0} parameter(5)
  ROOT %r = (f32[10], f32[10], f32[10], f32[10], f32[10], /*index=5*/f32[10]) all-reduce(%a, %b, %c, %d, %e, /*index=5*/%f), replica_groups={{0,1}}, to_apply=%add
}

%cond (p: s32[]) -> pred[] {
  %p = s32[] parameter(0)
  %q = s32[] parameter(1)
  ROOT %lt = pred[] compare(%p, %q), direction=LT
}

%body (x: f32[10]) -> f32[10] {
  %x = f32[10]{0} parameter(0)
  ROOT %g = f32[20]{0} all-gather(%x), replica_groups={{0,1}}, dimensions={0}
}

ENTRY %main (v: f32[10]) -> f32[10] {
  %v = f32[10]{0} parameter(0)
  %one = (f32[10]) call(%v, %v, %v, %v, %v, %v), to_apply=%reduce
  %two = (f32[10]) call(%v, %v, %v, %v, %v, %v), to_apply=%reduce
  ROOT %w = f32[10]{0} while(%v), condition=%cond, body=%body
}
"""
  found = hlo.collectives(text, devices=2)
  assert found.count == {'all-reduce': 2, 'all-gather': 1}
  assert found.operand_bytes['all-reduce'] == 2 * 6 * 40
  assert found.unknown_loops == 1
