"""What a model attends to, for every model family: each kind of its
attention on one input, every layer and head (`AttentionView`), as the
explorer page (`tools/explore.py`) and the figures (`tools/figure.py`)
show it. The tasks train and evaluate; the views are read from them here
(`of(task, params, *reads)`), so a task is data, loss and evaluation.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
from jax.experimental import multihost_utils
import numpy as np

from transformer import layers
from transformer.data import augment
from transformer.data import tokenization


@dataclasses.dataclass
class AttentionView:
  """One kind of attention of a model on one input, every layer and head:
  what the explorer page and the figures show."""
  name: str  # e.g. 'encoder self-attention'
  queries: list[str]  # T labels of the rows
  keys: list[str]  # S labels of the columns
  weights: np.ndarray  # [layers, heads, T, S]
  # Image models: the picture [H, W, C] in [0, 1] the keys from
  # `first_patch` on cover, as a grid x grid of patches, row-major.
  image: np.ndarray | None = None
  grid: int = 0
  first_patch: int = 0


# What each task's model reads, (text, image), and its views.
READS = {'translation': (True, False), 'language_modeling': (True, False),
         'masked_language_modeling': (True, False),
         'text_classification': (True, False),
         'image_classification': (False, True),
         'captioning': (False, True),
         'visual_question_answering': (True, True)}


def of(task: Any, params: Any, *reads: Any) -> list[AttentionView]:
  """Every kind of attention of `task`'s model (params `params`) reading
  `reads` (its text, image or both, as `READS` says)."""
  name = task.config.task
  if name not in READS:
    raise ValueError(f'No attention views for a {name!r} task; the views '
                     f'are of {", ".join(READS)} models.')
  return _BY_TASK[name](task, params, *reads)


@functools.partial(jax.jit, static_argnums=(0,))
def _encoder_attention(model, params, tokens):
  """Every encoder layer's weights (compiled: op by op, each op would
  compile apart)."""
  _, state = model.apply({'params': params}, tokens, deterministic=True,
                         method='encode', mutable=['intermediates'])
  return layers.attention_weights(state['intermediates'])


def encoder_views(task: Any, params: Any, text_: str) -> list[AttentionView]:
  """The self-attention of a task's BERT encoder (`task.model.encode`) as
  it reads `text_` after the start token (EOS in the place of [CLS]), cut
  to the model's max_length: every layer and head."""
  ids = ([tokenization.EOS_ID] + task.tokenizer.encode(
      text_, add_eos=False))[:task.model.config.max_length]
  tokens = np.repeat(np.asarray([ids], np.int32), task.batch_divisor, 0)
  # Rows may live on other hosts' devices, as in every task's views.
  [weights] = layers.group_layers(multihost_utils.process_allgather(
      _encoder_attention(task.model, params, tokens), tiled=True)).values()
  pieces = ['[CLS]'] + [task.tokenizer.id_to_piece(i) for i in ids[1:]]
  return [AttentionView('encoder self-attention', pieces, pieces, weights)]


def translation_views(task: Any, params: Any, source: str
                    ) -> list[AttentionView]:
  """The model's attention as it translates `source` (the workdir's beam
  settings), then reads its translation: the encoder's and decoder's
  self-attention and the decoder's attention over the source (the RNN's
  alignment alone). Decoder positions are labelled with the piece each
  predicts; the decoder reads the piece before it."""
  cfg = task.config.eval
  [(ids, output)] = task.translate_ids(
      params, [source], beam_size=cfg.beam_size,
      length_penalty=cfg.length_penalty,
      max_length_offset=cfg.max_length_offset)
  rows = lambda x: np.repeat(x[None], task.batch_divisor, 0)
  weights = multihost_utils.process_allgather(
      task.attention_weights(params, rows(ids), rows(output)), tiled=True)
  src = [task.tokenizer.id_to_piece(int(i)) for i in ids]
  out = [task.tokenizer.id_to_piece(int(i)) for i in output]
  # kind -> (name, query labels, key labels)
  kinds = {'encoder/self_attention': ('encoder self-attention', src, src),
           'decoder/self_attention': ('decoder self-attention', out, out),
           'decoder/cross_attention': ('decoder attention over the source',
                                       out, src),
           'attention': ('alignment a_{t,i} over the source', out, src)}
  grouped = layers.group_layers(weights)
  return [AttentionView(*labels, grouped[kind])
          for kind, labels in kinds.items() if kind in grouped]


def language_views(task: Any, params: Any, text_: str
                    ) -> list[AttentionView]:
  """The model's causal self-attention, every layer and head, as it
  reads `text_` (within the context, after the start token)."""
  pieces, maps = task.self_attention_maps(
      params, text_, last=task.model_config.max_length)
  return [AttentionView('self-attention', pieces, pieces,
                             np.stack(maps))]


def image_views(task: Any, params: Any, picture: np.ndarray
                ) -> list[AttentionView]:
  """Every layer's and head's self-attention over the patches (and the
  class token) for one uint8 picture at the stored size, with the
  picture the model saw: the explorer's page."""
  stacked, labels, image = task.patch_attention(params, picture)
  c = task.model_config
  return [AttentionView('self-attention over the patches', labels,
                              labels, stacked, image=image,
                              grid=c.grid_size,
                              first_patch=1 if c.pooling == 'token' else 0)]


def caption_views(task: Any, params: Any, image: np.ndarray
                    ) -> list[AttentionView]:
  """The model's attention as it reads the caption it writes for a uint8
  [S, S, 3] image (the workdir's beam settings): each word's attention
  over the image grid (Show-Attend-Tell's a_t, or the decoder's
  cross-attention), the caption's self-attention, and the image
  encoder's over the grid; image views come with the picture."""
  cfg = task.config.eval
  [ids] = task.caption(params, image[None], beam_size=cfg.beam_size,
                       length_penalty=cfg.length_penalty)
  ends = np.flatnonzero(ids == tokenization.EOS_ID)
  ids = ids[:ends[0] + 1] if len(ends) else ids[ids > 0]
  rows = lambda x: np.repeat(x[None], task.batch_divisor, 0)
  grouped = layers.group_layers(multihost_utils.process_allgather(
      task.attention_weights(params, rows(image), rows(ids)), tiled=True))
  g = task.model_config.grid_size
  words = [task.tokenizer.id_to_piece(int(t)) for t in ids]
  cells = [f'cell {r},{c}' for r in range(g) for c in range(g)]
  over = dict(image=image / 255.0, grid=g, first_patch=0)
  kinds = {  # kind -> (name, query labels, key labels, over the image)
      'attention': ('words attend to the image (a_t)', words, cells, True),
      'text/decoder/cross_attention': (
          'words attend to the image (decoder cross-attention)', words,
          cells, True),
      'text/decoder/self_attention': ('caption self-attention', words,
                                      words, False),
      'encoder/self_attention': ('image encoder self-attention', cells,
                                 cells, True),
      'grid/vit/self_attention': ('ViT grid self-attention', cells, cells,
                                  True)}
  return [AttentionView(name, queries, keys, grouped[kind],
                             **(over if image_keys else {}))
          for kind, (name, queries, keys, image_keys) in kinds.items()
          if kind in grouped]


def question_views(task: Any, params: Any, question: str, image: np.ndarray
                    ) -> list[AttentionView]:
  """The model's attention on a question about a uint8 [S, S, 3] image:
  two streams: each stream's self-attention, the words' co-attention over
  the image regions (with the image, for overlays) and the regions' over
  the words; one stream: its self-attention over words and regions."""
  tokens = task.encode_questions([question])
  weights = multihost_utils.process_allgather(task.attention_weights(
      params, np.repeat(tokens, task.batch_divisor, 0),
      np.repeat(image[None], task.batch_divisor, 0)), tiled=True)
  length = int((tokens[0] > 0).sum())
  grid = task.config.data.image_size // task.config.data.patch_size
  words = ['[CLS]'] + [task.tokenizer.id_to_piece(int(t))
                       for t in tokens[0, 1:length]]
  regions = ['[IMG]'] + [f'region {r},{c}' for r in range(grid)
                         for c in range(grid)]
  picture = augment.to_unit(image)
  grouped = layers.group_layers(weights)
  if task.config.data.blind:  # no regions reach it: only the words'
    # (one stream: words first, then the regions it never sees)
    words_self = (next(iter(grouped.values()))
                  if task.model_config.architecture == 'single_stream'
                  else grouped['text_layers/self_attention'])
    return [AttentionView(
        'self-attention over the words (a question-only model never sees '
        'the image)', words, words, words_self[..., :length, :length])]
  if task.model_config.architecture == 'single_stream':
    # Words (padded to max_length), then the IMG token and the regions.
    [stacked] = grouped.values()
    t = tokens.shape[1]
    keep = np.r_[0:length, t:t + len(regions)]
    both = words + regions
    return [AttentionView(
        'self-attention over words and regions', both, both,
        stacked[..., keep[:, None], keep], image=picture, grid=grid,
        first_patch=length + 1)]
  return [
      AttentionView('words attend to the regions (co-attention)',
                         words, regions,
                         grouped['co_layers/text_attends_to_other']
                         [..., :length, :], image=picture, grid=grid,
                         first_patch=1),
      AttentionView('regions attend to the words (co-attention)',
                         regions, words,
                         grouped['co_layers/visual_attends_to_other']
                         [..., :length]),
      AttentionView('text stream self-attention', words, words,
                         grouped['text_layers/self_attention']
                         [..., :length, :length]),
      AttentionView('visual stream self-attention', regions, regions,
                         grouped['visual_layers/self_attention'])]


_BY_TASK: dict[str, Callable[..., list[AttentionView]]] = {
    'translation': translation_views, 'language_modeling': language_views,
    'masked_language_modeling': encoder_views,
    'text_classification': encoder_views,
    'image_classification': image_views, 'captioning': caption_views,
    'visual_question_answering': question_views}
