"""`tools.figure`: the panels the flags choose, image overlays, and errors
that name the fix (a trained workdir's figure, the key each head's query
attends to most: e2e/test_figure_e2e.py)."""

import numpy as np

from conftest import raises_naming
from transformer.insight import attention_views
from transformer.tools import explore
from transformer.tools import figure


def synthetic_view(image=None):
  rng = np.random.default_rng(0)
  weights = rng.random((3, 2, 5, 6))
  weights /= weights.sum(-1, keepdims=True)
  return attention_views.AttentionView('words over the image', list('abcde'),
                            ['▁x', 'y', 'z', 'u', 'v', 'w'], weights,
                            image=image, grid=2 if image is not None else 0,
                            first_patch=2)


def test_panels_follow_layer_and_head():
  view = synthetic_view()
  maps, titles = figure.panels(view, 'all', 'all')
  assert maps.shape == (6, 5, 6) and titles[3] == 'layer 1 head 1'
  np.testing.assert_array_equal(maps[3], view.weights[1, 1])
  maps, titles = figure.panels(view, '-1', 'mean')
  np.testing.assert_allclose(maps[0], view.weights[2].mean(0))
  assert titles == ['layer 2, mean of 2 heads']
  maps, _ = figure.panels(view, '0', '1')
  np.testing.assert_array_equal(maps[0], view.weights[0, 1])
  with raises_naming(ValueError, '--layer=3', '3 layers', '0 to 2'):
    figure.panels(view, '3', 'mean')
  with raises_naming(ValueError, "--layer='last'", 'not an index'):
    figure.panels(view, 'last', 'mean')


def test_query_by_text_or_position():
  labels = ['▁the', '▁cat', 's', '▁it']
  assert figure.query_index(labels, 'it') == 3
  assert figure.query_index(labels, '1') == 1
  assert figure.query_index(labels, '-1') == 3
  with raises_naming(ValueError, "'dog'", 'the cat s it'):
    figure.query_index(labels, 'dog')


def test_image_views_are_drawn_as_overlays(monkeypatch, tmp_path):
  view = synthetic_view(image=np.full((8, 8, 3), 0.5))

  class Stub:
    def __init__(self, workdir, average):
      del workdir, average

    def views(self, text, image):
      del text, image
      return [view]

    def title(self):
      return 'stub'

  drawn = {}
  monkeypatch.setattr(explore, 'Explorer', Stub)
  monkeypatch.setattr(figure.plots, 'plot_image_attention',
                      lambda image, maps, titles, path, suptitle:
                      drawn.update(maps=maps, titles=titles) or path)
  figure.figure('w', str(tmp_path / 'c.png'), layer='1', head='0')
  # One overlay per query word, over the 2 x 2 patches after the first two
  # keys.
  assert drawn['titles'] == list('abcde')
  np.testing.assert_array_equal(drawn['maps'],
                                view.weights[1, 0, :, 2:].reshape(5, 2, 2))
  figure.figure('w', str(tmp_path / 'c.png'), layer='all', head='mean',
                query='c')
  np.testing.assert_allclose(
      drawn['maps'], view.weights.mean(1)[:, 2, 2:].reshape(3, 2, 2))
  with raises_naming(ValueError, '--query', '--layer', '--head=mean'):
    figure.figure('w', str(tmp_path / 'c.png'), layer='all', head='all')
