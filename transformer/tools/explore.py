r"""An attention explorer: one self-contained HTML page (scripts and data
inlined; no server, no network) of every layer's and head's attention of a
trained workdir's model on one input.

    python -m transformer.tools.explore --workdir=workdirs/mt_offline \
        --input="the red house sees a small cat" --output=page.html
    python -m transformer.tools.explore --workdir=workdirs/shakespeare_char \
        --input="ROMEO: what light"
    python -m transformer.tools.explore --workdir=workdirs/vit_offline \
        --image=image.png
    python -m transformer.tools.explore --workdir=workdirs/vqa \
        --image=scene.png --input="what colour is the square?"
    python -m transformer.tools.explore --workdir=workdirs/mt_offline --serve

With --serve the model is restored once and a page on
http://127.0.0.1:PORT/ (this machine only: never another interface, and
only for pages opened at a loopback address) takes new inputs from a form
(text, and for image models an image file sent from the browser), each
answered with the same explorer page.

In the page one picks the kind of attention (a translation model: the
encoder's and decoder's self-attention and the decoder's attention over the
source, for the translation the model itself produces; a language model:
its causal self-attention; BERT, pretrained or fine-tuned: its encoder's
self-attention; a ViT reading --image: its self-attention over the
patches; a captioner describing --image: each word's attention over the
image grid, the caption's self-attention and the image encoder's; ViLBERT
answering --input about --image: the words' co-attention
over the image regions and the regions' over the words, and each stream's
self-attention), a layer and a head or the mean of the heads, and hovers a
token to see its attention to every other token as lines (BertViz's head
view) or as a heatmap, and for image models as an overlay on the image;
the model view shows every layer and head at once.
`explore(workdir, text, output)` does the same from python.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import sys
from typing import Sequence

from absl import flags
import numpy as np
import PIL.Image

from transformer import storage
from transformer import workdir as workdir_lib
from transformer.data import images as image_data
from transformer.insight import attention_views
from transformer.tools import cli
from transformer.tools import explorer_server

_HERE = os.path.dirname(os.path.abspath(__file__))


def define_flags() -> None:
  """The command's flags, defined when it runs (`run`)."""
  flags.DEFINE_string('workdir', None, 'A trained workdir.', required=True)
  flags.DEFINE_string('input', '', 'The text the model reads (a VQA '
                      'model: the question).')
  flags.DEFINE_string('image', None, 'The image file an image or '
                      'vision-and-language model reads.')
  flags.DEFINE_string('output', None, 'The HTML file to write; default '
                      'WORKDIR/explorer.html.')
  flags.DEFINE_integer('average', 1, 'Average the last N checkpoints.')
  flags.DEFINE_bool('serve', False, 'Serve a page on 127.0.0.1 that takes '
                    'new inputs, instead of writing one page.')
  flags.DEFINE_integer('port', 8000, 'The port --serve listens on (0: any '
                       'free port).', lower_bound=0, upper_bound=65535)
  cli.define_overwrite_flag()


def _png_data_url(image: np.ndarray) -> str:
  """An [H, W, C] picture in [0, 1] as an inline PNG."""
  pixels = np.clip(np.asarray(image) * 255 + 0.5, 0, 255).astype(np.uint8)
  if pixels.shape[-1] == 1:
    pixels = pixels[..., 0]
  buffer = io.BytesIO()
  PIL.Image.fromarray(pixels).save(buffer, format='PNG')
  return 'data:image/png;base64,' + base64.b64encode(
      buffer.getvalue()).decode()


def page(title: str, text: str, views: Sequence[attention_views.AttentionView],
         form: str = '') -> str:
  """The explorer's HTML for `views` of the model reading `text`, with
  `form` (HTML) above it when served."""
  data = {'title': title, 'input': text, 'views': [
      {'name': v.name, 'queries': list(v.queries), 'keys': list(v.keys),
       'weights': np.round(np.asarray(v.weights, np.float64), 4).tolist(),
       **({} if v.image is None else {
           'image': _png_data_url(v.image), 'grid': v.grid,
           'first_patch': v.first_patch})}
      for v in views]}
  # Inside <script>, '</script' ends the element and '<!--' then '<script'
  # makes the HTML parser skip the next '</script>' (the page went blank):
  # no '<' may reach it. JSON's \u escapes keep the strings exact; '>' and
  # '&' go too, and U+2028/9, which older JavaScript reads as line ends.
  blob = json.dumps(data, ensure_ascii=False).translate(
      {ord(c): f'\\u{ord(c):04x}' for c in '<>&\u2028\u2029'})
  with open(os.path.join(_HERE, 'explorer.html'), encoding='utf-8') as f:
    html = f.read()
  with open(os.path.join(_HERE, 'explorer.js'), encoding='utf-8') as f:
    script = f.read()
  # One pass over the template: a placeholder inside the inserted text (an
  # input of '/*SCRIPT*/') is text, not a place to insert at.
  parts = {'<!--FORM-->': form, '/*DATA*/': blob, '/*SCRIPT*/': script}
  return re.sub('|'.join(map(re.escape, parts)), lambda m: parts[m[0]], html)


# What each task's model reads: (text, an image file).


class Explorer:
  """A workdir's model, restored once, and the attention views of what it
  reads."""

  def __init__(self, workdir: str, average: int = 1):
    cli.check_flag('average', average, at_least=1)
    self.workdir = workdir
    self.config = workdir_lib.load_config(workdir)
    if self.config.task not in attention_views.READS:
      raise ValueError(
          f'The explorer shows translation, language, BERT, ViT, captioning '
          f'and VQA models; {workdir} trained a {self.config.task!r} task.')
    self.needs_text, self.needs_image = attention_views.READS[self.config.task]
    self.restored = workdir_lib.restore(workdir, average=average)

  def views(self, text: str = '', image: str | bytes | None = None
            ) -> list[attention_views.AttentionView]:
    """Every kind of attention of the model reading `text` and/or `image`
    (a file's path, or the bytes of a file sent to --serve's form);
    ValueError, naming the fix, for an input it cannot read."""
    task = self.config.task
    if self.needs_text and not text:
      raise ValueError(f'A {task} model reads text: give --input.')
    if self.needs_image != (image is not None):
      raise ValueError(
          f'A {task} model ' + ('reads an image: give --image=FILE.'
                                if self.needs_image else
                                'reads no image: leave out --image.'))
    reads = [text] if self.needs_text else []
    if self.needs_image:
      sent = isinstance(image, bytes)
      if not sent and not os.path.isfile(image):
        raise ValueError(f'No image file {image!r}: give the path of a PNG '
                         f'or JPEG file.')
      try:
        reads.append(image_data.read_image(
            io.BytesIO(image) if sent else image,
            self.config.data.get('load_size') or self.config.data.image_size,
            getattr(self.restored.task, 'num_channels', 3)))
      except image_data.BadImageError as e:
        if not sent:
          raise
        raise ValueError('The file sent cannot be decoded as an image: '
                         'choose a PNG or JPEG file.') from e
    with self.restored.active():
      return attention_views.of(self.restored.task, self.restored.params,
                                *reads)

  def title(self) -> str:
    name = storage.path(self.workdir).name
    return f'{self.config.task} · {name} · step {self.restored.step}'

  def page(self, text: str = '', image: str | bytes | None = None,
           form: str = '', image_name: str | None = None
           ) -> tuple[str, list[attention_views.AttentionView]]:
    """The page of the model reading `text` and/or `image` (as `views`;
    `image_name` names sent bytes), and its views (`views` says what it
    cannot read)."""
    views = self.views(text, image)
    if isinstance(image, str):
      image_name = os.path.basename(image)
    shown = ' · '.join(x for x in (text, image_name) if x)
    return page(self.title(), shown, views, form), views


def explore(workdir: str, text: str = '', output: str | None = None, *,
            image: str | None = None, average: int = 1,
            overwrite: bool = False
            ) -> tuple[str, list[attention_views.AttentionView]]:
  """Writes the explorer page of `workdir`'s model reading `text` and/or
  the `image` file (default WORKDIR/explorer.html; a page already there
  only with `overwrite`, checked before any work); the path and the views
  it shows."""
  output = output or storage.join(workdir, 'explorer.html')
  if os.path.isdir(output):
    raise ValueError(f'--output={output} is a folder; give the path of the '
                     f'page to write, e.g. --output={output}/page.html.')
  outputs = [cli.Output('--output', output)]
  cli.check_outputs(outputs, overwrite=overwrite,
                    inputs=[image] if image else [])
  with cli.Writing(outputs, overwrite=overwrite) as writing:
    html, views = Explorer(workdir, average).page(text, image)
    writing.write(output, html)
  return output, views


def main(argv):
  cli.no_arguments(argv)
  args = flags.FLAGS
  if args.serve:
    server = explorer_server.make_server(Explorer(args.workdir, args.average),
                                         args.port, args.input, args.image)
    print(f'Serving the explorer on http://127.0.0.1:'
          f'{server.server_address[1]}/ (this machine only); Ctrl-C stops '
          f'it.', file=sys.stderr, flush=True)
    try:
      server.serve_forever()
    except KeyboardInterrupt:
      pass
    finally:
      server.server_close()
    return
  path, views = explore(args.workdir, args.input, args.output,
                        image=args.image, average=args.average,
                        overwrite=args.overwrite)
  print(f'Written: {path} ({", ".join(v.name for v in views)}); open it in '
        f'a browser.', file=sys.stderr)


def run() -> None:
  """The `transformer-explore` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
