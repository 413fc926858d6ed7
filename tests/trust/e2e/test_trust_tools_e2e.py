"""The files commands write, as `tools/cli.py` promises them under
everything a user or the machine does meanwhile (issue 38's third trust
pass), where a command runs in a process or needs a trained workdir or a
full disk: Ctrl-C ends any command in one line and leaves none of its
files, a second translation into the same file fails naming it, a full disk
names the file and leaves nothing that blocks the rerun, and what a command
prints keeps one record per line. (The rest: ../test_trust_tools.py.)"""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import fake_workdir
from conftest import leftovers
from conftest import raises_naming
from conftest import REPO
from transformer.tools import cli
from transformer.tools import explore

USER_ERROR = 2


def python(code, *, stdin=b'', timeout=600):
  """`code` run by a fresh python in the repository (JAX on the CPU)."""
  return subprocess.run(
      [sys.executable, '-c', textwrap.dedent(code)], cwd=REPO, input=stdin,
      capture_output=True, check=False, timeout=timeout,
      env={**os.environ, 'JAX_PLATFORMS': 'cpu'})


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
  assert 'Error: ' in stderr and str(out) in stderr, stderr[-2000:]
  assert '--overwrite' in stderr
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
  assert 'Error: ' in stderr and str(out) in stderr, stderr[-2000:]
  for name in ('No space left on device', 'free space', '--output',
               'Nothing was written'):
    assert name in stderr, stderr[-2000:]
  assert os.listdir(full_disk) == ['fill']
  (full_disk / 'fill').unlink()  # space freed: the rerun is not blocked
  run = subprocess.run([sys.executable, *args], cwd=REPO, input=b'a dog\n',
                       capture_output=True, check=False, timeout=600,
                       env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert run.returncode == 0, run.stderr.decode()[-2000:]
  assert out.read_text().endswith('\n')


def test_a_full_disk_fails_the_explorer_page_by_name(trained, full_disk):
  page = full_disk / 'x.html'
  with raises_naming(OSError, str(page), 'No space left on device',
                     '--output'):
    explore.explore(str(trained), 'the red house', str(page))
  assert os.listdir(full_disk) == ['fill']


def test_a_plot_on_a_full_disk_is_named_by_its_output(full_disk):
  """A plot fails inside matplotlib's caller with an error that names no
  file: the output is found from the path it was handed."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from transformer.insight import plots  # pylint: disable=g-import-not-at-top
  figure = full_disk / 'maps' / 'cat_attention.png'
  outputs = [cli.Output('--attention_dir', str(figure))]
  with raises_naming(OSError, str(figure), 'No space left on device',
                     '--attention_dir'):
    with cli.Writing(outputs) as writing:
      plots.plot_attention(np.random.default_rng(0).random((40, 40)),
                           list('ab' * 20), list('cd' * 20),
                           writing.path(str(figure)))
  assert os.listdir(full_disk) == ['fill']


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
