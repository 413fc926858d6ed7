"""Attention heatmaps written as PNG files.

Uses matplotlib's object API with the Agg canvas, so plotting never touches
pyplot's global state or needs a display.
"""

from __future__ import annotations

import io
import math
import os
from typing import Sequence, TYPE_CHECKING

import numpy as np

from transformer import storage

if TYPE_CHECKING:
  from matplotlib.figure import Figure


def _figure(**kwargs) -> Figure:
  """A figure on the Agg canvas. matplotlib is imported by the first plot,
  not by every command that imports this module (it is 0.4 s of the start
  of a training run, which draws only at evaluations)."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top,redefined-outer-name
  figure = Figure(**kwargs)
  FigureCanvasAgg(figure)
  return figure


def save(figure: Figure, path: str, dpi: int = 100) -> None:
  """Writes the figure (its format from the file name) locally or to cloud
  storage."""
  buffer = io.BytesIO()
  figure.savefig(buffer, dpi=dpi,
                 format=os.path.splitext(path)[1].lstrip('.') or 'png')
  storage.write_atomically(path, buffer.getvalue())


def plot_attention(weights: np.ndarray, query_labels: Sequence[str],
                   key_labels: Sequence[str], path: str,
                   titles: Sequence[str] | None = None) -> str:
  """Heatmaps of attention weights, rows queries and columns keys.

  Args:
    weights: [T, S] for one panel or [P, T, S] for P panels (e.g. heads).
    query_labels: T row labels (e.g. target tokens).
    key_labels: S column labels (e.g. source tokens).
    path: PNG file to write; parent folders are created.
    titles: P panel titles.

  Returns:
    `path`.
  """
  weights = np.asarray(weights, np.float32)
  if weights.ndim == 2:
    weights = weights[None]
  panels, t, s = weights.shape
  if (len(query_labels), len(key_labels)) != (t, s):
    raise ValueError(f'{len(query_labels)} query and {len(key_labels)} key '
                     f'labels for weights of shape {weights.shape[-2:]}.')
  if titles is not None and len(titles) != panels:
    raise ValueError(f'{len(titles)} titles for {panels} panels.')
  columns = min(panels, 4)
  rows = math.ceil(panels / columns)
  cell = 0.35
  figure = _figure(figsize=(columns * max(3.0, cell * s + 1.5),
                           rows * max(3.0, cell * t + 1.5)),
                  layout='constrained')
  for p in range(panels):
    axes = figure.add_subplot(rows, columns, p + 1)
    image = axes.imshow(weights[p], cmap='viridis', vmin=0.0, vmax=1.0,
                        aspect='auto')
    axes.set_xticks(range(s), key_labels, rotation=90, fontsize=8)
    axes.set_yticks(range(t), query_labels, fontsize=8)
    if titles is not None:
      axes.set_title(titles[p], fontsize=9)
  figure.colorbar(image, ax=figure.axes, shrink=0.8)
  save(figure, path)
  return path


def plot_image_attention(image: np.ndarray, maps: np.ndarray,
                         titles: Sequence[str], path: str,
                         suptitle: str = '') -> str:
  """An image and, beside it, attention maps over its patch grid, each
  upsampled to the image and overlaid on it.

  Args:
    image: [H, W, C] in [0, 1] (C = 1 or 3).
    maps: [P, g, g] non-negative weights over a g x g patch grid.
    titles: P panel titles.
    path: PNG file to write; parent folders are created.
    suptitle: a title over all panels (e.g. the prediction).

  Returns:
    `path`.
  """
  maps = np.asarray(maps, np.float32)
  if maps.ndim != 3 or len(titles) != len(maps):
    raise ValueError(f'{len(titles)} titles for maps of shape {maps.shape}; '
                     f'expected [P, g, g] with P titles.')
  image = np.asarray(image, np.float32)
  grey = image[..., 0] if image.shape[-1] == 1 else None
  panels = len(maps) + 1
  columns = min(panels, 5)
  rows = math.ceil(panels / columns)
  figure = _figure(figsize=(2.4 * columns, 2.5 * rows), layout='constrained')
  extent = (0, image.shape[1], image.shape[0], 0)
  for p in range(panels):
    axes = figure.add_subplot(rows, columns, p + 1)
    axes.imshow(grey if grey is not None else image, cmap='gray',
                extent=extent, vmin=0.0, vmax=1.0)
    if p == 0:
      axes.set_title('input', fontsize=9)
    else:
      weights = maps[p - 1] / max(float(maps[p - 1].max()), 1e-12)
      # Nearest-neighbour upsampling: one cell per patch, as attended.
      axes.imshow(weights, cmap='inferno', alpha=0.6, extent=extent,
                  vmin=0.0, vmax=1.0, interpolation='nearest')
      axes.set_title(titles[p - 1], fontsize=9)
    axes.set_axis_off()
  if suptitle:
    figure.suptitle(suptitle, fontsize=10)
  save(figure, path)
  return path


def plot_curves(x: Sequence[float], curves: dict[str, Sequence[float]],
                path: str, *, xlabel: str) -> str:
  """One small panel per curve (metrics of different scales: loss, BLEU,
  accuracy), all over the same `x`; writes `path` and returns it."""
  if not curves:
    raise ValueError('No curves to plot.')
  run = {name: dict(zip(x, values)) for name, values in curves.items()}
  return plot_runs({'': run}, list(curves), path, xlabel=xlabel)


def plot_runs(runs: dict[str, dict[str, dict[float, float]]],
              tags: Sequence[str], path: str, *, xlabel: str = 'step',
              marked: dict[str, str] | None = None) -> str:
  """One panel per tag, one line per run over its steps: runs
  {label: {tag: {step: value}}} (one run labelled '' draws no legend).
  `marked` {tag: other tag}: the other tag's points drawn as stars on that
  tag's panel, in the run's colour (an evaluation of averaged checkpoints
  beside the checkpoints'); writes `path` and returns it."""
  if not tags:
    raise ValueError('No tags to plot: name at least one scalar.')
  marked = marked or {}
  labelled = any(runs)
  columns = min(len(tags), 3)
  rows = math.ceil(len(tags) / columns)
  figure = _figure(figsize=(3.6 * columns, 2.8 * rows), layout='constrained')
  for i, tag in enumerate(tags):
    axes = figure.add_subplot(rows, columns, i + 1)
    style = 'o-' if max(len(s.get(tag, ())) for s in runs.values()) < 20 \
        else '-'  # points while they are few enough to see
    starred = False
    for n, (label, scalars) in enumerate(runs.items()):
      colour = f'C{n % 10}'
      values = scalars.get(tag, {})
      steps = sorted(values)
      axes.plot(steps, [values[s] for s in steps], style, color=colour,
                markersize=3, label=label)
      stars = scalars.get(marked.get(tag), {})
      if stars:
        starred = True
        axes.plot(list(stars), list(stars.values()), '*', color=colour,
                  markersize=10, label=f'{label}, averaged')
    axes.set_title(tag, fontsize=9)
    axes.set_xlabel(xlabel, fontsize=8)
    axes.grid(alpha=0.3)
    if labelled and (i == 0 or starred):
      axes.legend(fontsize=7)
  save(figure, path)
  return path


def plot_kernel_regression(x_train: np.ndarray, y_train: np.ndarray,
                           x_test: np.ndarray, curves: dict[str, np.ndarray],
                           weights: dict[str, np.ndarray], path: str) -> str:
  """The lecture's kernel-regression figure: the training points and each
  method's fitted curve over `x_test`, then each method's attention weights
  [test points, training points] as a heatmap; writes `path`."""
  panels = 1 + len(weights)
  figure = _figure(figsize=(4.2 * panels, 3.6), layout='constrained')
  axes = figure.add_subplot(1, panels, 1)
  axes.plot(x_train, y_train, 'o', markersize=3, alpha=0.5, label='training')
  for name, values in curves.items():
    axes.plot(x_test, values, label=name)
  axes.set_xlabel('x', fontsize=8)
  axes.legend(fontsize=7)
  extent = (float(x_train.min()), float(x_train.max()),
            float(x_test.max()), float(x_test.min()))
  for i, (name, grid) in enumerate(weights.items()):
    axes = figure.add_subplot(1, panels, i + 2)
    image = axes.imshow(grid, cmap='Reds', aspect='auto', extent=extent,
                        interpolation='nearest')
    axes.set_title(name, fontsize=9)
    axes.set_xlabel('training x (keys)', fontsize=8)
    axes.set_ylabel('test x (queries)', fontsize=8)
    figure.colorbar(image, ax=axes, shrink=0.8)
  save(figure, path)
  return path
