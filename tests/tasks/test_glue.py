"""GLUE: each task's official TSV layout and TFDS features read into
(a, b, label) rows, the metrics against scikit-learn's and scipy's
definitions, BERT's pair encoding (token types, longest-first truncation),
the offline pair tasks' labels, and a converted checkpoint's recipe.
Fine-tuning runs that report the task's metrics (STS-B regression, MNLI
matched and mismatched): e2e/test_glue_e2e.py."""

import collections

import numpy as np
import pytest
from scipy import stats

from conftest import _glue_data
from conftest import GLUE_FILES
from conftest import load_experiment
from conftest import raises_naming
from transformer import metrics
from transformer.data import glue
from transformer.data import tokenization
from transformer.models import encoder
from transformer.tasks import text_classification

sklearn_metrics = pytest.importorskip('sklearn.metrics')


def test_metrics_equal_sklearn_and_scipy():
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 3, 200)
  predictions = np.where(rng.random(200) < 0.6, labels,
                         rng.integers(0, 3, 200))
  assert metrics.matthews(predictions, labels) == pytest.approx(
      sklearn_metrics.matthews_corrcoef(labels, predictions))
  binary, truth = predictions % 2, labels % 2
  assert metrics.matthews(binary, truth) == pytest.approx(
      sklearn_metrics.matthews_corrcoef(truth, binary))
  assert metrics.f1(binary, truth) == pytest.approx(
      sklearn_metrics.f1_score(truth, binary))
  assert metrics.matthews(np.ones(5), np.ones(5)) == 0.0  # undefined
  scores = np.round(rng.uniform(0, 5, 100), 1)  # ties
  guesses = scores + rng.normal(0, 1, 100)
  assert metrics.pearson(guesses, scores) == pytest.approx(
      stats.pearsonr(guesses, scores)[0])
  assert metrics.spearman(np.round(guesses), scores) == pytest.approx(
      stats.spearmanr(np.round(guesses), scores)[0])


def test_pairs_cut_the_longer_sentence_first_and_type_the_second():
  a, b = text_classification.truncate_pair(list(range(10)), [1, 2, 3], 8)
  assert (a, b) == ([0, 1, 2, 3, 4], [1, 2, 3])
  a, b = text_classification.truncate_pair([1, 2, 3], [4, 5, 6], 4)
  assert (a, b) == ([1, 2], [4, 5])
  eos = tokenization.EOS_ID
  tokens = np.array([[eos, 7, 8, eos, 9, eos, 0, 0]])
  np.testing.assert_array_equal(encoder.pair_token_types(tokens, eos, eos),
                                [[0, 0, 0, 0, 1, 1, 0, 0]])
  sep = 5  # a vocabulary's own [SEP]
  tokens = np.array([[eos, 7, sep, 9, 9, sep, 0]])
  np.testing.assert_array_equal(encoder.pair_token_types(tokens, sep, eos),
                                [[0, 0, 0, 1, 1, 1, 0]])


EXPECTED_LABELS = {'cola': [1, 0], 'sst2': [1, 0], 'mrpc': [1], 'qqp': [0],
                   'stsb': [5.0], 'mnli': [2], 'qnli': [1], 'rte': [0],
                   'wnli': [1]}


@pytest.mark.parametrize('task', sorted(GLUE_FILES))
@pytest.mark.parametrize('encoding', ['utf-8', 'utf-8-sig'])
def test_official_tsv_layouts(task, tmp_path, encoding):
  """As published, and saved with a byte-order mark (Excel's 'UTF-8'),
  which is no part of the header's first column."""
  content, second = GLUE_FILES[task]
  (tmp_path / 'train.tsv').write_text(content, encoding=encoding)
  rows = glue.read_tsv(task, str(tmp_path / 'train.tsv'))
  assert [label for *_, label in rows] == EXPECTED_LABELS[task]
  assert rows[0][1] == second  # None for single sentences
  assert isinstance(rows[0][0], str) and rows[0][0]
  assert not rows[0][0].startswith('\ufeff')


def test_bad_glue_files_are_named(tmp_path, caplog):
  path = tmp_path / 'dev.tsv'
  path.write_text('index\tsentence1\tsentence2\tlabel\n0\ta\tb\tmaybe\n')
  with raises_naming(ValueError, 'dev.tsv line 2', "'maybe'",
                     "('entailment', 'not_entailment')"):
    glue.read_tsv('rte', str(path))
  with raises_naming(ValueError, 'dev.tsv', "'question'", 'qnli'):
    glue.read_tsv('qnli', str(path))
  with raises_naming(FileNotFoundError, 'dev_matched.tsv',
                     'config.data.path'):
    glue.tsv_path(str(tmp_path), 'mnli', 'dev_matched')
  with raises_naming(ValueError, "'squad'", "'cola'", "'wnli'"):
    glue.spec('squad')
  # QQP's train.tsv has short lines: counted and reported, not silent.
  (tmp_path / 'qqp.tsv').write_text(GLUE_FILES['qqp'][0])
  assert len(glue.read_tsv('qqp', str(tmp_path / 'qqp.tsv'))) == 1
  assert 'left out 1 lines' in caplog.text


@pytest.mark.parametrize('task', ['mrpc', 'stsb', 'mnli'])
def test_tfds_glue_features_under_mock_data(task):
  tfds = pytest.importorskip('tensorflow_datasets')
  split = glue.spec(task).eval_split[0]
  with tfds.testing.mock_data(num_examples=4):
    rows = glue.read_tfds(task, split, None)
  assert len(rows) == 4
  for a, b, label in rows:
    assert isinstance(a, str) and isinstance(b, str)
    assert (0 <= label <= 5) if task == 'stsb' else label in range(
        glue.spec(task).num_classes)


def test_offline_entailment_labels_follow_the_words():
  rows = glue.offline_pairs('entailment', 300, 0, 'train')
  counts = np.bincount([int(label) for *_, label in rows], minlength=3)
  assert counts.min() > 60
  for a, b, label in rows:
    a, b = a.split(), b.split()
    added = collections.Counter(b) - collections.Counter(a)
    dropped = collections.Counter(a) - collections.Counter(b)
    if label == 0:  # modifiers dropped ('an old cat' -> 'a cat')
      assert len(b) < len(a) and set(added) <= {'a', 'an'}
    elif label == 1:  # one adjective added ('a cat' -> 'an old cat')
      assert len(b) == len(a) + 1 and set(dropped) <= {'a'}
      assert sum(added.values()) == 1 + sum(dropped.values())
    else:  # a verb or a noun replaced
      assert len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1
  paraphrases = glue.offline_pairs('paraphrase', 200, 0, 'train')
  assert 60 < sum(label for *_, label in paraphrases) < 140
  assert glue.offline_pairs('paraphrase', 5, 0, 'test') != paraphrases[:5]


def test_pairs_are_encoded_as_bert_reads_them(tmp_path):
  config = load_experiment('glue', 'task=paraphrase,runlocal')
  task = text_classification.TextClassificationTask(config, str(tmp_path))
  tokens, target = task.examples('train')[0]
  a, b, label = task.rows('train')[0]
  eos = tokenization.EOS_ID
  assert tokens[0] == eos and tokens[-1] == eos
  assert (tokens == eos).sum() == 3 and target[0] == label + 1
  first = task.tokenizer.encode(a, add_eos=False)
  np.testing.assert_array_equal(tokens[1:1 + len(first)], first)
  assert task.tokenizer.decode(tokens[len(first) + 2:]) == b


def test_a_converted_checkpoint_gets_the_measured_recipe(converted_bert,
                                                         tmp_path):
  """From a converted BERT, glue.py fine-tunes as benchmarks/
  against_transformers.py measured it: batches of 32 rows of at most 128
  tokens, AdamW with linear decay to 0, steps for the recipe's epochs; an
  own pretraining keeps the experiment's defaults."""
  _glue_data(tmp_path, 70)
  glue_dir = tmp_path / 'glue_data'
  config = load_experiment('glue', f'task=rte,glue_dir={glue_dir},'
                           f'init_from={converted_bert}')
  assert config.data.path == str(glue_dir / 'RTE')
  assert (config.data.max_length, config.data.batch_rows) == (128, 32)
  assert config.optimizer.schedule == 'linear'
  # Pairs padded to multiples of 32 tokens, single sentences of 8.
  assert config.data.length_multiple == 32
  cola = tmp_path / 'glue_data' / 'CoLA'
  cola.mkdir()
  for split in ('train', 'dev'):
    (cola / f'{split}.tsv').write_text('src\t1\t\tA cat sat.\n' * 40)
  single = load_experiment('glue', f'task=cola,glue_dir={glue_dir},'
                           f'init_from={converted_bert}')
  assert single.data.length_multiple == 8
  epochs = 3  # glue.CONVERTED's
  assert config.train.num_steps == epochs * 3  # 70 pairs: 3 batches of 32
  assert config.train.eval_every == config.train.num_steps
  longer = load_experiment('glue', f'task=rte,glue_dir={glue_dir},'
                           f'init_from={converted_bert},epochs=10')
  assert longer.train.num_steps == 30
  with raises_naming(ValueError, 'epochs=0', '>= 1'):
    load_experiment('glue', f'task=rte,glue_dir={glue_dir},epochs=0')


def test_the_linear_schedule_decays_to_zero_as_bert_and_transformers():
  import ml_collections  # pylint: disable=g-import-not-at-top
  from transformer import optimizers  # pylint: disable=g-import-not-at-top
  settings = ml_collections.ConfigDict(dict(
      name='adam', schedule='linear', learning_rate=1e-3, warmup_steps=10,
      b1=0.9, b2=0.999, eps=1e-8, grad_clip_norm=0.0, weight_decay=0.0,
      weight_decay_skip=(), end_learning_rate_ratio=0.1, mu_dtype='float32'))
  _, schedule = optimizers.build(settings, 110)
  # transformers' get_linear_schedule_with_warmup: s / warmup, then
  # (total - s) / (total - warmup).
  for step in (0, 5, 10, 60, 109, 110):
    expected = (step / 10 if step < 10 else (110 - step) / 100) * 1e-3
    assert float(schedule(step)) == pytest.approx(expected, abs=1e-9)


def test_the_glue_table_reads_tsv_folders_from_a_converted_checkpoint(
    converted_bert, tmp_path, monkeypatch):
  from conftest import REPO  # pylint: disable=g-import-not-at-top
  from transformer.reproduce import specs  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  import shutil  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(tmp_path)
  # The data folder: GLUE's tasks in its glue/, RTE there, CoLA not.
  monkeypatch.setenv('TRANSFORMER_DATA', str(tmp_path / 'data'))
  _glue_data(tmp_path, 40)
  (tmp_path / 'data').mkdir()
  (tmp_path / 'glue_data').rename(tmp_path / 'data' / 'glue')
  shutil.copytree(converted_bert, tmp_path / 'workdirs' / 'minilm')
  spec = specs.load_spec(os.path.join(REPO, 'experiments', 'paper',
                                      'devlin2019_glue.py'))
  rte = next(row for row in spec.ROWS if row.name == 'rte')
  setup = specs.setup(spec, rte, 'minilm')
  assert not setup.problem, setup.problem
  assert setup.config.data.source == 'tsv'
  assert setup.config.data.path == str(tmp_path / 'data' / 'glue' / 'RTE')
  assert setup.config.data.tokenizer == 'bert'
  cola = next(row for row in spec.ROWS if row.name == 'cola')
  assert 'data/glue/CoLA' in specs.setup(spec, cola, 'minilm').problem


def test_an_empty_split_is_refused_naming_it(tmp_path):
  """An empty CoLA dev.tsv once ended a run with exit 0 and 'matthews 0',
  a score over no sentences."""
  from conftest import load_experiment  # pylint: disable=g-import-not-at-top
  from transformer.tasks import text_classification  # pylint: disable=g-import-not-at-top
  (tmp_path / 'train.tsv').write_text(GLUE_FILES['cola'][0])
  (tmp_path / 'dev.tsv').write_text('')
  config = load_experiment('glue', f'task=cola,path={tmp_path},runlocal')
  task = text_classification.TextClassificationTask(config,
                                                    str(tmp_path / 'w'))
  assert task.rows('train')
  with raises_naming(ValueError, "'dev' split", "source='tsv'",
                     f'config.data.path={tmp_path}', 'has no rows'):
    task.rows('dev')
  # An empty train.tsv is named as the data, not as the vocabulary that
  # would have been trained on it.
  (tmp_path / 'train.tsv').write_text('')
  with raises_naming(ValueError, "'train' split",
                     f'config.data.path={tmp_path}', 'has no rows'):
    text_classification.TextClassificationTask(config, str(tmp_path / 'w2'))
