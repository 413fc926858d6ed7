"""The figures of what models attend to, as PNG files: those evaluations
draw (the trainer wires a task's `write_figures` to `evaluation_figures`)
and those the commands write (predict's class-token maps, generate's
self-attention, ask's co-attention). The tasks compute the weights; the
drawing is here, so a task is data, loss and evaluation.

Every process calls these (the weights may live on other hosts' devices);
process 0 writes.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Sequence

import jax
from jax.experimental import multihost_utils
import numpy as np

from transformer import storage
from transformer.data import tokenization
from transformer.data.generated import scenes
from transformer.insight import plots
from transformer.models import vit


def wire(task: Any) -> Any:
  """`task` with its evaluation's figures drawn (`evaluation_figures`)."""
  task.write_figures = functools.partial(evaluation_figures, task)
  return task


def evaluation_figures(task: Any, params: Any, label: str,
                       **evaluated: Any) -> list[str]:
  """The figures of an evaluation (labelled `label`, e.g. 'step2000') of
  what it `evaluated`, the task's own keywords, in WORKDIR/plots."""
  plots_dir = storage.join(task.workdir, 'plots')
  name = task.config.task
  if name == 'translation':
    return cross_attention(task, params, evaluated['source'],
                           evaluated['translation'],
                           storage.join(plots_dir, f'cross_attention_{label}'))
  if name == 'image_classification':
    path = class_token_attention(task, params, evaluated['picture'],
                                 storage.join(plots_dir,
                                              f'attention_{label}.png'))
    return [path] if path else []
  if name == 'captioning':
    return caption_attention(task, params, evaluated['images'],
                             evaluated['tokens'], plots_dir, label)
  if name == 'visual_question_answering':
    return question_figures(task, params, evaluated['split'],
                            evaluated['predicted'], plots_dir, label)
  return []


def cross_attention(task: Any, params: Any, source: str, translation: str,
                    prefix: str) -> list[str]:
  """Heatmaps of a translation model's attention over the source for one
  sentence pair: for the Transformer one PNG per layer (every head and
  their mean), `{prefix}_layer_K.png`, for the RNN its weights a_{t,i}."""
  # One row per data-parallel shard: the batch axis is sharded.
  rows, limit = task.batch_divisor, task.config.data.max_length
  inputs = np.asarray([task.tokenizer.encode(source)[:limit]] * rows,
                      np.int32)
  targets = np.asarray([task.tokenizer.encode(translation)[:limit]] * rows,
                       np.int32)
  weights = multihost_utils.process_allgather(
      task.attention_weights(params, inputs, targets), tiled=True)
  maps = _cross_attention_maps(weights)
  pieces = lambda ids: [task.tokenizer.id_to_piece(int(i)) for i in ids]
  if jax.process_index() != 0 or not maps:
    return []
  paths = [plots.plot_attention(np.asarray(weights), pieces(targets[0]),
                                pieces(inputs[0]), f'{prefix}_{name}.png',
                                titles=titles)
           for name, (weights, titles) in maps.items()]
  print(f'Cross-attention plots: {paths[0]} ... ({len(paths)} files)',
        flush=True)
  return paths


def _cross_attention_maps(weights: dict[str, Any]
                          ) -> dict[str, tuple[np.ndarray, list[str]]]:
  """{layer: ([N + 1, T, S] of example 0, titles)}: every cross-attention
  head of each decoder layer and their mean, or the RNN's alignment."""
  maps = {}
  for name, layer_weights in weights.items():
    layer_weights = np.asarray(layer_weights[0])
    if name == 'attention':  # the RNN's a_{t,i}
      maps['alignment'] = (layer_weights, ['alignment a_{t,i}'])
    elif name.startswith('decoder/') and name.endswith('/cross_attention'):
      layer = name.split('/')[1]
      maps[layer] = (
          np.concatenate([layer_weights, layer_weights.mean(0, keepdims=True)]),
          [f'{layer} head {h}' for h in range(len(layer_weights))] +
          [f'{layer} mean'])
  return maps


def self_attention(task: Any, params: Any, texts: Sequence[str],
                   prefix: str, *, last: int = 32) -> list[str]:
  """A language model reading each text: per text and decoder layer one
  PNG, `{prefix}{i}_layer_{k}.png`, of `task.self_attention_maps`, every
  head and their mean."""
  paths = []
  for i, text_ in enumerate(texts):
    pieces, maps = task.self_attention_maps(params, text_, last=last)
    labels = [p.replace('\n', '\\n') for p in pieces]
    for k, heads in enumerate(maps):
      titles = ([f'layer {k} head {h}' for h in range(len(heads))]
                + [f'layer {k} mean'])
      if jax.process_index() == 0:
        paths.append(plots.plot_attention(
            np.concatenate([heads, heads.mean(0, keepdims=True)]), labels,
            labels, f'{prefix}{i}_layer_{k}.png', titles=titles))
  return paths


def _class_token(task: Any) -> None:
  if task.model_config.pooling != 'token':
    raise ValueError("Attention maps follow the class token; this model "
                     "pools with 'gap'.")


def class_token_attention(task: Any, params: Any, picture: np.ndarray,
                          path: str) -> str | None:
  """A ViT's class token's attention over the patches for one uint8
  picture at the stored size: each head of the last layer, and the
  rollout through all layers, with the predicted class."""
  _class_token(task)
  c = task.model_config
  stacked, _, image = task.patch_attention(params, picture)
  probabilities = task.predict(params, picture[None])[0]
  if jax.process_index() != 0:
    return None
  grid = lambda row: np.asarray(row[..., 1:]).reshape(-1, c.grid_size,
                                                      c.grid_size)
  last = grid(stacked[-1][:, 0])
  rollout = grid(np.asarray(vit.attention_rollout(
      [layer[None] for layer in stacked]))[0, 0])
  best = int(probabilities.argmax())
  return plots.plot_image_attention(
      image, np.concatenate([last, rollout]),
      [f'layer {c.num_layers - 1} head {h}' for h in range(len(last))]
      + ['rollout'], path,
      suptitle=f'{task.class_names[best]} ({probabilities[best]:.2f})')


def layer_attention(task: Any, params: Any, picture: np.ndarray,
                    prefix: str) -> list[str]:
  """Per layer k, `{prefix}_layer_{k}.png`: a ViT's class token's
  attention over the patches in each head and their mean, on the
  picture."""
  _class_token(task)
  stacked, _, image = task.patch_attention(params, picture)
  if jax.process_index() != 0:
    return []
  g = task.model_config.grid_size
  paths = []
  for k, heads in enumerate(stacked):  # [N, T, T]
    maps = heads[:, 0, 1:].reshape(-1, g, g)  # the class token's
    maps = np.concatenate([maps, maps.mean(0, keepdims=True)])
    paths.append(plots.plot_image_attention(
        image, maps, [f'layer {k} head {h}' for h in range(len(heads))]
        + [f'layer {k} mean'], f'{prefix}_layer_{k}.png'))
  return paths


def caption_attention(task: Any, params: Any, images: np.ndarray,
                      tokens: np.ndarray, folder: str, label: str
                      ) -> list[str]:
  """For each image (uint8 [B, S, S, 3]) and its generated caption
  (`tokens` [B, T]): the image and the attention of every word, the end of
  the caption included, over it: FOLDER/caption_{label}_{i}.png."""
  if not len(images):
    return []
  weights = task.word_attention(params, images, tokens)
  if jax.process_index() != 0:
    return []
  paths = []
  for i, (image, ids) in enumerate(zip(images, tokens)):
    length = int(np.argmax(ids == tokenization.EOS_ID)) + 1 \
        if (ids == tokenization.EOS_ID).any() else int((ids > 0).sum())
    words = [task.tokenizer.id_to_piece(int(t)) for t in ids[:length]]
    paths.append(plots.plot_image_attention(
        image / 255.0, weights[i, :length], words,
        storage.join(folder, f'caption_{label}_{i}.png'),
        suptitle=task.tokenizer.decode(ids)))
  return paths


def question_figures(task: Any, params: Any, split: str,
                     predicted: np.ndarray, folder: str, label: str
                     ) -> list[str]:
  """`co_attention` of the first `eval.num_plots` questions of a split,
  titled with the predicted and the true answer:
  FOLDER/coattention_{label}_{i}.png; none for a question-only model,
  which never sees the image."""
  if task.config.data.blind:
    return []
  count = min(task.config.eval.num_plots, len(predicted))
  questions, tokens, answers = task.split(split)
  return [co_attention(
      task, params, questions.scenes.images[i], tokens[i],
      f'{questions.questions[i]} -> {scenes.ANSWERS[predicted[i]]} '
      f'(true: {scenes.ANSWERS[answers[i]]})',
      storage.join(folder, f'coattention_{label}_{i}.png'))
          for i in range(count)]


def co_attention(task: Any, params: Any, image: np.ndarray,
                 token_row: np.ndarray, title: str, path: str) -> str | None:
  """The co-attention of a question about an image: at `path`, each
  word's attention over the image patches in every co-attentional layer
  (heads averaged), overlaid on the image; beside it (`*_heads.png`) the
  same per layer and head as word x patch heatmaps, and (`*_regions.png`)
  each patch's attention over the words per layer and head. Returns
  `path` (None on processes other than 0)."""
  words, regions = task.co_attention(
      params, np.repeat(token_row[None], task.batch_divisor, 0),
      np.repeat(image[None], task.batch_divisor, 0))
  gather = lambda x: np.asarray(multihost_utils.process_allgather(
      x, tiled=True))[0]
  words, regions = gather(words), gather(regions)  # [K, N, T, R], [K, N, R, T]
  if jax.process_index() != 0:
    return None
  grid = task.config.data.image_size // task.config.data.patch_size
  length = int((token_row > 0).sum())
  names = ['[CLS]'] + [task.tokenizer.id_to_piece(int(t))
                       for t in token_row[1:length]]
  layers, heads = words.shape[:2]
  label = lambda k: f'co-layer {k}' if layers > 1 else 'last layer'
  averaged = words[:, :, :length].mean(1)  # [K, T, R]
  plots.plot_image_attention(
      image / 255.0, averaged.reshape(layers * length, grid, grid),
      [f'{label(k)}: {n}' for k in range(layers) for n in names], path,
      suptitle=title)
  patches = [f'{r},{c}' for r in range(grid) for c in range(grid)]
  panels = [f'{label(k)}, head {h}' for k in range(layers)
            for h in range(heads)]
  stem = os.path.splitext(path)[0]
  plots.plot_attention(
      words[:, :, :length].reshape(layers * heads, length, -1), names,
      patches, f'{stem}_heads.png', titles=panels)
  plots.plot_attention(
      regions[..., :length].reshape(layers * heads, -1, length), patches,
      names, f'{stem}_regions.png', titles=panels)
  return path
