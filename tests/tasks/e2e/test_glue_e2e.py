"""GLUE fine-tuning runs: each task's metrics (STS-B regression, MNLI
matched and mismatched) and a converted checkpoint's positions cut."""

import re

import numpy as np

from conftest import _glue_data
from conftest import GLUE_FILES
from conftest import load_experiment
from transformer import metrics
from transformer import train
from transformer.tasks import text_classification


def stsb_and_mnli(root):
  rng = np.random.default_rng(0)
  words = 'a dog cat runs sees the big small red'.split()
  sentence = lambda: ' '.join(rng.choice(words, rng.integers(3, 7)))
  stsb_header = GLUE_FILES['stsb'][0].splitlines()[0]
  mnli_header = GLUE_FILES['mnli'][0].splitlines()[0]
  names = ('entailment', 'neutral', 'contradiction')
  for split in ('train', 'dev'):
    lines = [stsb_header] + [
        f'{i}\tg\tf\ty\t0\tn\tn\t{sentence()}\t{sentence()}\t'
        f'{rng.uniform(0, 5):.3f}' for i in range(40)]
    (root / 'stsb').mkdir(exist_ok=True)
    (root / 'stsb' / f'{split}.tsv').write_text('\n'.join(lines) + '\n')
  for split in ('train', 'dev_matched', 'dev_mismatched'):
    lines = [mnli_header] + [
        f'{i}\t1\t1\tg\tx\ty\tx\ty\t{sentence()}\t{sentence()}\tneutral\t'
        f'{names[i % 3]}' for i in range(30)]
    (root / 'mnli').mkdir(exist_ok=True)
    (root / 'mnli' / f'{split}.tsv').write_text('\n'.join(lines) + '\n')


def test_fine_tuning_reports_each_tasks_glue_metrics(tmp_path, capfd):
  stsb_and_mnli(tmp_path)
  config = load_experiment(
      'glue', f'task=stsb,source=tsv,path={tmp_path / "stsb"},runlocal')
  result = train.train_and_evaluate(config, str(tmp_path / 'stsb_run'))
  # A pair task counts pairs: its data line, progress and TensorBoard.
  out = capfd.readouterr().out
  assert re.search(r'Training data: [\d,]+ pairs,', out), out
  assert re.search(r'pairs/s [\d,]+', out) and 'sentences' not in out, out
  assert 'train/pairs_per_second' in metrics.read_scalars(
      str(tmp_path / 'stsb_run'))
  assert {'pearson', 'spearman', 'loss'} <= set(result)
  assert 'accuracy' not in result and -1 <= result['pearson'] <= 1
  config = load_experiment(
      'glue', f'task=mnli,source=tsv,path={tmp_path / "mnli"},runlocal')
  result = train.train_and_evaluate(config, str(tmp_path / 'mnli_run'))
  assert {'accuracy', 'accuracy_mismatched'} <= set(result)
  task = text_classification.TextClassificationTask(
      config, str(tmp_path / 'mnli_run'))
  assert task.model.config.num_classes == 3


def test_fine_tuning_from_a_converted_checkpoint_cuts_its_positions(
    converted_bert, tmp_path):
  """BERT's 512 positions, rows of 128 tokens: the table is cut, not
  refused; every batch holds 32 pairs (the last of an epoch fewer)."""
  _glue_data(tmp_path, 40)
  config = load_experiment('glue', f'task=rte,glue_dir={tmp_path}/glue_data,'
                           f'init_from={converted_bert},epochs=1')
  assert config.train.num_steps == 2
  task = text_classification.TextClassificationTask(config,
                                                    str(tmp_path / 'w'))
  batches = task.train_iter(0)
  rows = sorted(int((next(batches)['targets'][:, 0] > 0).sum())
                for _ in range(2))
  assert rows == [8, 32]
  train.train_and_evaluate(config, str(tmp_path / 'tuned'))
  from transformer import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  params = workdir_lib.restore(str(tmp_path / 'tuned')).params
  assert params['positions']['embedding'].shape[0] == 128
