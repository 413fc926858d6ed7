"""What the command-line tools share: flag parsing that refuses a misspelt
--config field with a message, and one meaning for exit codes:

   0  done
   1  the run failed: training stopped on non-finite values, or a
      checkpoint could not be written (the message says what to change)
   2  user error: bad flags, config, input file or workdir (the message says
      what to fix)
  66  missing input: a dataset, file, workdir or checkpoint that is not
      there (sysexits' EX_NOINPUT)
  75  preempted: SIGTERM/SIGINT stopped training after writing a
      checkpoint; rerun the same command to resume (EX_TEMPFAIL)

Errors end with 'Error: <message>' instead of a traceback from inside JAX;
`--verbosity=1` logs the traceback too.

The console shows the commands' own lines and warnings; libraries' INFO
logs (orbax's checkpointing, JAX's backends, ...) stay off it, and go to
WORKDIR/logs/ for training runs. So do orbax's warnings and errors: the
checkpoint code reports every failure itself, in one line (`checkpoints`).
`--verbosity=0` shows them all again.

Files a command writes follow one rule (`check_outputs`), checked before
any work: each is written once per run (distinct inputs get distinct names,
`output_names`), none replaces an input, and none replaces a file that was
there before the command started unless `--overwrite` says so. (The
reports that `compare` and `reproduce` keep in the workdir they run are that
workdir's own, and each run brings them up to date.)
"""

from __future__ import annotations

import collections
import functools
import logging as std_logging
import os
import re
import sys
import threading
from typing import Callable, Iterable, NamedTuple, Sequence

from absl import app
from absl import flags
from absl import logging
import ml_collections

from transformer import checkpoints
from transformer import faults
from transformer import ranges
from transformer import workdir as workdir_lib
from transformer.data import files

RUN_FAILED = 1
USER_ERROR = 2
MISSING_INPUT = 66
PREEMPTED = faults.PREEMPTED_EXIT_CODE


def _exit(code: int, error: BaseException) -> None:
  logging.debug('Stopped by', exc_info=True)
  print(f'Error: {error}', file=sys.stderr, flush=True)
  sys.exit(code)


def check_flag(name: str, value: float | None, *,
               at_least: float | None = None, above: float | None = None,
               at_most: float | None = None) -> None:
  """Refuses a numeric flag that is not finite or outside its range, before
  any work: e.g. `--max_new_tokens=-5`, `--temperature=nan`."""
  if value is not None:
    ranges.check(f'--{name}', value,
                 low=above if at_least is None else at_least,
                 low_in=at_least is not None, high=at_most, high_in=True)


def backslash_escapes(name: str, value: str) -> str:
  r"""A flag's text with its backslash escapes ('\n', '\t', '\x41',
  '\u00e9') turned into characters, other text as typed; an escape that
  cannot be read ('\x4', a backslash at the end) is refused naming the
  flag."""
  try:
    return value.encode('latin-1', 'backslashreplace').decode(
        'unicode_escape')
  except UnicodeDecodeError as e:
    bad = e.object[e.start:e.end].decode('latin-1')
    raise ValueError(f'--{name}={value}: the escape {bad} cannot be read '
                     f'({e.reason}); write a backslash as \\\\, a newline '
                     f'as \\n, a character as \\xHH or \\uHHHH.') from None


# What a 64-bit integer holds: absl parses integer flags of any size, and
# numpy and JAX overflow beyond it (an OverflowError from deep inside).
INT64 = (-2**63, 2**63 - 1)


def _check_integer_flags() -> None:
  """Refuses an integer flag beyond 64 bits (e.g. --seed=2**70), in one
  line naming it, before any work."""
  for name in flags.FLAGS:
    flag = flags.FLAGS[name]
    if not isinstance(flag.parser, flags.IntegerParser) or not flag.present:
      continue
    values = flag.value if isinstance(flag.value, list) else [flag.value]
    for value in values:
      if value is not None and not INT64[0] <= value <= INT64[1]:
        raise ValueError(f'--{name}={value} does not fit in 64 bits; give a '
                         f'number from {INT64[0]} to {INT64[1]}.')


# -- The files a command writes (see the module docstring).


def define_overwrite_flag() -> None:
  flags.DEFINE_bool('overwrite', False, 'Replace files that are already '
                    'where this command writes (without it, the command '
                    'refuses them before any work).')


class Output(NamedTuple):
  """A file a command will write, and the flag that chose its place.

  `numbered`: a series whose length is known only once the model is
  restored (one file per layer): the path with a number before its
  extension, 'maps/cat_layer_.png' standing for maps/cat_layer_0.png,
  maps/cat_layer_1.png, ...
  """
  flag: str  # e.g. '--attention_dir'
  path: str
  numbered: bool = False


def output_names(inputs: Sequence[str]) -> list[str]:
  """A name per input file (without extension) for the files a command
  writes about it, distinct for distinct files: its path relative to the
  inputs' common folder without its extension ('cat'; a/cat.png and
  b/cat.png: 'a/cat' and 'b/cat'), with the extension where two inputs
  would share one (cat.png and cat.jpg: 'cat.png' and 'cat.jpg'). The same
  file given twice gets the same name."""
  absolute = [os.path.abspath(p) for p in inputs]
  distinct = list(dict.fromkeys(absolute))
  if not distinct:
    return []
  folder = os.path.commonpath([os.path.dirname(p) for p in distinct])
  relative = {p: os.path.relpath(p, folder) for p in distinct}
  names = {p: os.path.splitext(r)[0] for p, r in relative.items()}
  while True:  # each round gives a shared name its full relative path
    counts = collections.Counter(names.values())
    shared = [p for p in distinct
              if counts[names[p]] > 1 and names[p] != relative[p]]
    if not shared:
      return [names[p] for p in absolute]
    for p in shared:
      names[p] = relative[p]


def _key(path: str) -> str:
  return path if files.is_remote(path) else os.path.realpath(path)


def _existing(output: Output) -> list[str]:
  """The files already where `output` goes (for a series, its members)."""
  if not output.numbered:
    return [output.path] if files.exists(output.path) else []
  folder, name = os.path.split(output.path)
  root, extension = os.path.splitext(name)
  pattern = re.compile(re.escape(root) + r'\d+' + re.escape(extension))
  folder = folder or '.'
  return [files.join(folder, n) for n in files.listdir(folder)
          if pattern.fullmatch(n)]


def _blocking_file(path: str) -> str | None:
  """A file where `path` needs a folder (its parent or one above), if
  any."""
  folder = os.path.dirname(path.rstrip('/'))
  while folder and not files.exists(folder):
    parent = os.path.dirname(folder)
    if parent == folder:
      return None
    folder = parent
  return folder if folder and not files.path(folder).is_dir() else None


def check_outputs(outputs: Iterable[Output], *, overwrite: bool = False,
                  inputs: Sequence[str] = ()) -> None:
  """The one rule for the files a command writes, checked before any work:
  no two outputs of the run share a path, none is an input of the run,
  none is a folder or lies under a file, and none is already there unless
  `overwrite` (a file from an earlier run, or one the user keeps there, is
  never replaced silently).

  Raises:
    ValueError: two outputs share a path, or one is an input or a folder.
    FileExistsError: outputs already there, without `overwrite`.
  """
  outputs = list(outputs)
  claimed = {}
  read = {_key(p): p for p in inputs if p != '-'}
  for output in outputs:
    key = _key(output.path)
    if key in claimed:
      other = claimed[key].flag
      raise ValueError(
          f'{other} and {output.flag} would both write {output.path}; give '
          f'them different files.' if other != output.flag else
          f'{output.flag}: {output.path} would be written twice in one run; '
          f'give inputs of different names.')
    claimed[key] = output
    if key in read:
      raise ValueError(f'{output.flag}={output.path} is an input of this '
                       f'command; give another file to write.')
    blocking = _blocking_file(output.path)
    if blocking:
      raise ValueError(f'{output.flag}: {blocking} is a file, not a folder '
                       f'to write {output.path} in; give another place.')
    if not output.numbered and files.path(output.path).is_dir():
      raise ValueError(f'{output.flag}: {output.path} is a folder; give the '
                       f'path of the file to write.')
  if overwrite:
    return
  found = [(output, path) for output in outputs
           for path in _existing(output)]
  if found:
    output, path = found[0]
    more = f' (and {len(found) - 1} more of its files)' if len(found) > 1 \
        else ''
    raise FileExistsError(
        f'{path} is already there{more}: this command does not replace '
        f'files; give --overwrite to replace them, or another '
        f'{output.flag}.')


# The command that reads each task's workdirs.
TASK_COMMANDS = {'translation': 'translate', 'language_modeling': 'generate',
                 'image_classification': 'predict',
                 'text_classification': 'predict',
                 'visual_question_answering': 'ask'}


def workdir_config(workdir: str, task: str) -> ml_collections.ConfigDict:
  """The config `workdir` was trained with, refused unless it trained
  `task`, naming the task it trained and the command that reads it."""
  config = workdir_lib.load_config(workdir)
  if config.task != task:
    command = TASK_COMMANDS.get(config.task)
    fix = (f'python -m transformer.tools.{command} --workdir={workdir} reads '
           f'it' if command else f'no command reads such a workdir; give one '
           f'that trained {task!r}')
    raise ValueError(f'{workdir} trained a {config.task!r} task, not '
                     f'{task!r}: {fix}.')
  return config


def quiet_console() -> None:
  """Keeps INFO log lines off the console (warnings and errors still show),
  unless --verbosity was given."""
  if not flags.FLAGS['verbosity'].present:
    handler = logging.get_absl_handler()
    handler.setLevel(std_logging.WARNING)
    handler.addFilter(_for_the_console)


def _for_the_console(record: std_logging.LogRecord) -> bool:
  """Orbax (and asyncio, for its tasks) log a background write's failure
  several times, with thread tracebacks (`checkpoints.Manager` reports it
  once, in words); gcsfs warns on every bucket access it cannot classify.
  They stay in the log file."""
  return record.name != 'asyncio' and not any(
      f'{os.sep}{library}{os.sep}' in record.pathname
      for library in ('orbax', 'gcsfs'))


def log_to_file(path: str) -> None:
  """Also writes every log line from INFO up to `path` (e.g. a training
  run's WORKDIR/logs/train.log), which keeps what the console leaves out."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  handler = _LogFile(path, encoding='utf-8')
  handler.setFormatter(logging.PythonFormatter())
  std_logging.getLogger().addHandler(handler)


class _LogFile(std_logging.FileHandler):
  """A log file that, once it cannot be written (a full disk), says so in
  one line and stops, instead of a traceback for every log line."""

  def handleError(self, record: std_logging.LogRecord) -> None:
    error = sys.exc_info()[1]
    std_logging.getLogger().removeHandler(self)
    print(f'Warning: cannot write the log file {self.baseFilename} '
          f'({getattr(error, "strerror", None) or error}); it stops here.',
          file=sys.stderr, flush=True)


class _MainThreadStderr:
  """sys.stderr for the main thread; what other threads print there goes to
  the log. After a failed checkpoint write, TensorStore's callbacks print a
  traceback per pending write from orbax's threads ('Event loop is
  closed'); the failure itself is reported once, by `checkpoints.Manager`."""

  def __init__(self, stream):
    self._stream = stream

  def write(self, text: str) -> int:
    if threading.current_thread() is threading.main_thread():
      return self._stream.write(text)
    if text.strip():
      logging.info('stderr of thread %s: %s',
                    threading.current_thread().name, text.rstrip())
    return len(text)

  def __getattr__(self, name):
    return getattr(self._stream, name)


def handle_errors(main: Callable[[list[str]], None]
                  ) -> Callable[[list[str]], None]:
  """Wraps an absl `main` so that the library's errors end the command with
  their message and exit code (see the module docstring)."""

  @functools.wraps(main)
  def wrapped(argv):
    quiet_console()
    sys.stderr = _MainThreadStderr(sys.stderr)
    try:
      return main(argv)
    except faults.Preempted as e:
      print(e, flush=True)
      sys.exit(PREEMPTED)
    except Exception as e:  # pylint: disable=broad-except
      # gs:// unreachable (no credentials, say): TensorFlow's or gcsfs's
      # error, whatever reached the bucket first.
      failure = files.storage_failure(e)
      if failure is not None:
        _exit(USER_ERROR, failure)
      if isinstance(e, FileNotFoundError):  # also a TFDS dataset not prepared
        _exit(MISSING_INPUT, e)
      if isinstance(e, (FloatingPointError, checkpoints.WriteFailed)):
        _exit(RUN_FAILED, e)
      if isinstance(e, (OSError, ValueError, app.UsageError)):
        _exit(USER_ERROR, e)
      raise
  return wrapped


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing, with a misspelt --config.field refused by a
  message (ml_collections raises AttributeError or KeyError there, which
  absl would show as a traceback), and an experiment file that is missing,
  does not parse or refuses its argument named in one line; exits
  USER_ERROR (MISSING_INPUT for a missing file)."""
  spec = _config_spec(argv)
  try:
    _check_experiment_file(spec)
    remaining = flags.FLAGS(argv)
    _check_experiment_loaded(spec)
    _check_integer_flags()
    return remaining
  except FileNotFoundError as e:
    _exit(MISSING_INPUT, e)
  except (OSError, ValueError) as e:
    _exit(USER_ERROR, e)
  except SyntaxError as e:
    _exit(USER_ERROR, ValueError(
        f'--config={spec}: {e.filename} line {e.lineno}: {e.msg}; fix the '
        f'experiment file.'))
  except flags.Error as e:
    if _CONFIG_FILE_ERROR not in str(e):
      print(f'FATAL Flags parsing error: {e}\nPass --helpshort or '
            f'--helpfull to see help on flags.', file=sys.stderr)
      sys.exit(USER_ERROR)
    _exit(USER_ERROR, ValueError(f'--config={spec}: {_last_line(e)}'))
  except (AttributeError, KeyError, TypeError) as e:
    if 'get_config' in str(e):
      _exit(USER_ERROR, ValueError(
          f'--config={spec}: the file defines no get_config(); an '
          f'experiment file returns its config from get_config(arg).'))
    detail = str(e).strip('\'"').replace('\\n', ' ').replace("\\'", "'")
    print(f'Error in a --config override: {detail}', file=sys.stderr)
    sys.exit(USER_ERROR)


# How ml_collections reports an error raised by an experiment's get_config:
# this, then the traceback as text.
_CONFIG_FILE_ERROR = 'Error whilst parsing config file'


def _last_line(error: Exception) -> str:
  """The last line of an error's text (the exception at the end of a
  traceback quoted in it), without its type."""
  line = str(error).strip().splitlines()[-1]
  return re.sub(r'^[\w.]+(Error|Exception): ', '', line)


def _config_spec(argv: list[str]) -> str | None:
  """The value of --config in `argv` (None without one, or for commands
  without that flag)."""
  if 'config' not in flags.FLAGS:
    return None
  for i, arg in enumerate(argv[1:], 1):
    if arg.startswith('--config='):
      return arg.split('=', 1)[1]
    if arg == '--config' and i + 1 < len(argv):
      return argv[i + 1]
  return None


def _check_experiment_file(spec: str | None) -> None:
  """Refuses a --config file that is not there (ml_collections would report
  it only when the config is first used, in several lines)."""
  path = (spec or '').split(':', 1)[0]
  if spec is not None and not os.path.isfile(path):
    raise FileNotFoundError(
        f'--config={spec}: no experiment file {path}; the experiments are '
        f'in experiments/, e.g. --config=experiments/mt_offline.py:runlocal.')


def _check_experiment_loaded(spec: str | None) -> None:
  """Raises the error an experiment's get_config raised as OSError (e.g. a
  workdir it reads that is not there), which ml_collections keeps until
  the config is first used, with the flag in its message."""
  if spec is None:
    return
  error = getattr(flags.FLAGS['config'].value, '__dict__', {}).get('_error')
  if isinstance(error, OSError):
    raise type(error)(f'--config={spec}: {error}')


def run(main: Callable[[list[str]], None]) -> None:
  """`app.run` of a tool's `main` with the shared flag parsing and error
  handling: the body of each tool's `if __name__ == '__main__'` and of its
  console script."""
  app.run(handle_errors(main), flags_parser=parse_flags)


def no_arguments(argv: list[str]) -> None:
  """Refuses positional arguments (a misspelt flag without its dashes)."""
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}; flags are '
                         f'written --name=value.')
