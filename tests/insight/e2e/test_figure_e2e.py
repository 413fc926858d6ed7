"""`tools.figure` of a trained workdir: the key each head's query attends
to most, and errors that name the fix."""

import numpy as np
import PIL.Image

from conftest import raises_naming
from transformer.tools import explore
from transformer.tools import figure


TEXT = 'the red house sees a cat'


def test_translation_figure_names_each_heads_strongest_key(trained, tmp_path):
  views = explore.Explorer(str(trained)).views(TEXT)
  source = figure.choose_view(views, 'over the source')
  path, lines = figure.figure(
      str(trained), str(tmp_path / 'a.png'), text=TEXT,
      view='over the source', layer='all', head='all', query='0')
  assert PIL.Image.open(path).size[0] > 100
  weights = source.weights  # [L, N, T, S]
  assert len(lines) == weights.shape[0] * weights.shape[1]
  layers, heads = weights.shape[:2]
  line = lines[(layers - 1) * heads + 1]
  key = source.keys[int(np.argmax(weights[-1, 1, 0]))]
  assert line.startswith(f'layer {layers - 1} head 1: ') and (
      f'-> {key!r}' in line)
  with raises_naming(ValueError, "--view='co-attention'",
                     "'encoder self-attention'"):
    figure.figure(str(trained), str(tmp_path / 'b.png'), text=TEXT,
                  view='co-attention')
  with raises_naming(ValueError, f"--output={tmp_path / 'b.pdf'}", '.png'):
    figure.figure(str(trained), str(tmp_path / 'b.pdf'), text=TEXT)
