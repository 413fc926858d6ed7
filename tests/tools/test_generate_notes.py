"""What `generate` says before it samples: prompt text the vocabulary
lacks is named once (it would be read as the unknown id, silently)."""

from transformer.data import tokenization
from transformer.tools import generate


def test_characters_the_vocabulary_lacks_are_named_once(capsys):
  tokenizer = tokenization.CharTokenizer.build(['ROMEO: wherefore art'])
  generate._note_unknown(tokenizer, ['ROMEO: \u2603\u03b6\u4e2d', 'RO\u4e2d'])
  err = capsys.readouterr().err
  assert err.count('\n') == 1, err
  assert '4 pieces' in err and '\u2603 \u03b6 \u4e2d' in err
  assert 'unknown id' in err
  generate._note_unknown(tokenizer, ['ROMEO: art'])  # nothing missing
  assert not capsys.readouterr().err


def test_words_the_vocabulary_lacks_are_counted(capsys):
  tokenizer = tokenization.WordTokenizer.build(['the red circle'])
  generate._note_unknown(tokenizer, ['the blue circle'])
  err = capsys.readouterr().err
  assert '1 piece of the prompts is not' in err


def test_a_vocabulary_without_an_unknown_token_is_never_noted(capsys):
  """GPT-2's published vocabulary has no unknown token: our id 2 is a real
  token there ('!'), never text the vocabulary lacks."""

  class Gpt2Like:
    def id_to_piece(self, token_id):
      return '!' if token_id == tokenization.UNK_ID else 'x'

    def encode(self, text, add_eos=True):
      del add_eos
      return [tokenization.UNK_ID if c == '!' else 5 for c in text]

  generate._note_unknown(Gpt2Like(), ['hello!'])
  assert not capsys.readouterr().err
