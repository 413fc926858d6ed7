"""The progress line: in place on a terminal, a line per interval in a
log, and never overwritten by what else is printed meanwhile."""

import io
import logging
import sys

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
  assert sys.stdout is terminal  # given back


def test_other_output_starts_below_the_line(monkeypatch):
  terminal, errors = Terminal(), Terminal()
  monkeypatch.setattr(sys, 'stdout', terminal)
  monkeypatch.setattr(sys, 'stderr', errors)
  handler = logging.StreamHandler(errors)
  logging.getLogger().addHandler(handler)
  try:
    with console.ProgressLine() as line:
      line.show('step 1/4')
      print('eval at step 1: loss 2')  # the evaluation's line
      line.show('step 2/4')
      logging.getLogger('x').warning('a warning')  # a library's, to stderr
      line.show('step 3/4')
  finally:
    logging.getLogger().removeHandler(handler)
  assert terminal.getvalue() == (
      '\r\x1b[Kstep 1/4\neval at step 1: loss 2\n\r\x1b[Kstep 2/4\n'
      '\r\x1b[Kstep 3/4\n')
  assert errors.getvalue() == 'a warning\n'
  assert handler.stream is errors  # given back
