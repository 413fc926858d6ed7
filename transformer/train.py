"""The generic training loop: sharded state, jitted steps, checkpoints.

The trainer knows nothing about tokens or images. It drives a task object
(`transformer.tasks.Task`): the task initialises parameters, yields batches,
computes the loss and its metric sums, and evaluates; the trainer owns the
mesh, the optimizer, the jitted steps, checkpoints, metric writing and
progress.
"""

from __future__ import annotations

import collections
import functools
import json
import math
import os
import re
import time
from typing import Any, Callable, Sequence

from absl import logging
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from transformer import checkpoints
from transformer import faults
from transformer import metrics
from transformer import resume
from transformer import sharding
from transformer import tasks


def default_config() -> ml_collections.ConfigDict:
  """The trainer's settings; tasks add theirs (e.g. `data`, `model`)."""
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.task = ''
  config.train = ml_collections.ConfigDict(dict(
      num_steps=100_000, log_every=100, eval_every=5_000,
      checkpoint_every=1_000, keep_checkpoints=20, label_smoothing=0.1,
      init_from='',  # a workdir whose parameters start a new run
      # Gradient accumulation: each step's batch is split into this many
      # micro-batches whose gradients are summed before one update (the
      # same update as the whole batch, in less activation memory).
      microbatches=1,
      # A step with a non-finite loss, gradient or update is never applied;
      # then 'stop' ends the run with a report, 'skip' goes on (and stops
      # after max_consecutive_skips such steps in a row). See faults.py.
      nonfinite='stop', max_consecutive_skips=10))
  # Vaswani et al. 5.3: Adam(0.9, 0.98, 1e-9), D^-0.5 * rsqrt schedule.
  config.optimizer = ml_collections.ConfigDict(dict(
      name='adam',  # or 'sgd': SGD with momentum b1 (ViT fine-tuning)
      schedule='rsqrt', learning_rate=512**-0.5, warmup_steps=4_000, b1=0.9,
      b2=0.98, eps=1e-9, grad_clip_norm=0.0, weight_decay=0.0,
      # Parameters whose path matches one of these regular expressions are
      # never decayed (e.g. a ViT's class token and position embeddings).
      weight_decay_skip=(),
      end_learning_rate_ratio=0.1,  # end of the cosine schedule
      # Adam's first moment in this dtype ('bfloat16' halves its memory;
      # the second moment stays float32, as in optax and big_vision).
      mu_dtype='float32'))
  config.eval = ml_collections.ConfigDict(dict(average_checkpoints=1))
  # -1: all remaining devices. Pure data parallelism by default; fsdp > 1
  # shards parameters and optimizer state, tensor > 1 splits heads and mlp.
  config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
  # Logical axis -> mesh axes, applied in order; a mesh axis is used once per
  # array, so activations [batch, length, embed] give fsdp to 'batch' and
  # keep 'embed' whole, while parameters shard 'embed' over fsdp (FSDP).
  # Axes of size 1 shard nothing: the same rules serve every mesh.
  config.axis_rules = [('batch', ('data', 'fsdp')), ('length', None),
                       ('embed', 'fsdp'), ('mlp', 'tensor'),
                       ('heads', 'tensor'), ('kv', None), ('vocab', 'tensor'),
                       ('layers', None)]
  return config


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any


def rsqrt_schedule(learning_rate: float, warmup_steps: int) -> optax.Schedule:
  """lrate = learning_rate * min(step^-0.5, step * warmup^-1.5), step >= 1.

  With learning_rate = D^-0.5 this is the schedule of Vaswani et al. (5.3).
  """
  def schedule(count):
    step = jnp.maximum(count + 1, 1).astype(jnp.float32)
    return learning_rate * jnp.minimum(step**-0.5,
                                       step * warmup_steps**-1.5)
  return schedule


def _decayed(params: Any, skip: tuple[str, ...]) -> Any:
  """Weight-decay mask: arrays of rank >= 2 (kernels, embedding and position
  tables, as nanoGPT), not biases or LayerNorm gains, and none whose path
  matches a pattern of `skip`."""
  return jax.tree_util.tree_map_with_path(
      lambda path, x: x.ndim >= 2 and not any(
          re.search(pattern, jax.tree_util.keystr(path)) for pattern in skip),
      params)


def make_optimizer(config: ml_collections.ConfigDict, num_steps: int
                  ) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """Adam (AdamW with weight_decay > 0), or SGD with momentum b1, with the
  config's schedule, and gradient clipping if configured.

  Schedules: 'rsqrt' (Vaswani et al.), 'constant', and 'cosine': linear
  warmup to learning_rate, then cosine decay to learning_rate *
  end_learning_rate_ratio at the last training step.
  """
  if config.schedule == 'rsqrt':
    schedule = rsqrt_schedule(config.learning_rate, config.warmup_steps)
  elif config.schedule == 'constant':
    schedule = optax.constant_schedule(config.learning_rate)
  elif config.schedule == 'cosine':
    if config.warmup_steps >= num_steps:
      raise ValueError(
          f'optimizer.warmup_steps={config.warmup_steps} must be below '
          f'train.num_steps={num_steps} for the cosine schedule.')
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, config.learning_rate, config.warmup_steps, num_steps,
        end_value=config.learning_rate * config.end_learning_rate_ratio)
  else:
    raise ValueError(f"optimizer.schedule={config.schedule!r}; choose 'rsqrt', "
                     f"'constant' or 'cosine'.")
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
                                _decayed, skip=config.weight_decay_skip))
  else:
    optimizer = optax.adam(schedule, b1=config.b1, b2=config.b2,
                           eps=config.eps, mu_dtype=config.mu_dtype)
  if config.grad_clip_norm:
    return optax.chain(optax.clip_by_global_norm(config.grad_clip_norm),
                       optimizer), schedule
  return optimizer, schedule


def _gradients(params: Any, batch: dict[str, jax.Array], rng: jax.Array, *,
               loss_fn: Callable[..., Any], microbatches: int
               ) -> tuple[Any, metrics.Sums]:
  """Gradients of the batch loss and its metric sums, over `microbatches`
  micro-batches in turn.

  A task's loss is sums['loss'] sum / count, so the whole batch's gradient is
  the count-weighted sum of the micro-batch gradients over the total count.
  Micro-batch i takes rows i, i + k, ... (k = microbatches), which every
  data-parallel shard holds equally.
  """
  def grad_fn(batch, rng):
    (_, sums), grads = jax.value_and_grad(
        lambda p: loss_fn(p, batch, rng, deterministic=False),
        has_aux=True)(params)
    return grads, sums

  if microbatches == 1:
    return grad_fn(batch, rng)
  micro = jax.tree.map(
      lambda x: x.reshape(x.shape[0] // microbatches, microbatches,
                          *x.shape[1:]).swapaxes(0, 1), batch)

  def accumulate(carry, inputs):
    index, micro_batch = inputs
    grads, sums = grad_fn(micro_batch, jax.random.fold_in(rng, index))
    weight = sums['loss'][1]
    total_grads, total_sums = carry
    total_grads = jax.tree.map(lambda t, g: t + g * weight, total_grads,
                               grads)
    return (total_grads, metrics.add(total_sums, sums)), None

  first = jax.tree.map(lambda x: x[0], micro)
  grads_shape, sums_shape = jax.eval_shape(grad_fn, first, rng)
  zeros = lambda tree: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                                    tree)
  (grads, sums), _ = jax.lax.scan(
      accumulate, (zeros(grads_shape), zeros(sums_shape)),
      (jnp.arange(microbatches), micro))
  count = jnp.maximum(sums['loss'][1], 1.0)
  return jax.tree.map(lambda g: g / count, grads), sums


def train_step(state: TrainState, batch: dict[str, jax.Array], *,
               loss_fn: Callable[..., Any], tx: optax.GradientTransformation,
               seed: int, microbatches: int = 1
               ) -> tuple[TrainState, metrics.Sums, dict[str, Any]]:
  """One optimizer step. Dropout keys are fold_in(seed, step), so a resumed
  run draws the same numbers as an uninterrupted one. A step whose loss,
  gradient norm or update norm is not finite leaves parameters and
  optimizer state unchanged (the step counter still advances) and adds
  nothing to the metrics but 'skipped'.

  Returns:
    The new state, metric sums, and `faults.health` of the step.
  """
  rng = jax.random.fold_in(jax.random.key(seed), state.step)
  grads, sums = _gradients(state.params, batch, rng, loss_fn=loss_fn,
                           microbatches=microbatches)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  grad_norm = optax.tree.norm(grads)
  step_health = faults.health(sums['loss'][0], grads,
                              optax.tree.norm(updates), grad_norm)
  finite = step_health['finite']
  keep = lambda new, old: jax.tree.map(
      lambda n, o: jnp.where(finite, n, o), new, old)
  sums = jax.tree.map(lambda x: jnp.where(finite, x, jnp.zeros_like(x)),
                      {**sums, 'grad_norm': (grad_norm, 1.0)})
  sums['skipped'] = (1.0 - finite.astype(jnp.float32), 1.0)
  return state.replace(step=state.step + 1,
                       params=keep(params, state.params),
                       opt_state=keep(opt_state, state.opt_state)
                       ), sums, step_health


def eval_step(params: Any, batch: dict[str, jax.Array], *,
              loss_fn: Callable[..., Any]) -> metrics.Sums:
  return loss_fn(params, batch, None, deterministic=True)[1]


def create_state(task: tasks.Task, tx: optax.GradientTransformation,
                 mesh: jax.sharding.Mesh, rules, seed: int
                 ) -> tuple[Callable[[], TrainState], TrainState]:
  """Sharded initialisation: eval_shape -> logical specs -> shardings ->
  jit(init, out_shardings), so parameters are created already sharded and
  never gathered on one device.

  Returns:
    A function that initialises the state, and the abstract state
    (ShapeDtypeStructs carrying the shardings, for restoring).
  """
  def init(rng):
    params = task.init(rng)
    return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                      opt_state=tx.init(params))

  rng = jax.random.key(seed)
  boxed = jax.eval_shape(init, rng)
  shardings = sharding.logical_shardings(boxed, mesh, rules)
  initialise = jax.jit(lambda r: nn.unbox(init(r)), out_shardings=shardings)
  # Plain unboxing: outside jit there is nothing to constrain.
  unboxed = jax.tree.map(
      lambda x: x.unbox(apply_constraint=False)
      if isinstance(x, nn.LogicallyPartitioned) else x, boxed,
      is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
  sharding.check_divisible(unboxed, shardings)
  abstract = jax.tree.map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
      unboxed, shardings)
  return functools.partial(initialise, rng), abstract


def _save_config(config: ml_collections.ConfigDict, workdir: str) -> None:
  if jax.process_index() == 0:
    with open(os.path.join(workdir, 'config.json'), 'w') as f:
      f.write(config.to_json_best_effort(indent=2))


def load_config(workdir: str) -> ml_collections.ConfigDict:
  """The config a workdir was trained with (for translate/evaluate)."""
  path = os.path.join(workdir, 'config.json')
  if not os.path.exists(path):
    raise FileNotFoundError(
        f'{path} not found: {workdir} is not a training workdir. Train into '
        f'it first: python -m transformer.main --workdir={workdir}')
  with open(path) as f:
    saved = json.load(f)
  # Saved values over today's defaults: settings added since the run was
  # trained take their default values.
  config = tasks.default_config(saved['task'])
  config.update(saved)
  return config


def load_progress(workdir: str) -> dict[str, float]:
  """What a training run recorded: 'step', 'train_seconds' and the count of
  its units (e.g. 'tokens')."""
  with open(os.path.join(workdir, 'progress.json')) as f:
    return json.load(f)


def _format_time(seconds: float) -> str:
  minutes, seconds = divmod(int(seconds), 60)
  hours, minutes = divmod(minutes, 60)
  return f'{hours}:{minutes:02d}:{seconds:02d}'


def _validate(config: ml_collections.ConfigDict) -> None:
  """Checks across config sections, before anything is built or compiled."""
  train_cfg = config.train
  for name in ('num_steps', 'log_every', 'eval_every', 'checkpoint_every',
               'keep_checkpoints', 'microbatches'):
    if train_cfg[name] < 1:
      raise ValueError(f'config.train.{name}={train_cfg[name]} must be >= 1.')
  if train_cfg.nonfinite not in faults.POLICIES:
    raise ValueError(f'config.train.nonfinite={train_cfg.nonfinite!r}; '
                     f'choose one of {faults.POLICIES}.')
  if config.eval.average_checkpoints > train_cfg.keep_checkpoints:
    raise ValueError(
        f'config.eval.average_checkpoints={config.eval.average_checkpoints} '
        f'exceeds config.train.keep_checkpoints={train_cfg.keep_checkpoints}: '
        f'keep at least as many checkpoints as are averaged.')


class Trainer:
  """Mesh, task, optimizer and jitted steps for one config and workdir."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *,
               devices: Sequence[jax.Device] | None = None):
    """`devices`: the mesh's (default all of every process)."""
    self.config, self.workdir = config, workdir
    _validate(config)
    self.mesh = sharding.make_mesh(config.mesh.to_dict(), devices)
    self.rules = sharding.rules_from_config(config.axis_rules)
    # Every micro-batch is split evenly over the data-parallel shards.
    self.task = tasks.build(
        config, workdir, batch_divisor=sharding.batch_divisor(self.mesh) *
        config.train.microbatches)
    self.tx, self.schedule = make_optimizer(config.optimizer,
                                            config.train.num_steps)
    with sharding.active(self.mesh, self.rules):
      self.initialise, self.abstract = create_state(
          self.task, self.tx, self.mesh, self.rules, config.seed)
    state_shardings = jax.tree.map(lambda a: a.sharding, self.abstract)
    batch_sharding = sharding.batch_sharding(self.mesh)
    self.train_step = jax.jit(
        functools.partial(train_step, loss_fn=self.task.loss, tx=self.tx,
                          seed=config.seed,
                          microbatches=config.train.microbatches),
        in_shardings=(state_shardings, batch_sharding),
        out_shardings=(state_shardings, None, None), donate_argnums=0)
    self.eval_step = jax.jit(
        functools.partial(eval_step, loss_fn=self.task.loss),
        in_shardings=(state_shardings.params, batch_sharding))

  def evaluate(self, params: Any, label: str) -> dict[str, float]:
    """Loss metrics on the evaluation batches, then the task's own; `label`
    (e.g. 'step2000') names the reports and plots the task writes."""
    sums = None
    with sharding.active(self.mesh, self.rules):
      for batch in self.task.eval_batches():
        sums = metrics.add(sums, self.eval_step(
            params, sharding.global_batch(batch, self.mesh)))
      result = metrics.normalize(sums) if sums else {}
      result.update(self.task.evaluate(params, label=label))
    return result

  def restore_params(self, average: int = 1) -> tuple[Any, int]:
    """Latest (or averaged last `average`) parameters of the workdir."""
    mngr = checkpoints.manager(self.workdir, read_only=True)
    step = mngr.latest_step()
    if step is None:
      raise FileNotFoundError(
          f'No checkpoint in {checkpoints.directory(self.workdir)}; train '
          f'first: python -m transformer.main --workdir={self.workdir}')
    if average > 1:
      params, _ = checkpoints.averaged_params(mngr, self.abstract.params,
                                              average)
    else:
      params = checkpoints.restore(mngr, step,
                                   {'params': self.abstract.params})['params']
    mngr.close()
    return params, step


def warm_start(params: Any, source: str,
               adapt: Callable[[Any, Any], Any] | None = None) -> Any:
  """`params` with every array that `source`'s latest checkpoint has at the
  same path and shape (e.g. a pretrained encoder under a new head).
  `adapt(loaded, params)`, a task's, may first reshape what was loaded
  (e.g. position embeddings for a new resolution) or drop arrays."""
  source_trainer = Trainer(load_config(source), source)
  loaded, step = source_trainer.restore_params()
  if adapt is not None:
    loaded = adapt(loaded, params)
  flat_loaded = dict(jax.tree_util.tree_flatten_with_path(loaded)[0])
  copied, new, mismatched = [], [], []

  def pick(path, value):
    name = jax.tree_util.keystr(path)
    if path not in flat_loaded:
      new.append(name)
      return value
    if flat_loaded[path].shape != value.shape:
      mismatched.append(f'{name} {flat_loaded[path].shape} != {value.shape}')
      return value
    copied.append(name)
    return jax.device_put(flat_loaded[path].astype(value.dtype),
                          value.sharding)

  params = jax.tree_util.tree_map_with_path(pick, params)
  if mismatched:
    raise ValueError(f'{source} (step {step}) has parameters of other shapes '
                     f'(different vocabulary or sizes?): {mismatched}')
  if not copied:
    raise ValueError(f'{source} (step {step}) shares no parameter with this '
                     f'model: it is not a checkpoint of the same architecture.')
  unused = sorted(set(map(jax.tree_util.keystr, flat_loaded)) - set(copied))
  print(f'Initialised {len(copied)} parameter arrays from {source} (step '
        f'{step}); newly initialised: {new or "none"}; not used: '
        f'{unused or "none"}', flush=True)
  return params


class _TrainLog:
  """Periodic train metrics: console, TensorBoard, and progress.json.

  progress.json keeps the training seconds and units (e.g. target tokens)
  across resumes, as of the last log line before each checkpoint.
  """

  def __init__(self, workdir: str, writer: metrics.MetricWriter, unit: str,
               start: int, num_steps: int, schedule: optax.Schedule):
    self.workdir, self.writer, self.unit = workdir, writer, unit
    self.start, self.num_steps, self.schedule = start, num_steps, schedule
    self.run_start = self.window_start = time.time()
    self.sums, self.steps = None, 0
    self.progress = collections.defaultdict(float)
    path = os.path.join(workdir, 'progress.json')
    if start and os.path.exists(path):
      with open(path) as f:
        saved = json.load(f)
      if saved.pop('step') == start:
        self.progress.update(saved)

  def add(self, sums: metrics.Sums) -> None:
    """Adds on device: nothing waits for the step to finish."""
    self.sums = metrics.add(self.sums, sums)
    self.steps += 1

  def exclude(self, seconds: float) -> None:
    """Keeps time spent outside training (evaluation) out of throughput."""
    self.window_start += seconds

  def write(self, step: int) -> None:
    summary = metrics.normalize(self.sums)
    if not math.isfinite(summary['loss']):
      raise FloatingPointError(
          f'Training loss is {summary["loss"]} at step {step}. Lower '
          f'config.optimizer.learning_rate, set '
          f'config.optimizer.grad_clip_norm, or resume from an earlier '
          f'checkpoint in {checkpoints.directory(self.workdir)}.')
    now = time.time()
    count = float(jax.device_get(self.sums['loss'][1]))
    rate = f'{self.unit}_per_second'
    summary['learning_rate'] = float(self.schedule(step - 1))
    summary[rate] = count / (now - self.window_start)
    summary['step_seconds'] = (now - self.window_start) / self.steps
    self.progress['train_seconds'] += now - self.window_start
    self.progress[self.unit] += count
    eta = (now - self.run_start) / (step - self.start) * (self.num_steps -
                                                          step)
    self.writer.write_scalars(step, {f'train/{k}': v
                                     for k, v in summary.items()})
    print(f'step {step}/{self.num_steps}  loss {summary["loss"]:.4f}  '
          f'{self.unit}/s {summary[rate]:,.0f}  '
          f'{summary["step_seconds"] * 1e3:,.0f} ms/step  elapsed '
          f'{_format_time(now - self.run_start)}  remaining '
          f'{_format_time(eta)}', flush=True)
    self.sums, self.steps, self.window_start = None, 0, now

  def save_progress(self, step: int) -> None:
    if jax.process_index() == 0:
      with open(os.path.join(self.workdir, 'progress.json'), 'w') as f:
        json.dump({'step': step, **self.progress}, f)


def _save(mngr, step: int, state: TrainState, workdir: str) -> None:
  try:
    checkpoints.save(mngr, step, state.params, state.opt_state)
  except OSError as e:
    raise OSError(
        f'Writing checkpoint {step} into {checkpoints.directory(workdir)} '
        f'failed: {e.strerror or e}. The last complete checkpoint '
        f'({mngr.latest_step()}) is intact; free space or fix the storage '
        f'and rerun to resume from it.') from e


def _restore_or_initialise(trainer: Trainer, mngr, workdir: str
                           ) -> tuple[TrainState, int]:
  config = trainer.config
  changes = resume.config_changes(workdir, config)
  if mngr.all_steps():
    resume.check_config_change(changes)
  restored, start = resume.restore_latest(
      workdir, mngr, {'params': trainer.abstract.params,
                      'opt_state': trainer.abstract.opt_state}, changes)
  _save_config(config, workdir)
  if start:
    logging.info('Resumed from %s at step %d.', mngr.directory, start)
    return TrainState(step=jnp.asarray(start, jnp.int32), **restored), start
  state = trainer.initialise()
  if config.train.init_from:
    state = state.replace(params=warm_start(
        state.params, config.train.init_from,
        getattr(trainer.task, 'adapt_pretrained', None)))
  return state, 0


def train_and_evaluate(config: ml_collections.ConfigDict,
                       workdir: str) -> dict[str, float]:
  """Trains (resuming from the workdir's latest good checkpoint) and
  evaluates.

  Returns:
    The final evaluation metrics.

  Raises:
    faults.Preempted: after SIGTERM/SIGINT, once the checkpoint is written.
    faults.NonFiniteError: on non-finite steps, as config.train.nonfinite
      says.
  """
  resume.check_writable(workdir)
  trainer = Trainer(config, workdir)
  task, train_cfg = trainer.task, config.train
  mngr = checkpoints.manager(workdir, max_to_keep=train_cfg.keep_checkpoints)
  state, start = _restore_or_initialise(trainer, mngr, workdir)
  num_params = sum(x.size for x in jax.tree.leaves(state.params))
  print(f'Model: {num_params:,} parameters; mesh {dict(trainer.mesh.shape)}; '
        f'workdir {workdir}', flush=True)

  writer = metrics.MetricWriter(workdir)
  log = _TrainLog(workdir, writer, task.unit, start, train_cfg.num_steps,
                  trainer.schedule)
  monitor = faults.NonFiniteMonitor(train_cfg.nonfinite,
                                    train_cfg.max_consecutive_skips, workdir)
  batches = task.train_iter(start)
  result = {}
  with sharding.active(trainer.mesh, trainer.rules), \
      faults.PreemptionSignals() as signals, \
      checkpoints.finish_writes_on_error(mngr):
    for step in range(start + 1, train_cfg.num_steps + 1):
      host_batch = next(batches)
      state, step_sums, step_health = trainer.train_step(
          state, sharding.global_batch(host_batch, trainer.mesh))
      if step == start + 1:  # the only wait outside logging and evaluation
        compile_seconds = time.time() - log.window_start
        jax.block_until_ready(step_sums)
        writer.write_scalars(step, {'train/first_step_seconds':
                                    time.time() - log.window_start})
        print(f'Traced and compiled the train step in {compile_seconds:.1f} '
              f's (first step done after '
              f'{time.time() - log.window_start:.1f} s).', flush=True)
      monitor.check(step, step_health, host_batch, step_sums['loss'])
      log.add(step_sums)
      last = step == train_cfg.num_steps
      preempted = signals.stop_requested(mngr, step)
      if step % train_cfg.log_every == 0 or last or preempted:
        log.write(step)
      if step % train_cfg.checkpoint_every == 0 or last or preempted:
        monitor.flush()  # never checkpoint past an unjudged step
        _save(mngr, step, state, workdir)
        log.save_progress(step)
      if preempted:
        mngr.wait_until_finished()
        mngr.close()
        writer.close()
        raise faults.Preempted(step)
      if step % train_cfg.eval_every == 0 or last:
        eval_start = time.time()
        result = trainer.evaluate(state.params, f'step{step}')
        writer.write_scalars(step, {f'eval/{k}': v
                                    for k, v in result.items()})
        print(f'eval at step {step}: ' + '  '.join(
            f'{k} {v:.4g}' for k, v in sorted(result.items())), flush=True)
        log.exclude(time.time() - eval_start)
  if not result:  # resumed a finished run: evaluate what it ended with
    result = trainer.evaluate(state.params, f'step{start}')
  mngr.wait_until_finished()
  mngr.close()
  if config.eval.average_checkpoints > 1:
    count = config.eval.average_checkpoints
    params, _ = trainer.restore_params(count)
    averaged = trainer.evaluate(params,
                                f'step{train_cfg.num_steps}_average{count}')
    writer.write_scalars(train_cfg.num_steps,
                         {f'eval_averaged/{k}': v
                          for k, v in averaged.items()})
    result.update({f'averaged_{k}': v for k, v in averaged.items()})
  writer.close()
  return result
