"""The task of docs/recipes/task.md trains: the trainer runs it for a few
steps, checkpoints and evaluates it, with no change of its own."""

import importlib.util
import os

_PAGES = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), 'recipe_pages.py')


def _recipe_pages():
  spec = importlib.util.spec_from_file_location('recipe_pages', _PAGES)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_the_task_recipe_trains(monkeypatch, tmp_path):
  from transformer import tasks  # pylint: disable=g-import-not-at-top
  from transformer import train  # pylint: disable=g-import-not-at-top
  from transformer import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  pages = _recipe_pages()
  [module] = [code for code in pages.code_blocks('task.md', 'python')
              if code.startswith('# transformer/tasks/')]
  pages.load_module('transformer.tasks.language_id', module, monkeypatch,
                    'docs/recipes/task.md')
  monkeypatch.setattr(tasks, 'TASKS', (*tasks.TASKS, 'language_id'))
  config = tasks.default_config('language_id')
  config.data.update(dict(num_train=100, num_eval=20, batch_size=8,
                          eval_batch_size=20, max_length=48))
  config.train.update(dict(num_steps=4, checkpoint_every=2, eval_every=4,
                           log_every=2))
  config.optimizer.warmup_steps = 1
  workdir = str(tmp_path / 'workdir')
  final = train.train_and_evaluate(config, workdir)
  assert 0 <= final['accuracy'] <= 1 and final['loss'] > 0
  restored = workdir_lib.restore(workdir)
  assert restored.step == 4
