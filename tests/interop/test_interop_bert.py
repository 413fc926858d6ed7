"""A converted BERT workdir: a randomly initialised transformers BERT with a
WordPiece vocabulary, converted by the command, tokenizes and scores (MLM
logits) as the reference does, and text classification fine-tunes from it.
Skipped without `transformers` and `torch` (`pip install -e ".[interop]"`).
"""


import jax.numpy as jnp
import numpy as np
import pytest

from conftest import convert_and_restore
from conftest import load_experiment
from conftest import randomised
from transformer import train
from transformer import workdir as workdir_lib
from transformer.data import text

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')
tokenizers_lib = pytest.importorskip('tokenizers')

SENTENCES = ['The red house is big.', 'a small cat sees the dog']


@pytest.fixture(scope='module')
def published(tmp_path_factory):
  directory = tmp_path_factory.mktemp('bert')
  wordpiece = tokenizers_lib.BertWordPieceTokenizer(lowercase=True)
  wordpiece.train_from_iterator(text.offline_splits(200, 10, seed=0)['train'],
                                vocab_size=300, show_progress=False)
  wordpiece.save_model(str(directory))  # vocab.txt, [PAD] [UNK] [CLS] ...
  size = wordpiece.get_vocab_size()
  config = transformers.BertConfig(
      vocab_size=size, hidden_size=32, num_hidden_layers=2,
      num_attention_heads=4, intermediate_size=64,
      max_position_embeddings=32)
  torch.manual_seed(0)
  model = randomised(transformers.BertForPreTraining(config))
  model.save_pretrained(directory)
  tokenizer = transformers.BertTokenizer(str(directory / 'vocab.txt'))
  return model, tokenizer, str(directory)


@pytest.fixture(scope='module')
def converted(published, tmp_path_factory):
  return convert_and_restore(
      published[-1], str(tmp_path_factory.mktemp('converted') / 'workdir'))


def test_tokenization_and_mlm_logits_match_the_reference(published,
                                                         converted):
  model, reference, _ = published
  trainer, params, _ = converted
  tokenizer = trainer.task.tokenizer
  assert trainer.task.mask_id == tokenizer.order.tolist().index(
      reference.mask_token_id)
  rows = []
  for sentence in SENTENCES:
    expected = reference(sentence)['input_ids']  # [CLS] ... [SEP]
    ours = [1] + tokenizer.encode(sentence, add_eos=False)
    np.testing.assert_array_equal(tokenizer.order[ours], expected[:-1])
    rows.append(ours)
  width = max(map(len, rows))
  tokens = np.asarray([r + [0] * (width - len(r)) for r in rows])
  with torch.no_grad():
    hf = model(torch.tensor(tokenizer.order[tokens]),
               attention_mask=torch.tensor(tokens > 0)).prediction_logits
  expected = hf.numpy()[..., tokenizer.order]
  ours = np.asarray(trainer.task.model.apply(
      {'params': params}, jnp.asarray(tokens), deterministic=True,
      method='mlm_logits'))
  real = tokens > 0
  error = np.abs(ours[real] - expected[real]).max() / np.abs(
      expected[real]).max()
  assert error < 1e-5


def test_text_classification_fine_tunes_the_converted_encoder(converted,
                                                              tmp_path):
  _, loaded, workdir = converted
  config = load_experiment('sst2', f'init_from={workdir},runlocal')
  config.train.num_steps = 2
  config.optimizer.warmup_steps = 1
  train.train_and_evaluate(config, str(tmp_path))
  restored = workdir_lib.restore(str(tmp_path))
  tuned = restored.params
  assert type(restored.task.tokenizer).__name__ == 'BertTokenizer'
  moved = np.abs(np.asarray(tuned['embed']['embed']['embedding']) -
                 np.asarray(loaded['embed']['embed']['embedding'])).max()
  assert moved < 0.01  # started from the converted weights
  np.testing.assert_array_equal(tuned['pooler']['kernel'].shape,
                                loaded['pooler']['kernel'].shape)
