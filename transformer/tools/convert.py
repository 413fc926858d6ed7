"""Turns a published checkpoint into a workdir of this codebase, and a
workdir back into the Hugging Face layout.

    python -m transformer.tools.convert --from=hf --input=DIR --output=WORKDIR
    python -m transformer.tools.convert --from=vit_npz \
        --input=ViT-B_16.npz --output=WORKDIR [--image_size=384]
    python -m transformer.tools.convert --to=hf --workdir=WORKDIR --output=DIR

Marian (OPUS-MT) -> `python -m transformer.tools.translate --workdir=WORKDIR`;
GPT-2 and Llama (tokenizer.json or tokenizer.model) -> `python -m
transformer.tools.generate --workdir=WORKDIR`;
BERT -> fine-tuning with `experiments/sst2.py:init_from=WORKDIR`;
ViT (`google/vit-*`, or the original .npz) -> `python -m
transformer.tools.predict --workdir=WORKDIR`, and
`--config.train.init_from=WORKDIR` fine-tunes it (at another resolution or
on other classes). See `transformer/interop/workdirs.py`.

A config field the model cannot follow exactly is refused by name (the
loaders' docstrings list every field). Before it reports success, convert
checks every converted tensor against the model's shapes and restores the
written workdir, comparing its logits with the converted parameters'; a
failure exits non-zero and leaves no workdir at --output.

`--to=hf` writes config.json, model.safetensors and the tokenizer (or
image processor) files of a language model (as GPT-2 or Llama), a BERT
encoder, a ViT image classifier or a translation Transformer (as Marian),
converted or trained here, which transformers' `from_pretrained` loads
(`transformer/interop/export.py`).
"""

from absl import app
from absl import flags

from transformer.interop import export
from transformer.interop import workdirs
from transformer.tools import cli


def define_flags() -> None:
  """The command's flags, defined when it runs (`run`): importing the
  module for its function defines none, so tools import side by side."""
  flags.DEFINE_enum('from', None, list(workdirs.KINDS),
                    'Checkpoint format to read (with --input).')
  flags.DEFINE_enum('to', None, ['hf'],
                    'Format to write a workdir in (with --workdir).')
  flags.DEFINE_string('input', None, 'Hugging Face directory or .npz.')
  flags.DEFINE_string('workdir', None, '--to: the workdir to export.')
  flags.DEFINE_string('output', None, 'The workdir (--from) or directory '
                      '(--to) to write.', required=True)
  flags.DEFINE_integer('image_size', None,
                       'vit_npz: resample the positions to this size.')


def main(argv):
  cli.no_arguments(argv)
  args = flags.FLAGS
  direction = args['from'].value, args.to
  if (direction[0] is None) == (direction[1] is None):
    raise app.UsageError('Give --from=FORMAT with --input (a published '
                         'checkpoint into a workdir), or --to=hf with '
                         '--workdir (a workdir into the Hugging Face '
                         'layout).')
  needed = '--input' if direction[0] else '--workdir'
  if (args.input if direction[0] else args.workdir) is None:
    raise app.UsageError(f'{needed} is missing: --from reads --input, --to '
                         f'reads --workdir.')
  if direction[1]:
    written = export.export(args.workdir, args.output)
  else:
    written = workdirs.convert(args['from'].value, args.input, args.output,
                               image_size=args.image_size)
  print(f'Wrote {args.output}: {written}.')


def run() -> None:
  """The `transformer-convert` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
