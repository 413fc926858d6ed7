"""The results registry (`tools.results`): the tables in README.md and
docs/ are the registry's, a figure whose experiment's code changed is
stale unless marked history, and `record` appends a workdir's value."""

import json
import shutil

import pytest

from conftest import raises_naming
from conftest import write_run
from transformer.tools import results


def test_the_pages_tables_are_the_registrys_and_no_row_is_stale():
  problems = results.render(check=True)
  assert not problems, '\n'.join(problems)


@pytest.fixture
def registry(tmp_path, monkeypatch):
  """A copy of the registry, an experiment file and a page, as REPO."""
  (tmp_path / 'docs' / 'results').mkdir(parents=True)
  shutil.copy(f'{results.REGISTRY}/lm_offline.json', tmp_path / 'docs' /
              'results')
  experiment = tmp_path / 'exp.py'
  experiment.write_text('"""Doc."""\n\ndef get_config():\n  return 1\n')
  row = json.loads((tmp_path / 'docs/results/lm_offline.json').read_text())
  row.update(describes='exp.py', code=results.code_digest(str(experiment)))
  (tmp_path / 'docs/results/lm_offline.json').write_text(json.dumps(row))
  page = tmp_path / 'README.md'
  page.write_text('Intro.\n\n<!-- results: readme -->\nold\n<!-- /results -->\n'
                  'After.\n')
  monkeypatch.setattr(results, 'REPO', str(tmp_path))
  monkeypatch.setattr(results, 'REGISTRY', str(tmp_path / 'docs' / 'results'))
  return tmp_path


def test_an_edited_table_fails_the_check_and_render_restores_it(registry):
  assert any('README.md differs' in p for p in results.render(check=True))
  assert not results.render()
  text = (registry / 'README.md').read_text()
  assert text.startswith('Intro.\n\n<!-- results: readme -->\n| task |')
  assert 'perplexity per subword 8.87 (seed 0)' in text
  assert text.endswith('<!-- /results -->\nAfter.\n')
  assert not results.render(check=True)


def test_a_row_whose_code_changed_is_stale_unless_history(registry,
                                                          monkeypatch):
  experiment = registry / 'exp.py'
  results.render()
  # A reworded docstring or a comment is no change of code.
  experiment.write_text('"""Other words."""\n\n# why\ndef get_config():\n'
                        '  return 1\n')
  assert not results.render(check=True)
  experiment.write_text('"""Doc."""\n\ndef get_config():\n  return 2\n')
  [problem] = results.render(check=True)
  assert 'lm_offline' in problem and 'measure them again' in problem
  # A run of the new code leaves the old runs stale.
  monkeypatch.setattr(results, 'commit', lambda: 'abc1234')  # no git here
  results.record('lm_offline', 'accuracy', 44.0, seed=1)
  assert any('lm_offline' in p and '2 of its runs' in p
             for p in results.render(check=True))
  path = registry / 'docs/results/lm_offline.json'
  row = json.loads(path.read_text())
  path.write_text(json.dumps({**row, 'history': True}))
  # History: no longer stale, and its cell says where it was measured.
  assert results.render(check=True) == [
      'README.md differs from the registry: run python -m '
      'transformer.tools.results render']
  assert not results.render()
  assert 'measured at e8cece7' in (registry / 'README.md').read_text()


def test_record_appends_a_workdirs_last_value_with_where_it_ran(
    registry, tmp_path, monkeypatch):
  monkeypatch.setattr(results, 'commit', lambda: 'abc1234')  # no git here
  workdir = tmp_path / 'run'
  write_run(str(workdir), {100: {'eval/perplexity': 9.5},
                           200: {'eval/perplexity': 8.5}})
  results.record('lm_offline', 'perplexity per subword',
                 results.last_value(str(workdir), 'eval/perplexity'), seed=3)
  row = results.rows()['lm_offline']
  [record] = [r for r in row['records']
              if r['metric'] == 'perplexity per subword']
  run = record['runs'][-1]
  assert run['value'] == 8.5 and run['seed'] == 3
  assert {'commit', 'date', 'machine'} <= set(run)
  assert 'to 8.87' in results.result(record)  # now a range over 2 runs
  with raises_naming(ValueError, "logged no 'eval/bleu'", 'eval/perplexity'):
    results.last_value(str(workdir), 'eval/bleu')
  with raises_naming(FileNotFoundError, 'No registry row', 'write it first'):
    results.record('nope', 'x', 1.0, seed=0)


def test_outside_a_checkout_the_command_says_so(tmp_path, monkeypatch):
  monkeypatch.setattr(results, 'REGISTRY', str(tmp_path / 'none'))
  with raises_naming(FileNotFoundError, 'No results registry',
                     'checkout of the repository'):
    results.render(check=True)
