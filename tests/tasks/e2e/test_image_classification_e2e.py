"""The image-classification task end to end: training, resume, the
experiments, prediction and fine-tuning from a trained ViT."""

import os

import jax
import numpy as np
import pytest

from conftest import load_experiment
from conftest import write_mnist
from transformer import checkpoints
from transformer import optimizers
from transformer import train
from transformer import workdir as workdir_lib
from transformer.data import image_batches
from transformer.tasks import image_classification as ic


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  config = load_experiment('vit_offline', 'runlocal')
  config.optimizer.schedule = 'constant'  # see the resume test
  workdir = str(tmp_path_factory.mktemp('vit'))
  return config, workdir, train.train_and_evaluate(config, workdir)


def test_training_runs_with_every_augmentation_and_reports_metrics(trained):
  config, workdir, result = trained
  assert config.data.randaugment_layers and config.data.mixup_alpha
  for key in ('loss', 'accuracy', 'top5_accuracy'):
    assert np.isfinite(result[key])
  assert 0 <= result['accuracy'] <= result['top5_accuracy'] <= 1
  assert sorted(checkpoints.manager(workdir, read_only=True).all_steps()) == [
      3, 6]


def test_resume_ends_with_identical_parameters(trained, tmp_path):
  config, full_workdir, _ = trained
  # The interrupted run is the same config stopped at step 3: a constant
  # schedule keeps its learning rates those of the 6-step run.
  assert config.optimizer.schedule == 'constant'
  partial = config.copy_and_resolve_references()
  partial.train.num_steps = 3
  workdir = str(tmp_path)
  train.train_and_evaluate(partial, workdir)
  train.train_and_evaluate(config, workdir)
  resumed = workdir_lib.restore(workdir)
  reference = workdir_lib.restore(full_workdir).params
  assert resumed.step == 6
  jax.tree.map(np.testing.assert_array_equal, resumed.params, reference)


@pytest.mark.slow
def test_the_default_vit_experiment_learns_the_shapes(tmp_path):
  """The offline experiment as the README runs it: far beyond chance (10%)
  on held-out shapes. About 8 minutes on 2 CPU cores."""
  config = load_experiment('vit_offline')
  result = train.train_and_evaluate(config, str(tmp_path))
  assert result['accuracy'] > 0.6


def test_mnist_experiment_on_idx_files(tmp_path):
  write_mnist(tmp_path, train=24, test=10)
  config = load_experiment('vit_mnist', f'path={tmp_path},runlocal')
  task = ic.ImageClassificationTask(config, str(tmp_path / 'work'))
  assert task.num_channels == 1 and len(task.class_names) == 10
  result = train.train_and_evaluate(config, str(tmp_path / 'work'))
  assert np.isfinite(result['loss'])


def test_folder_source_resizes_to_load_size(tmp_path):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  for split in ('train', 'test'):
    for name in ('cat', 'dog'):
      os.makedirs(tmp_path / split / name)
      for i in range(3):
        Image.new('RGB', (40, 30), (i * 50, 0, 0)).save(
            tmp_path / split / name / f'{i}.jpg')
  config = load_experiment('vit_offline', 'runlocal')
  config.data.update(dict(source='folder', path=str(tmp_path), load_size=20))
  pictures, labels, names = image_batches.read_split(config.data, 'train')
  assert pictures.shape == (6, 20, 20, 3) and names == ('cat', 'dog')
  result = train.train_and_evaluate(config, str(tmp_path / 'work'))
  assert np.isfinite(result['loss'])


def test_predict_tool_and_attention_maps(trained, tmp_path):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  from transformer.tools import predict  # pylint: disable=g-import-not-at-top
  _, workdir, _ = trained
  restored = workdir_lib.restore(workdir)
  task = restored.task
  pictures, _, _ = task.images.split('test')
  paths = []
  for i in range(2):
    paths.append(str(tmp_path / f'image{i}.png'))
    Image.fromarray(pictures[i]).save(paths[i])
  predictions, step = predict.classify(
      workdir, paths, top_k=3, attention_dir=str(tmp_path / 'maps'))
  assert step == 6
  probabilities = task.predict(restored.params, pictures[:2])
  for (path, best), row, expected in zip(predictions, probabilities, paths):
    assert path == expected and len(best) == 3
    assert best[0] == (task.class_names[row.argmax()],
                       pytest.approx(row.max(), abs=1e-6))
    name = os.path.splitext(os.path.basename(path))[0]
    assert os.path.getsize(tmp_path / 'maps' / f'{name}_attention.png') > 5_000
    for k in range(task.model_config.num_layers):
      assert os.path.getsize(tmp_path / 'maps' / f'{name}_layer_{k}.png') > 5_000
  assert os.path.exists(os.path.join(workdir, 'plots', 'attention_step6.png'))


@pytest.mark.slow  # the ImageNet experiment runs the same path by default
def test_cifar10_experiment_under_mock_tfds(tmp_path):
  tfds = pytest.importorskip('tensorflow_datasets')
  config = load_experiment('vit_cifar10', 'runlocal')
  assert config.train.num_steps == 4
  paper = load_experiment('vit_cifar10')
  assert (paper.model.num_layers, paper.model.d_model, paper.model.num_heads,
          paper.model.d_ff) == (7, 256, 4, 512)
  assert paper.train.num_steps == 300 * 390
  with tfds.testing.mock_data(num_examples=16):
    result = train.train_and_evaluate(config, str(tmp_path))
  assert np.isfinite(result['loss'])


def test_fine_tuning_at_a_higher_resolution_resizes_positions(trained,
                                                              tmp_path):
  from transformer.models import vit  # pylint: disable=g-import-not-at-top
  config, source, _ = trained
  finetune = load_experiment('vit_finetune',
                             f'init_from={source},image_size=24,runlocal')
  assert finetune.optimizer.name == 'sgd' and finetune.data.image_size == 24
  trainer = train.Trainer(finetune, str(tmp_path))
  assert trainer.task.model_config.grid_size == 6
  pretrained = workdir_lib.restore(source).params
  params = train.warm_start(trainer, trainer.initialise().params)
  np.testing.assert_allclose(
      params['pos_embedding'], vit.resize_position_embedding(
          pretrained['pos_embedding'], 6, has_class_token=True), rtol=1e-6)
  np.testing.assert_array_equal(params['head']['kernel'],
                                pretrained['head']['kernel'])
  result = train.train_and_evaluate(finetune, str(tmp_path))
  assert np.isfinite(result['loss'])


def test_fine_tuning_on_other_classes_restarts_the_classifier(trained,
                                                               tmp_path):
  _, source, _ = trained
  from PIL import Image  # pylint: disable=g-import-not-at-top
  for split in ('train', 'test'):
    for name in ('a', 'b', 'c'):
      os.makedirs(tmp_path / 'data' / split / name)
      Image.new('RGB', (16, 16), (len(name) * 80, 9, 9)).save(
          tmp_path / 'data' / split / name / '0.png')
  finetune = load_experiment(
      'vit_finetune', f'init_from={source},source=folder,'
      f'path={tmp_path / "data"},image_size=16,runlocal')
  finetune.data.update(dict(batch_size=2, eval_batch_size=2))
  trainer = train.Trainer(finetune, str(tmp_path / 'work'))
  params = train.warm_start(trainer, trainer.initialise().params)
  assert params['head']['kernel'].shape == (32, 3)
  np.testing.assert_array_equal(params['head']['kernel'], 0.0)


def test_fine_tuning_rgb_to_grey_sums_the_patch_kernels(trained, tmp_path):
  _, source, _ = trained
  write_mnist(tmp_path, train=8, test=4, side=16)
  rng = np.random.default_rng(0)
  finetune = load_experiment(
      'vit_finetune', f'init_from={source},source=mnist,path={tmp_path},'
      f'image_size=16,runlocal')
  finetune.data.update(dict(batch_size=4, eval_batch_size=4))
  trainer = train.Trainer(finetune, str(tmp_path / 'work'))
  source_run = workdir_lib.restore(source)
  pretrained = source_run.params
  params = train.warm_start(trainer, trainer.initialise().params)
  kernel = pretrained['embedding']['kernel']
  np.testing.assert_allclose(params['embedding']['kernel'],
                             kernel.sum(axis=2, keepdims=True), rtol=1e-6)
  # Ten digits are not the ten shapes: same shape, new classifier.
  assert params['head']['kernel'].shape == pretrained['head']['kernel'].shape
  np.testing.assert_array_equal(params['head']['kernel'], 0.0)
  # A grey image through the grey model = the same image in every colour
  # channel through the colour model (before the classifier).
  grey = rng.integers(0, 256, (2, 16, 16, 1)).astype(np.uint8)
  model, source_model = trainer.task.model, source_run.task.model
  embed = lambda m, p, x: m.apply({'params': p}, trainer.task.inputs(x),
                                  method='embed_patches')
  np.testing.assert_allclose(embed(model, params, grey),
                             embed(source_model, pretrained,
                                   np.repeat(grey, 3, -1)),
                             rtol=1e-4, atol=1e-4)


def test_weight_decay_spares_class_token_positions_biases_and_norms(trained):
  config, workdir, _ = trained
  params = workdir_lib.restore(workdir).params
  mask = optimizers.decay_mask(params, config.optimizer.weight_decay_skip)
  assert not mask['cls'] and not mask['pos_embedding']
  assert mask['embedding']['kernel'] and mask['head']['kernel']
  assert not mask['head']['bias']
  layer = mask['encoder']['layer_0']
  assert layer['self_attention']['query']['kernel']
  assert not layer['attention_sublayer']['norm']['scale']
  # Without the skip list (the language models' setting) they are decayed.
  assert optimizers.decay_mask(params, ())['pos_embedding']
