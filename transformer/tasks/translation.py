"""Machine translation: parallel text -> SentencePiece -> Transformer -> BLEU.

Data comes from the offline generated grammar, a folder of local parallel
text files, or TFDS (see `config.data.source`); it is read only when needed,
so translating with a trained workdir reads no corpus.
"""

from __future__ import annotations

import functools
from typing import Any, Iterable, Iterator, Sequence

from absl import logging

import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import ml_collections
import numpy as np

from transformer import configs
from transformer import decoding
from transformer import layers
from transformer import metrics
from transformer import storage
from transformer.core import losses
from transformer.data import batching
from transformer.data import packing
from transformer.data import sources
from transformer.data import tokenization
from transformer.models import convs2s
from transformer.models import encoder_decoder
from transformer.models import rnn
from transformer.tasks import base
from transformer.tasks import vocabularies

# The kind of examples the task reads (`data.sources`).
DATA_KIND = 'pairs'

Pairs = list[tuple[str, str]]
# Model families: modules of the interface `family.DecodingFamily`
# (tests/models/test_models.py checks each). A config may set any field of the
# family's Config but these, which the task sets from the data.
FAMILIES = {'transformer': encoder_decoder, 'rnn': rnn, 'convs2s': convs2s}
MODEL_EXCLUDE = ('vocab_size', 'max_length')


def default_config() -> ml_collections.ConfigDict:
  """Every setting of a translation experiment, with the paper's values
  where the paper gives one; experiment files change what they need."""
  config = configs.default_config()
  config.task = 'translation'
  config.data = ml_collections.ConfigDict(dict(
      source='offline',  # 'offline' | 'local' | 'tfds'
      source_lang='en', target_lang='es',
      train_split='train', eval_split='validation',
      num_train=50_000, num_eval=500, num_test=500, seed=0,  # offline
      max_clauses=1,  # offline: sentences of 1..max_clauses clauses
      path='',  # local: folder of {split}.{lang}[.gz]
      tfds_name='', tfds_data_dir='', max_examples_per_split=0,  # tfds
      # 'sentencepiece' (trained on the training text) or 'marian' (the
      # vocabulary of a converted OPUS-MT model).
      tokenizer='sentencepiece',
      vocab_size=37_000, tokenizer_model_type='unigram',
      character_coverage=1.0, max_length=256,
      too_long='drop',  # or 'truncate': pairs longer than max_length
      tokens_per_batch=25_000,  # per side, as in the paper
      packing=True,  # False: length-bucketed rows of one example (RNNs)
      eval_batch_size=64))
  # family: a key of FAMILIES; fields left at None take the named size's
  # value (SIZES of the family's module).
  config.model = configs.model_section(
      *(family.Config for family in FAMILIES.values()), exclude=MODEL_EXCLUDE,
      family='transformer', size='base', dtype='float32')
  config.eval.update(dict(
      beam_size=4, length_penalty=0.6, max_length_offset=50,
      num_bleu_examples=0,  # 0: the whole eval split
      num_print=3, plot_example=0, bleu_tokenize='13a'))
  return config


def model_family(config: ml_collections.ConfigDict):
  """The module of `config.model.family`."""
  if config.model.family not in FAMILIES:
    raise ValueError(f'config.model.family={config.model.family!r}; choose '
                     f'one of {sorted(FAMILIES)}.')
  return FAMILIES[config.model.family]


def saved_config(config: ml_collections.ConfigDict
                 ) -> ml_collections.ConfigDict:
  """The config as a workdir keeps it: config.model with the chosen
  family's fields only (the section's defaults hold all three families';
  `workdir.load_config` fills the others back in)."""
  saved = ml_collections.ConfigDict(config.to_dict())
  saved.model = configs.section_in_use(config.model,
                                       model_family(config).Config,
                                       MODEL_EXCLUDE)
  return saved


def model_config(config: ml_collections.ConfigDict, vocab_size: int):
  """The model's dataclass from the named size and the config's overrides."""
  family = model_family(config)
  overrides = configs.model_overrides(config.model, family.Config,
                                      MODEL_EXCLUDE)
  ignored = sorted({
      field for other in FAMILIES.values() if other is not family
      for field in configs.model_overrides(config.model, other.Config,
                                           MODEL_EXCLUDE)
      if field not in overrides})
  if ignored:
    raise ValueError(f'config.model fields {ignored} do not apply to the '
                     f'{config.model.family!r} family; remove them.')
  return family.config_for(
      config.model.size, vocab_size=vocab_size,
      max_length=config.data.max_length, dtype=jnp.dtype(config.model.dtype),
      **overrides)


def translation_loss(model: Any, params: Any,
                     batch: dict[str, jax.Array], rng: jax.Array | None, *,
                     label_smoothing: float, deterministic: bool):
  """Mean label-smoothed loss over target tokens, and metric sums.

  `batch` has 'inputs' and 'targets' [B, L], and for packed rows also
  '{inputs,targets}_segmentation' and '{inputs,targets}_position'.
  """
  logits = model.apply(
      {'params': params}, batch['inputs'], batch['targets'],
      inputs_positions=batch.get('inputs_position'),
      targets_positions=batch.get('targets_position'),
      inputs_segmentation=batch.get('inputs_segmentation'),
      targets_segmentation=batch.get('targets_segmentation'),
      deterministic=deterministic,
      rngs=None if rng is None else {'dropout': rng})
  sums = losses.token_sums(logits, batch['targets'], label_smoothing)
  return losses.mean(sums), sums


class TranslationTask(base.Task):
  """The `transformer.tasks.Task` for machine translation."""

  unit = 'tokens'

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *,
               batch_divisor: int = 1, shapes_only: bool = False):
    self.config, self.workdir = config, workdir
    self.batch_divisor = batch_divisor
    self.tokenizer = (vocabularies.stand_in(config.data) if shapes_only
                      else self._tokenizer())
    self.family = model_family(config)
    self.model_config = model_config(config, self.tokenizer.vocab_size)
    self.model = self.family.build(self.model_config)
    self.decoder = self.family.build(self.model_config, decode=True)

  def _tokenizer(self):
    """The workdir's SentencePiece model, trained on the training text the
    first time (by process 0; the others wait for it), or the vocabulary of
    a converted Marian model."""
    data = self.config.data
    if data.tokenizer == 'marian':
      return vocabularies.published_tokenizer('marian', self.workdir)
    if data.tokenizer != 'sentencepiece':
      raise ValueError(f"config.data.tokenizer={data.tokenizer!r}; choose "
                       f"'sentencepiece' or 'marian'.")
    return tokenization.SentencePieceTokenizer(vocabularies.in_workdir(
        self.workdir, 'spm.model', lambda path: tokenization.load_or_train(
            path, lambda: [s for pair in self.pairs(data.train_split)
                           for s in pair], data.vocab_size,
            model_type=data.tokenizer_model_type,
            character_coverage=data.character_coverage)))

  @functools.cache
  def pairs(self, split: str) -> Pairs:
    return sources.read('pairs', self.config.data, split)

  def _tokenised(self, pairs: Pairs, report: bool = True
                 ) -> tuple[list[tuple[np.ndarray, np.ndarray]], int]:
    """Tokenised pairs (both sides end with EOS) no longer than max_length,
    and how many were dropped or truncated."""
    encode = lambda texts: [np.asarray(t, np.int32)
                            for t in self.tokenizer.encode_batch(texts)]
    examples = list(zip(encode([s for s, _ in pairs]),
                        encode([t for _, t in pairs])))
    return batching.filter_long(examples, self.config.data.max_length,
                                self.config.data.too_long, report=report)

  @functools.cache
  def examples(self, split: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Tokenised pairs of a split (filter_long counts and reports what it
    drops or truncates)."""
    return self._tokenised(self.pairs(split))[0]

  def cached_sides(self, split: str) -> tuple[Any, Any]:
    """The (source, target) `batching.Side`s of a split's examples from the
    token cache: later starts read no text and run no tokenizer."""
    def chunks():
      pairs = self.pairs(split)
      for begin in range(0, len(pairs), base.CACHE_CHUNK):
        part = pairs[begin:begin + base.CACHE_CHUNK]
        kept, changed = self._tokenised(part, report=False)
        yield kept, {'examples': len(part), 'too_long': changed}
    source, target, meta = base.cached_sides(self, split, chunks)
    data, notes = self.config.data, meta['notes']
    batching.report_long(notes.get('too_long', 0), notes.get('examples', 0),
                         data.max_length, data.too_long)
    return source, target

  # -- Task interface -------------------------------------------------------

  def init(self, rng: jax.Array) -> Any:
    tokens = jnp.ones((1, 8), jnp.int32)
    return self.model.init({'params': rng}, tokens, tokens,
                           deterministic=True)['params']

  def train_iter(self, start_step: int) -> Iterator[dict[str, np.ndarray]]:
    data = self.config.data
    batcher = (packing.PackedTrainBatches if data.packing
               else batching.BucketedTrainBatches)
    batches = batcher(
        self.cached_sides(data.train_split), max_length=data.max_length,
        tokens_per_batch=data.tokens_per_batch, seed=self.config.seed,
        start_step=start_step, row_multiple=self.batch_divisor,
        host=(jax.process_index(), jax.process_count()))
    # Read the evaluation split now, so that a wrong split name fails before
    # training rather than at the first evaluation.
    self.examples(data.eval_split)
    print(f'Training data: {batches.examples_per_epoch:,} pairs, '
          f'{batches.batches_per_epoch:,.1f} batches per epoch, padding '
          f'{batches.padding_fraction:.1%} of token slots.', flush=True)
    return iter(batches)

  def train_batch_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
    """Packed rows (`packing.PACKED_KEYS`), or the widest bucket's rows of
    one example."""
    keys = (packing.PACKED_KEYS if self.config.data.packing
            else ('inputs', 'targets'))
    return base.token_batch_shapes(self.config.data, self.batch_divisor,
                                   keys)

  def eval_batches(self) -> Iterable[dict[str, np.ndarray]]:
    for batch in self._padded(self.config.data.eval_split):
      yield {k: v for k, v in batch.items() if k != 'index'}

  def loss(self, params: Any, batch: dict[str, jax.Array],
           rng: jax.Array | None, *, deterministic: bool):
    return translation_loss(self.model, params, batch, rng,
                            label_smoothing=self.config.train.label_smoothing,
                            deterministic=deterministic)

  def evaluate(self, params: Any, *, label: str) -> dict[str, float]:
    """BLEU and exact match of beam-search translations of the eval split."""
    data, cfg = self.config.data, self.config.eval
    pairs = self.pairs(data.eval_split)
    limit = cfg.num_bleu_examples if cfg.num_bleu_examples > 0 else len(pairs)
    sources = [s for s, _ in pairs[:limit]]
    references = [t for _, t in pairs[:limit]]
    hypotheses = self.translate(params, sources, beam_size=cfg.beam_size,
                                length_penalty=cfg.length_penalty,
                                max_length_offset=cfg.max_length_offset)
    score, signature = metrics.bleu(hypotheses, references,
                                    tokenize=cfg.bleu_tokenize)
    exact = float(np.mean([h == r for h, r in zip(hypotheses, references)]))
    report = storage.join(self.workdir, 'reports',
                        f'{data.eval_split}_{label}.txt')
    if jax.process_index() == 0:  # one report, however many hosts
      storage.write_atomically(report, ''.join(
          f'SRC {source}\nREF {reference}\nHYP {hypothesis}\n\n'
          for source, reference, hypothesis in zip(sources, references,
                                                   hypotheses)))
    print(f'BLEU {score:.2f} on {len(sources)} {data.eval_split} sentences '
          f'(sacreBLEU {signature}); exact match {exact:.1%}; '
          f'translations: {report}', flush=True)
    for source, reference, hypothesis in list(zip(sources, references,
                                                  hypotheses))[:cfg.num_print]:
      print(f'  SRC {source}\n  REF {reference}\n  HYP {hypothesis}')
    if cfg.plot_example >= 0 and cfg.plot_example < len(sources):
      self.write_figures(params, label, source=sources[cfg.plot_example],
                         translation=hypotheses[cfg.plot_example])
    return {'bleu': score, 'exact_match': exact}

  # -- Inference ------------------------------------------------------------

  def _padded(self, split: str) -> list[dict[str, np.ndarray]]:
    return batching.padded_batches(
        self.examples(split), batch_size=self.config.data.eval_batch_size,
        row_multiple=self.batch_divisor,
        max_width=self.config.data.max_length)

  @functools.partial(jax.jit, static_argnums=(0,),
                     static_argnames=('beam_size', 'max_length'))
  def _search(self, params, inputs, max_lengths, *, beam_size: int,
              length_penalty: float, max_length: int):
    """Beam search (greedy for beam 1) over the model family's decoding
    state (the Transformer's KV cache, the RNN's state): [B, max_length]."""
    batch = inputs.shape[0]
    state = self.family.init_decoding(self.decoder, params, inputs,
                                      max_length, beam_size)
    step_fn = functools.partial(self.family.decoding_step, self.decoder,
                                params)
    if beam_size == 1:
      tokens, _ = decoding.greedy_search(
          step_fn, state, batch_size=batch, max_length=max_length,
          eos_id=tokenization.EOS_ID, max_lengths=max_lengths)
      return tokens
    sequences, _ = decoding.beam_search(
        step_fn, state, batch_size=batch, beam_size=beam_size,
        max_length=max_length, eos_id=tokenization.EOS_ID,
        alpha=length_penalty, max_lengths=max_lengths)
    return sequences[:, 0]

  def search_program(self):
    """Beam search over a padded evaluation batch of full-length sources
    (`_search`, as `translate` runs it)."""
    data, cfg = self.config.data, self.config.eval
    rows = batching.round_up(data.eval_batch_size, self.batch_divisor)
    search = functools.partial(
        self._search, beam_size=cfg.beam_size,
        length_penalty=cfg.length_penalty,
        max_length=min(data.max_length + cfg.max_length_offset,
                       data.max_length))
    return search, base.batch_shapes(
        rows, inputs=((data.max_length,), 'int32'), max_lengths=((),
                                                                 'int32'))

  def translate(self, params: Any, sources: Sequence[str], *,
                beam_size: int, length_penalty: float,
                max_length_offset: int) -> list[str]:
    """Detokenised translations of `sources`, in order."""
    return [self.tokenizer.decode(output) for _, output in self.translate_ids(
        params, sources, beam_size=beam_size, length_penalty=length_penalty,
        max_length_offset=max_length_offset)]

  def translate_ids(self, params: Any, sources: Sequence[str], *,
                    beam_size: int, length_penalty: float,
                    max_length_offset: int
                    ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per source in order, (its ids as the model read them, the ids of
    its translation up to and including EOS)."""
    limit = self.config.data.max_length
    encoded = [np.asarray(t, np.int32)
               for t in self.tokenizer.encode_batch(list(sources))]
    truncated = sum(len(e) > limit for e in encoded)
    if truncated:
      logging.warning('Truncated %d of %d source sentences to max_length=%d '
                      'tokens.', truncated, len(encoded), limit)
      encoded = [e[:limit] for e in encoded]
    examples = [(e, np.zeros(0, np.int32)) for e in encoded]
    outputs = [np.zeros(0, np.int32)] * len(sources)
    for batch in batching.padded_batches(
        examples, batch_size=self.config.data.eval_batch_size,
        row_multiple=self.batch_divisor, max_width=limit):
      lengths = (batch['inputs'] > 0).sum(-1)
      # Maximum output length: input length + offset (paper: 50), capped by
      # the positional table; one static bound per batch keeps compiles few.
      cap = self.config.data.max_length
      max_lengths = np.minimum(lengths + max_length_offset, cap)
      tokens = self._search(params, batch['inputs'],
                            max_lengths.astype(np.int32),
                            beam_size=beam_size,
                            length_penalty=length_penalty,
                            max_length=int(min(batch['inputs'].shape[1] +
                                               max_length_offset, cap)))
      # One transfer per batch; rows may live on other hosts' devices.
      tokens = multihost_utils.process_allgather(tokens, tiled=True)
      for row, index in enumerate(batch['index']):
        if index >= 0:
          outputs[index] = _through_eos(np.asarray(tokens[row]))
    return list(zip(encoded, outputs))

  @functools.partial(jax.jit, static_argnums=(0,))
  def attention_weights(self, params, inputs, targets):
    """Every attention layer's weights while the model reads `targets`
    (teacher forcing): {path: [B, N, T, S]}."""
    _, state = self.model.apply({'params': params}, inputs, targets,
                                deterministic=True, mutable=['intermediates'])
    # An RNN without attention sows nothing.
    return layers.attention_weights(state.get('intermediates', {}))

  @functools.partial(jax.jit, static_argnums=(0,))
  def _cross_attention(self, params, inputs, targets):
    """Every decoder layer's attention over the source while the model
    reads `targets` (teacher forcing): {path: [B, N, T, S]}."""
    return {name: weights for name, weights in self.attention_weights(
        params, inputs, targets).items()
            if name == 'attention' or name.endswith('/cross_attention')}

  def alignment_layers(self, layer: int | None = None,
                       head: int | None = None) -> list[str]:
    """The attention layers whose weights `alignments` averages (the RNN's
    one alignment, or decoder cross-attention layers); refuses a layer or
    head the model does not have, naming the range."""
    if self.config.model.family == 'rnn':
      if self.model_config.attention == 'none':
        raise ValueError('This RNN encoder-decoder has no attention '
                         "(model.attention='none'), so no alignments.")
      if layer is not None or head is not None:
        raise ValueError('The RNN has one alignment, no layers or heads: '
                         'leave the layer and head unset.')
      return ['attention']
    for name, value, count in (
        ('layer', layer, self.model_config.num_layers),
        ('head', head, getattr(self.model_config, 'num_heads', 1))):
      if value is not None and not 0 <= value < count:
        raise ValueError(f'Alignment {name} {value}: the model has {count} '
                         f'decoder {name}s, numbered 0 to {count - 1}.')
    return [f'decoder/layer_{i}/cross_attention'
            for i in range(self.model_config.num_layers)
            if layer is None or i == layer]

  def alignments(self, params: Any, pairs: Sequence[tuple[np.ndarray,
                                                          np.ndarray]], *,
                 layer: int | None = None, head: int | None = None
                 ) -> list[np.ndarray]:
    """Per (source ids, target ids) pair, the decoder's attention over the
    source [T, S] as it predicts each target token: the RNN's a_{t,i}, or
    the Transformer's cross-attention of decoder layer `layer` and head
    `head` (None: the mean over the layers, or over the heads)."""
    layer_names = self.alignment_layers(layer, head)
    result = [np.zeros((0, 0), np.float32)] * len(pairs)
    for batch in batching.padded_batches(
        pairs, batch_size=self.config.data.eval_batch_size,
        row_multiple=self.batch_divisor,
        max_width=self.config.data.max_length):
      weights = multihost_utils.process_allgather(self._cross_attention(
          params, batch['inputs'], batch['targets']), tiled=True)
      chosen = np.mean([np.asarray(weights[name]) for name in layer_names],
                       axis=0)  # [B, N, T, S]
      chosen = chosen.mean(1) if head is None else chosen[:, head]
      for row, index in enumerate(batch['index']):
        if index >= 0:
          source, target = pairs[index]
          result[index] = chosen[row, :len(target), :len(source)]
    return result



def _through_eos(ids: np.ndarray) -> np.ndarray:
  """A search's output row up to and including its first EOS (the whole
  row, padding dropped, when it reached its length limit first)."""
  ends = np.flatnonzero(ids == tokenization.EOS_ID)
  return ids[:ends[0] + 1] if len(ends) else ids[ids != tokenization.PAD_ID]


TASK = TranslationTask
