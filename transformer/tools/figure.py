r"""One attention figure (PNG) of a trained workdir's model on one input: the
lectures' figures, from the same views as the explorer page.

    # an alignment heatmap: the decoder's attention over the source, last
    # layer, mean of the heads, for the model's own translation
    python -m transformer.tools.figure --workdir=workdirs/multi30k_de_en \
        --input="Ein Hund rennt durch den Schnee ." \
        --view="over the source" --output=alignment.png
    # every head of encoder layer 2 (what does multi-head attention learn)
    python -m transformer.tools.figure --workdir=workdirs/multi30k_de_en \
        --input="..." --view="encoder self" --layer=2 --head=all \
        --output=encoder_heads.png
    # one token's attention in every head of every layer (the "it" figure),
    # with the key each head attends to most printed
    python -m transformer.tools.figure --workdir=... --input="..." \
        --view="encoder self" --layer=all --head=all --query=es
    # a captioner's words over the image, each as an overlay
    python -m transformer.tools.figure --workdir=workdirs/captions \
        --image=scene.png --view="over the image" --output=caption.png

--layer is a layer index (negative from the last) or `all`; --head a head
index, `mean` (of the layer's heads) or `all`; --query keeps one query row
(a token's text, its '▁' word mark ignored, or its position). Over an image
(ViT, captioners, VQA co-attention) the weights over the patches are drawn
as overlays: one per query token, or with --query one per panel.
`figure(workdir, output, ...)` does the same from python.
"""

from __future__ import annotations

import sys

from absl import flags
import numpy as np

from transformer.insight import plots
from transformer.insight import attention_views
from transformer.tools import cli
from transformer.tools import explore

_MAX_OVERLAYS = 24


def define_flags() -> None:
  """The command's flags, defined when it runs (`run`)."""
  flags.DEFINE_string('workdir', None, 'A trained workdir.', required=True)
  flags.DEFINE_string('input', '', 'The text the model reads (a VQA '
                      'model: the question).')
  flags.DEFINE_string('image', None, 'The image file an image or '
                      'vision-and-language model reads.')
  flags.DEFINE_string('view', '', 'Which attention: part of its name as '
                      'the explorer lists it (default: the first).')
  flags.DEFINE_string('layer', '-1', 'A layer index (negative from the '
                      'last) or all.')
  flags.DEFINE_string('head', 'mean', 'A head index, mean or all.')
  flags.DEFINE_string('query', '', 'Keep one query row: a token or its '
                      'position.')
  flags.DEFINE_string('output', None, 'The PNG file to write.',
                      required=True)
  flags.DEFINE_integer('average', 1, 'Average the last N checkpoints.')
  cli.define_overwrite_flag()


def choose_view(views: list[attention_views.AttentionView], name: str
                ) -> attention_views.AttentionView:
  """The view whose name contains `name` (any case); the first if empty."""
  found = [v for v in views if name.lower() in v.name.lower()]
  if not found:
    raise ValueError(f'No attention named like --view={name!r}; this model '
                     f'has: {", ".join(repr(v.name) for v in views)}.')
  return found[0]


def _index(value: str, size: int, what: str) -> int:
  try:
    index = int(value)
  except ValueError:
    raise ValueError(f'--{what}={value!r} is not an index.') from None
  if not -size <= index < size:
    raise ValueError(f'--{what}={index} is out of range: the view has '
                     f'{size} {what}s (0 to {size - 1}, or negative from the '
                     f'last).')
  return index % size


def query_index(labels: list[str], query: str) -> int:
  """The row of `query`: its position, or the first token that reads as
  it once the '▁' word mark and spaces are stripped."""
  if query.lstrip('-').isdigit():
    return _index(query, len(labels), 'query')
  plain = [label.replace('▁', '').strip() for label in labels]
  if query.strip() not in plain:
    raise ValueError(f'No query token {query!r}; the rows are: '
                     f'{" ".join(plain)}.')
  return plain.index(query.strip())


def panels(view: attention_views.AttentionView, layer: str, head: str
           ) -> tuple[np.ndarray, list[str]]:
  """The [P, T, S] maps the flags choose and their titles."""
  weights = np.asarray(view.weights, np.float64)  # [L, N, T, S]
  num_layers, num_heads = weights.shape[:2]
  chosen = (range(num_layers) if layer == 'all'
            else [_index(layer, num_layers, 'layer')])
  if head not in ('all', 'mean'):
    head_index = _index(head, num_heads, 'head')
  maps, titles = [], []
  for l in chosen:
    if head == 'all':
      maps += list(weights[l])
      titles += [f'layer {l} head {h}' for h in range(num_heads)]
    elif head == 'mean':
      maps.append(weights[l].mean(0))
      titles.append(f'layer {l}, mean of {num_heads} heads')
    else:
      maps.append(weights[l, head_index])
      titles.append(f'layer {l} head {head_index}')
  return np.stack(maps), titles


def figure(workdir: str, output: str, *, text: str = '',
           image: str | None = None, view: str = '', layer: str = '-1',
           head: str = 'mean', query: str = '', average: int = 1,
           overwrite: bool = False) -> tuple[str, list[str]]:
  """Writes the figure (a file already at `output` is refused before any
  work unless `overwrite`); returns its path and, with `query`, one line
  per panel naming the key that query attends to most."""
  if not output.endswith('.png'):
    raise ValueError(f'--output={output} must name a .png file.')
  outputs = [cli.Output('--output', output)]
  cli.check_outputs(outputs, overwrite=overwrite,
                    inputs=[image] if image else [])
  with cli.Writing(outputs, overwrite=overwrite) as writing:
    lines = _draw(workdir, writing.path(output), text=text, image=image,
                  view=view, layer=layer, head=head, query=query,
                  average=average)
  return output, lines


def _draw(workdir: str, output: str, *, text: str, image: str | None,
          view: str, layer: str, head: str, query: str, average: int
          ) -> list[str]:
  """Draws the figure `figure` writes into `output`; the lines it
  prints."""
  explorer = explore.Explorer(workdir, average)
  chosen = choose_view(explorer.views(text, image), view)
  maps, titles = panels(chosen, layer, head)
  queries, keys = list(chosen.queries), list(chosen.keys)
  lines = []
  if query:
    row = query_index(queries, query)
    maps, queries = maps[:, row:row + 1], [queries[row]]
    # The key's position too: a word may occur more than once.
    lines = [f'{title}: {queries[0]!r}@{row} -> '
             f'{keys[int(np.argmax(m[0]))]!r}@{int(np.argmax(m[0]))} '
             f'({m[0].max():.2f})' for title, m in zip(titles, maps)]
  heading = f'{explorer.title()} · {chosen.name}'
  if chosen.image is None:
    plots.plot_attention(maps, queries, keys, output,
                         titles=[f'{heading}\n{t}' if i == 0 else t
                                 for i, t in enumerate(titles)])
    return lines
  grid, first = chosen.grid, chosen.first_patch
  patches = maps[..., first:first + grid * grid]
  if query:  # one overlay per panel
    overlays = patches[:, 0]
    names = titles
  elif len(maps) == 1:  # one overlay per query token
    overlays = patches[0]
    names = [q.replace('▁', '') for q in queries]
  else:
    raise ValueError('Over an image, several panels need one --query token '
                     '(or choose one --layer and --head=mean or an index).')
  if len(overlays) > _MAX_OVERLAYS:
    raise ValueError(f'{len(overlays)} overlays: choose one --query token '
                     f'(the rows are {len(queries)} tokens).')
  plots.plot_image_attention(chosen.image, overlays.reshape(-1, grid, grid),
                             names, output, suptitle=f'{heading}, '
                             f'{titles[0] if len(titles) == 1 else query}')
  return lines


def main(argv):
  cli.no_arguments(argv)
  args = flags.FLAGS
  path, lines = figure(args.workdir, args.output, text=args.input,
                       image=args.image, view=args.view, layer=args.layer,
                       head=args.head, query=args.query,
                       average=args.average, overwrite=args.overwrite)
  for line in lines:
    print(line)
  print(f'Written: {path}', file=sys.stderr)


def run() -> None:
  """The `transformer-figure` console script."""
  define_flags()
  cli.run(main)


if __name__ == '__main__':
  run()
