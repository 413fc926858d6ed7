"""Translate sentences with a trained workdir.

    echo "the red house" | python -m transformer.translate --workdir=DIR
    python -m transformer.translate --workdir=DIR --input=src.txt \
        --output=hyp.txt --beam_size=4 --length_penalty=0.6 --average=5

Reads one sentence per line (a file or stdin), writes one translation per
line (a file or stdout), from the workdir's latest checkpoint or the average
of its last `--average` checkpoints. Defaults come from the workdir's config.
"""

import sys

from absl import app
from absl import flags

from transformer import commands
from transformer import sharding
from transformer import train
from transformer.data import text

_WORKDIR = flags.DEFINE_string('workdir', None, 'A training workdir.',
                               required=True)
_INPUT = flags.DEFINE_string('input', '-', 'Source file; - for stdin.')
_OUTPUT = flags.DEFINE_string('output', '-', 'Output file; - for stdout.')
_BEAM_SIZE = flags.DEFINE_integer('beam_size', None,
                                  'Beam size (1: greedy); default: config.')
_LENGTH_PENALTY = flags.DEFINE_float(
    'length_penalty', None, 'GNMT length penalty alpha; default: config.')
_MAX_LENGTH_OFFSET = flags.DEFINE_integer(
    'max_length_offset', None,
    'Output length limit = input length + this; default: config.')
_AVERAGE = flags.DEFINE_integer(
    'average', None, 'Average the last N checkpoints; default: config.')


def _pick(flag, default):
  return default if flag.value is None else flag.value


@commands.user_errors_exit
def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  config = train.load_config(_WORKDIR.value)
  trainer = train.Trainer(config, _WORKDIR.value)
  params, step = trainer.restore_params(
      _pick(_AVERAGE, config.eval.average_checkpoints))
  if _INPUT.value == '-':
    sentences = text.split_lines(text.decode_utf8(sys.stdin.buffer.read(),
                                                  'standard input'))
  else:
    sentences = text.utf8_lines(_INPUT.value)
  if not sentences:
    raise app.UsageError('No sentences to translate: pass them one per line '
                         'on standard input or in --input=FILE.')
  beam_size = _pick(_BEAM_SIZE, config.eval.beam_size)
  if beam_size < 1:
    raise app.UsageError(f'--beam_size={beam_size} must be >= 1.')
  with sharding.active(trainer.mesh, trainer.rules):
    translations = trainer.task.translate(
        params, sentences, beam_size=beam_size,
        length_penalty=_pick(_LENGTH_PENALTY, config.eval.length_penalty),
        max_length_offset=_pick(_MAX_LENGTH_OFFSET,
                                config.eval.max_length_offset))
  output = ''.join(t + '\n' for t in translations)
  if _OUTPUT.value == '-':
    sys.stdout.write(output)
  else:
    with open(_OUTPUT.value, 'w', encoding='utf-8') as f:
      f.write(output)
  print(f'Translated {len(sentences)} sentences with the checkpoint of step '
        f'{step}.', file=sys.stderr)


if __name__ == '__main__':
  app.run(main)
