"""What the command-line tools share: flag parsing, exit codes, error
messages, console logging and the rule for the files they write.

Flags: a misspelt --config field is refused with a message. One meaning
for exit codes:

   0  done
   1  the run failed: training stopped on non-finite values, or a
      checkpoint could not be written (the message says what to change)
   2  user error: bad flags, config, input file or workdir (the message says
      what to fix)
  66  missing input: a dataset, file, workdir or checkpoint that is not
      there (sysexits' EX_NOINPUT)
  75  preempted: SIGTERM/SIGINT stopped training after writing a
      checkpoint; rerun the same command to resume (EX_TEMPFAIL)
 130  interrupted: Ctrl-C (SIGINT) stopped the command outside training's
      steps; one line says so, and none of its files is left behind

Errors end with 'Error: <message>' instead of a traceback from inside JAX;
`--verbosity=1` logs the traceback too.

The console shows the commands' own lines and warnings; libraries' INFO
logs (orbax's checkpointing, JAX's backends, ...) stay off it, and go to
WORKDIR/logs/ for training runs. So do orbax's warnings and errors: the
checkpoint code reports every failure itself, in one line (`checkpoints`).
`--verbosity=0` shows them all again.

Files a command writes follow one rule (`check_outputs`), checked before
any work: each is written once per run (distinct inputs get distinct names,
`output_names`), none replaces an input, none has a name too long for its
file system, and none replaces a file that was there before the command
started unless `--overwrite` says so. `Writing` keeps the rule while the
command works: its files appear whole at the end or not at all (a full
disk, an error or Ctrl-C leaves nothing to block the rerun), and never over
a file another run wrote meanwhile. (The reports that `compare` and
`reproduce` keep in the workdir they run are that workdir's own, and each
run brings them up to date.)
"""

from __future__ import annotations

import collections
import errno
import functools
import glob
import importlib.util
import logging as std_logging
import os
import re
import shutil
import sys
import tempfile
import threading
import unicodedata
from typing import Callable, Iterable, NamedTuple, Sequence

from absl import app
from absl import flags
from absl import logging
import jax
import ml_collections

from transformer import checkpoints
from transformer import configs
from transformer import errors
from transformer import faults
from transformer import storage
from transformer import workdir as workdir_lib
from transformer.core import ranges
from transformer.data import downloads
from transformer.data import reading

RUN_FAILED = 1
USER_ERROR = 2
MISSING_INPUT = 66
PREEMPTED = faults.PREEMPTED_EXIT_CODE
INTERRUPTED = 130  # 128 + SIGINT, as shells report a command Ctrl-C ended


def _exit(code: int, error: BaseException | str) -> None:
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


def input_lines(flag: str | None, path: str) -> list[str]:
  """The lines of a UTF-8 text file that a flag (or, None, an argument)
  names, `-` for standard input; a path missing or a folder is refused,
  named, before any work."""
  if path == '-':
    return reading.split_lines(reading.decode_text(sys.stdin.buffer.read(),
                                             'standard input'))
  check_input_file(flag, path, 'a UTF-8 text file, one line each')
  return reading.lines(path)


def check_input_file(flag: str | None, path: str, what: str) -> None:
  """Refuses an input path that is missing or a folder, naming the flag
  (None: a command-line argument) and `what` to give instead."""
  name = f'{flag}={path}' if flag else path
  if storage.path(path).is_dir():
    raise IsADirectoryError(f'{name} is a folder; give {what} (a folder\'s '
                            'files: FOLDER/*).')
  if not storage.exists(path):
    raise FileNotFoundError(f'{name}: no such file; give {what}.')


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


def printable(text: str) -> str:
  r"""`text` for one field of a line of tab-separated output: control and
  format characters (a newline, a tab, U+202E that reverses the line in a
  terminal) and the backslash written as escapes ('\n', '\t', '\u202e',
  '\\'), everything else as it is."""
  special = {'\n': '\\n', '\t': '\\t', '\r': '\\r', '\\': '\\\\'}
  return ''.join(
      special.get(c) or (f'\\u{ord(c):04x}' if _hidden(c) else c)
      for c in text)


def _hidden(character: str) -> bool:
  """A control, line or paragraph separator, or format character, but
  the joiners inside emoji and scripts that need them."""
  return unicodedata.category(character) in ('Cc', 'Cf', 'Zl', 'Zp') and (
      character not in '\u200c\u200d')


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
  return path if storage.is_remote(path) else os.path.realpath(path)


def _existing(output: Output) -> list[str]:
  """The files already where `output` goes (for a series, its members)."""
  if not output.numbered:
    return [output.path] if storage.exists(output.path) else []
  folder, name = os.path.split(output.path)
  root, extension = os.path.splitext(name)
  pattern = re.compile(re.escape(root) + r'\d+' + re.escape(extension))
  folder = folder or '.'
  return [storage.join(folder, n) for n in storage.listdir(folder)
          if pattern.fullmatch(n)]


def _blocking_file(path: str) -> str | None:
  """A file where `path` needs a folder (its parent or one above), if
  any."""
  folder = os.path.dirname(path.rstrip('/'))
  while folder and not storage.exists(folder):
    parent = os.path.dirname(folder)
    if parent == folder:
      return None
    folder = parent
  return folder if folder and not storage.path(folder).is_dir() else None


def check_outputs(outputs: Iterable[Output], *, overwrite: bool = False,
                  inputs: Sequence[str] = ()) -> None:
  """The one rule for the files a command writes, checked before any work:
  no two outputs of the run share a path, none is an input of the run,
  none is a folder or lies under a file, none has a name (or path) longer
  than its file system takes while `Writing` writes it, and none is already
  there unless `overwrite` (a file from an earlier run, or one the user
  keeps there, is never replaced silently).

  Raises:
    ValueError: two outputs share a path, or one is an input or a folder,
      or its name is too long.
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
    if not output.numbered and storage.path(output.path).is_dir():
      raise ValueError(f'{output.flag}: {output.path} is a folder; give the '
                       f'path of the file to write.')
    _check_length(output)
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


# How `Writing` names what it writes meanwhile: a staging folder beside the
# outputs ('.writing-' + 8 random characters + '.tmp'), and in it a
# temporary file beside each ('.NAME.' + 8 random characters + '.tmp', as
# tempfile and `storage.write_atomically`, which the plots use, name theirs).
_STAGING = ('.writing-', '.tmp')
_STAGING_LENGTH = len(''.join(_STAGING)) + 8
_TEMPORARY_LENGTH = len('.' '.' '.tmp') + 8
_TEMPORARY = re.compile(r'\.(.+)\.\w{8}\.tmp')
# A numbered series is checked as if it had this many members (layers).
_SERIES_NUMBER = '999'


def _limit(path: str, name: str, default: int) -> int:
  """os.pathconf's `name` (PC_NAME_MAX, PC_PATH_MAX) of the file system
  `path` would be on: that of its nearest folder already there."""
  folder = os.path.dirname(os.path.abspath(path))
  while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
    folder = os.path.dirname(folder)
  try:
    return os.pathconf(folder, name)
  except (OSError, ValueError):
    return default


def _check_length(output: Output) -> None:
  """Refuses an output whose name, or path, is longer than its file system
  takes while `Writing` writes it (with the staging folder and temporary
  name): e.g. a map named after an image of 250 characters."""
  if storage.is_remote(output.path):
    return
  path = os.path.abspath(output.path)
  folder, name = os.path.split(path)
  shown = f'the file name {name} is'
  if output.numbered:
    root, extension = os.path.splitext(name)
    name = root + _SERIES_NUMBER + extension
    shown = f'the file names {root}N{extension} are up to'
  most = _limit(path, 'PC_NAME_MAX', 255)
  for part in folder.split(os.sep):
    if len(os.fsencode(part)) > most:
      raise ValueError(
          f'{output.flag}: the folder name {part} is '
          f'{len(os.fsencode(part))} bytes long, over the {most} a name may '
          f'have on this file system; give a shorter one.')
  size = len(os.fsencode(name))
  if size + _TEMPORARY_LENGTH > most:
    raise ValueError(
        f'{output.flag}: {shown} {size} bytes long; this '
        f'file system takes {most - _TEMPORARY_LENGTH} at most (names of '
        f'{most} bytes, less {_TEMPORARY_LENGTH} for the temporary name it '
        f'is written under first). Shorten it, or the name of the input '
        f'it is named after.')
  longest = _limit(path, 'PC_PATH_MAX', 4096)
  # A path's bytes and its terminating NUL, in the staging folder.
  size = (len(os.fsencode(os.path.join(folder, name))) + 1
          + _STAGING_LENGTH + _TEMPORARY_LENGTH + 1)
  if size > longest:
    raise ValueError(
        f'{output.flag}: the path {os.path.join(folder, name)} is too long: '
        f'{size} bytes while it is written (with its staging folder and '
        f'temporary name), over the {longest} this system takes; write it '
        f'in a folder of a shorter path.')


class Writing:
  """Writes a command's outputs as `check_outputs` promised them, whatever
  happens while the command works.

    with cli.Writing(outputs, overwrite=overwrite) as writing:
      ...  # the work
      writing.write(path, text)  # an output's content
      plots.plot_attention(..., writing.path(path))  # where a function
                                                      # writes one

  Entering makes a staging folder beside the outputs (so a folder that
  cannot be written is named before the work); everything goes there
  first, and is put in place when the `with` ends without an error, each
  file with a hard link, which never replaces a file: one that appeared
  since the check (another run writing the same --output) fails naming it,
  as the check would have, and the outputs this run had put in place are
  removed again (with `overwrite`, files are renamed over what is there).
  An error or Ctrl-C removes the staging folder and the folders made for
  the outputs: no partial output is left to block the rerun. A write that
  fails (a full disk, a read-only folder) is named by the output's path
  and the cause.
  """

  def __init__(self, outputs: Iterable[Output], *, overwrite: bool = False):
    self._outputs = list(outputs)
    self._overwrite = overwrite
    self._stages = {}  # an output folder -> its staging folder
    self._made = []  # folders made for the outputs, deepest last

  def __enter__(self) -> 'Writing':
    try:
      for output in self._outputs:
        self._stage(os.path.dirname(output.path))
    except BaseException as e:
      named = self._named(e, self._outputs[0].path)
      self._discard()
      if named is e:
        raise
      raise named from e
    return self

  def __exit__(self, kind, error, traceback) -> bool:
    del kind, traceback
    if error is None:
      try:
        self._publish()
      except BaseException as e:
        named = self._named(e)
        self._discard()
        if named is e:
          raise
        raise named from e
      self._discard(published=True)
      return False
    named = self._named(error)
    self._discard()
    if named is not error:
      raise named from error
    return False

  def path(self, path: str) -> str:
    """Where to write the output `path` (a file, or the prefix a function
    writes a series under) meanwhile; it is put in place at the end."""
    folder, name = os.path.split(path)
    return os.path.join(self._stage(folder), name)

  def folder(self, folder: str) -> str:
    """Where to write the files that go into `folder` meanwhile."""
    return self._stage(folder)

  def write(self, path: str, data: str | bytes) -> None:
    """The output `path`'s content (text as UTF-8), put in place at the
    end."""
    if isinstance(data, str):
      data = data.encode('utf-8')
    try:
      with open(self.path(path), 'xb') as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    except OSError as e:
      named = self._named(e, path)
      if named is e:
        raise
      raise named from e

  # -- Staging.

  def _key(self, folder: str) -> str:
    return folder if storage.is_remote(folder) else os.path.abspath(
        folder or '.')

  def _stage(self, folder: str) -> str:
    key = self._key(folder)
    if key not in self._stages:
      if storage.is_remote(key):  # copied up at the end
        self._stages[key] = tempfile.mkdtemp(prefix=_STAGING[0],
                                             suffix=_STAGING[1])
      else:
        self._makedirs(key)
        self._stages[key] = tempfile.mkdtemp(
            prefix=_STAGING[0], suffix=_STAGING[1], dir=key)
    return self._stages[key]

  def _makedirs(self, folder: str) -> None:
    """Makes `folder` and its missing parents, remembering them."""
    missing = []
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
      missing.append(folder)
      folder = os.path.dirname(folder)
    for made in reversed(missing):
      os.mkdir(made)
      self._made.append(made)

  def _flag(self, path: str) -> str:
    """The flag that chose where `path` goes: the output's own, else that
    of the output whose folder holds it most closely."""
    key = self._key(path)
    for output in self._outputs:
      if key == self._key(output.path):
        return output.flag
    holding = [output for output in self._outputs
               if key.startswith(self._key(os.path.dirname(output.path))
                                 + os.sep)]
    if holding:
      return max(holding, key=lambda o: len(os.path.dirname(o.path))).flag
    return self._outputs[0].flag if self._outputs else 'the output'

  def _publish(self) -> None:
    """Puts every staged file in place (see the class docstring)."""
    placed = []
    try:
      for folder, stage in self._stages.items():
        for root, _, names in os.walk(stage):
          for name in sorted(names):
            staged = os.path.join(root, name)
            path = (storage.join(folder, *os.path.relpath(staged, stage).split(
                os.sep)) if storage.is_remote(folder) else
                    os.path.join(folder, os.path.relpath(staged, stage)))
            if self._put(staged, path):
              placed.append(path)
    except BaseException:
      if not self._overwrite:  # only files of this run: it replaced none
        for path in placed:
          if not storage.is_remote(path):
            os.remove(path)
      raise

  def _put(self, staged: str, path: str) -> bool:
    """`staged` at `path`; whether it was placed there (False: a remote
    copy, which is not taken back)."""
    if storage.is_remote(path):
      if not self._overwrite and storage.exists(path):
        raise self._appeared(path)
      with open(staged, 'rb') as f:
        storage.write_atomically(path, f.read())
      return False
    if not os.path.isdir(os.path.dirname(path)):
      self._makedirs(os.path.dirname(path))
    if self._overwrite:
      os.replace(staged, path)
      return True
    try:
      os.link(staged, path)
    except FileExistsError:
      raise self._appeared(path) from None
    except OSError as e:
      if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP,
                         errno.EXDEV, errno.EMLINK):
        raise
      # A file system without hard links: the check and the rename are
      # two steps there.
      if os.path.lexists(path):
        raise self._appeared(path) from None
      os.rename(staged, path)
    return True

  def _appeared(self, path: str) -> FileExistsError:
    return FileExistsError(
        f'{path} is already there (it appeared while this command ran: '
        f'another run writing there?): this command does not replace '
        f'files; give --overwrite to replace it, or another '
        f'{self._flag(path)}.')

  def _discard(self, published: bool = False) -> None:
    """Removes the staging folders, and unless `published` the folders
    made for the outputs where they hold nothing."""
    for stage in self._stages.values():
      shutil.rmtree(stage, ignore_errors=True)
    self._stages = {}
    if not published:
      for folder in reversed(self._made):
        try:
          os.rmdir(folder)
        except OSError:
          pass
    self._made = []

  # -- Messages.

  def _output_of(self, name: str) -> str | None:
    """The output a path in a staging folder stands for (a temporary
    file's name without its decoration), or None for another path."""
    for folder, stage in self._stages.items():
      if name == stage or name.startswith(stage + os.sep):
        parts = os.path.relpath(name, stage).split(os.sep)
        match = _TEMPORARY.fullmatch(parts[-1])
        parts[-1] = match[1] if match else parts[-1]
        parts = [part for part in parts if part != '.']
        return storage.join(folder, *parts) if parts else folder
    return None

  def _named(self, error: BaseException, path: str | None = None
             ) -> BaseException:
    """`error` of writing an output as a message naming the output (`path`,
    or the one the error's file name stands for: `storage.write_atomically`
    names the file of a write that fails without one) and what to do;
    other errors (another file's, the work's own) as they are."""
    if not isinstance(error, OSError) or isinstance(error, FileExistsError):
      return error
    filename = getattr(error, 'filename', None)
    if filename is not None:
      path = self._output_of(os.fspath(filename)) or path
    if path is None:
      return error
    flag = self._flag(path)
    cause = error.strerror or str(error)
    fix = {errno.ENOSPC: f'free space on that disk, or give another {flag}',
           errno.EDQUOT: f'free space there, or give another {flag}',
           errno.ENAMETOOLONG: f'give a shorter {flag}'}.get(
               error.errno, f'give another {flag}')
    named = OSError(f'Cannot write {path} ({cause}); {fix}. Nothing was '
                    f'written.')
    named.errno = error.errno
    return named


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


def _log_background_failures() -> None:
  """What other threads raise, and what Python cannot raise (a finalizer's
  error), goes to the log, not the console: after a failed checkpoint
  write, TensorStore's callbacks raise once per pending write in orbax's
  threads ('Event loop is closed'); the failure itself is reported once,
  by `checkpoints.Manager`. Python's own hooks, so no stream is
  replaced."""

  def thread_failed(args: threading.ExceptHookArgs) -> None:
    logging.info('Thread %s raised', getattr(args.thread, 'name', '?'),
                 exc_info=(args.exc_type, args.exc_value, args.exc_traceback))

  def unraisable(args) -> None:
    logging.info('Ignored in %r: %s', args.object, args.err_msg or '',
                 exc_info=(args.exc_type, args.exc_value, args.exc_traceback))

  threading.excepthook = thread_failed
  sys.unraisablehook = unraisable


def handle_errors(main: Callable[[list[str]], None]
                  ) -> Callable[[list[str]], None]:
  """Wraps an absl `main` so that the library's errors end the command with
  their message and exit code (see the module docstring)."""

  @functools.wraps(main)
  def wrapped(argv):
    quiet_console()
    _log_background_failures()
    try:
      return main(argv)
    except faults.Preempted as e:
      print(e, flush=True)
      sys.exit(PREEMPTED)
    except KeyboardInterrupt:
      # Ctrl-C: what was being written is gone (`Writing`), and where in
      # JAX the signal landed says nothing to the user.
      logging.debug('Interrupted at', exc_info=True)
      print('Interrupted.', file=sys.stderr, flush=True)
      sys.exit(INTERRUPTED)
    except Exception as e:  # pylint: disable=broad-except
      # gs:// unreachable (no credentials, say): TensorFlow's or gcsfs's
      # error, whatever reached the bucket first.
      failure = storage.storage_failure(e)
      if failure is not None:
        _exit(USER_ERROR, failure)
      if isinstance(e, FileNotFoundError):  # also a TFDS dataset not prepared
        # A dataset missing from the data folder: how to fetch it.
        _exit(MISSING_INPUT, f'{e}{downloads.fetch_hint(str(e))}')
      if isinstance(e, (FloatingPointError, checkpoints.WriteFailed)):
        _exit(RUN_FAILED, e)
      read = errors.being_read(e)
      if isinstance(e, (OSError, ValueError, app.UsageError)):
        _exit(USER_ERROR, e if read is None or read in str(e) else
              f'{errors.first_line(e, None)} (while reading {read})')
      if read is not None:  # a parser's own failure, deep in a library
        _exit(USER_ERROR, f'{read} could not be read '
              f'({type(e).__name__}: {errors.first_line(e)}): it is damaged '
              f'or not the kind of file expected here. --verbosity=1 shows '
              f'where it failed.')
      raise
  return wrapped


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing, with a misspelt --config.field refused by a
  message (ml_collections raises AttributeError or KeyError there, which
  absl would show as a traceback), and an experiment file that is missing,
  does not parse or refuses its argument named in one line; exits
  USER_ERROR (MISSING_INPUT for a missing file)."""
  spec = config_spec(argv)
  if spec is not None:
    argv = _with_experiment_file(argv, spec)
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


def config_spec(argv: list[str]) -> str | None:
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


def _with_experiment_file(argv: list[str], spec: str) -> list[str]:
  """`argv` with --config's experiment name (or its checkout path, from
  another directory) replaced by its file (`configs.experiment_file`)."""
  found = configs.experiment_file(spec)
  if found == spec:
    return argv
  argv = list(argv)
  for i, arg in enumerate(argv[1:], 1):
    if arg == f'--config={spec}':
      argv[i] = f'--config={found}'
    elif arg == '--config' and i + 1 < len(argv) and argv[i + 1] == spec:
      argv[i + 1] = found
  return argv


def _check_experiment_file(spec: str | None) -> None:
  """Refuses a --config file that is not there (ml_collections would report
  it only when the config is first used, in several lines)."""
  if spec is None:
    return
  path = configs.experiment_file(spec).split(':', 1)[0]
  if not os.path.isfile(path):
    raise FileNotFoundError(
        f'--config={spec}: no experiment file or name {path}; the '
        f'experiments are {", ".join(configs.experiment_names())}, e.g. '
        f'--config=mt_offline:runlocal (or a file of your own).')


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
  handling and the compilation cache: the body of each tool's `if __name__
  == '__main__'` and of its console script."""
  use_compilation_cache()
  skip_absent_tpu()
  app.run(handle_errors(main), flags_parser=parse_flags)


def skip_absent_tpu() -> None:
  """Runs on the CPU where libtpu is installed (the `tpu` extra, which
  plans compile with) but neither a TPU nor jax's GPU plugin is: jax
  would otherwise start a TPU backend in every command and print its
  failure ("Failed to find host bounds for accelerator type ...").
  JAX_PLATFORMS, when set, decides."""
  if ('JAX_PLATFORMS' in os.environ
      or importlib.util.find_spec('libtpu') is None
      or importlib.util.find_spec('jax_plugins') is not None
      or glob.glob('/dev/accel*') or glob.glob('/dev/vfio/[0-9]*')):
    return
  jax.config.update('jax_platforms', 'cpu')


COMPILATION_CACHE = 'TRANSFORMER_COMPILATION_CACHE'


def use_compilation_cache() -> str | None:
  """Keeps XLA's compiled programs on disk (`jax_compilation_cache_dir`),
  as MaxText and t5x do, so a second start of the same model skips
  compiling: `$TRANSFORMER_COMPILATION_CACHE`, else JAX's own setting
  (`$JAX_COMPILATION_CACHE_DIR`), else ~/.cache/transformer/jax; 'off'
  keeps nothing. Programs that compile in under a second are not kept
  (JAX's threshold). Returns the folder."""
  folder = os.environ.get(COMPILATION_CACHE) or (
      jax.config.jax_compilation_cache_dir or os.path.join(
          os.path.expanduser('~'), '.cache', 'transformer', 'jax'))
  if folder.strip().lower() in ('off', 'none', '0', 'false'):
    jax.config.update('jax_compilation_cache_dir', None)
    return None
  jax.config.update('jax_compilation_cache_dir', folder)
  return folder


def no_arguments(argv: list[str]) -> None:
  """Refuses positional arguments (a misspelt flag without its dashes)."""
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}; flags are '
                         f'written --name=value.')
