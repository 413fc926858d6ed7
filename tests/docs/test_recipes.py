"""Every recipe of docs/recipes/ works against the current code: its code
blocks run as a reader would follow them (`recipe_pages`), and what they
add is checked here, then removed."""

from conftest import load_experiment
import recipe_pages


def test_the_model_family_recipe(monkeypatch, tmp_path, capsys):
  recipe_pages.run('model_family.md', monkeypatch, tmp_path)
  # The counts the page prints beside the paper's 18M and 59M.
  assert capsys.readouterr().out.split() == [
      'Mixer-S/16:', '18.5M', 'Mixer-B/16:', '59.9M']


def test_the_attention_kernel_recipe(monkeypatch, tmp_path):
  """The page's check runs; its diff, applied to kernels.py, makes
  `dot_product_attention(implementation='blockwise')` run the kernel,
  which agrees with the reference in value and gradient."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from transformer import attention  # pylint: disable=g-import-not-at-top
  recipe_pages.run('attention_kernel.md', monkeypatch, tmp_path)
  [diff] = recipe_pages.code_blocks('attention_kernel.md', 'diff')
  [kernel] = [code for code in recipe_pages.code_blocks(
      'attention_kernel.md', 'python') if code.startswith('# in ')]
  with open(attention.kernels.__file__, encoding='utf-8') as f:
    source = recipe_pages.apply_diff(f.read(), diff)
  kernels = recipe_pages.load_module(
      'transformer.attention.recipe_kernels', f'{source}\n\n{kernel}',
      monkeypatch, 'kernels.py with the recipe')
  assert 'blockwise' in kernels.IMPLEMENTATIONS
  q, k, v = jax.random.normal(jax.random.key(0), (3, 2, 40, 4, 8))

  def total(implementation, q):
    return kernels.dot_product_attention(
        q, k, v, causal=True, key_lengths=jnp.array([40, 0]),
        implementation=implementation).sum()

  np.testing.assert_allclose(total('blockwise', q), total('einsum', q),
                             rtol=1e-5)
  out = kernels.dot_product_attention(q, k, v, key_lengths=jnp.array([40, 0]),
                                      implementation='blockwise')
  np.testing.assert_array_equal(out[1], 0)  # no key to see: zeros
  np.testing.assert_allclose(jax.grad(total, 1)('blockwise', q),
                             jax.grad(total, 1)('einsum', q), atol=1e-5)


def test_the_data_source_recipe(monkeypatch, tmp_path):
  """The source the page registers reads its files, through the
  translation task too (its first training batch), and is gone after."""
  from transformer import tasks  # pylint: disable=g-import-not-at-top
  from transformer.data import sources  # pylint: disable=g-import-not-at-top
  from transformer.data.generated import offline_mt  # pylint: disable=g-import-not-at-top
  with recipe_pages.sources_restored():
    recipe_pages.run('data_source.md', monkeypatch, tmp_path)
    assert 'tab_separated' in sources.names('pairs')
    # Enough text for the task's SentencePiece vocabulary.
    folder = tmp_path / 'corpus'
    folder.mkdir()
    for split, pairs in offline_mt.splits(400, 20, 20, seed=0).items():
      (folder / f'{split}.tsv').write_text(
          ''.join(f'{source}\t{target}\n' for source, target in pairs))
    config = load_experiment('mt_offline', 'runlocal')
    config.data.update(dict(source='tab_separated', path=str(folder),
                            eval_split='validation', vocab_size=100))
    task = tasks.build(config, str(tmp_path / 'workdir'))
    batch = next(iter(task.train_iter(0)))
    assert batch['inputs'].any() and batch['targets'].any()
  assert 'tab_separated' not in sources.names('pairs')


def test_the_experiment_recipe(monkeypatch, tmp_path, capsys):
  """The page's file loads with and without its argument, passes the
  trainer's checks, and refuses an argument it does not know."""
  from conftest import raises_naming  # pylint: disable=g-import-not-at-top
  from transformer import configs  # pylint: disable=g-import-not-at-top
  recipe_pages.run('experiment.md', monkeypatch, tmp_path)
  assert capsys.readouterr().out.splitlines() == [
      'my_experiment.py 3 3 3000', 'my_experiment.py:runlocal 3 3 20']
  with raises_naming(ValueError, "['runlokal']", 'runlocal'):
    configs.load_experiment('my_experiment.py:runlokal')


def test_the_task_recipe(monkeypatch, tmp_path, capsys):
  """The page's task, named in the registry as its diff says, builds as
  the trainer builds it; its batches match `train_batch_shapes` and
  resume at any step; filler rows are not counted."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from transformer import tasks  # pylint: disable=g-import-not-at-top
  name_task_registry(monkeypatch)
  recipe_pages.run('task.md', monkeypatch, tmp_path)
  assert capsys.readouterr().out.endswith(' on 8 sentences\n')
  config = tasks.default_config('language_id')
  config.data.update(dict(num_train=40, num_eval=7, batch_size=4,
                          eval_batch_size=4))
  task = tasks.build(config, str(tmp_path / 'workdir'), batch_divisor=2)
  batches = task.train_iter(0)
  [next(batches) for _ in range(3)]
  resumed = next(task.train_iter(3))
  np.testing.assert_array_equal(next(batches)['tokens'], resumed['tokens'])
  assert {name: (a.shape, a.dtype) for name, a in resumed.items()} == {
      name: (s.shape, s.dtype) for name, s in task.train_batch_shapes().items()}
  evaluated = list(task.eval_batches())
  assert [len(b['labels']) for b in evaluated] == [4, 4, 4, 4]
  assert (np.concatenate([b['labels'] for b in evaluated]) >= 0).sum() == 14
  saved = tasks.saved_config(config).data
  assert 'num_train' in saved and 'path' not in saved


def name_task_registry(monkeypatch):
  """tasks.TASKS with 'language_id', as the page's diff writes it."""
  from transformer import tasks  # pylint: disable=g-import-not-at-top
  [diff] = recipe_pages.code_blocks('task.md', 'diff')
  with open(tasks.__file__, encoding='utf-8') as f:
    source = recipe_pages.apply_diff(f.read(), diff)
  assert "'referring_expressions', 'language_id')" in source
  monkeypatch.setattr(tasks, 'TASKS', (*tasks.TASKS, 'language_id'))
