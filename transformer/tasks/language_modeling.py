"""Language modelling: documents -> tokens -> packed rows -> GPT -> perplexity.

Documents come from the offline corpus, local text files or TFDS (`lm1b`);
tokens from a byte, character or SentencePiece tokenizer. Each document is
[EOS, t_1, ..., t_n, EOS] (EOS doubles as the start symbol), cut into chunks
of at most `max_length` predictions and packed into rows whose documents
never attend to each other. Evaluation reports loss, perplexity per token,
and bits per byte and per character, which compare across tokenizers, and
writes generated samples.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Iterable, Iterator, Sequence

import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import ml_collections
import numpy as np

from transformer import configs
from transformer import decoding
from transformer import layers
from transformer import storage
from transformer.core import losses
from transformer.data import batching
from transformer.data import packing
from transformer.data import sources
from transformer.data import text
from transformer.data import tokenization
from transformer.models import decoder
from transformer.tasks import base
from transformer.tasks import vocabularies

# The kind of examples the task reads (`data.sources`).
DATA_KIND = 'documents'

# Set by the task from the data.
MODEL_EXCLUDE = ('vocab_size', 'max_length')


def default_config() -> ml_collections.ConfigDict:
  """Every setting of a language-modelling experiment."""
  config = configs.default_config()
  config.task = 'language_modeling'
  config.train.label_smoothing = 0.0
  # nanoGPT's optimiser: AdamW (0.9, 0.99, 1e-8), weight decay 0.1, cosine
  # decay after warmup, gradients clipped at 1.
  config.optimizer.update(dict(schedule='cosine', learning_rate=1e-3,
                               b2=0.99, eps=1e-8, weight_decay=0.1,
                               grad_clip_norm=1.0))
  config.data = ml_collections.ConfigDict(dict(
      source='offline',  # 'offline' | 'local' | 'tfds'
      train_split='train', eval_split='validation',
      num_train=20_000, num_eval=500, max_sentences=8, seed=0,  # offline
      # local: a file or folder of *.txt; documents per file or per line;
      # validation from eval_path, or the last (1 - train_fraction) of the
      # text (of the characters for one document, else of the documents).
      path='', per='file', eval_path='', train_fraction=0.9,
      tfds_name='lm1b', tfds_data_dir='', max_examples_per_split=0,
      # 'byte' | 'char' | 'word' | 'sentencepiece'; 'gpt2' (a converted
      # GPT-2's byte-level BPE)
      tokenizer='sentencepiece',
      tokenizer_model_type='unigram',  # SentencePiece: 'unigram' | 'word'
      vocab_size=8_000,  # SentencePiece only
      max_length=256,  # context length
      # Cut documents longer than max_length at a random offset per epoch
      # (`text.ShiftedLMChunks`), not at the same places every epoch.
      shift_chunks=False,
      tokens_per_batch=16_384, eval_rows=64))
  config.model = configs.model_section(
      decoder.Config, exclude=MODEL_EXCLUDE, size='tiny', dtype='float32')
  config.eval.update(dict(
      prompts=('',), max_new_tokens=200, temperature=0.8, top_k=0,
      top_p=1.0, sample_seed=0))
  return config


def model_config(config: ml_collections.ConfigDict,
                 vocab_size: int) -> decoder.Config:
  return decoder.config_for(
      config.model.size, vocab_size=vocab_size,
      max_length=config.data.max_length, dtype=jnp.dtype(config.model.dtype),
      **configs.model_overrides(config.model, decoder.Config, MODEL_EXCLUDE))


def _token_lengths(tokenizer) -> np.ndarray:
  """[4, V]: UTF-8 bytes and characters of the text each token stands for
  (0 for padding and EOS), inside a document (rows 0, 1) and as its first
  token (rows 2, 3: SentencePiece's dummy space before a document is not
  text), so bits per byte/character follow exactly from the targets."""
  lengths = np.zeros((4, tokenizer.vocab_size), np.float32)
  if hasattr(tokenizer, 'token_bytes'):  # GPT-2: every id from 2 is text
    for i in range(2, tokenizer.vocab_size):
      data = tokenizer.token_bytes(i)
      characters = sum(byte & 0xC0 != 0x80 for byte in data)
      lengths[:, i] = len(data), characters, len(data), characters
    return lengths
  for i in range(3, tokenizer.vocab_size):
    if isinstance(tokenizer, tokenization.ByteTokenizer):
      starts_char = float((i - 3) & 0xC0 != 0x80)  # not a continuation byte
      lengths[:, i] = 1.0, starts_char, 1.0, starts_char
    else:
      if isinstance(tokenizer, tokenization.SentencePieceTokenizer):
        piece = tokenizer.id_to_piece(i).replace('\u2581', ' ')
        first = piece[1:] if piece.startswith(' ') else piece
      elif isinstance(tokenizer, tokenization.CharTokenizer):
        piece = first = tokenizer.characters[i - 3]
      else:  # words: a space before every word but the first (approximate
        # around line breaks, which carry no spaces)
        first = tokenizer.words[i - 3]
        piece = first if first == '\n' else ' ' + first
      lengths[:, i] = (len(piece.encode('utf-8')), len(piece),
                       len(first.encode('utf-8')), len(first))
  return lengths


def _scored_text(examples: Sequence[tuple[np.ndarray, np.ndarray]],
                 token_lengths: np.ndarray) -> tuple[float, float]:
  """The UTF-8 bytes and characters of the examples' targets, as `lm_loss`
  counts them: what bits per byte and per character divide by."""
  if not examples:
    return 0.0, 0.0
  inputs = np.concatenate([np.asarray(i) for i, _ in examples])
  targets = np.concatenate([np.asarray(t) for _, t in examples])
  starts = (inputs == tokenization.EOS_ID).astype(int)
  return (float(token_lengths[2 * starts, targets].sum()),
          float(token_lengths[2 * starts + 1, targets].sum()))


def lm_loss(model: decoder.Decoder, params: Any, batch: dict[str, jax.Array],
            rng: jax.Array | None, *, label_smoothing: float,
            deterministic: bool, token_lengths: np.ndarray | None = None):
  """Mean next-token loss and metric sums of packed rows ('inputs',
  'targets', 'inputs_position', 'inputs_segmentation', all [B, L]); with
  `token_lengths` (see `_token_lengths`) also bits per byte and character.
  """
  logits = model.apply(
      {'params': params}, batch['inputs'], positions=batch['inputs_position'],
      segmentation=batch['inputs_segmentation'], deterministic=deterministic,
      rngs=None if rng is None else {'dropout': rng})
  targets = batch['targets']
  sums = losses.token_sums(logits, targets, label_smoothing)
  if token_lengths is not None:
    bits = sums['nll'][0] / math.log(2)
    # A target whose input is EOS starts a document (the model's start
    # symbol); inside documents EOS is only ever a target.
    starts = (batch['inputs'] == tokenization.EOS_ID).astype(jnp.int32)
    lengths = jnp.asarray(token_lengths)
    sums['bits_per_byte'] = (bits, lengths[2 * starts, targets].sum())
    sums['bits_per_character'] = (bits,
                                  lengths[2 * starts + 1, targets].sum())
  return losses.mean(sums), sums


def generate_tokens(model: decoder.Decoder, params: Any, tokens: jax.Array,
                    pad: jax.Array, rng: jax.Array, temperature: float,
                    top_p: float, *, max_new_tokens: int, top_k: int,
                    greedy: bool, eos_id: int = tokenization.EOS_ID
                    ) -> tuple[jax.Array, jax.Array]:
  """Prefills the KV cache with left-padded prompts, then samples.

  Args:
    model: the decode-mode model (`decoder.build(config, decode=True)`).
    params: its parameters.
    tokens: [B, P] prompts, right-aligned; row b's first pad[b] are padding.
    pad: [B] int, the padding of each row.
    rng, temperature, top_p, max_new_tokens, top_k, greedy, eos_id: see
      `decoding.sample`.

  Each row's positions start at its first real token and its padding is
  masked out of every attention, so a row's continuation does not depend on
  the other prompts of the batch.

  Returns:
    (tokens [B, max_new_tokens], lengths [B]) as `decoding.sample`.
  """
  batch, prompt_length = tokens.shape
  capacity = prompt_length + max_new_tokens
  params = layers.unstack_layers(params)  # a scanned model's
  _, cache = model.apply({'params': params},
                         jnp.zeros((batch, capacity), jnp.int32),
                         deterministic=True, mutable=['cache'])
  key_mask = jnp.arange(capacity)[None, :] >= pad[:, None]
  positions = jnp.maximum(jnp.arange(prompt_length)[None] - pad[:, None], 0)
  logits, cache = model.apply(
      {'params': params, **cache}, tokens, positions=positions,
      key_mask=key_mask, deterministic=True, mutable=['cache'])
  state = {'cache': cache['cache'], 'key_mask': key_mask,
           'position': (prompt_length - pad)[:, None]}

  def step_fn(new_tokens, state):
    logits, cache = model.apply(
        {'params': params, 'cache': state['cache']}, new_tokens,
        positions=state['position'], key_mask=state['key_mask'],
        deterministic=True, mutable=['cache'])
    return logits[:, -1], {'cache': cache['cache'],
                           'key_mask': state['key_mask'],
                           'position': state['position'] + 1}

  return decoding.sample(
      step_fn, state, rng=rng, batch_size=batch,
      max_new_tokens=max_new_tokens, eos_id=eos_id,
      temperature=temperature, top_k=top_k, top_p=top_p, greedy=greedy,
      first_logits=logits[:, -1])


def beam_tokens(model: decoder.Decoder, params: Any, tokens: jax.Array,
                pad: jax.Array, *, beam_size: int, max_new_tokens: int,
                alpha: float, eos_id: int = tokenization.EOS_ID) -> jax.Array:
  """The best continuation of each left-padded prompt by beam search
  (`decoding.beam_search`: the GNMT length penalty `alpha` over the new
  tokens, EOS ending a hypothesis, as translation's).

  The KV cache is prefilled with all but each prompt's last token, which
  is the search's first input; the cache's rows are tiled to the beams
  and reordered with them. `tokens`, `pad`: as `generate_tokens`.

  Returns:
    [B, max_new_tokens] int32, EOS kept and 0 after it.
  """
  batch, prompt_length = tokens.shape
  # Every step feeds one token: the last new token is never fed.
  capacity = prompt_length - 1 + max_new_tokens
  params = layers.unstack_layers(params)  # a scanned model's
  _, cache = model.apply({'params': params},
                         jnp.zeros((batch, capacity), jnp.int32),
                         deterministic=True, mutable=['cache'])
  key_mask = jnp.arange(capacity)[None, :] >= pad[:, None]
  if prompt_length > 1:
    positions = jnp.maximum(jnp.arange(prompt_length - 1)[None] -
                            pad[:, None], 0)
    _, cache = model.apply(
        {'params': params, **cache}, tokens[:, :-1], positions=positions,
        key_mask=key_mask, deterministic=True, mutable=['cache'])
  state = {'cache': cache['cache'], 'key_mask': key_mask,
           'position': (prompt_length - 1 - pad)[:, None]}

  def step_fn(new_tokens, state):
    logits, cache = model.apply(
        {'params': params, 'cache': state['cache']}, new_tokens,
        positions=state['position'], key_mask=state['key_mask'],
        deterministic=True, mutable=['cache'])
    return logits[:, -1], {'cache': cache['cache'],
                           'key_mask': state['key_mask'],
                           'position': state['position'] + 1}

  sequences, _ = decoding.beam_search(
      step_fn, state, batch_size=batch, beam_size=beam_size,
      max_length=max_new_tokens, eos_id=eos_id, alpha=alpha,
      start_id=tokens[:, -1])
  return sequences[:, 0]


class CorpusTask(base.Task):
  """What the tasks on a text corpus share (language modelling here,
  masked language modelling): the documents of the configured corpus, the
  tokenizer built from them (or the one of `train.init_from`, whose
  checkpoint's ids it keeps), and their chunks of at most max_length."""

  unit = 'tokens'

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *,
               batch_divisor: int = 1, shapes_only: bool = False):
    self.config, self.workdir = config, workdir
    self.batch_divisor = batch_divisor
    if config.train.init_from and not shapes_only:
      vocabularies.copy_from(config.train.init_from, workdir,
                             required=config.data.tokenizer != 'byte')
    self.tokenizer = vocabularies.stand_in(config.data) if shapes_only else (
        vocabularies.text_tokenizer(
            config.data, workdir,
            lambda: self.documents(config.data.train_split)))

  @functools.cache
  def documents(self, split: str) -> list[str]:
    return sources.read('documents', self.config.data, split)

  @functools.cache
  def examples(self, split: str) -> list[tuple[np.ndarray, np.ndarray]]:
    ids = self.tokenizer.encode_batch(self.documents(split), add_eos=False)
    return text.lm_examples(ids, self.config.data.max_length)

  def cached_sides(self, split: str) -> tuple[Any, Any, dict[str, Any]]:
    """The (inputs, targets) `batching.Side`s of a split's chunks and the
    cache's meta from the token cache: later starts read no text and run no
    tokenizer."""
    max_length = self.config.data.max_length

    def chunks():  # for the token cache, built on the first start
      documents = self.documents(split)
      for begin in range(0, len(documents), base.CACHE_CHUNK):
        part = documents[begin:begin + base.CACHE_CHUNK]
        ids = self.tokenizer.encode_batch(part, add_eos=False)
        yield text.lm_examples(ids, max_length), {'documents': len(part)}

    return base.cached_sides(self, split, chunks)


class LanguageModelingTask(CorpusTask):
  """The `transformer.tasks.Task` for decoder-only language models."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, *,
               batch_divisor: int = 1, shapes_only: bool = False):
    super().__init__(config, workdir, batch_divisor=batch_divisor,
                     shapes_only=shapes_only)
    self.model_config = model_config(config, self.tokenizer.vocab_size)
    self.model = decoder.build(self.model_config)
    self.decoder = decoder.build(self.model_config, decode=True)
    # Bytes per token, for bits per byte; a stand-in vocabulary has no
    # tokens, but the same table shape keeps the loss the one trained.
    self.token_lengths = (
        np.zeros((4, self.tokenizer.vocab_size), np.float32) if shapes_only
        else _token_lengths(self.tokenizer))
    # What a prompt or a text read whole starts with: EOS (as training
    # documents do), or a converted Llama's BOS, as its tokenizer puts it.
    self.start_id = getattr(self.tokenizer, 'start_id', tokenization.EOS_ID)

  # -- Task interface -------------------------------------------------------

  def init(self, rng: jax.Array) -> Any:
    return self.model.init({'params': rng}, jnp.ones((1, 8), jnp.int32),
                           deterministic=True)['params']

  def train_iter(self, start_step: int) -> Iterator[dict[str, np.ndarray]]:
    data = self.config.data
    source, target, meta = self.cached_sides(data.train_split)
    batches = packing.PackedTrainBatches(
        (source, target), max_length=data.max_length,
        tokens_per_batch=data.tokens_per_batch, seed=self.config.seed,
        start_step=start_step, row_multiple=self.batch_divisor,
        host=(jax.process_index(), jax.process_count()),
        recut=text.ShiftedLMChunks(source, data.max_length,
                                   self.config.seed) if data.shift_chunks
        else None)
    self.check_eval_split()  # a wrong or empty split fails now, not later
    print(f'Training data: {meta["notes"].get("documents", 0):,} '
          f'documents, {batches.batches_per_epoch:,.1f} batches per epoch '
          f'of {batches.rows_per_batch} x {data.max_length} tokens, padding '
          f'{batches.padding_fraction:.1%}.', flush=True)
    return iter(batches)

  def train_batch_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
    """Packed rows (`packing.PACKED_KEYS`) of max_length tokens."""
    return base.token_batch_shapes(self.config.data, self.batch_divisor,
                                   packing.PACKED_KEYS)

  @functools.cache
  def check_eval_split(self) -> None:
    """Refuses an evaluation split with no text to score: bits per byte
    and per character divide by its bytes and characters (as targets), and
    a split of a few characters the tokenizer does not know (learned from
    the training text) has none: the metrics would be ~1e9."""
    data = self.config.data
    examples = self.examples(data.eval_split)
    scored = _scored_text(examples, self.token_lengths)
    if min(scored) > 0:
      return
    characters = sum(len(d) for d in self.documents(data.eval_split))
    fix = ('give more text in config.data.path, a smaller '
           'config.data.train_fraction (the validation text is the last '
           f'{1 - data.train_fraction:.0%} of it), or a validation file '
           'in config.data.eval_path' if data.source == 'local' and
           not data.eval_path else 'give a larger evaluation split')
    raise ValueError(
        f'The {data.eval_split!r} split is too small to measure: '
        f'{characters} character{"" if characters == 1 else "s"}, '
        f'{int(scored[0])} bytes of them text the tokenizer knows (it '
        f'learned its pieces from the training text), so bits per byte '
        f'would divide by zero; {fix}.')

  def eval_batches(self) -> Iterable[dict[str, np.ndarray]]:
    self.check_eval_split()
    rows = packing.pack(self.examples(self.config.data.eval_split),
                         self.config.data.max_length)
    size = max(self.batch_divisor, self.config.data.eval_rows -
               self.config.data.eval_rows % self.batch_divisor)
    for begin in range(0, len(rows['inputs']), size):
      batch = {k: v[begin:begin + size] for k, v in rows.items()}
      missing = -len(batch['inputs']) % self.batch_divisor
      yield {k: np.pad(v, ((0, missing), (0, 0))) for k, v in batch.items()}

  def loss(self, params: Any, batch: dict[str, jax.Array],
           rng: jax.Array | None, *, deterministic: bool):
    return lm_loss(self.model, params, batch, rng,
                   label_smoothing=self.config.train.label_smoothing,
                   deterministic=deterministic,
                   token_lengths=self.token_lengths)

  def evaluate(self, params: Any, *, label: str) -> dict[str, float]:
    """Writes samples for the configured prompts (loss metrics come from
    `eval_batches`)."""
    cfg = self.config.eval
    samples = self.generate(
        params, list(cfg.prompts), max_new_tokens=cfg.max_new_tokens,
        temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
        seed=cfg.sample_seed)
    if jax.process_index() == 0:
      path = storage.join(self.workdir, 'reports', f'samples_{label}.txt')
      storage.write_atomically(path, ''.join(
          f'PROMPT {prompt!r}\n{prompt}{sample}\n\n'
          for prompt, sample in zip(cfg.prompts, samples)))
      for prompt, sample in zip(cfg.prompts, samples):
        print(f'--- sample ({label}) ---\n{prompt}{sample}', flush=True)
    return {}

  # -- Generation -----------------------------------------------------------

  def generate(self, params: Any, prompts: Sequence[str], *,
               max_new_tokens: int, temperature: float = 1.0, top_k: int = 0,
               top_p: float = 1.0, greedy: bool = False, seed: int = 0,
               stop: Sequence[str] = (), beam_size: int = 0,
               length_penalty: float = 0.6) -> list[str]:
    """Continuations of `prompts` (batched, of any lengths), cut at the
    first EOS or stop string.

    Longer than the context, generation continues from the last half
    context of each row (as nanoGPT crops its input): the cache is refilled
    with that window and sampling resumes. With `beam_size` >= 1, each is
    the best continuation by beam search (`beam_tokens`, GNMT penalty
    `length_penalty`), within the context.
    """
    if beam_size:
      return self._decode_texts(
          prompts, self._beam_search(params, prompts, beam_size,
                                     max_new_tokens, length_penalty), stop)
    if not greedy and temperature <= 0:
      raise ValueError(f'temperature={temperature} must be > 0; use greedy '
                       f'decoding for the most likely tokens.')
    if top_k < 0 or not 0 < top_p <= 1:
      raise ValueError(f'top_k={top_k} must be >= 0 and top_p={top_p} in '
                       f'(0, 1].')
    context = self.model_config.max_length
    prompt_ids = [self.tokenizer.encode(p, add_eos=False) for p in prompts]
    sequences = [[self.start_id] + ids for ids in prompt_ids]
    new = [[] for _ in prompts]
    finished = [False] * len(prompts)
    remaining, round_ = max_new_tokens, 0
    while remaining > 0 and not all(finished):
      windows = [seq if len(seq) < context else seq[-(context // 2):]
                 for seq in sequences]
      count = min(remaining, context - max(map(len, windows)))
      output = self._generate_round(params, windows, count, temperature,
                                    top_k, top_p, greedy,
                                    jax.random.fold_in(jax.random.key(seed),
                                                       round_))
      for row, tokens in enumerate(output):
        if finished[row]:
          continue
        tokens = [int(t) for t in tokens]
        if tokenization.EOS_ID in tokens:
          tokens = tokens[:tokens.index(tokenization.EOS_ID)]
          finished[row] = True
        new[row] += tokens
        sequences[row] += tokens
      remaining -= count
      round_ += 1
    return self._decode_texts(prompts, new, stop)

  def search_program(self):
    """Sampling (`_sample`, as `generate` runs it) of the evaluation's
    prompts, each a start token, for its max_new_tokens within the
    context."""
    cfg = self.config.eval
    rows = batching.round_up(max(len(cfg.prompts), 1), self.batch_divisor)
    search = functools.partial(
        self._sample, max_new_tokens=min(cfg.max_new_tokens,
                                         self.model_config.max_length - 1),
        top_k=cfg.top_k, greedy=False)
    return search, {
        **base.batch_shapes(rows, tokens=((1,), 'int32'), pad=((), 'int32')),
        'rng': jax.eval_shape(jax.random.key, 0),
        'temperature': jax.ShapeDtypeStruct((), 'float32'),
        'top_p': jax.ShapeDtypeStruct((), 'float32')}

  def _decode_texts(self, prompts: Sequence[str], new: list[list[int]],
                    stop: Sequence[str]) -> list[str]:
    """The continuation texts of the new token ids, cut at a stop."""
    texts = []
    prompt_ids = [self.tokenizer.encode(p, add_eos=False) for p in prompts]
    for ids, generated in zip(prompt_ids, new):
      # Decode with the prompt, so that the space (or SentencePiece word
      # boundary) between prompt and continuation is kept.
      prompt_text = self.tokenizer.decode(ids)
      full = self.tokenizer.decode(ids + generated)
      sample = (full[len(prompt_text):] if full.startswith(prompt_text)
                else self.tokenizer.decode(generated))
      for s in stop:
        if s and s in sample:
          sample = sample[:sample.index(s)]
      texts.append(sample)
    return texts

  @functools.partial(jax.jit, static_argnums=(0,))
  def _self_attention(self, params, tokens):
    _, state = self.model.apply({'params': params}, tokens,
                                deterministic=True, mutable=['intermediates'])
    return layers.attention_weights(state['intermediates'])

  def self_attention_maps(self, params: Any, text_: str, *, last: int = 32
                          ) -> tuple[list[str], list[np.ndarray]]:
    """The model's causal self-attention as it reads `text_` (e.g. a prompt
    and its continuation) after the start token, over its last `last`
    tokens (within the context): their pieces, and per decoder layer the
    [N, t, t] weights among them."""
    if last < 1:
      raise ValueError(f'last={last}: show at least one token.')
    context = self.model_config.max_length
    ids = ([self.start_id]
           + self.tokenizer.encode(text_, add_eos=False))[-context:]
    # Right padding (to a multiple of 8: few compiles) changes nothing
    # before it under a causal mask; one row per data-parallel shard.
    width = min(context, -(-len(ids) // 8) * 8)
    tokens = np.zeros((self.batch_divisor, width), np.int32)
    tokens[:, :len(ids)] = ids
    weights = multihost_utils.process_allgather(
        self._self_attention(params, tokens), tiled=True)
    shown = slice(max(0, len(ids) - last), len(ids))
    pieces = [self.tokenizer.id_to_piece(t) for t in ids[shown]]
    [stacked] = layers.group_layers(weights).values()  # [L, N, T, T]
    return pieces, list(stacked[:, :, shown, shown])

  def _beam_search(self, params, prompts: Sequence[str], beam_size: int,
                   max_new_tokens: int, alpha: float) -> list[list[int]]:
    """The new token ids of each prompt's best continuation, EOS cut."""
    context = self.model_config.max_length
    windows = [[self.start_id] + self.tokenizer.encode(p, add_eos=False)
               for p in prompts]
    longest = max(map(len, windows))
    if longest + max_new_tokens - 1 > context:
      fits = context - longest + 1
      raise ValueError(
          f'Beam search stays within the context of {context} tokens: the '
          f'longest prompt takes {longest} (with the start token), so ' + (
              f'--max_new_tokens is at most {fits}.' if fits >= 1 else
              f'no token fits after it: shorten it to at most {context - 1} '
              f'tokens, or sample without --beam_size (samples read the '
              f'last {context // 2} tokens of a longer prompt).'))
    tokens, pad = self._left_padded(windows)
    output = multihost_utils.process_allgather(self._beam(
        params, tokens, pad, alpha, beam_size=beam_size,
        max_new_tokens=max_new_tokens), tiled=True)[:len(windows)]
    found = []
    for row in output:
      row = [int(t) for t in row]
      found.append(row[:row.index(tokenization.EOS_ID)]
                   if tokenization.EOS_ID in row else row)
    return found

  @functools.partial(jax.jit, static_argnums=(0,),
                     static_argnames=('beam_size', 'max_new_tokens'))
  def _beam(self, params, tokens, pad, alpha, *, beam_size: int,
            max_new_tokens: int):
    return beam_tokens(self.decoder, params, tokens, pad, beam_size=beam_size,
                       max_new_tokens=max_new_tokens, alpha=alpha)

  def _left_padded(self, windows: list[list[int]]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """[rows, longest] right-aligned windows and [rows] their padding;
    rows a multiple of the data-parallel shards (filler rows: EOS only)."""
    longest = max(len(w) for w in windows)
    rows = len(windows) + (-len(windows) % self.batch_divisor)
    tokens = np.zeros((rows, longest), np.int32)
    pad = np.full(rows, longest - 1, np.int32)
    for row, window in enumerate(windows + [[tokenization.EOS_ID]] *
                                 (rows - len(windows))):
      tokens[row, longest - len(window):] = window  # left-padded
      pad[row] = longest - len(window)
    return tokens, pad

  def _generate_round(self, params, windows, count, temperature, top_k,
                      top_p, greedy, rng) -> np.ndarray:
    """[len(windows), count] tokens continuing left-padded windows."""
    tokens, pad = self._left_padded(windows)
    output, _ = self._sample(params, tokens, pad, rng, temperature, top_p,
                             max_new_tokens=count, top_k=top_k, greedy=greedy)
    return multihost_utils.process_allgather(output, tiled=True)[
        :len(windows)]

  @functools.partial(jax.jit, static_argnums=(0,),
                     static_argnames=('max_new_tokens', 'top_k', 'greedy'))
  def _sample(self, params, tokens, pad, rng, temperature, top_p, *,
              max_new_tokens: int, top_k: int, greedy: bool):
    return generate_tokens(self.decoder, params, tokens, pad, rng,
                           temperature, top_p, max_new_tokens=max_new_tokens,
                           top_k=top_k, greedy=greedy)


TASK = LanguageModelingTask
