"""The tokenizers of converted checkpoints, read through our ids.

A converted workdir keeps its published tokenizer files in
`<workdir>/vocab/` with the id order of `published_ids.IdOrder` (padding
0, EOS 1, unknown 2, as every task and model here expects); one base class,
`PublishedIds`, maps ids both ways for every family. The classes are
`tokenization.Tokenizer`s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
import json
import os
import re

import sentencepiece as spm

from transformer import errors
from transformer.data import published_ids
from transformer.data import reading
from transformer.data import tokenization

MARIAN_PIECES = 'marian_pieces.json'


def _workdir_files(folder: str, names: Sequence[str], kind: str
                   ) -> list[str]:
  """Paths of a converted workdir's vocabulary files, all of which exist."""
  paths = [os.path.join(folder, name) for name in names]
  missing = [p for p in paths if not os.path.exists(p)]
  if missing:
    raise FileNotFoundError(
        f'{", ".join(missing)} missing: a {kind} workdir holds the files '
        'that `python -m transformer.tools.convert --from=hf` writes.')
  return paths


# The fix for a damaged file of a converted workdir's vocab/.
_CONVERT_AGAIN = ('convert the checkpoint again (python -m '
                  'transformer.tools.convert)')


def _read_ids(path: str) -> dict:
  """A converted workdir's ids file (`PublishedIds.ids` and its settings)."""
  return reading.json_object(path, fix=_CONVERT_AGAIN)


def _tokenizer_json(path: str, fix: str = reading.REDOWNLOAD):
  """A tokenizer.json as the `tokenizers` library's `Tokenizer`, with its
  settings (the JSON object); a file that is not JSON, or not a tokenizer
  the library reads, is refused naming it.

  Raises:
    reading.Unreadable: naming the file (and where it stops being JSON, or
      what the library did not read) and `fix`.
  """
  from tokenizers import Tokenizer  # pylint: disable=g-import-not-at-top
  raw = reading.read_bytes(path)
  settings = reading.json_object(path, raw=raw, fix=fix)
  try:
    # The text as in the file, so that the library's line and column are
    # the file's.
    return Tokenizer.from_str(raw.decode('utf-8-sig')), settings
  except Exception as e:  # pylint: disable=broad-except
    raise reading.Unreadable(
        f'{path} is not a tokenizer the `tokenizers` library reads '
        f'({errors.first_line(e)}): {fix}.') from e


def _byte_level_bpe_problem(tokenizer, settings: dict) -> str:
  """Why a tokenizer is not GPT-2's byte-level BPE ('' if it is), in
  words: GPT-2's tokens spell bytes in its byte-level alphabet, which
  `GPT2Tokenizer.token_bytes` reads back."""
  kind = type(tokenizer.model).__name__
  if kind != 'BPE':
    return f'is a {kind} model'
  if 'ByteLevel' not in json.dumps([settings.get('pre_tokenizer'),
                                    settings.get('decoder')]):
    return 'is a BPE model without byte-level pre-tokenization'
  return ''


class MarianTokenizer(tokenization.Batches):
  """Marian's tokenization: the source SentencePiece model segments the
  input, a shared vocabulary maps pieces to ids (unknown pieces to the
  unknown id), EOS ends every input; a leading language code such as
  '>>fra<<' (multilingual targets) is one token. Outputs are joined with
  the target SentencePiece model.

  As Hugging Face's MarianTokenizer without `sacremoses` installed, no
  Moses punctuation normalisation is applied.
  """

  def __init__(self, folder: str):
    """Reads source.spm, target.spm and marian_pieces.json from `folder`."""
    paths = _workdir_files(
        folder, ('source.spm', 'target.spm', MARIAN_PIECES), 'Marian')
    self._source = spm.SentencePieceProcessor(model_file=paths[0])
    self._target = spm.SentencePieceProcessor(model_file=paths[1])
    self.pieces = reading.json_value(
        paths[2], _pieces_problem, fix=_CONVERT_AGAIN)['pieces']
    self._ids = {piece: i for i, piece in enumerate(self.pieces)}

  @staticmethod
  def save(folder: str, source_spm: str, target_spm: str,
           pieces: Sequence[str]) -> None:
    """Copies the SentencePiece models and writes the pieces in our id
    order into `folder`."""
    os.makedirs(folder, exist_ok=True)
    for path, name in ((source_spm, 'source.spm'), (target_spm, 'target.spm')):
      with open(path, 'rb') as f:
        data = f.read()
      with open(os.path.join(folder, name), 'wb') as f:
        f.write(data)
    with open(os.path.join(folder, MARIAN_PIECES), 'w',
              encoding='utf-8') as f:
      json.dump({'pieces': list(pieces)}, f, ensure_ascii=False)

  @property
  def vocab_size(self) -> int:
    return len(self.pieces)

  def encode(self, text: str, add_eos: bool = True) -> list[int]:
    code = []
    if text.startswith('>>') and (end := text.find('<<')) != -1:
      code, text = [text[:end + 2]], text[end + 2:]
    pieces = code + self._source.encode(text, out_type=str)
    ids = [self._ids.get(p, tokenization.UNK_ID) for p in pieces]
    return ids + [tokenization.EOS_ID] if add_eos else ids

  def decode(self, ids: Iterable[int]) -> str:
    """Text of the ids before the first EOS, as Hugging Face's
    `decode(skip_special_tokens=True)` with the target SentencePiece model:
    padding and unknown ids skipped, pieces the target model lacks (from
    the source side of the shared vocabulary) with their '▁' as spaces."""
    pieces = [self.pieces[i]
              for i in tokenization.ids_before_eos(ids, self.vocab_size)
              if i != tokenization.UNK_ID]
    return self._target.decode_pieces(pieces).replace('\u2581', ' ').strip()

  def id_to_piece(self, token_id: int) -> str:
    return self.pieces[int(token_id)]


def _pieces_problem(value) -> str:
  pieces = value.get('pieces') if isinstance(value, dict) else None
  if isinstance(pieces, list) and all(isinstance(p, str) for p in pieces):
    return ''
  return 'it holds no {"pieces": [strings...]}'


GPT2_FILES = ('gpt2_tokenizer.json', 'gpt2_ids.json')


def _byte_level_alphabet() -> dict[str, int]:
  """GPT-2's byte-level alphabet: the character that stands for each byte
  in its tokens (printable bytes themselves, the others moved to 256+)."""
  printable = [*range(ord('!'), ord('~') + 1), *range(ord('¡'), ord('¬') + 1),
               *range(ord('®'), ord('ÿ') + 1)]
  characters, extra = {}, 0
  for byte in range(256):
    if byte in printable:
      characters[chr(byte)] = byte
    else:
      characters[chr(256 + extra)] = byte
      extra += 1
  return characters


class PublishedIds(tokenization.Batches):
  """A published tokenizer read through our ids (`published_ids.IdOrder`,
  in `ids`): subclasses give the published tokenizer's `_encode`,
  `_decode` and `_piece`, in its own ids."""

  ids: published_ids.IdOrder
  # Last ids that a task adds to the vocabulary itself (BERT's [MASK]).
  _held_back = 0

  @property
  def vocab_size(self) -> int:
    return len(self.ids) - self._held_back

  def encode(self, text: str, add_eos: bool = True) -> list[int]:
    published = self._encode(text)
    ids = self.ids.to_ours(published).tolist() if published else []
    return ids + [tokenization.EOS_ID] if add_eos else ids

  def decode(self, ids: Iterable[int]) -> str:
    """Text of the ids before the first EOS, padding skipped."""
    ids = tokenization.ids_before_eos(ids, self.vocab_size)
    return self._decode(self.ids.to_published(ids).tolist()) if ids else ''

  def id_to_piece(self, token_id: int) -> str:
    """The published token, or '<pad>' for padding the vocabulary lacks."""
    token_id = int(token_id)
    if token_id == tokenization.PAD_ID and self.ids.added_padding:
      return '<pad>'
    return self._piece(int(self.ids.to_published(token_id)))


class GPT2Tokenizer(PublishedIds):
  """GPT-2's byte-level BPE (the `tokenizers` library, from the published
  tokenizer.json, or vocab.json and merges.txt). GPT-2 has no padding
  token (a converted model never predicts the one added) and no unknown
  one: every text encodes."""

  def __init__(self, folder: str):
    paths = _workdir_files(folder, GPT2_FILES, 'GPT-2')
    self._bpe, settings = _tokenizer_json(paths[0], _CONVERT_AGAIN)
    problem = _byte_level_bpe_problem(self._bpe, settings)
    if problem:
      raise reading.Unreadable(f'{paths[0]} {problem}, not GPT-2\'s '
                               f'byte-level BPE: {_CONVERT_AGAIN}.')
    meta = _read_ids(paths[1])
    self.ids = published_ids.IdOrder.of(meta['vocab_size'],
                                        eos=meta['eos_id'])

  @staticmethod
  def save(folder: str, tokenizer, eos_id: int, vocab_size: int) -> None:
    """Writes the byte-level BPE `Tokenizer` (`published_bpe`) and GPT-2's
    EOS id and vocabulary size into `folder`."""
    os.makedirs(folder, exist_ok=True)
    tokenizer.save(os.path.join(folder, GPT2_FILES[0]))
    with open(os.path.join(folder, GPT2_FILES[1]), 'w') as f:
      json.dump({'eos_id': eos_id, 'vocab_size': vocab_size}, f)

  def _encode(self, text: str) -> list[int]:
    return self._bpe.encode(text).ids

  def _decode(self, ids: list[int]) -> str:
    return self._bpe.decode(ids)

  def _piece(self, token_id: int) -> str:
    """The BPE token ('Ġ' marks a leading space)."""
    return self._bpe.id_to_token(token_id)

  def token_bytes(self, token_id: int) -> bytes:
    """The UTF-8 bytes a token stands for (a token may hold part of a
    character); none for padding and EOS."""
    if int(token_id) in (tokenization.PAD_ID, tokenization.EOS_ID):
      return b''
    if not hasattr(self, '_alphabet'):
      self._alphabet = _byte_level_alphabet()
    # None: a row of a table padded past the tokenizer (no text).
    piece = self.id_to_piece(token_id) or ''
    if all(c in self._alphabet for c in piece):
      return bytes(self._alphabet[c] for c in piece)
    return piece.encode()  # an added token that is text as it stands


def published_bpe(source: str, family: str):
  """A Hugging Face model directory's tokenizer as the `tokenizers`
  library's `Tokenizer`: its tokenizer.json where it has one (recent
  repositories have nothing else), else built from the family's older
  files: BERT's vocab.txt (with tokenizer_config.json's casing), GPT-2's
  vocab.json and merges.txt. Truncation and padding a tokenizer.json
  carries are switched off: the tasks cut and pad rows themselves.

  Raises:
    FileNotFoundError: naming the files the directory lacks.
    reading.Unreadable: naming the file that is damaged (and its line), or
      a GPT-2 tokenizer.json that is not byte-level BPE.
  """
  path = os.path.join(source, 'tokenizer.json')
  if os.path.exists(path):
    tokenizer, settings = _tokenizer_json(path)
    problem = (_byte_level_bpe_problem(tokenizer, settings)
               if family == 'gpt2' else '')
    if problem:
      raise reading.Unreadable(
          f'{path} {problem}; GPT-2 checkpoints need a byte-level BPE '
          f'tokenizer.json (or vocab.json and merges.txt): download the '
          f'tokenizer files of this checkpoint.')
  else:
    tokenizer = _from_older_files(source, family)
  tokenizer.no_truncation()
  tokenizer.no_padding()
  return tokenizer


# The files each family published before tokenizer.json.
OLDER_FILES = {'bert': ('vocab.txt',), 'gpt2': ('vocab.json', 'merges.txt')}


def _from_older_files(source: str, family: str):
  names = OLDER_FILES[family]
  paths = [os.path.join(source, name) for name in names]
  if not all(map(os.path.exists, paths)):
    raise FileNotFoundError(
        f'{source} has no tokenizer.json and lacks '
        f'{" and ".join(n for n, p in zip(names, paths) if not os.path.exists(p))}'
        f': download the tokenizer files with the weights (the whole model '
        f'repository).')
  # Each file read first, so that a damaged one is named itself; what the
  # library refuses then is their combination.
  if family == 'gpt2':
    from tokenizers import ByteLevelBPETokenizer  # pylint: disable=g-import-not-at-top
    vocab, merges = _vocab_json(paths[0]), _merges(paths[1])
    build = lambda: ByteLevelBPETokenizer(vocab, merges)
  else:
    from tokenizers import BertWordPieceTokenizer  # pylint: disable=g-import-not-at-top
    vocab, settings = _vocab_txt(paths[0]), _wordpiece_settings(source)
    build = lambda: BertWordPieceTokenizer(vocab, **settings)
  try:
    return build()._tokenizer  # pylint: disable=protected-access
  except Exception as e:  # pylint: disable=broad-except
    raise reading.Unreadable(
        f'{" and ".join(paths)} do{"es" if len(paths) == 1 else ""} not make '
        f'a tokenizer ({errors.first_line(e)}): damaged or cut short; '
        f'download {"it" if len(paths) == 1 else "them"} again.') from e


def _vocab_json(path: str) -> dict[str, int]:
  """GPT-2's vocab.json: token -> id."""
  def problem(value) -> str:
    if not isinstance(value, dict):
      return f'it holds a {type(value).__name__}, not a JSON object'
    for token, i in value.items():
      if not isinstance(i, int) or isinstance(i, bool) or i < 0:
        return f'the token {token!r} has the id {i!r}, not a number >= 0'
    return ''
  return reading.json_value(path, problem)


def _merges(path: str) -> list[tuple[str, str]]:
  """GPT-2's merges.txt: a '#version' line, then one merge a line, two
  tokens and a space between them."""
  merges = []
  for number, line in enumerate(reading.lines(path), 1):
    line = line.removesuffix('\r')
    if line.startswith('#version'):
      continue
    pair = line.split(' ')
    if len(pair) != 2:
      raise reading.Unreadable(
          f'{path}, line {number}: {line[:40]!r} is not a merge (two tokens, '
          f'one space between them): {reading.REDOWNLOAD}.')
    merges.append((pair[0], pair[1]))
  return merges


# Unicode's White_Space, which the `tokenizers` library strips from the end
# of each line of a vocab.txt (Python's str.isspace differs: it takes
# \x1c-\x1f, which may end a token).
_WHITE_SPACE = ('\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003'
                '\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029'
                '\u202f\u205f\u3000')


def _vocab_txt(path: str) -> dict[str, int]:
  """BERT's vocab.txt: one token a line, its id the line's index (a token
  that repeats keeps its last), as the library reads it."""
  return {line.rstrip(_WHITE_SPACE): i
          for i, line in enumerate(reading.lines(path))}


# tokenizer_config.json's WordPiece settings -> (BertWordPieceTokenizer's
# argument, its default, the values it takes).
_WORDPIECE_SETTINGS = {
    'do_lower_case': ('lowercase', True, (True, False)),
    'strip_accents': ('strip_accents', None, (None, True, False)),
    'tokenize_chinese_chars': ('handle_chinese_chars', True, (True, False)),
}


def _wordpiece_settings(source: str) -> dict:
  """BertWordPieceTokenizer's arguments from tokenizer_config.json (its
  casing, accents, Chinese characters); a value of another type is refused
  naming the file and the field."""
  path = os.path.join(source, 'tokenizer_config.json')
  settings = _tokenizer_config(source)
  arguments = {}
  for field, (argument, default, values) in _WORDPIECE_SETTINGS.items():
    value = settings.get(field, default)
    if not any(value is v for v in values):
      raise reading.Unreadable(
          f'{path}: {field}={value!r} is not one of '
          f'{", ".join(map(json.dumps, values))}; correct it, or download '
          f'the file again.')
    arguments[argument] = value
  return arguments


def _tokenizer_config(source: str) -> dict:
  """A model directory's tokenizer_config.json ({} without one)."""
  path = os.path.join(source, 'tokenizer_config.json')
  return reading.json_object(path) if os.path.exists(path) else {}


def token_list(tokenizer) -> list[str]:
  """A `Tokenizer`'s tokens in id order (added tokens included).

  Raises:
    ValueError: ids with gaps (no token for some id below the largest).
  """
  vocab = tokenizer.get_vocab(with_added_tokens=True)
  tokens = [None] * len(vocab)
  for token, i in vocab.items():
    if i >= len(tokens):
      raise ValueError(f'The tokenizer has {len(vocab)} tokens but uses id '
                       f'{i}: its ids have gaps, which no checkpoint here '
                       f'fits.')
    tokens[i] = token
  return tokens


BERT_FILES = ('bert_tokenizer.json', 'bert_ids.json')
# Workdirs converted before tokenizer.json was read kept vocab.txt.
OLD_BERT_FILES = ('bert_vocab.txt', 'bert_ids.json')


class BertTokenizer(PublishedIds):
  """BERT's WordPiece (the `tokenizers` library, from the published
  tokenizer.json or vocab.txt): [PAD] is padding, [CLS] EOS (our tasks'
  start symbol, as BERT's), [UNK] unknown, and [MASK] last: one past
  `vocab_size`, where the masked-LM task puts its mask id. [SEP] is an
  ordinary token here."""

  _held_back = 1  # [MASK]

  def __init__(self, folder: str):
    from tokenizers import BertWordPieceTokenizer  # pylint: disable=g-import-not-at-top
    if os.path.exists(os.path.join(folder, OLD_BERT_FILES[0])):
      paths = _workdir_files(folder, OLD_BERT_FILES, 'BERT')
      meta = _read_ids(paths[1])
      self._wordpiece = BertWordPieceTokenizer(
          _vocab_txt(paths[0]), lowercase=meta['lowercase'])
    else:
      paths = _workdir_files(folder, BERT_FILES, 'BERT')
      meta = _read_ids(paths[1])
      self._wordpiece, _ = _tokenizer_json(paths[0], _CONVERT_AGAIN)
    self.ids = published_ids.IdOrder(meta['order'])

  @staticmethod
  def id_order(tokens: Sequence[str]) -> published_ids.IdOrder:
    """Our ids of BERT's `tokens` (in BERT's id order).

    Raises:
      ValueError: a special token is missing.
    """
    ids = {token: i for i, token in enumerate(tokens)}
    missing = [s for s in ('[PAD]', '[CLS]', '[UNK]', '[MASK]')
               if s not in ids]
    if missing:
      raise ValueError(f'The tokenizer lacks {missing}: not a BERT '
                       f'WordPiece vocabulary.')
    return published_ids.IdOrder.of(
        len(tokens), pad=ids['[PAD]'], eos=ids['[CLS]'], unk=ids['[UNK]'],
        last=[ids['[MASK]']])

  @staticmethod
  def save(folder: str, tokenizer, ids: published_ids.IdOrder) -> None:
    """Writes the `Tokenizer` (`published_bpe`) and our `ids` (`id_order`)
    into `folder`."""
    os.makedirs(folder, exist_ok=True)
    tokenizer.save(os.path.join(folder, BERT_FILES[0]))
    with open(os.path.join(folder, BERT_FILES[1]), 'w') as f:
      json.dump(ids.to_json(), f)

  @property
  def sep_id(self) -> int:
    """Our id of [SEP], which sentence pairs put after each sentence."""
    return int(self.ids.to_ours(self._wordpiece.token_to_id('[SEP]')))

  def _encode(self, text: str) -> list[int]:
    return self._wordpiece.encode(text, add_special_tokens=False).ids

  def _decode(self, ids: list[int]) -> str:
    return self._wordpiece.decode(ids)

  def _piece(self, token_id: int) -> str:
    return self._wordpiece.id_to_token(token_id)


LLAMA_IDS = 'llama_ids.json'
LLAMA_JSON = 'llama_tokenizer.json'  # a published tokenizer.json
LLAMA_SPM = 'llama.model'  # a published tokenizer.model, without one
_BYTE_PIECE = re.compile(r'<0x([0-9A-Fa-f]{2})>')


class _LlamaJson:
  """Llama's published ids through a tokenizer.json (the `tokenizers`
  library): SentencePiece-style BPE with byte fallback (Llama 2, Mistral:
  '▁' for spaces, '<0xNN>' for bytes) or byte-level BPE (Llama 3)."""

  file = LLAMA_JSON

  def __init__(self, tokenizer):
    self._bpe = tokenizer
    settings = json.loads(tokenizer.to_str())
    unk = (settings.get('model') or {}).get('unk_token')
    self.unk_id = None if unk is None else tokenizer.token_to_id(unk)
    self.byte_level = 'ByteLevel' in json.dumps(
        [settings.get('pre_tokenizer'), settings.get('decoder')])
    self._special = {i for i, token in
                     tokenizer.get_added_tokens_decoder().items()
                     if token.special}

  @classmethod
  def load(cls, folder: str) -> _LlamaJson:
    tokenizer, _ = _tokenizer_json(os.path.join(folder, cls.file),
                                   _CONVERT_AGAIN)
    return cls(tokenizer)

  def save(self, folder: str) -> None:
    self._bpe.save(os.path.join(folder, self.file))

  @property
  def vocab_size(self) -> int:
    return self._bpe.get_vocab_size(with_added_tokens=True)

  def token_id(self, token: str) -> int | None:
    return self._bpe.token_to_id(token)

  def encode(self, text: str) -> list[int]:
    return self._bpe.encode(text, add_special_tokens=False).ids

  def decode(self, ids: list[int]) -> str:
    return self._bpe.decode(ids, skip_special_tokens=True)

  def piece(self, token_id: int) -> str:
    return self._bpe.id_to_token(token_id)

  def piece_bytes(self, token_id: int) -> bytes:
    """The bytes of text a token stands for; none for special tokens."""
    if token_id in self._special or token_id == self.unk_id:
      return b''
    piece = self.piece(token_id)
    if self.byte_level:
      if not hasattr(self, '_alphabet'):
        self._alphabet = _byte_level_alphabet()
      if all(c in self._alphabet for c in piece):
        return bytes(self._alphabet[c] for c in piece)
      return piece.encode()  # an added token that is text as it stands
    return _sentencepiece_bytes(piece)


def _sentencepiece_bytes(piece: str) -> bytes:
  """'▁' is a space; a byte-fallback piece '<0xNN>' is that byte."""
  byte = _BYTE_PIECE.fullmatch(piece)
  if byte:
    return bytes([int(byte.group(1), 16)])
  return piece.replace('\u2581', ' ').encode()


def _fallback_text(pieces: list[str]) -> str:
  """The text of SentencePiece pieces as a published tokenizer.json's
  decoder writes it (Replace '▁' by ' ', ByteFallback, Fuse, Strip one
  leading space): each run of byte pieces '<0xNN>' its UTF-8 text, or one
  '\ufffd' per byte when the run is not UTF-8."""
  parts, run = [], []
  for piece in pieces + [None]:
    byte = piece and _BYTE_PIECE.fullmatch(piece)
    if byte:
      run.append(int(byte.group(1), 16))
      continue
    if run:
      try:
        parts.append(bytes(run).decode())
      except UnicodeDecodeError:
        parts.append('\ufffd' * len(run))
      run = []
    if piece is not None:
      parts.append(piece.replace('\u2581', ' '))
  text = ''.join(parts)
  return text[1:] if text.startswith(' ') else text


class _LlamaSentencePiece:
  """Llama's published ids through its SentencePiece tokenizer.model (the
  `sentencepiece` library), for a directory without a tokenizer.json."""

  file = LLAMA_SPM

  def __init__(self, path: str):
    self._proto = reading.read_bytes(path)
    try:
      self._sp = spm.SentencePieceProcessor(model_proto=self._proto)
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f'{path} is not a SentencePiece model ({e}): damaged '
                       f'or cut short; download it again.') from e
    unk = self._sp.unk_id()
    self.unk_id = unk if unk >= 0 else None

  @classmethod
  def load(cls, folder: str) -> _LlamaSentencePiece:
    return cls(os.path.join(folder, cls.file))

  def save(self, folder: str) -> None:
    with open(os.path.join(folder, self.file), 'wb') as f:
      f.write(self._proto)

  @property
  def vocab_size(self) -> int:
    return self._sp.get_piece_size()

  def token_id(self, token: str) -> int | None:
    i = self._sp.piece_to_id(token)
    # piece_to_id answers the unknown id for a piece it lacks.
    return i if self._sp.id_to_piece(i) == token else None

  def encode(self, text: str) -> list[int]:
    return self._sp.encode(text)

  def decode(self, ids: list[int]) -> str:
    """As the tokenizer.json of the same model decodes (transformers'
    conversion of it), which writes bytes that are no UTF-8 otherwise than
    SentencePiece: one '\ufffd' for each byte of the run they are in."""
    return _fallback_text([self.piece(i) for i in ids
                           if not self._special(i)])

  def piece(self, token_id: int) -> str:
    return self._sp.id_to_piece(token_id)

  def _special(self, token_id: int) -> bool:
    return self._sp.is_control(token_id) or self._sp.is_unknown(token_id)

  def piece_bytes(self, token_id: int) -> bytes:
    if self._special(token_id):
      return b''
    return _sentencepiece_bytes(self.piece(token_id))


def published_llama(source: str):
  """A Llama directory's tokenizer: its tokenizer.json (`published_bpe`)
  where it has one, else its SentencePiece tokenizer.model.

  Raises:
    FileNotFoundError: the directory has neither.
  """
  if os.path.exists(os.path.join(source, 'tokenizer.json')):
    return _LlamaJson(published_bpe(source, 'llama'))
  path = os.path.join(source, 'tokenizer.model')
  if not os.path.exists(path):
    raise FileNotFoundError(
        f'{source} has neither tokenizer.json nor tokenizer.model: download '
        f'the tokenizer files with the weights (the whole model '
        f'repository).')
  return _LlamaSentencePiece(path)


def _token_text(value) -> str | None:
  """A tokenizer_config.json token: a string, or a dict with its content
  (None for anything else)."""
  if isinstance(value, dict):
    value = value.get('content')
  return value if isinstance(value, str) else None


def llama_special_ids(hf: dict, source: str, published
                      ) -> tuple[int | None, int]:
  """Llama's (BOS, EOS) ids: config.json's bos_token_id and eos_token_id,
  else tokenizer_config.json's bos_token and eos_token, else LlamaConfig's
  defaults (1, 2). Of a list of EOS ids (Llama 3.1 Instruct's) the one the
  tokenizer names eos_token, else the first: our tasks stop at one EOS.

  Raises:
    ValueError: an id outside the tokenizer's vocabulary.
  """
  settings = _tokenizer_config(source)
  ids = {}
  for name, default in (('bos', 1), ('eos', 2)):
    text = _token_text(settings.get(f'{name}_token'))
    named = None if text is None else published.token_id(text)
    value = hf.get(f'{name}_token_id', named if named is not None
                   else default)
    if isinstance(value, list):
      value = named if named in value else (value[0] if value else None)
    if value is not None and not 0 <= value < published.vocab_size:
      raise ValueError(
          f'{name}_token_id={value} is not an id of the tokenizer '
          f'({published.vocab_size} tokens): config.json and the tokenizer '
          f'files come from different models; download them together.')
    ids[name] = value
  if ids['eos'] is None:
    raise ValueError('config.json has eos_token_id=null: our tasks end '
                     'every text with EOS; set it to the end-of-text id.')
  return ids['bos'], ids['eos']


class LlamaTokenizer(PublishedIds):
  """A Llama tokenizer (`published_llama`: tokenizer.json through the
  `tokenizers` library, or tokenizer.model through `sentencepiece`). Llama
  has no padding token (a converted model never predicts the one added).
  Texts encode without BOS, as every tokenizer here; `start_id` is our id
  of BOS, which the language-modelling task puts before a prompt, as
  transformers' tokenizer does."""

  def __init__(self, folder: str):
    ids_path, = _workdir_files(folder, (LLAMA_IDS,), 'Llama')
    meta = _read_ids(ids_path)
    backend = (_LlamaJson if os.path.exists(os.path.join(folder, LLAMA_JSON))
               else _LlamaSentencePiece)
    self._published = backend.load(folder)
    order = meta['order']
    # Workdirs converted before `published_ids` left the padding out.
    self.ids = published_ids.IdOrder(
        order if order[:1] == [published_ids.NEW]
        else [published_ids.NEW] + order)
    bos = meta.get('bos_id')
    self.start_id = (tokenization.EOS_ID if bos is None
                     else int(self.ids.to_ours(bos)))

  @staticmethod
  def id_order(published, eos_id: int) -> published_ids.IdOrder:
    """Our ids of a published Llama tokenizer (`published_llama`)."""
    unk = published.unk_id
    return published_ids.IdOrder.of(published.vocab_size, eos=eos_id,
                                    unk=None if unk == eos_id else unk)

  @staticmethod
  def save(folder: str, published, ids: published_ids.IdOrder,
           bos_id: int | None, eos_id: int) -> None:
    """Writes the published tokenizer and our `ids` (with Llama's BOS and
    EOS ids) into `folder`."""
    os.makedirs(folder, exist_ok=True)
    published.save(folder)
    with open(os.path.join(folder, LLAMA_IDS), 'w') as f:
      json.dump({**ids.to_json(), 'bos_id': bos_id, 'eos_id': eos_id}, f)

  def _encode(self, text: str) -> list[int]:
    return self._published.encode(text)

  def _decode(self, ids: list[int]) -> str:
    """Special tokens (BOS, unknown) skipped."""
    return self._published.decode(ids)

  def _piece(self, token_id: int) -> str:
    """Llama's token ('▁' marks a space, 'Ġ' in byte-level BPE)."""
    return self._published.piece(token_id)

  def token_bytes(self, token_id: int) -> bytes:
    """The UTF-8 bytes a token stands for ('▁' a space, '<0xNN>' that
    byte; a token may hold part of a character); none for padding and
    special tokens."""
    if int(token_id) == tokenization.PAD_ID:
      return b''
    return self._published.piece_bytes(
        int(self.ids.to_published(int(token_id))))
