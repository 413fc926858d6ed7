"""The commands' last line of defence (`cli.handle_errors`): an error
that escapes while a user's file is read (`errors.reading`) names that
file in one line, whatever raised it; other unexpected errors keep their
traceback (they are bugs)."""

import json

import pytest

from transformer import errors
from transformer.tools import cli


def _run(main, capsys):
  with pytest.raises(SystemExit) as exited:
    cli.handle_errors(main)([])
  return exited.value.code, capsys.readouterr().err


def test_a_parser_failure_names_the_file_being_read(tmp_path, capsys):
  path = tmp_path / 'tokenizer.json'
  path.write_text('{"model": {"type": "Unigram"}}')

  def main(unused_argv):
    with errors.reading(path):
      json.loads(path.read_text())['model']['vocab']['\u2581']  # KeyError

  code, err = _run(main, capsys)
  [line] = err.splitlines()
  assert code == cli.USER_ERROR
  assert line.startswith(f'Error: {path} could not be read (KeyError: ')
  assert '--verbosity=1' in line and 'Traceback' not in err


def test_the_innermost_file_is_named_and_a_named_one_is_kept(tmp_path,
                                                            capsys):
  outer, inner = tmp_path / 'dir', tmp_path / 'dir' / 'config.json'

  def main(unused_argv):
    with errors.reading(outer), errors.reading(inner):
      raise ValueError('Expecting value: line 1 column 19')

  code, err = _run(main, capsys)
  assert code == cli.USER_ERROR
  assert err.strip() == (f'Error: Expecting value: line 1 column 19 (while '
                         f'reading {inner})')

  def names_it(unused_argv):
    with errors.reading(inner):
      raise ValueError(f'{inner} is damaged: not valid JSON')

  _, err = _run(names_it, capsys)
  assert err.strip() == f'Error: {inner} is damaged: not valid JSON'


def test_a_bug_outside_any_reading_keeps_its_traceback():
  def main(unused_argv):
    raise KeyError('a bug')

  with pytest.raises(KeyError):
    cli.handle_errors(main)([])
