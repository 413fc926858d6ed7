"""Generate text with a trained language-model workdir.

    python -m transformer.generate --workdir=DIR --prompt="ROMEO:" \
        --max_new_tokens=300 --temperature=0.8 --top_k=200 --seed=1
    python -m transformer.generate --workdir=DIR --prompts_file=prompts.txt \
        --greedy --stop="\n\n"

Prompts (several --prompt flags, or one per line of --prompts_file) are
generated as one batch, whatever their lengths: the KV cache is filled with
the left-padded prompts at once and then extended one token per step.
"""

import sys

from absl import app
from absl import flags

from transformer import commands
from transformer import sharding
from transformer import train
from transformer.data import text

_WORKDIR = flags.DEFINE_string('workdir', None, 'A language-model workdir.',
                               required=True)
_PROMPT = flags.DEFINE_multi_string('prompt', [], 'A prompt; repeatable.')
_PROMPTS_FILE = flags.DEFINE_string('prompts_file', None,
                                    'A file of prompts, one per line.')
_MAX_NEW_TOKENS = flags.DEFINE_integer('max_new_tokens', 200,
                                       'Tokens to generate per prompt.')
_TEMPERATURE = flags.DEFINE_float('temperature', 1.0, 'Sampling temperature.')
_TOP_K = flags.DEFINE_integer('top_k', 0, 'Sample among the k most likely '
                              'tokens (0: all).')
_TOP_P = flags.DEFINE_float('top_p', 1.0, 'Nucleus sampling threshold.')
_GREEDY = flags.DEFINE_bool('greedy', False, 'Take the most likely token.')
_SEED = flags.DEFINE_integer('seed', 0, 'Sampling seed.')
_STOP = flags.DEFINE_multi_string('stop', [], 'Cut a sample at this string; '
                                  'repeatable ("\\n" is a newline).')
_AVERAGE = flags.DEFINE_integer('average', 1,
                                'Average the last N checkpoints.')


@commands.user_errors_exit
def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  prompts = list(_PROMPT.value)
  if _PROMPTS_FILE.value:
    prompts += text.utf8_lines(_PROMPTS_FILE.value)
  if not prompts:
    raise app.UsageError('Give --prompt (repeatable) or --prompts_file; '
                         '--prompt="" generates from nothing.')
  config = train.load_config(_WORKDIR.value)
  if config.task != 'language_modeling':
    raise app.UsageError(f'{_WORKDIR.value} trained a {config.task!r} task; '
                         f'generate needs a language model.')
  trainer = train.Trainer(config, _WORKDIR.value)
  params, step = trainer.restore_params(_AVERAGE.value)
  # Backslash escapes ('\\n') become characters; other text stays as typed.
  stop = [s.encode('latin-1', 'backslashreplace').decode('unicode_escape')
          for s in _STOP.value]
  with sharding.active(trainer.mesh, trainer.rules):
    samples = trainer.task.generate(
        params, prompts, max_new_tokens=_MAX_NEW_TOKENS.value,
        temperature=_TEMPERATURE.value, top_k=_TOP_K.value,
        top_p=_TOP_P.value, greedy=_GREEDY.value, seed=_SEED.value, stop=stop)
  for prompt, sample in zip(prompts, samples):
    sys.stdout.write(f'{prompt}{sample}\n')
    if len(prompts) > 1:
      sys.stdout.write('-' * 40 + '\n')
  print(f'Generated with the checkpoint of step {step}.', file=sys.stderr)


if __name__ == '__main__':
  app.run(main)
