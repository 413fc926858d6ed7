"""The curves command: runs' TensorBoard scalars as one figure and a table
of last values with their mean and range; event files cut short or
damaged."""

from hypothesis import given
from hypothesis import HealthCheck
from hypothesis import settings
from hypothesis import strategies as st
import pytest
from tensorboardX.proto import event_pb2

from conftest import PNG
from conftest import raises_naming
from conftest import write_run
from transformer import metrics
from transformer.insight import plots
from transformer.tools import cli
from transformer.tools import curves


def test_reads_every_event_file_of_a_resumed_run(two_runs):
  runs = curves.read(two_runs, ['a', 'b'])
  assert runs['a']['train/loss'] == {100: 5.0, 200: 4.0, 300: 3.0}
  assert runs['a']['eval/bleu'] == {200: 30.0, 300: 33.0}
  assert curves.last_values(runs, 'eval/bleu') == {'a': 33.0, 'b': 37.0}
  assert curves.last_values(runs, 'eval_averaged/bleu') == {'a': 35.0}


def test_table_gives_last_values_mean_and_range(two_runs):
  runs = curves.read(two_runs, ['seed 0', 'seed 1'])
  lines = curves.table(runs, ['train/loss', 'eval/bleu']).splitlines()
  assert lines[0].split()[:4] == ['last', 'value', 'seed', '0']
  loss = lines[1].split()
  assert loss == ['train/loss', '3', '2', '2.5', '2-3']
  bleu = lines[2].split()
  assert bleu == ['eval/bleu', '33', '37', '35', '33-37']
  # The averaged evaluation has its row, without a mean of one run.
  assert lines[3].split() == ['eval_averaged/bleu', '35', '-']


def test_table_keeps_each_value_under_a_long_label(two_runs):
  labels = ['dropout 0.1 (4000 steps)', 'b']
  lines = curves.table(curves.read(two_runs, labels),
                       ['eval/bleu']).splitlines()
  # Each value ends where its label ends in the header.
  label_end = lines[0].index(labels[0]) + len(labels[0])
  assert lines[1].index('33') + len('33') == label_end
  b_end = lines[0].index(' b ') + 2
  assert lines[1].index('37') + len('37') == b_end


def test_table_says_when_the_runs_last_steps_differ(tmp_path, two_runs):
  shorter = tmp_path / 'short'
  write_run(shorter, {100: {'train/loss': 6.0, 'eval/bleu': 20.0}})
  runs = curves.read([two_runs[0], str(shorter)], ['long', 'short'])
  text = curves.table(runs, ['eval/bleu'])
  assert '(at steps long: 300, short: 100)' in text
  assert 'at steps' not in curves.table(curves.read(two_runs), ['eval/bleu'])


def test_patterns_select_tags_in_order_and_keep_averages_to_their_panel(
    two_runs):
  runs = curves.read(two_runs)
  assert curves.select(runs, ['eval/*', 'train/loss']) == [
      'eval/bleu', 'train/loss']
  assert curves.select(runs, ['*']) == ['eval/bleu', 'train/loss']
  assert curves.select(runs, ['eval_averaged/bleu']) == ['eval_averaged/bleu']
  with raises_naming(ValueError, '--tags', "'eval/rouge'",
                     'eval/bleu, eval_averaged/bleu, train/loss'):
    curves.select(runs, ['eval/rouge'])


def test_refuses_mismatched_labels_and_runs_without_scalars(tmp_path,
                                                            two_runs):
  with raises_naming(ValueError, '--labels', '1 labels', '2 workdirs',
                     'one per workdir'):
    curves.read(two_runs, ['only one'])
  with raises_naming(ValueError, '--labels', "['same', 'same']",
                     '--labels="seed 0,seed 1"'):
    curves.read(two_runs, ['same', 'same'])
  with raises_naming(FileNotFoundError, '--workdirs',
                     str(tmp_path / 'nowhere')):
    curves.read([str(tmp_path / 'nowhere')])
  (tmp_path / 'empty').mkdir()
  with raises_naming(ValueError, '--workdirs', str(tmp_path / 'empty'),
                     'events.out.tfevents', 'train into it first'):
    curves.read([str(tmp_path / 'empty')])
  # Default labels: the workdirs' folder names, which must differ.
  assert list(curves.read(two_runs)) == ['seed0', 'seed1']
  other = tmp_path / 'elsewhere' / 'seed0'
  write_run(other, {1: {'train/loss': 1.0}})
  with raises_naming(ValueError, "folder names", "['seed0', 'seed0']",
                     '--labels="seed 0,seed 1"'):
    curves.read([two_runs[0], str(other)])


def test_plot_draws_each_run_and_the_averaged_star(tmp_path, two_runs):
  runs = curves.read(two_runs)
  plain = plots.plot_runs(runs, ['eval/bleu'], str(tmp_path / 'plain.png'))
  starred = plots.plot_runs(runs, ['eval/bleu'], str(tmp_path / 'star.png'),
                            marked={'eval/bleu': 'eval_averaged/bleu'})
  for path in (plain, starred):
    with open(path, 'rb') as f:
      assert f.read(4) == PNG
  with open(plain, 'rb') as f, open(starred, 'rb') as g:
    assert f.read() != g.read()
  with pytest.raises(ValueError, match='No tags'):
    plots.plot_runs(runs, [], str(tmp_path / 'none.png'))


# -- Damaged and cut-short event files (each record is a uint64 length, its
# masked CRC-32C, the data and the data's masked CRC-32C).

_SCALARS = {100: {'train/loss': 5.0, 'eval/bleu': 30.0},
            200: {'train/loss': 4.0}, 300: {'train/loss': 3.0}}


@pytest.fixture(name='event_file', scope='module')
def fixture_event_file(tmp_path_factory):
  """A run's one event file as training writes it: its bytes, and each
  record's (start, end, {tag: {step: value}}), framed here by the length
  fields alone (the file is whole)."""
  workdir = tmp_path_factory.mktemp('run')
  write_run(workdir, _SCALARS)
  [path] = workdir.iterdir()
  data = path.read_bytes()
  frames, start = [], 0
  while start < len(data):
    end = start + 16 + int.from_bytes(data[start:start + 8], 'little')
    event = event_pb2.Event.FromString(data[start + 12:end - 4])
    frames.append((start, end, {v.tag: {event.step: v.simple_value}
                                for v in event.summary.value}))
    start = end
  assert start == len(data) and len(frames) == 5  # a version record first
  return data, frames


def _expected(frames, cut):
  """The scalars of the records whole before byte `cut`."""
  scalars = {}
  for _, end, values in frames:
    for tag, steps in values.items():
      if end <= cut:
        scalars.setdefault(tag, {}).update(steps)
  return scalars


def _run_of(tmp_path, data):
  workdir = tmp_path / 'damaged'
  workdir.mkdir(exist_ok=True)
  path = workdir / 'events.out.tfevents.1.host'
  path.write_bytes(data)
  return str(workdir), str(path)


def test_a_last_record_cut_short_is_left_out_with_a_note(event_file,
                                                         tmp_path, capsys):
  data, frames = event_file
  start = frames[-1][0]
  for tail in (data[:start + 5], data[:-1], data[:start] + bytes(30)):
    workdir, path = _run_of(tmp_path, tail)
    runs = curves.read([workdir], ['run'])
    assert runs['run'] == _expected(frames, start)
    [note] = capsys.readouterr().err.splitlines()
    assert note.startswith(f'Note: {path}: ') and f'byte {start}' in note
    assert '4 record(s) before it are read' in note


def test_a_damaged_record_is_one_line_naming_the_file_and_byte(
    event_file, tmp_path, capsys):
  data, frames = event_file
  start, end, _ = frames[2]
  for at in (start + 3, start + 9, start + 12, end - 1):  # length, CRCs, data
    damaged = bytearray(data)
    damaged[at] ^= 0x20
    workdir, path = _run_of(tmp_path, bytes(damaged))
    read = cli.handle_errors(lambda unused_argv: curves.read([workdir]))
    with pytest.raises(SystemExit) as exited:
      read([])
    [line] = capsys.readouterr().err.splitlines()
    assert exited.value.code == cli.USER_ERROR, line
    assert line.startswith(f'Error: {path}: ') and f'byte {start}' in line
    assert f'truncate -s {start} {path}' in line and workdir in line


@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 10_000), flips=st.lists(
    st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=3))
def test_cut_or_flipped_bytes_give_the_records_before_or_name_the_record(
    event_file, tmp_path, cut, flips):
  """Whatever the damage: the whole records before it, or the one-line
  error naming the record where it is; never another exception."""
  data, frames = event_file
  cut %= len(data) + 1
  damaged = bytearray(data[:cut])
  for at, mask in flips:
    if cut:
      damaged[at % cut] ^= mask
  workdir, path = _run_of(tmp_path, bytes(damaged))
  # Two flips of one byte may undo each other: the first byte changed.
  first = next((i for i, (a, b) in enumerate(zip(damaged, data)) if a != b),
               None)
  hit = [(start, end) for start, end, _ in frames
         if first is not None and start <= first < end]
  # Seen: a flip in a whole record, or in the length of the last record
  # whose length and its CRC are there.
  seen = hit and (hit[0][1] <= cut or (
      first < hit[0][0] + 12 <= cut))
  if seen:
    with raises_naming(metrics.DamagedEventFile, path,
                       f'byte {hit[0][0]}', 'truncate -s') as caught:
      metrics.read_events(workdir)
    assert '\n' not in str(caught.value)
  else:
    events = metrics.read_events(workdir)
    assert events.scalars == _expected(frames, cut)
    boundary = cut in {0} | {end for _, end, _ in frames}
    assert bool(events.cut_short) != boundary



def test_an_empty_tags_flag_is_refused_with_the_default(two_runs):
  runs = curves.read(two_runs, ["a", "b"])
  with raises_naming(ValueError, '--tags is empty',
                     "--tags=train/loss,eval/*"):
    curves.select(runs, [])
  assert curves.select(runs, ['train/loss', 'eval/*'])  # what it proposes
