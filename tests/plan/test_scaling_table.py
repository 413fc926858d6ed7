"""The scaling table's rows and how docs/scaling.md carries them: the
block the command rewrites, and a published measurement checked against
the bound beside it."""

import types

from conftest import load_experiment
from transformer import configs
from transformer.plan import roofline
from transformer.plan import scaling
from transformer.plan import topology


def test_every_row_is_an_experiment_with_fields_that_exist():
  for row in scaling.ROWS:
    name, _, arg = row.experiment.removeprefix('experiments/').partition(':')
    configs.override(load_experiment(name.removesuffix('.py'), arg),
                     row.overrides)  # an unknown field raises
    for _, name in row.topologies:
      topology.parse(name)
    assert set(row.published) <= {name for _, name in row.topologies}


def _record(row, name, units_per_second):
  plan = types.SimpleNamespace(
      memory=types.SimpleNamespace(peak=2 * 2**30, capacity=16 * 2**30),
      roofline=roofline.Roofline(compute=0.5, memory=0.1, interconnect=0.2),
      mfu_ceiling=0.8, units_per_second_per_chip=units_per_second,
      unit='tokens', fits=True)
  tried = [types.SimpleNamespace(plan=plan, flags=['--config.a=1'])]
  return {**scaling.record(row, 'v6e-256', name, tried,
                           ['--config.mesh.fsdp=256'], 600.0),
          'versions': 'today', 'command': 'cmd'}


def test_a_published_figure_above_the_bound_is_flagged():
  row = next(r for r in scaling.ROWS if r.published)
  name, published = next(iter(row.published.items()))
  rate = published.tokens_per_second_per_chip
  above = scaling.markdown([_record(row, name, rate * 2)])
  below = scaling.markdown([_record(row, name, rate / 2)])
  assert 'bound above it' in above and 'wrong' not in above
  assert 'the bound is wrong' in below
  assert '`mesh.fsdp=256`' in above
  assert '500 (compute; 800 if nothing overlapped)' in above


def test_nothing_fitting_names_the_closest_and_reruns_replace_records():
  row = scaling.ROWS[0]
  _, name = row.topologies[0]
  plan = types.SimpleNamespace(
      memory=types.SimpleNamespace(peak=20 * 2**30, capacity=16 * 2**30),
      fits=False)
  missed = {**scaling.record(
      row, 'v4-8', name, [types.SimpleNamespace(
          plan=plan, flags=['--config.model.remat=full'])], [], 60.0),
            'versions': 'today', 'command': 'cmd'}
  text = scaling.markdown([missed])
  assert 'no candidate fits (closest: 20.0 of 16 GiB with ' in text
  assert '`model.remat=full`' in text
  fitted = _record(row, name, 1000.0)
  assert scaling.merged([missed], [fitted]) == [fitted]


def test_the_table_replaces_its_block_and_keeps_the_page():
  page = '# Scaling\n\nProse.\n'
  first = scaling.in_page(page, 'table one')
  assert first.startswith(page.rstrip()) and 'table one' in first
  second = scaling.in_page(first + '\nAfter.\n', 'table two')
  assert 'table one' not in second and 'table two' in second
  assert second.count(scaling.BEGIN) == 1 and second.endswith('After.\n')
