r"""Generate text with a trained language-model workdir.

    python -m transformer.tools.generate --workdir=DIR --prompt="ROMEO:" \
        --max_new_tokens=300 --temperature=0.8 --top_k=200 --seed=1
    python -m transformer.tools.generate --workdir=DIR \
        --prompts_file=prompts.txt --greedy --stop="\n\n"
    python -m transformer.tools.generate --workdir=DIR --prompt="ROMEO:" \
        --beam_size=4 --length_penalty=0.6 --max_new_tokens=40

Prompts (several --prompt flags, or one per line of --prompts_file) are
generated as one batch, whatever their lengths: the KV cache is filled with
the left-padded prompts at once and then extended one token per step.
`generate(workdir, prompts, ...)` does the same from python.

`--beam_size=N` searches instead of sampling: translation's beam search
(the GNMT `--length_penalty`, EOS ending a hypothesis) over the
continuation, within the model's context; the sampling flags are refused
beside it.

`--attention_dir=DIR` also writes, per prompt and decoder layer, the
model's self-attention (every head and their mean) over the last
`--attention_tokens` tokens of the prompt and its continuation, as the
model reads them: DIR/sample_{i}_layer_{k}.png.
"""

from __future__ import annotations

import os
import sys
from typing import NamedTuple, Sequence

from absl import flags

from transformer import workdir as workdir_lib
from transformer.data import tokenization
from transformer.insight import attention_figures
from transformer.tools import cli


def define_flags() -> None:
  """The command's flags, defined when it runs (`run`): importing the
  module for its function defines none, so tools import side by side."""
  flags.DEFINE_string('workdir', None, 'A language-model workdir.',
                      required=True)
  flags.DEFINE_multi_string('prompt', [], 'A prompt; repeatable.')
  flags.DEFINE_string('prompts_file', None, 'A file of prompts, one per line.')
  flags.DEFINE_integer('max_new_tokens', 200, 'Tokens to generate per prompt.')
  flags.DEFINE_float('temperature', 1.0, 'Sampling temperature.')
  flags.DEFINE_integer('top_k', 0, 'Sample among the k most likely tokens '
                       '(0: all).')
  flags.DEFINE_float('top_p', 1.0, 'Nucleus sampling threshold.')
  flags.DEFINE_bool('greedy', False, 'Take the most likely token.')
  flags.DEFINE_integer('seed', 0, 'Sampling seed.')
  flags.DEFINE_integer('beam_size', None, 'Beam search of this width for '
                       'the most likely continuation, instead of sampling.')
  flags.DEFINE_float('length_penalty', None, 'Beam search: GNMT length '
                     'penalty alpha (default 0.6; 0: by log-probability).')
  flags.DEFINE_multi_string('stop', [], 'Cut a sample at this string; '
                            'repeatable ("\\n" is a newline).')
  flags.DEFINE_integer('average', 1, 'Average the last N checkpoints.')
  flags.DEFINE_string('attention_dir', None, 'Also write each sample\'s '
                      'self-attention figures (per layer) into this folder.')
  flags.DEFINE_integer('attention_tokens', 32, 'The last tokens of each '
                       'sample that the attention figures show.')
  cli.define_overwrite_flag()


class Generated(NamedTuple):
  samples: list[str]  # the continuation of each prompt
  step: int  # of the checkpoint used
  figures: list[str]  # attention figures written (with attention_dir)


def _check_flags(*, max_new_tokens: int, temperature: float, top_k: int,
                 top_p: float, greedy: bool, average: int, seed: int,
                 beam_size: int | None = None,
                 length_penalty: float | None = None) -> None:
  """Refuses sampling settings that mean nothing, before restoring."""
  cli.check_flag('max_new_tokens', max_new_tokens, at_least=1)
  if beam_size is None:
    if length_penalty is not None:
      raise ValueError('--length_penalty ranks beam search\'s hypotheses: '
                       'give --beam_size too.')
  else:
    cli.check_flag('beam_size', beam_size, at_least=1)
    cli.check_flag('length_penalty', length_penalty, at_least=0)
    sampling = [name for name, given in (
        ('--temperature', temperature != 1.0), ('--top_k', top_k != 0),
        ('--top_p', top_p != 1.0), ('--greedy', greedy)) if given]
    if sampling:
      raise ValueError(f'--beam_size searches for the most likely '
                       f'continuation; {", ".join(sampling)} choose how to '
                       f'sample: leave them out, or --beam_size.')
  # jax.random.key takes a 64-bit integer (the config's seed is >= 0 too).
  cli.check_flag('seed', seed, at_least=0, at_most=cli.INT64[1])
  cli.check_flag('average', average, at_least=1)
  if not greedy:  # greedy decoding ignores the temperature
    cli.check_flag('temperature', temperature, above=0)
  cli.check_flag('top_k', top_k, at_least=0)
  cli.check_flag('top_p', top_p, above=0, at_most=1)


def generate(workdir: str, prompts: Sequence[str], *,
             max_new_tokens: int = 200, temperature: float = 1.0,
             top_k: int = 0, top_p: float = 1.0, greedy: bool = False,
             seed: int = 0, stop: Sequence[str] = (), average: int = 1,
             attention_dir: str | None = None, attention_tokens: int = 32,
             overwrite: bool = False, beam_size: int | None = None,
             length_penalty: float | None = None) -> Generated:
  """The continuation of each prompt, the step of the checkpoint used, and
  with `attention_dir` the self-attention figures of each prompt and its
  continuation (see the module docstring; `LanguageModelingTask.generate`
  for the options). Figures already in `attention_dir` are refused before
  any work unless `overwrite`."""
  if not prompts:
    raise ValueError('Give --prompt (repeatable) or --prompts_file; '
                     '--prompt="" generates from nothing.')
  _check_flags(max_new_tokens=max_new_tokens, temperature=temperature,
               top_k=top_k, top_p=top_p, greedy=greedy, average=average,
               seed=seed, beam_size=beam_size, length_penalty=length_penalty)
  cli.check_flag('attention_tokens', attention_tokens, at_least=1)
  cli.workdir_config(workdir, 'language_modeling')
  outputs = [] if attention_dir is None else [
      cli.Output('--attention_dir', os.path.join(
          attention_dir, f'sample_{i}_layer_.png'), numbered=True)
      for i in range(len(prompts))]
  cli.check_outputs(outputs, overwrite=overwrite)
  restored = workdir_lib.restore(workdir, average=average)
  _note_unknown(restored.task.tokenizer, prompts)
  if beam_size is None:  # beam search refuses to run past the context
    _note_past_context(restored.task, prompts, max_new_tokens)
  with cli.Writing(outputs, overwrite=overwrite) as writing, \
      restored.active():
    samples = restored.task.generate(
        restored.params, prompts, max_new_tokens=max_new_tokens,
        temperature=temperature, top_k=top_k, top_p=top_p, greedy=greedy,
        seed=seed, stop=stop, beam_size=beam_size or 0,
        length_penalty=0.6 if length_penalty is None else length_penalty)
    figures = [] if attention_dir is None else [
        os.path.join(attention_dir, os.path.basename(figure))
        for figure in attention_figures.self_attention(
            restored.task, restored.params,
            [p + s for p, s in zip(prompts, samples)],
            writing.path(os.path.join(attention_dir, 'sample_')),
            last=attention_tokens)]
  return Generated(samples, restored.step, figures)


def _note_unknown(tokenizer, prompts: Sequence[str]) -> None:
  """Says once when the prompts hold text the vocabulary lacks (a
  character vocabulary's missing characters, listed): it is read as the
  unknown id, which the model never trained on."""
  # Published vocabularies without one (GPT-2's) hold a real token there.
  if tokenizer.id_to_piece(tokenization.UNK_ID) not in ('<unk>', '[UNK]'):
    return
  count = sum(tokenizer.encode(p, add_eos=False).count(tokenization.UNK_ID)
              for p in prompts)
  if not count:
    return
  missing = ''
  if isinstance(tokenizer, tokenization.CharTokenizer):
    missing = ' (' + ' '.join(dict.fromkeys(  # in the order they come
        c for p in prompts for c in p if tokenizer.encode(
            c, add_eos=False) == [tokenization.UNK_ID])) + ')'
  print(f'Note: {count} piece{"s" if count > 1 else ""} of the prompts '
        f'{"are" if count > 1 else "is"} not in the model\'s vocabulary'
        f'{missing}: read as the unknown id, which the model never trained '
        f'on.', file=sys.stderr, flush=True)


def _note_past_context(task, prompts: Sequence[str],
                       max_new_tokens: int) -> None:
  """Says when the samples will outgrow the model's context: beyond it,
  each continues from its last half context (the model sees no further
  back), so a long --max_new_tokens is not what the model can read."""
  context = task.model_config.max_length
  longest = 1 + max(len(task.tokenizer.encode(p, add_eos=False))
                    for p in prompts)  # the start token and the prompt
  if longest >= context:
    print(f'Note: the longest prompt takes {longest} tokens (with the start '
          f'token), past the model\'s context of {context}: each sample '
          f'continues from its last {context // 2} tokens only; a prompt of '
          f'at most {context - 2} tokens is read whole.', file=sys.stderr,
          flush=True)
  elif longest + max_new_tokens > context:
    print(f'Note: --max_new_tokens={max_new_tokens} runs past the model\'s '
          f'context of {context} tokens (with the prompt): from there each '
          f'sample continues from its last {context // 2} tokens only; '
          f'--max_new_tokens={context - longest} stays within it.',
          file=sys.stderr, flush=True)


def main(argv):
  cli.no_arguments(argv)
  args = flags.FLAGS
  prompts = list(args.prompt)
  if args.prompts_file:
    prompts += cli.input_lines('--prompts_file', args.prompts_file)
  # Backslash escapes ('\\n') become characters; other text stays as typed.
  stop = [cli.backslash_escapes('stop', s) for s in args.stop]
  samples, step, figures = generate(
      args.workdir, prompts, max_new_tokens=args.max_new_tokens,
      temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
      greedy=args.greedy, seed=args.seed, stop=stop, average=args.average,
      attention_dir=args.attention_dir,
      attention_tokens=args.attention_tokens, overwrite=args.overwrite,
      beam_size=args.beam_size, length_penalty=args.length_penalty)
  for prompt, sample in zip(prompts, samples):
    sys.stdout.write(f'{prompt}{sample}\n')
    if len(prompts) > 1:
      sys.stdout.write('-' * 40 + '\n')
  print(f'Generated with the checkpoint of step {step}.', file=sys.stderr)
  if figures:
    print(f'Attention figures: {figures[0]} ... ({len(figures)} files)',
          file=sys.stderr)


def run() -> None:
  """The `transformer-generate` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
