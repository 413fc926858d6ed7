"""Plans compiled for TPU topologies from this CPU (libtpu's compiler; the
tests skip, saying so, without it): every experiment's train step, memory
that adds up, refusals that name the problem, and the search."""

import dataclasses

import jax
import numpy as np
import pytest

from conftest import load_experiment
from conftest import raises_naming
from transformer import configs
from transformer.plan import planner
from transformer.plan import report
from transformer.plan import search
from transformer.plan import topology

pytestmark = pytest.mark.skipif(
    not topology.libtpu_installed(),
    reason=f'libtpu (the TPU compiler) is not installed: {topology.INSTALL}')

# Every experiment's small variant: vit_finetune starts from a trained
# workdir, which its config reads, and is left out.
EXPERIMENTS = [
    'bert_mlm:runlocal', 'captioning_offline:runlocal',
    'coco_captions:runlocal', 'glue:task=entailment,runlocal',
    'lm1b:runlocal', 'lm_offline:runlocal', 'lm_offline:model=llama,runlocal',
    'mt_local:src=de,tgt=en,runlocal', 'mt_offline:runlocal',
    'ptb:runlocal', 'rnn_vs_transformer:model=rnn_attention,runlocal',
    'rnn_vs_transformer:model=convs2s,runlocal',
    'shakespeare_char:runlocal', 'sst2:runlocal', 'vilbert_coco:runlocal',
    'vilbert_offline:runlocal', 'vilbert_refer:runlocal',
    'vilbert_vqa:runlocal', 'vit_cifar10:runlocal', 'vit_imagenet:S/16,runlocal',
    'vit_mnist:runlocal', 'vit_offline:runlocal', 'wmt14:ende_base,runlocal']


def _config(spec, overrides=None):
  name, _, arg = spec.partition(':')
  config = load_experiment(name, arg)
  return configs.override(config, overrides) if overrides else config


GENERATIONS = ('v5e:2x2', 'v4:2x2x1')
# The default run compiles one experiment for each generation (small text
# steps compile in 2 to 5 s on 2 cores, a ViLBERT's in 14 to 16 s);
# `-m slow` compiles every experiment for both.
EACH_TASK = ('mt_offline:runlocal', 'bert_mlm:runlocal')
SWEEP = [pytest.param(spec, name, marks=() if (
    spec in EACH_TASK and name == GENERATIONS[EACH_TASK.index(spec) % 2])
                      else (pytest.mark.slow,))
         for spec in EXPERIMENTS for name in GENERATIONS]


@pytest.mark.parametrize('spec,name', SWEEP)
def test_every_experiment_compiles_for_two_generations(spec, name):
  plan = planner.plan(_config(spec), name, search=False)
  assert plan.fits and plan.topology.chips == 4
  assert plan.mesh == {'data': 4, 'fsdp': 1, 'tensor': 1}
  # The state the chip holds is what its shardings say (replicated here).
  assert plan.memory.arguments >= plan.memory.parameters + \
      plan.memory.optimizer + plan.memory.batch
  assert plan.model_flops > 0 and plan.roofline.bound > 0
  # Data parallelism: gradients are summed over the chips.
  assert plan.collectives.count.get('all-reduce', 0) >= 1


def test_a_plan_adds_up_and_its_bound_holds_each_term():
  config = _config('lm_offline:runlocal', {'mesh.fsdp': 2, 'mesh.data': 2})
  plan = planner.plan(config, 'v5e:2x2')
  ready = planner.prepare(config, 'v5e:2x2')
  params = jax.tree.leaves(ready.steps.abstract.params)
  total = sum(int(np.prod(p.shape)) * p.dtype.itemsize for p in params)
  # fsdp=2 shards every 'embed' axis over two chips: at least half gone.
  assert total / 2 <= plan.memory.parameters < total
  assert plan.memory.peak >= plan.memory.arguments
  assert plan.roofline.bound == max(plan.roofline.compute,
                                    plan.roofline.memory,
                                    plan.roofline.interconnect)
  assert 0 < plan.mfu_ceiling <= 1
  assert plan.search is not None and plan.search.peak > 0  # it decodes
  # FSDP gathers parameters before use, each chip its pair's other half.
  gathered = plan.collectives
  assert gathered.count.get('all-gather', 0) >= 1
  assert gathered.link_bytes['all-gather'] == gathered.operand_bytes[
      'all-gather']
  text = report.text(plan, 'experiments/lm_offline.py:runlocal', config)
  for part in ('Memory per chip', 'FLOPs per chip', 'Collectives',
               'Step time bound', 'MFU at most', 'fits'):
    assert part in text
  record = report.record(plan, 'experiments/lm_offline.py:runlocal',
                         ['--config.mesh.fsdp=2'])
  assert record['chips'] == record['hosts'] * record['chips_per_host'] == 4
  assert record['generation'] == 'v5e' and record['fits']


# Two layers of width 8,192: 1.6B parameters, 19 GiB with Adam's moments,
# more than a v5e chip's 16 GiB unless sharded.
HUGE = {'model.num_layers': 2, 'model.d_model': 8192, 'model.num_heads': 8,
        'model.d_ff': 32768, 'data.vocab_size': 512}


def test_a_model_that_cannot_fit_is_refused_naming_its_terms():
  config = _config('lm_offline:runlocal', HUGE)
  plan = planner.plan(config, 'v5e:2x2', search=False)
  assert not plan.fits
  verdict = report.verdict(plan)
  assert verdict.startswith('does not fit') and 'optimizer state' in verdict
  assert any('--config.mesh.fsdp' in option
             for option in report.shrink(plan, config))


# 19 s on 2 cores: out of the default run's 10 minutes; CI
# runs it (`ci`).
@pytest.mark.slow
@pytest.mark.ci
def test_search_climbs_each_meshs_ladder_and_finds_what_fits():
  """On a chip of 6 MiB, a small LM's data-parallel step (6.3 to 10 MiB a
  chip, libtpu 0.0.42.1, whatever it saves) does not fit and its fully
  sharded one (5.0 MiB) does."""
  config = _config('lm_offline:runlocal', {'data.vocab_size': 4096})
  small = topology.resolve('v5e:2x2')
  small = dataclasses.replace(small, chip=dataclasses.replace(
      small.chip, hbm_bytes=6 * 2**20))
  tried = search.run(config, small, budget_seconds=600, max_candidates=6)
  best = search.winner(tried)
  assert best is not None and best.plan.fits
  assert (best.overrides['mesh.fsdp'], best.overrides['model.remat']) == (
      4, 'none')
  assert best.flags[0].startswith('--config.mesh.')
  # The data-parallel mesh climbed its ladder in order, fitting nowhere
  # (a bfloat16 first moment: 6.3 MiB); 4 micro-batches would have
  # changed the global batch of 8 rows.
  data_parallel = [t for t in tried if t.overrides['mesh.data'] == 4]
  compiled = [{k: v for k, v in t.overrides.items()
               if not k.startswith('mesh.')}
              for t in data_parallel if t.plan is not None]
  skipped = [{k: v for k, v in t.overrides.items()
              if not k.startswith('mesh.')}
             for t in data_parallel if t.plan is None]
  rungs = [r for r in search.ladder(config) if r not in skipped]
  assert sorted(compiled, key=rungs.index) == rungs[:len(compiled)]
  assert len(compiled) == 5
  assert not any(t.plan.fits for t in data_parallel if t.plan is not None)
  assert any(t.skipped.startswith('batch of 16 rows') for t in data_parallel)


def test_bad_topologies_and_meshes_are_refused_before_compiling():
  with raises_naming(ValueError, "'v9x'", 'v4, v5e, v5p, v6e, h100, h200'):
    topology.parse('v9x:2x2')
  with raises_naming(ValueError, "--topology='v5e-16'", 'GENERATION:SHAPE',
                     'v5e:16x16'):
    topology.parse('v5e-16')
  with raises_naming(ValueError, 'config.mesh', "'data': 3", '3 devices',
                     '4 are available', '-1'):
    planner.prepare(_config('mt_offline:runlocal', {'mesh.data': 3}),
                    'v5e:2x2')
  with raises_naming(ValueError, 'config.data.batch_size=6', 'multiple of 4'):
    planner.prepare(_config('vit_offline:runlocal',
                            {'data.batch_size': 6}), 'v5e:2x2')


def test_a_topology_knows_its_hosts():
  slice_ = topology.resolve('v5e:4x4')
  assert (slice_.chips, slice_.hosts, slice_.chips_per_host) == (16, 4, 4)
  assert slice_.dims == '4x4' and slice_.chip.name == 'v5e'


def test_attention_is_chosen_for_the_topology_not_this_cpu():
  """Traced on a CPU for TPU chips, causal attention is the TPU's fused
  kernel (no [T, S] score halves in the jaxpr), as a run there takes it."""
  from transformer.attention import kernels  # pylint: disable=g-import-not-at-top
  chips = topology.resolve('v5e:2x2').devices
  mesh = jax.sharding.Mesh(np.asarray(chips), ('data',))
  q = jax.ShapeDtypeStruct((2, 8, 4, 16), jax.numpy.bfloat16)
  attend = lambda q: kernels.dot_product_attention(q, q, q, causal=True)
  here = str(jax.make_jaxpr(attend)(q))
  with jax.set_mesh(mesh):
    assert kernels.target_platform() == 'tpu'
    there = str(jax.make_jaxpr(attend)(q))
  assert kernels.target_platform() == 'cpu'
  assert here != there  # the CPU's einsum halves, the TPU's fused call


@pytest.mark.skipif(not topology.gpu_plugin_installed(),
                    reason=f"jax's CUDA plugin is not installed: "
                    f"{topology.GPU_PLUGIN}")
def test_a_gpu_topology_compiles_for_the_card_without_one():
  plan = planner.plan(_config('lm_offline:runlocal'), 'h100:8', search=False)
  assert not plan.topology.simulated and plan.topology.chips == 8
  assert plan.topology.devices[0].device_kind == 'NVIDIA H100 80GB HBM3'
  assert plan.fits and plan.memory.capacity == pytest.approx(0.75 * 80e9)
  assert plan.xla_flops is None and plan.executed_flops > 0
