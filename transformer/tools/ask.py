"""Ask a visual-question-answering workdir about an image file.

    python -m transformer.tools.ask --workdir=workdirs/vqa \
        --image=scene.png --question="what colour is the square?" \
        --question="how many circles are there?" --attention_dir=maps/

The image is read as RGB and resized to the model's input size, as the
scenes it was trained on. Prints, per question, the top-k answers with their
probabilities; with --attention_dir also writes each question's
co-attention figure (every word's attention over the image patches,
overlaid on the image), NAME_question{i}.png with its _heads.png and
_regions.png (figures already there are refused before any work unless
--overwrite). `ask(workdir, image, questions, ...)` does the same
from python.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from absl import flags
import numpy as np

from transformer import workdir as workdir_lib
from transformer.data import images as image_data
from transformer.data.generated import scenes
from transformer.insight import attention_figures
from transformer.tools import cli


def define_flags() -> None:
  flags.DEFINE_string('workdir', None, 'A visual_question_answering '
                      'workdir.', required=True)
  flags.DEFINE_string('image', None, 'The image file.', required=True)
  flags.DEFINE_multi_string('question', None, 'A question (repeatable).',
                            required=True)
  flags.DEFINE_integer('top_k', 5, 'Answers to print per question.')
  flags.DEFINE_string('attention_dir', None,
                      'Write co-attention figures (PNG) here.')
  cli.define_overwrite_flag()


# (question, [(answer, probability)] best first) per question.
Answers = list[tuple[str, list[tuple[str, float]]]]


def ask(workdir: str, image: str, questions: Sequence[str], *,
        top_k: int = 5, attention_dir: str | None = None,
        overwrite: bool = False) -> tuple[Answers, int]:
  """The top-k answers to each question about the image file, and the step
  of the checkpoint used; with `attention_dir`, figures written there."""
  if not os.path.isfile(image):
    raise FileNotFoundError(f'No such image file: {image}')
  if not questions:
    raise ValueError('Give at least one --question.')
  cli.check_flag('top_k', top_k, at_least=1)
  config = cli.workdir_config(workdir, 'visual_question_answering')
  if attention_dir and config.data.blind:
    raise ValueError(f'{workdir} is a question-only model (config.data.blind)'
                     ': it never sees the image, so it has no co-attention '
                     'over it to draw; leave out --attention_dir.')
  [name] = cli.output_names([image])
  figures = [os.path.join(attention_dir, f'{name}_question{number}.png')
             for number in range(len(questions))] if attention_dir else []
  # Each figure has two companions (`VisualQuestionAnsweringTask.figure`).
  outputs = [cli.Output('--attention_dir', f'{f[:-4]}{suffix}.png')
             for f in figures for suffix in ('', '_heads', '_regions')]
  cli.check_outputs(outputs, overwrite=overwrite)
  restored = workdir_lib.restore(workdir)
  task = restored.task
  picture = image_data.read_image(image, config.data.image_size, 3)
  top_k = min(top_k, len(scenes.ANSWERS))
  results = []
  with cli.Writing(outputs, overwrite=overwrite) as writing, \
      restored.active():
    probabilities = task.answer(restored.params, picture, list(questions))
    tokens = task.encode_questions(list(questions))
    for number, (question, row) in enumerate(zip(questions, probabilities)):
      best = np.argsort(-row)[:top_k]
      results.append((question, [(scenes.ANSWERS[i], float(row[i]))
                                 for i in best]))
      if figures:
        attention_figures.co_attention(
            task, restored.params, picture, tokens[number],
            f'{question} -> {scenes.ANSWERS[best[0]]}',
            writing.path(figures[number]))
  return results, restored.step


def main(argv):
  cli.no_arguments(argv)
  args = flags.FLAGS
  answers, step = ask(args.workdir, args.image, args.question,
                      top_k=args.top_k, attention_dir=args.attention_dir,
                      overwrite=args.overwrite)
  for question, best in answers:
    sys.stdout.write(question + '\t' + '  '.join(
        f'{answer} {probability:.3f}' for answer, probability in best)
                     + '\n')
  print(f'Answered with the checkpoint of step {step}.', file=sys.stderr)


def run() -> None:
  """The `transformer-ask` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
