"""The results registry (`tools.results`): the tables in README.md and
docs/ are the registry's, a figure whose experiment's code changed is
stale unless marked history, and `record` appends a workdir's value."""

import json
import re
import shutil

import pytest

from conftest import raises_naming
from conftest import REPO
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


def test_typed_figures_are_found_unless_rendered_or_declared():
  text = '\n'.join([
      '| size | params |', '|---|---|', '| mini | 5,661,696 |', '',  # 1
      '<!-- not measured: counts from the config -->',
      '| size | params |', '|---|---|', '| mini | 5,661,696 |', '',
      '<!-- results: table:x -->', '| a | b |', '|---|---|', '| 1 | 2 |',
      '<!-- /results -->', '',
      '| flag | meaning |', '|---|---|', '| `--x` | the thing |', '',
      '```bash', 'python benchmarks/attention.py --length=128', '```', '',
      '```', '  kernel  ms', '-' * 24, '  xla  2.50', '```'])  # line 24
  assert results.typed_tables(text) == [1, 24]


def test_a_captured_table_renders_with_where_it_ran_and_goes_stale(
    registry, monkeypatch):
  monkeypatch.setattr(results, 'commit', lambda: 'abc1234')  # no git here
  bench = registry / 'bench.py'
  bench.write_text('"""A benchmark."""\nprint(1)\n')
  output = '  kernel  ms\n' + '-' * 24 + '\n     xla 2.50\n'
  page = registry / 'docs' / 'page.md'
  page.write_text('Speed:\n\n<!-- results: table:speed -->\n'
                  '<!-- /results -->\n')
  with raises_naming(FileNotFoundError, 'No registry table', 'capture it'):
    results.render(check=True)
  monkeypatch.setattr(results, 'changed_since_commit', lambda path: True)
  with raises_naming(ValueError, 'bench.py has changes not committed',
                     'commit it first'):
    results.capture('speed', 'python bench.py', output, describes='bench.py')
  monkeypatch.setattr(results, 'changed_since_commit', lambda path: False)
  results.capture('speed', 'python bench.py', output, describes='bench.py')
  assert not results.render()
  text = page.read_text()
  assert '```\n' + output + '```\n' in text
  assert 'measured at abc1234' in text and 'tables/speed' in text
  assert not results.render(check=True)
  bench.write_text('"""A benchmark."""\nprint(2)\n')  # its code changed
  [problem] = results.render(check=True)
  assert 'tables/speed' in problem and 'capture it again' in problem
  page.write_text('No marker now.\n')
  assert any('tables/speed is shown on no page' in p
             for p in results.render(check=True))
  with raises_naming(ValueError, 'Nothing to capture', 'pipe'):
    results.capture('empty', 'python bench.py', '\n')


def test_a_table_file_holds_its_cells_or_its_output(registry):
  folder = registry / 'docs' / 'results' / 'tables'
  folder.mkdir()
  base = dict(command='c', machine='m', commit='abc', date='2026-11-29')
  (folder / 'both.json').write_text(json.dumps(
      {**base, 'output': 'x', 'rows': []}))
  with raises_naming(ValueError, 'both.json', 'exactly one of'):
    results.table('both')
  (folder / 'ragged.json').write_text(json.dumps(
      {**base, 'columns': ['a', 'b'], 'rows': [['1', '2'], ['3']]}))
  with raises_naming(ValueError, 'ragged.json', 'rows of [1] cells'):
    results.table('ragged')
  (folder / 'bare.json').write_text(json.dumps({'output': 'x'}))
  with raises_naming(ValueError, 'bare.json', "lacks ['command'"):
    results.table('bare')
  (folder / 'grid.json').write_text(json.dumps(
      {**base, 'source': 'typed', 'history': True, 'columns': ['a', 'b|c'],
       'rows': [['1', '']], 'align': ['---', '---:']}))
  assert results.render_measured('grid') == (
      '| a | b\\|c |\n|---|---:|\n| 1 |  |\n\n*m; in the docs since abc '
      '(2026-11-29), earlier code; registry `tables/grid`.*\n')


def test_the_scaling_plans_are_checked_against_their_records(registry):
  shutil.copy(f'{REPO}/docs/scaling.json', registry / 'docs')
  page = registry / 'docs' / 'scaling.md'
  page.write_text('# Scaling\n')
  assert any('scaling.md differs' in p for p in results.render(check=True))
  assert not results.render()  # the block written from docs/scaling.json
  text = page.read_text()
  assert text.startswith('# Scaling\n') and '| v5e-16 (`v5e:4x4`) |' in text
  assert results.typed_tables(text) == []
  page.write_text(text.replace('| v5e-16', '| v5e-32'))  # edited by hand
  assert any('scaling.md differs' in p for p in results.render(check=True))


def test_figures_typed_into_prose_are_found_unless_rendered_or_declared():
  text = '\n'.join([
      'The run took 6 min 54 s and reached BLEU 99.95.',  # 1: three
      'It trains `--steps=1000` [a page](x.md#10%) <!-- 2.5 s -->.',
      '',
      '<!-- not measured: the paper\'s figures -->',
      'The paper reports 27.3 BLEU in 3.5 days.',
      '',
      'Ours: <!-- figure: r/BLEU -->99.95<!-- /figure --> at 1.09x speed,',
      'on 16 GiB; a 8 x 256 batch of v5e:16x16.',  # 8
      '',
      '| a | 2.5 s |', '',
      '```', 'took 9.1 s', '```',
      '<!-- figure: r/BLEU -->1<!-- /figure --> opens a line.',  # 15
      'Seeds reached 99.84 and 0.889 (41.7 at most, -0.17); dropout 0.1 on',
      'Python 3.11.'])
  assert results.typed_prose(text) == [
      (1, '6 min'), (1, '54 s'), (1, 'BLEU 99.95'), (7, '1.09x'),
      (8, '16 GiB'), (16, '99.84'), (16, '0.889'), (16, '41.7'),
      (16, '0.17')]
  assert results.typed_figures.figures_opening_lines(text) == [15]


def test_inline_figures_render_records_and_table_cells(registry):
  folder = registry / 'docs' / 'results' / 'tables'
  folder.mkdir()
  base = dict(command='c', machine='m', commit='abc', date='2026-11-29')
  (folder / 'speed.json').write_text(json.dumps({**base, 'output': (
      'gpt2, 12 blocks\n| model | ms | tok/s |\n|---|---|---|\n'
      '| `llama` | 9,359 | 219 |\n| gpt2 | 9,270 | 221 |\n\n'
      '| model | MB |\n|---|---|\n| llama | 819.62 |')}))
  (folder / 'grid.json').write_text(json.dumps(
      {**base, 'columns': ['heads', 'BLEU'], 'rows': [['24', '40.20']]}))
  page = registry / 'docs' / 'page.md'
  page.write_text(
      '<!-- results: table:speed -->\n<!-- /results -->\n'
      '<!-- results: table:grid -->\n<!-- /results -->\n'
      'Llama at <!-- figure: table:speed|llama|tok/s -->1<!-- /figure -->'
      ' tokens a second, <!-- figure: table:speed|llama|MB --><!-- /figure'
      ' -->; all heads <!-- figure: table:grid|24|BLEU --><!-- /figure -->'
      '; perplexity <!-- figure: lm_offline/perplexity per subword -->'
      '<!-- /figure -->.\n')
  assert any('page.md differs' in p for p in results.render(check=True))
  assert not results.render()
  text = page.read_text()
  assert ('Llama at <!-- figure: table:speed|llama|tok/s -->219<!-- '
          '/figure --> tokens a second, <!-- figure: table:speed|llama|MB '
          '-->819.62<!-- /figure -->; all heads <!-- figure: '
          'table:grid|24|BLEU -->40.20<!-- /figure -->; perplexity '
          '<!-- figure: lm_offline/perplexity per subword -->8.87<!-- '
          '/figure -->.') in text
  assert not results.render(check=True)
  page.write_text(text.replace('|tok/s', '|tokens'))
  with raises_naming(ValueError, 'tables/speed has no cell |llama|tokens',
                     'by its header'):
    results.render(check=True)
  page.write_text('<!-- figure: lm_offline/BLEU --><!-- /figure -->\n')
  with raises_naming(ValueError, "lm_offline/BLEU", 'records no'):
    results.render(check=True)


def test_experiments_name_registry_records_instead_of_run_logs():
  """What an experiment measured is in the registry, named from its
  docstring (`registry row NAME`, `registry table NAME`,
  docs/results/NAME.json), not retyped
  there: a paragraph that says what was measured holds no figure."""
  import ast  # pylint: disable=g-import-not-at-top
  import glob  # pylint: disable=g-import-not-at-top
  from transformer.tools import typed_figures  # pylint: disable=g-import-not-at-top
  rows, tables = results.rows(), results.table_names()
  named = 0
  for path in glob.glob(f'{REPO}/transformer/experiments/**/*.py',
                        recursive=True):
    with open(path, encoding='utf-8') as f:
      doc = ast.get_docstring(ast.parse(f.read())) or ''
    for paragraph in doc.split('\n\n'):
      if 'easured' not in paragraph and 'Expected result' not in paragraph:
        continue
      figures = [m.group(0) for m in typed_figures.MEASURED.finditer(
          paragraph)]
      assert not figures, f'{path}: {figures} typed; name the record'
      for kind, name in re.findall(r'registry (row|table) `(\w+)`',
                                   paragraph):
        assert name in (rows if kind == 'row' else tables), (path, name)
        named += 1
      for name in re.findall(r'docs/results/(\w+)\.json', paragraph):
        assert name in rows, (path, name)
        named += 1
  assert named >= 9


def test_means_round_half_up_as_written():
  """42.235, the mean of 42.64 and 41.83, is 42.23499... as a float: it
  shows as 42.24, as the page's reader would round it."""
  record = {'metric': 'BLEU', 'runs': [{'value': 42.64}, {'value': 41.83}]}
  assert results.result(record) == 'BLEU 41.83 to 42.64 (mean 42.24; 2 runs)'
  assert results.result({'metric': 'time', 'digits': 0, 'unit': ' s',
                         'runs': [{'value': 13420}, {'value': 15018}]}) == (
                             'time 13,420 s to 15,018 s (mean 14,219 s; 2 '
                             'runs)')
