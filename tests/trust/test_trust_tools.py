"""The files commands write, as `tools/cli.py` promises them under
everything a user or the machine does meanwhile (issue 38's third trust
pass): Ctrl-C ends any command in one line and leaves none of its files, a
second run writing the same file fails naming it instead of replacing it, a
full disk names the file and leaves nothing that blocks the rerun, names too
long for the file system are refused before any work, what a command
prints or reads line by line keeps one record per line, and a float flag or
an experiment argument that cannot be used is refused naming the fix."""

import errno
import math
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO
from transformer import configs
from transformer.tools import cli
from transformer.tools import explore
from transformer.tools import kernel_regression
from transformer.tools import predict

USER_ERROR = 2
STAGING = '.writing-'


def fake_workdir(path, task, **data):
  """A workdir with the config of `task` (data fields changed) and nothing
  else: enough for what commands check before they restore a
  checkpoint."""
  from transformer import tasks  # pylint: disable=g-import-not-at-top
  path.mkdir()
  config = tasks.default_config(task)
  config.data.update(data)
  (path / 'config.json').write_text(config.to_json_best_effort())
  return str(path)


def python(code, *, stdin=b'', timeout=600):
  """`code` run by a fresh python in the repository (JAX on the CPU)."""
  return subprocess.run(
      [sys.executable, '-c', textwrap.dedent(code)], cwd=REPO, input=stdin,
      capture_output=True, check=False, timeout=timeout,
      env={**os.environ, 'JAX_PLATFORMS': 'cpu'})


def leftovers(folder):
  """Staging folders and temporary files left anywhere under `folder`."""
  return [os.path.join(root, name) for root, dirs, names in os.walk(folder)
          for name in dirs + names
          if name.startswith(STAGING) or name.endswith('.tmp')]


# -- Ctrl-C (#123).

INTERRUPTED_TOOL = """
    import sys, time
    from absl import flags
    from transformer.tools import cli
    flags.DEFINE_string('output', None, '')
    def main(argv):
      if not flags.FLAGS.output:
        print('working', flush=True)
        time.sleep(120)
      outputs = [cli.Output('--output', flags.FLAGS.output)]
      cli.check_outputs(outputs)
      with cli.Writing(outputs) as writing:
        writing.write(flags.FLAGS.output, 'half of it')
        print('working', flush=True)
        time.sleep(120)
    sys.argv = ['tool', *sys.argv[1:]]
    cli.run(main)
"""


@pytest.mark.parametrize('writes', [False, True])
def test_ctrl_c_ends_a_command_in_one_line_leaving_no_file(writes, tmp_path):
  out = tmp_path / 'out' / 'page.html'
  process = subprocess.Popen(
      [sys.executable, '-c', textwrap.dedent(INTERRUPTED_TOOL),
       *([f'--output={out}'] if writes else [])],
      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  try:
    assert process.stdout.readline() == b'working\n'
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
  finally:
    process.kill()
  assert stderr.decode() == 'Interrupted.\n'
  assert process.returncode == 130
  assert not out.exists() and not (tmp_path / 'out').exists()
  assert not leftovers(tmp_path)


# -- A second run writing the same file (#125).


def test_a_file_written_meanwhile_is_never_replaced(tmp_path):
  out = tmp_path / 'race.txt'
  outputs = [cli.Output('--output', str(out))]
  cli.check_outputs(outputs)  # passes: the other run has not written yet
  with pytest.raises(FileExistsError, match=(
      f'{out} is already there .*give --overwrite to replace it, or '
      f'another --output')):
    with cli.Writing(outputs) as writing:
      writing.write(str(out), 'ours\n')
      out.write_text('theirs\n')  # the other run finished first
  assert out.read_text() == 'theirs\n'
  assert not leftovers(tmp_path)
  with cli.Writing(outputs, overwrite=True) as writing:
    writing.write(str(out), 'ours\n')
  assert out.read_text() == 'ours\n'


def test_outputs_put_in_place_are_taken_back_when_one_cannot_be(tmp_path):
  outputs = [cli.Output('--output', str(tmp_path / 'hyp.txt')),
             cli.Output('--alignments', str(tmp_path / 'a' / 'al.jsonl'))]
  with pytest.raises(FileExistsError, match='al.jsonl is already there'):
    with cli.Writing(outputs) as writing:
      writing.write(outputs[0].path, 'hyp\n')
      writing.write(outputs[1].path, '{}\n')
      (tmp_path / 'a' / 'al.jsonl').write_text('theirs')
  assert sorted(os.listdir(tmp_path)) == ['a']
  assert os.listdir(tmp_path / 'a') == ['al.jsonl']


def test_two_translations_into_one_file_never_replace_each_other(
    trained, tmp_path):
  """The race of two `translate --output=race.txt`: the one that finishes
  second fails naming the file (here the other's output appears while the
  model translates)."""
  out = tmp_path / 'race.txt'
  run = python(f"""
      import sys
      from transformer.tools import translate
      work = translate.translate
      def racing(*args, **kwargs):
        result = work(*args, **kwargs)
        open({str(out)!r}, 'w').write('the other run\\n')
        return result
      translate.translate = racing
      translate.define_flags()
      sys.argv = ['translate', '--workdir={trained}', '--output={out}']
      translate.cli.run(translate.main)
  """, stdin=b'a dog\n')
  stderr = run.stderr.decode()
  assert run.returncode == USER_ERROR, stderr[-2000:]
  assert f'Error: {out} is already there' in stderr, stderr[-2000:]
  assert 'Traceback' not in stderr
  assert out.read_text() == 'the other run\n'
  assert not leftovers(tmp_path)


# -- A full disk (#57, #58).


@pytest.fixture
def full_disk(tmp_path):
  """A 1 MiB tmpfs, full (root only: skipped where mounting is not
  allowed); the file `fill` fills it."""
  disk = tmp_path / 'disk'
  disk.mkdir()
  if subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=1M', 'tmpfs',
                     str(disk)], capture_output=True,
                    check=False).returncode:
    pytest.skip('mounting a small tmpfs needs root')
  with open(disk / 'fill', 'wb') as f:
    with pytest.raises(OSError):
      f.write(b'x' * (2 << 20))
      f.flush()
  yield disk
  # Lazily: a file the test's run left open must not keep it mounted.
  subprocess.run(['umount', '-l', str(disk)], check=False)


def test_a_full_disk_names_the_file_and_leaves_nothing_behind(
    trained, full_disk):
  out = full_disk / 'out.txt'
  args = ['-m', 'transformer.tools.translate', f'--workdir={trained}',
          f'--output={out}']
  run = subprocess.run([sys.executable, *args], cwd=REPO, input=b'a dog\n',
                       capture_output=True, check=False, timeout=600,
                       env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  stderr = run.stderr.decode()
  assert run.returncode == USER_ERROR, stderr[-2000:]
  assert (f'Error: Cannot write {out} (No space left on device); free space '
          f'on that disk, or give another --output. Nothing was written.'
          in stderr), stderr[-2000:]
  assert os.listdir(full_disk) == ['fill']
  (full_disk / 'fill').unlink()  # space freed: the rerun is not blocked
  run = subprocess.run([sys.executable, *args], cwd=REPO, input=b'a dog\n',
                       capture_output=True, check=False, timeout=600,
                       env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert run.returncode == 0, run.stderr.decode()[-2000:]
  assert out.read_text().endswith('\n')


def test_a_full_disk_fails_the_explorer_page_by_name(trained, full_disk):
  page = full_disk / 'x.html'
  with pytest.raises(OSError, match=f'Cannot write {page} \\(No space left '
                     'on device\\)'):
    explore.explore(str(trained), 'the red house', str(page))
  assert os.listdir(full_disk) == ['fill']


def test_a_plot_on_a_full_disk_is_named_by_its_output(full_disk):
  """A plot fails inside matplotlib's caller with an error that names no
  file: the output is found from the path it was handed."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from transformer.insight import plots  # pylint: disable=g-import-not-at-top
  figure = full_disk / 'maps' / 'cat_attention.png'
  outputs = [cli.Output('--attention_dir', str(figure))]
  with pytest.raises(OSError, match=f'Cannot write {figure} .*another '
                     '--attention_dir'):
    with cli.Writing(outputs) as writing:
      plots.plot_attention(np.random.default_rng(0).random((40, 40)),
                           list('ab' * 20), list('cd' * 20),
                           writing.path(str(figure)))
  assert os.listdir(full_disk) == ['fill']


def test_the_works_own_errors_pass_unchanged(tmp_path):
  """Only a failed write is renamed after an output: an error of the work
  (a missing checkpoint) is left as it is."""
  out = tmp_path / 'f.png'
  with pytest.raises(FileNotFoundError, match='no checkpoint'):
    with cli.Writing([cli.Output('--output', str(out))]) as writing:
      staged = writing.path(str(out))  # pylint: disable=unused-variable
      raise FileNotFoundError(errno.ENOENT, 'no checkpoint', '/w/4')
  assert not os.listdir(tmp_path)


# -- Names too long for the file system (#15).


def test_a_name_too_long_is_refused_before_any_work(tmp_path):
  image = tmp_path / ('x' * 250 + '.png')
  image.write_bytes(b'not read: refused before')
  workdir = fake_workdir(tmp_path / 'w', 'image_classification')
  with pytest.raises(ValueError, match=(
      '--attention_dir: the file name x+_attention.png is 264 bytes long; '
      'this file system takes 241 at most')):
    predict.classify(workdir, [str(image)],
                     attention_dir=str(tmp_path / 'maps'))
  assert not (tmp_path / 'maps').exists()


def test_name_and_path_lengths_count_the_temporary_names(tmp_path):
  most = os.pathconf(tmp_path, 'PC_NAME_MAX') - 14
  fits = cli.Output('--output', str(tmp_path / ('a' * (most - 4) + '.txt')))
  cli.check_outputs([fits])
  with cli.Writing([fits]) as writing:
    writing.write(fits.path, 'fits')
  assert open(fits.path).read() == 'fits'
  series = cli.Output('--attention_dir',
                      str(tmp_path / ('b' * (most - 7) + '_.png')),
                      numbered=True)
  with pytest.raises(ValueError, match='the file names b+_N.png are up to'):
    cli.check_outputs([series])
  deep = tmp_path / '/'.join(['d' * 200] * 20) / 'out.txt'
  with pytest.raises(ValueError, match='--output: the path .* is too long'):
    cli.check_outputs([cli.Output('--output', str(deep))])


# -- One record per line (#17, #133).


def test_names_are_printed_one_record_per_line(tmp_path):
  workdir = fake_workdir(tmp_path / 'w', 'image_classification')
  names = ['new\nline.png', 'tab\there.png', 'rtl\u202e.png', 'back\\n.png',
           'emoji😀 שלום.png']
  run = python(f"""
      import sys
      from transformer.tools import predict
      predict.classify = lambda workdir, paths, **options: (
          [(path, [('cat', 0.75)]) for path in paths], 4)
      predict.define_flags()
      sys.argv = ['predict', '--workdir={workdir}', *{names!r}]
      predict.cli.run(predict.main)
  """)
  assert run.returncode == 0, run.stderr.decode()[-2000:]
  assert run.stdout.decode().splitlines() == [
      'new\\nline.png\tcat 0.750', 'tab\\there.png\tcat 0.750',
      'rtl\\u202e.png\tcat 0.750', 'back\\\\n.png\tcat 0.750',
      'emoji😀 שלום.png\tcat 0.750']


@pytest.mark.parametrize('task,lines,message', [
    ('entailment', ['no tab here', 'a\tb'],
     'This model classifies sentence pairs: each line is two sentences '
     'separated by one tab (sentence1<TAB>sentence2); not line 1 (no tab).'),
    ('entailment', ['a\tb', 'a\tb\tc', 'x', 'p\tq'],
     'not lines 2 (2 tabs), 3 (no tab).'),
    ('sst2', ['fine', 'a\tb'],
     'This model classifies single sentences: each line is one sentence, '
     'without tabs; not line 2 (1 tab).'),
])
def test_lines_must_fit_a_pair_or_single_sentence_model(task, lines, message,
                                                        tmp_path):
  workdir = fake_workdir(tmp_path / 'w', 'text_classification',
                         glue_task=task)
  with pytest.raises(ValueError) as error:
    predict.classify_texts(workdir, lines)
  assert str(error.value).endswith(message), error.value


def test_a_converted_classifier_takes_one_sentence_or_a_pair(tmp_path):
  from transformer import tasks  # pylint: disable=g-import-not-at-top
  config = tasks.default_config('text_classification')
  config.data.tokenizer = 'bert'  # without init_from: a converted one
  assert predict.reads_pairs(config) is None
  predict._check_shape(['one', 'a\tpair'], None)  # pylint: disable=protected-access
  with pytest.raises(ValueError, match=r'not line 2 \(2 tabs\) of f.txt'):
    predict._check_shape(['a', 'b\tc\td'], None, 'f.txt')  # pylint: disable=protected-access


# -- Float flags (#121).


@pytest.mark.parametrize('bandwidth', [math.nan, 1e308, math.inf, 0.0, -1.0])
def test_kernel_regression_refuses_bandwidths_it_cannot_compute(bandwidth):
  with pytest.raises(ValueError, match=re.escape(
      f'--bandwidth={bandwidth} must be in [1e-06, 1000000.0]')):
    kernel_regression.fit(bandwidth=bandwidth, steps=2)


# -- Experiment arguments (#90).


def test_a_comma_in_an_experiment_argument_suggests_the_field_flag():
  with pytest.raises(ValueError) as error:
    configs.parse_args('path=/data/dir,with=comma,src=de,tgt=en,runlocal',
                       name='experiments/mt_local.py',
                       known=('path', 'src', 'tgt', 'runlocal'))
  message = str(error.value)
  assert "unknown arguments ['with']" in message
  assert ("path=/data/dir,with=comma was cut at its comma. Give that value "
          "as a flag, which takes any text: "
          "--config.data.path=/data/dir,with=comma;" in message), message

