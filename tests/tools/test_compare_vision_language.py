"""The vision-and-language comparison: its plan, table and plot (end to
end under runlocal: e2e/test_compare_vision_language_e2e.py)."""

import pytest

from transformer.data.generated import scenes
from transformer.tools import compare_vision_language as compare


def test_plan_pretrains_before_the_runs_that_start_from_it():
  runs = compare.plan(['two_stream', 'single_stream'], pretrain_steps=7,
                      vqa_steps=5)
  names = [r.name for r in runs]
  assert names == ['two_stream', 'two_stream_vqa', 'two_stream_vqa_scratch',
                   'two_stream_refer', 'two_stream_refer_scratch',
                   'single_stream', 'single_stream_vqa',
                   'single_stream_vqa_scratch', 'single_stream_refer',
                   'single_stream_refer_scratch', 'question_only']
  for run in runs:
    if run.init_from:
      assert names.index(run.init_from) < names.index(run.name)
      assert run.architecture == run.init_from
    assert (run.init_from == '') == (run.name.endswith('_scratch') or
                                     run.name in ('two_stream',
                                                  'single_stream',
                                                  'question_only'))
  steps = {r.name: r.steps for r in runs}
  assert steps['two_stream'] == 7 and steps['single_stream_vqa'] == 5
  assert steps['two_stream_refer'] == 0  # the experiment's own
  assert runs[-1].experiment == 'vilbert_vqa.py:blind'
  with pytest.raises(ValueError, match='two_streams'):
    compare.plan(['two_streams'])


def _results(architectures):
  """Distinct made-up metrics for every run, to check where each lands."""
  results = {}
  for number, run in enumerate(compare.plan(architectures)):
    r = {'accuracy': number / 100, 'params': 1000 + number,
         'minutes': float(number), 'steps': 10 * number}
    r.update({f'accuracy_{k}': (number + i / 10) / 100
              for i, k in enumerate(scenes.QUESTION_TYPES)})
    r.update({f'{w}_retrieval_r{k}': (number + k / 10) / 100
              for w in ('image', 'caption') for k in (1, 5, 10)})
    results[run.name] = r
  return results


def test_table_puts_each_runs_metrics_in_its_row(tmp_path):
  results = _results(['two_stream'])
  table = compare.rows(results, ['two_stream'])
  assert [(r['model'], r['pretrained']) for r in table] == [
      ('two-stream (ViLBERT)', True), ('two-stream (ViLBERT)', False),
      ('question only (no image)', False)]
  text = compare.write_table(table, results, str(tmp_path / 'c.md'))
  lines = text.splitlines()
  pretrained = next(l for l in lines if '| yes |' in l)
  # VQA is run 1, referring run 3, retrieval from the pretraining (run 0);
  # the time is the three runs' sum.
  assert '| 1.0 | 1.0 | 1.1 | 1.2 | 1.3 | 1.4 | 3.0 |' in pretrained
  assert '| 0.1 / 0.5 / 1.0 |' in pretrained
  assert '| 1,001 | 4.0 min |' in pretrained
  scratch = next(l for l in lines if l.startswith('| two-stream') and
                 '| no |' in l)
  assert '| 2.0 | 2.0 |' in scratch and '| 4.0 | - | - |' in scratch
  assert '| 6.0 min |' in scratch  # runs 2 and 4
  blind = next(l for l in lines if l.startswith('| question only'))
  assert '| 5.0 |' in blind and '| - | - | - |' in blind
  compare.plot(table, str(tmp_path / 'c.png'))
  assert (tmp_path / 'c.png').stat().st_size > 10_000
