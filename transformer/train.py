"""The generic training loop: sharded state, jitted steps, checkpoints.

The trainer knows nothing about tokens or images. It drives a task object
(`transformer.tasks.Task`, built by `tasks.build` from the config): the task
initialises parameters, yields batches, computes the loss and its metric
sums, and evaluates; the trainer owns the mesh, the optimizer
(`optimizers`), the jitted steps, checkpoints, metric writing and progress
(`workdir`).
"""

from __future__ import annotations

import collections
import functools
import math
import time
from typing import Any, Callable, NamedTuple, Sequence

from absl import logging
import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from transformer import checkpoints
from transformer import console
from transformer import faults
from transformer import metrics
from transformer import optimizers
from transformer import sharding
from transformer import storage
from transformer import tasks
from transformer import workdir as workdir_lib
from transformer.attention import lora
from transformer.core import losses
from transformer.core import ranges
from transformer.insight import attention_figures
from transformer.tasks import base as tasks_base
from transformer.tasks import vocabularies


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any


def _gradients(params: Any, batch: dict[str, jax.Array], rng: jax.Array, *,
               loss_fn: Callable[..., Any], microbatches: int,
               trainable: Callable[[Any], bool] | None = None
               ) -> tuple[Any, losses.Sums]:
  """Gradients of the batch loss and its metric sums, over `microbatches`
  micro-batches in turn.

  A task's loss is sums['loss'] sum / count, so the whole batch's gradient is
  the count-weighted sum of the micro-batch gradients over the total count.
  Micro-batch i takes rows i, i + k, ... (k = microbatches), which every
  data-parallel shard holds equally. With `trainable` (a key path -> bool,
  e.g. low-rank adapters alone) only those parameters are differentiated;
  the others' gradients are zero and never computed.
  """
  leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
  chosen = [trainable is None or trainable(path) for path, _ in leaves]
  values = [value for _, value in leaves]

  def grad_fn(batch, rng):
    def loss_of(differentiated):
      given = iter(differentiated)
      whole = [next(given) if c else v for v, c in zip(values, chosen)]
      return loss_fn(jax.tree_util.tree_unflatten(treedef, whole), batch,
                     rng, deterministic=False)
    (_, sums), grads = jax.value_and_grad(loss_of, has_aux=True)(
        [v for v, c in zip(values, chosen) if c])
    given = iter(grads)
    return jax.tree_util.tree_unflatten(treedef, [
        next(given) if c else jnp.zeros_like(v)
        for v, c in zip(values, chosen)]), sums

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
               seed: int, microbatches: int = 1, skip_nonfinite: bool = True,
               trainable: Callable[[Any], bool] | None = None
               ) -> tuple[TrainState, losses.Sums, dict[str, Any]]:
  """One optimizer step. Dropout keys are fold_in(seed, step), so a resumed
  run draws the same numbers as an uninterrupted one. A step is finite when
  its loss, gradient norm and new parameters are; one that is not adds
  nothing to the metrics but 'skipped'.

  Args:
    skip_nonfinite: a non-finite step leaves parameters and optimizer state
      as they were (the step counter still advances): config.train.nonfinite
      'skip'. False applies it: for 'stop', whose run ends before such a
      state is evaluated or saved; this saves a pass over parameters and
      optimizer state, old and new (docs/benchmarks.md).
    trainable: a key path -> bool: differentiate those parameters alone
      (low-rank adapters, `optimizers.is_adapter_path`); None: all.

  Returns:
    The new state, metric sums, and `faults.health` of the step.
  """
  rng = jax.random.fold_in(jax.random.key(seed), state.step)
  grads, sums = _gradients(state.params, batch, rng, loss_fn=loss_fn,
                           microbatches=microbatches, trainable=trainable)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  # One pass over each gradient gives both the norm and the finiteness.
  squares = jax.tree.map(lambda g: jnp.sum(jnp.square(g.astype(jnp.float32))),
                         grads)
  grad_norm = jnp.sqrt(sum(jax.tree.leaves(squares)))
  # The new parameters rather than the update's norm: XLA then computes
  # them in the optimizer's fused pass instead of writing the update out
  # for a norm first (GPT-2 small step: 2.8 GB less), and a large finite
  # update whose squared norm overflows is no longer taken for a
  # non-finite one.
  params_finite = jnp.all(jnp.asarray(
      [jnp.isfinite(p).all() for p in jax.tree.leaves(params)]))
  step_health = faults.health(sums['loss'], squares, params_finite,
                              grad_norm)
  finite = step_health['finite']
  sums = jax.tree.map(lambda x: jnp.where(finite, x, jnp.zeros_like(x)),
                      {**sums, 'grad_norm': (grad_norm, 1.0)})
  sums['skipped'] = (1.0 - finite.astype(jnp.float32), 1.0)
  if skip_nonfinite:
    # A `where`, not `lax.cond`: a cond saved 2.2 of 40.8 GB on a CPU (0.6%
    # of the step, within noise), but a conditional may make a GPU step
    # wait on the host for its predicate (docs/benchmarks.md).
    keep = lambda new, old: jax.tree.map(
        lambda n, o: jnp.where(finite, n, o), new, old)
    params, opt_state = (keep(params, state.params),
                         keep(opt_state, state.opt_state))
  return state.replace(step=state.step + 1, params=params,
                       opt_state=opt_state), sums, step_health


def eval_step(params: Any, batch: dict[str, jax.Array], *,
              loss_fn: Callable[..., Any]) -> losses.Sums:
  return loss_fn(params, batch, None, deterministic=True)[1]


def create_state(task: tasks.Task, tx: optax.GradientTransformation,
                 mesh: jax.sharding.Mesh, rules, seed: int
                 ) -> tuple[Callable[[], TrainState], TrainState]:
  """A function that initialises the train state already sharded, and the
  abstract state (with shardings, for restoring): `sharding.sharded_init`
  of the task's parameters and the optimizer's state."""
  def init(rng):
    params = task.init(rng)
    return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                      opt_state=tx.init(params))

  # The key first: with the mesh of a TPU topology active (a plan), no
  # array can be made.
  rng = jax.random.key(seed)
  with sharding.active(mesh, rules):
    return sharding.sharded_init(init, rng, mesh, rules)


class Steps(NamedTuple):
  """A task's state and steps on a mesh (`jit_steps`)."""
  initialise: Callable[[], TrainState]  # the sharded initial state
  abstract: TrainState  # ShapeDtypeStructs with their shardings
  train_step: Any  # jitted (state, batch) -> (state, sums, health)
  eval_step: Any  # jitted (params, batch) -> sums


def jit_steps(config: ml_collections.ConfigDict, task: tasks.Task,
              tx: optax.GradientTransformation, mesh: jax.sharding.Mesh,
              rules) -> Steps:
  """The sharded state and the jitted train and evaluation steps of `task`
  on `mesh`: what a `Trainer` runs, and what `transformer.plan` lowers and
  compiles for a TPU topology's devices."""
  initialise, abstract = create_state(task, tx, mesh, rules, config.seed)
  state_shardings = jax.tree.map(lambda a: a.sharding, abstract)
  batch_sharding = sharding.batch_sharding(mesh)
  train_fn = jax.jit(
      functools.partial(train_step, loss_fn=task.loss, tx=tx,
                        seed=config.seed,
                        microbatches=config.train.microbatches,
                        skip_nonfinite=config.train.nonfinite == 'skip',
                        trainable=(optimizers.is_adapter_path if
                                   config.model.get('lora_rank', 0)
                                   else None)),
      in_shardings=(state_shardings, batch_sharding),
      out_shardings=(state_shardings, None, None), donate_argnums=0)
  eval_fn = jax.jit(functools.partial(eval_step, loss_fn=task.loss),
                    in_shardings=(state_shardings.params, batch_sharding))
  return Steps(initialise, abstract, train_fn, eval_fn)


def _format_time(seconds: float) -> str:
  minutes, seconds = divmod(int(seconds), 60)
  hours, minutes = divmod(minutes, 60)
  return f'{hours}:{minutes:02d}:{seconds:02d}'


def check_config(config: ml_collections.ConfigDict) -> None:
  """Refuses a config whose values cannot train, before anything is
  written into the workdir (a refused run leaves no vocabulary, lock or log
  behind): what can be checked without data or vocabulary, i.e. the
  trainer's settings, the task's data, evaluation and model settings, and
  the optimizer's."""
  tasks.default_config(config.task)  # an unknown task, named
  _validate(config)
  tasks_base.check_data(config)
  tasks.check_model(config)
  optimizers.build(config.optimizer, config.train.num_steps)


def _validate(config: ml_collections.ConfigDict) -> None:
  """Checks across config sections, before anything is built or compiled."""
  train_cfg = config.train
  for name in ('num_steps', 'log_every', 'eval_every', 'checkpoint_every',
               'keep_checkpoints', 'microbatches', 'max_consecutive_skips'):
    ranges.check(f'config.train.{name}', train_cfg[name], low=1)
  ranges.check('config.train.label_smoothing', train_cfg.label_smoothing,
               low=0, high=1)
  if train_cfg.nonfinite not in faults.POLICIES:
    raise ValueError(f'config.train.nonfinite={train_cfg.nonfinite!r}; '
                     f'choose one of {faults.POLICIES}.')
  if config.model.get('lora_rank', 0) and config.eval.average_checkpoints > 1:
    raise ValueError(
        f'config.eval.average_checkpoints={config.eval.average_checkpoints} '
        f'with low-rank adapters (config.model.lora_rank): averaging their '
        f'A and B apart does not average the updates they make; set it to '
        f'1.')
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
    check_config(config)
    self.mesh = sharding.make_mesh(config.mesh.to_dict(), devices)
    self.rules = sharding.rules_from_config(config.axis_rules)
    vocabularies.check_built_from(config, workdir)
    # Every micro-batch is split evenly over the data-parallel shards. Its
    # evaluations' figures are drawn by `insight.attention_figures`.
    self.task = attention_figures.wire(tasks.build(
        config, workdir, batch_divisor=sharding.batch_divisor(self.mesh) *
        config.train.microbatches))
    # Low-rank adapters train alone, and checkpoints hold them alone where
    # every other weight is `base`'s ({'workdir', 'step'} of the init_from
    # checkpoint), as peft saves them (`warm_start`).
    self.adapters_only = workdir_lib.adapters_of(self.task) is not None
    self.base = None
    self.tx, self.schedule = optimizers.build(
        config.optimizer, config.train.num_steps,
        adapters_only=self.adapters_only)
    (self.initialise, self.abstract, self.train_step,
     self.eval_step) = jit_steps(config, self.task, self.tx, self.mesh,
                                 self.rules)

  def saved(self, params: Any) -> Any:
    """What a checkpoint holds of `params`: with a `base`, the adapters."""
    return params if self.base is None else lora.adapters(params)

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


_add_sums = jax.jit(metrics.add)

# Log windows the time remaining is estimated from (1,000 steps at
# log_every=100).
RECENT_WINDOWS = 10


class _TrainLog:
  """Periodic train metrics: console, TensorBoard, and progress.json.

  The training seconds and units (e.g. target tokens), as of the last log
  line before each checkpoint, are saved in the checkpoint (restored with
  its step on resume) and in progress.json (for reports).
  """

  def __init__(self, workdir: str, writer: metrics.MetricWriter, unit: str,
               start: int, num_steps: int, schedule: optax.Schedule,
               progress: dict[str, float] | None,
               line: console.ProgressLine | None = None):
    self.workdir, self.writer, self.unit = workdir, writer, unit
    self.start, self.num_steps, self.schedule = start, num_steps, schedule
    self.line = line or console.ProgressLine()
    self.run_start = self.window_start = time.time()
    self.sums, self.steps = None, 0
    # Rates and the time remaining leave compiling out: the first step's
    # wait (`first_step`) and windows that compiled for new batch shapes.
    self.first_done = None
    # The last windows only: on a shared machine the rate changes as other
    # work starts and stops, and a whole run's mean lags far behind it.
    self.measured = collections.deque(maxlen=RECENT_WINDOWS)
    # Each new batch shape (bucketed batches have several) is one more
    # compilation of the step, inside the window's time: the log says so.
    self.shapes, self.new_shapes = set(), 0
    self.progress = collections.defaultdict(float)
    if progress is not None:  # the counts of the checkpoint resumed
      self.progress.update(progress)
    elif start:  # a checkpoint from before they were kept there
      self._progress_from_file(start)

  def _progress_from_file(self, start: int) -> None:
    saved = workdir_lib.load_progress(self.workdir)
    if saved.pop('step', None) == start:
      self.progress.update(saved)
    elif saved:
      print(f'progress.json is not of checkpoint {start} (an interrupted '
            f'save): training time and token counts start again from here.',
            flush=True)

  def add(self, sums: losses.Sums, batch: dict[str, np.ndarray]) -> None:
    """Adds on device: nothing waits for the step to finish."""
    # One compiled call, not an eager add per metric: a dozen dispatches a
    # step were a host cost of small models' training (docs/benchmarks.md).
    self.sums = dict(sums) if self.sums is None else _add_sums(self.sums,
                                                               sums)
    self.steps += 1
    shape = tuple(sorted((k, np.shape(v)) for k, v in batch.items()))
    if shape not in self.shapes:
      self.shapes.add(shape)
      self.new_shapes += len(self.shapes) > 1  # the first: first_step's

  def exclude(self, seconds: float) -> None:
    """Keeps time spent outside training (evaluation) out of throughput."""
    self.window_start += seconds

  def first_step(self, step: int, sums: losses.Sums) -> None:
    """Waits for the first step (the only wait outside logging and
    evaluation) and reports how long tracing and compiling took."""
    compile_seconds = time.time() - self.window_start
    jax.block_until_ready(sums)
    self.first_done = time.time()
    seconds = self.first_done - self.window_start
    self.writer.write_scalars(step, {'train/first_step_seconds': seconds})
    print(f'Traced and compiled the train step in {compile_seconds:.1f} s '
          f'(first step done after {seconds:.1f} s).', flush=True)

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
    steps, seconds = self.steps, now - self.window_start
    if self.first_done is not None and self.first_done > self.window_start:
      # The window of the first step: rates from the steps after it.
      steps, seconds = steps - 1, now - self.first_done
      count *= steps / self.steps
    if steps and not self.new_shapes:
      self.measured.append((seconds, steps))
    rate = f'{self.unit}_per_second'
    summary['learning_rate'] = float(self.schedule(step - 1))
    if steps:
      summary[rate] = count / max(seconds, 1e-9)
      summary['step_seconds'] = seconds / steps
    self.progress['train_seconds'] += now - self.window_start
    self.progress[self.unit] += float(jax.device_get(self.sums['loss'][1]))
    self.writer.write_scalars(step, {f'train/{k}': v
                                     for k, v in summary.items()})
    speed = (f'{self.unit}/s {summary[rate]:,.0f}  '
             f'{summary["step_seconds"] * 1e3:,.0f} ms/step  ' if steps
             else '')
    self.line.show(
        f'step {step}/{self.num_steps}  loss {summary["loss"]:.4f}  {speed}'
        f'elapsed {_format_time(now - self.run_start)}  remaining '
        f'{self._remaining(step)}{self._compiles()}')
    self.sums, self.steps, self.window_start = None, 0, now
    self.new_shapes = 0

  def _remaining(self, step: int) -> str:
    """The time the steps left take at the rate of the last windows that
    compiled nothing; '-' before such a window."""
    if not self.measured:
      return '-' if step < self.num_steps else _format_time(0)
    seconds, steps = map(sum, zip(*self.measured))
    return _format_time(seconds / steps * (self.num_steps - step))

  def _compiles(self) -> str:
    if not self.new_shapes:
      return ''
    return (f'  (includes compiling the step for {self.new_shapes} new '
            f'batch shape{"s" if self.new_shapes > 1 else ""}; '
            f'{len(self.shapes)} so far)')

  def save(self, mngr, step: int, state: TrainState, trainer: Trainer
           ) -> None:
    """Starts writing checkpoint `step` with the counts so far."""
    checkpoints.save(mngr, step, trainer.saved(state.params),
                     state.opt_state, self.progress, base=trainer.base)
    workdir_lib.save_progress(self.workdir, {'step': step, **self.progress})


def _restore_or_initialise(trainer: Trainer, mngr, workdir: str
                           ) -> tuple[TrainState, int, dict | None]:
  """The state of the workdir's latest good checkpoint, or a new one
  (warm-started from `config.train.init_from` when set), its step and the
  training counts it holds."""
  config = trainer.config
  changes = workdir_lib.config_changes(workdir, config)
  steps = mngr.all_steps()
  if steps:
    workdir_lib.check_config_change(changes)
  # Adapters saved alone name their base (the checkpoints of one run all
  # name the same); other checkpoints hold every weight.
  trainer.base = (checkpoints.adapters_base(mngr, max(steps))
                  if steps and trainer.adapters_only else None)
  restored, start = checkpoints.restore_latest(
      workdir, mngr, {'params': trainer.saved(trainer.abstract.params),
                      'opt_state': trainer.abstract.opt_state}, changes,
      workdir_lib.vocabulary(workdir, trainer.task))
  workdir_lib.save_config(config, workdir)
  if restored is not None:  # step 0 too: a converted checkpoint's
    logging.info('Resumed from %s at step %d.', mngr.directory, start)
    progress = restored.pop(checkpoints.PROGRESS)
    if trainer.base is not None:  # onto the base they were trained on
      with sharding.active(trainer.mesh, trainer.rules):
        restored['params'] = lora.with_adapters(workdir_lib.adapters_base(
            trainer.task, lambda: trainer.initialise().params,
            trainer.base), restored['params'])
    return (TrainState(step=jnp.asarray(start, jnp.int32), **restored),
            start, progress)
  state = trainer.initialise()
  if config.train.init_from:
    state = state.replace(params=warm_start(trainer, state.params))
  return state, 0, None


def warm_start(trainer: Trainer, params: Any) -> Any:
  """`params` with every array of the latest checkpoint of
  `config.train.init_from` that has the same path and shape, after the task
  adapted them (`Task.adapt_pretrained`: e.g. positions resized). Low-rank
  adapters whose every other weight came from it record that checkpoint
  as their base, and are then saved alone; where a weight was newly drawn
  (a new head), checkpoints keep every weight."""
  source = workdir_lib.restore(trainer.config.train.init_from)
  with sharding.active(trainer.mesh, trainer.rules):
    params, fresh = workdir_lib.warm_started(trainer.task, params, source)
  drawn = [path for path in fresh if not optimizers.is_adapter_path(path)]
  if trainer.adapters_only and not drawn:
    trainer.base = {'workdir': storage.absolute(source.workdir),
                    'step': source.step}
  return params


def check_start(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Refuses, before anything is built or written, a `train.init_from`
  this run cannot start from (`tasks.check_init_from`; one without a
  checkpoint), and low-rank adapters trained into their own base's workdir
  (their checkpoints would hold the adapters alone, over the base's)."""
  source = config.train.init_from
  if not source:
    return
  tasks.check_init_from(config)
  if not checkpoints.exist(source):
    raise FileNotFoundError(
        f'config.train.init_from={source} holds no checkpoint: train it '
        f'first (python -m transformer.main --workdir={source} with its '
        f'experiment).')
  if config.model.get('lora_rank') and storage.same_place(source, workdir):
    raise ValueError(
        f'--workdir={workdir} is config.train.init_from: low-rank adapters '
        f'(config.model.lora_rank) are saved alone, apart from the weights '
        f'they adapt. Give them a new --workdir.')


def _train(trainer: Trainer, state: TrainState, start: int, mngr,
           writer: metrics.MetricWriter, progress: dict[str, float] | None
           ) -> tuple[TrainState, dict[str, float]]:
  """Steps start + 1 .. num_steps with their logs, checkpoints and
  evaluations; returns the state and the last evaluation."""
  train_cfg, workdir = trainer.config.train, trainer.workdir
  with console.ProgressLine() as line:
    return _train_steps(trainer, state, start, mngr, writer, _TrainLog(
        workdir, writer, trainer.task.unit, start, train_cfg.num_steps,
        trainer.schedule, progress, line))


def _train_steps(trainer: Trainer, state: TrainState, start: int, mngr,
                 writer: metrics.MetricWriter, log: _TrainLog
                 ) -> tuple[TrainState, dict[str, float]]:
  train_cfg, workdir = trainer.config.train, trainer.workdir
  monitor = faults.NonFiniteMonitor(train_cfg.nonfinite,
                                    train_cfg.max_consecutive_skips, workdir,
                                    say=log.line.print)
  batches = trainer.task.train_iter(start)
  result = {}
  with faults.PreemptionSignals(say=log.line.print) as signals:
    if start == 0 and train_cfg.eval_at_start:
      # Where training starts from (a fine-tuning's pretrained model), as
      # nanoGPT evaluates at iteration 0. Nothing is saved on a signal:
      # a rerun starts again.
      _evaluate_step(trainer, state, 0, mngr, writer, log, signals,
                     save_first=False)
    for step in range(start + 1, train_cfg.num_steps + 1):
      host_batch = next(batches)
      state, step_sums, step_health = trainer.train_step(
          state, sharding.global_batch(host_batch, trainer.mesh))
      if step == start + 1:
        log.first_step(step, step_sums)
      monitor.check(step, step_health, host_batch)
      log.add(step_sums, host_batch)
      last = step == train_cfg.num_steps
      preempted = signals.stop_requested(mngr, step)
      if step % train_cfg.log_every == 0 or last or preempted:
        monitor.flush()  # never log, save or evaluate an unjudged step
        log.write(step)
        mngr.raise_write_errors()
      if step % train_cfg.checkpoint_every == 0 or last or preempted:
        monitor.flush()
        log.save(mngr, step, state, trainer)
      if preempted:
        mngr.wait_until_finished()
        mngr.close()
        writer.close()
        raise faults.Preempted(step)
      if step % train_cfg.eval_every == 0 or last:
        monitor.flush()
        unsaved = step % train_cfg.checkpoint_every and not last
        result = _evaluate_step(trainer, state, step, mngr, writer, log,
                                signals, save_first=bool(unsaved))
  return state, result


def _evaluate_step(trainer: Trainer, state: TrainState, step: int, mngr,
                   writer: metrics.MetricWriter, log: _TrainLog, signals,
                   save_first: bool) -> dict[str, float]:
  """The evaluation at `step`, written and printed; a signal during it
  stops the run with the state saved (`save_first`: not yet saved)."""
  log.line.end()  # the evaluation prints its own lines
  eval_start = time.time()
  try:
    # A signal stops an evaluation at once: a grace period is shorter than
    # a beam search over the test set.
    with signals.interrupting():
      result = trainer.evaluate(state.params, f'step{step}')
  except faults.Interrupted:
    if save_first:
      log.save(mngr, step, state, trainer)
    mngr.wait_until_finished()
    mngr.close()
    writer.close()
    kept = ('the checkpoint is written' if step
            else 'nothing was trained yet')
    raise faults.Preempted(step, f'Preempted at step {step} during its '
                           f'evaluation: {kept}; rerun the same command to '
                           f'resume.') from None
  writer.write_scalars(step, {f'eval/{k}': v for k, v in result.items()})
  log.line.print(f'eval at step {step}: ' + '  '.join(
      f'{k} {v:.4g}' for k, v in sorted(result.items())))
  log.exclude(time.time() - eval_start)
  return result


def _evaluate_averaged(trainer: Trainer, writer: metrics.MetricWriter
                       ) -> dict[str, float]:
  """Evaluation of the mean of the last `eval.average_checkpoints`
  checkpoints (the paper's checkpoint averaging)."""
  count, steps = (trainer.config.eval.average_checkpoints,
                  trainer.config.train.num_steps)
  params, _ = checkpoints.restore_params(trainer.workdir,
                                         trainer.abstract.params, count)
  averaged = trainer.evaluate(params, f'step{steps}_average{count}')
  writer.write_scalars(steps, {f'eval_averaged/{k}': v
                               for k, v in averaged.items()})
  return {f'averaged_{k}': v for k, v in averaged.items()}


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
    workdir.WorkdirBusy: another run trains into the workdir.
  """
  check_config(config)  # before anything is written into the workdir
  check_start(config, workdir)
  workdir_lib.check_writable(workdir)
  with workdir_lib.lock(workdir):
    return _train_and_evaluate(config, workdir)


def _train_and_evaluate(config: ml_collections.ConfigDict,
                        workdir: str) -> dict[str, float]:
  workdir_lib.check_same_task(workdir, config)
  trainer = Trainer(config, workdir)
  mngr = checkpoints.manager(workdir,
                             max_to_keep=config.train.keep_checkpoints)
  state, start, progress = _restore_or_initialise(trainer, mngr, workdir)
  num_params = sum(x.size for x in jax.tree.leaves(state.params))
  print(f'Model: {num_params:,} parameters; mesh {dict(trainer.mesh.shape)}; '
        f'workdir {workdir}', flush=True)
  if start:  # a rerun says where it stands, as a user restarting asks
    print(f'Resumed from the checkpoint of step {start} of '
          f'{config.train.num_steps}' + (
              ': training is done; evaluating it again.'
              if start >= config.train.num_steps else '.'), flush=True)
  writer = metrics.MetricWriter(workdir)
  with sharding.active(trainer.mesh, trainer.rules), \
      checkpoints.finish_writes_on_error(mngr):
    state, result = _train(trainer, state, start, mngr, writer, progress)
  mngr.wait_until_finished()
  mngr.close()
  try:
    # Every checkpoint is written: a signal stops these evaluations at once.
    with faults.PreemptionSignals() as signals, signals.interrupting():
      if not result:  # resumed a finished run: evaluate what it ended with
        result = trainer.evaluate(state.params, f'step{start}')
      if config.eval.average_checkpoints > 1:
        result.update(_evaluate_averaged(trainer, writer))
  except faults.Interrupted:
    raise faults.Preempted(config.train.num_steps, (
        'Preempted during the final evaluation: every checkpoint is '
        'written; rerun the same command to evaluate.')) from None
  finally:
    writer.close()
  return result
