"""The progress line: in place on a terminal, a line per interval in a
log, and never overwritten by what else is printed meanwhile."""

import io
import logging
import sys
import warnings

from transformer import console


class Terminal(io.StringIO):

  def isatty(self):
    return True


def test_a_pipe_or_file_gets_one_line_per_interval():
  out = io.StringIO()
  with console.ProgressLine(out) as line:
    line.show('step 1/2')
    line.show('step 2/2')
  assert out.getvalue() == 'step 1/2\nstep 2/2\n'


def test_a_terminal_redraws_the_line_in_place(monkeypatch):
  terminal = Terminal()
  monkeypatch.setattr(sys, 'stdout', terminal)
  with console.ProgressLine() as line:
    line.show('step 1/2')
    line.show('step 2/2')
  assert terminal.getvalue() == '\r\x1b[Kstep 1/2\r\x1b[Kstep 2/2\n'


def test_other_output_starts_below_the_line_and_no_stream_is_replaced(
    monkeypatch):
  terminal, errors = Terminal(), Terminal()
  monkeypatch.setattr(sys, 'stdout', terminal)
  monkeypatch.setattr(sys, 'stderr', errors)
  handler = logging.StreamHandler(errors)
  logging.getLogger().addHandler(handler)
  try:
    with console.ProgressLine() as line:
      line.show('step 1/5')
      line.print('eval at step 1: loss 2')  # the run's own line
      line.show('step 2/5')
      logging.getLogger('x').warning('a warning')  # a library's, to stderr
      line.show('step 3/5')
      # What warnings.warn calls to show a warning (pytest's own capture
      # of warnings would bypass it).
      warnings.showwarning(UserWarning('deprecated'), UserWarning, 'f.py', 1)
      line.show('step 4/5')
      assert sys.stdout is terminal and sys.stderr is errors
      assert handler.stream is errors
  finally:
    logging.getLogger().removeHandler(handler)
  assert terminal.getvalue() == (
      '\r\x1b[Kstep 1/5\neval at step 1: loss 2\n\r\x1b[Kstep 2/5\n'
      '\r\x1b[Kstep 3/5\n\r\x1b[Kstep 4/5\n')
  assert errors.getvalue().startswith('a warning\n')
  assert not handler.filters  # the hooks are off again
