"""A converted BERT workdir: a randomly initialised transformers BERT with a
WordPiece vocabulary, converted by the command, tokenizes and scores (MLM
logits) as the reference does (fine-tuning from it:
e2e/test_interop_bert_e2e.py). Skipped without `transformers` and `torch`
(`pip install -e ".[interop]"`)."""

import contextlib
import io

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import convert_and_restore
from conftest import publish_bert
from conftest import published_and_converted

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')
tokenizers_lib = pytest.importorskip('tokenizers')

SENTENCES = ['The red house is big.', 'a small cat sees the dog']


published, _ = published_and_converted(publish_bert)


@pytest.fixture(scope='module', name='converted')
def converted_fixture(published, tmp_path_factory):
  """(the workdir restored, its parameters, the workdir, what convert
  printed)."""
  with contextlib.redirect_stdout(io.StringIO()) as printed:
    restored = convert_and_restore(
        published[-1], str(tmp_path_factory.mktemp('converted') / 'workdir'))
  return (*restored, printed.getvalue())


def test_convert_names_the_published_head_it_leaves_out(converted):
  """BertForPreTraining's next-sentence head has no place in our model:
  convert says so where it says what it initialises."""
  from transformer.interop import bert  # pylint: disable=g-import-not-at-top
  assert ("not converted: cls.seq_relationship (BertForPreTraining's "
          "next-sentence head)") in converted[-1]
  assert not bert.left_out(['bert.embeddings.word_embeddings.weight',
                            'cls.predictions.bias'])  # BertForMaskedLM


def test_tokenization_and_mlm_logits_match_the_reference(published,
                                                         converted):
  model, reference, _ = published
  trainer, params, _, _ = converted
  tokenizer = trainer.task.tokenizer
  assert trainer.task.mask_id == tokenizer.ids.order.tolist().index(
      reference.mask_token_id)
  rows = []
  for sentence in SENTENCES:
    expected = reference(sentence)['input_ids']  # [CLS] ... [SEP]
    ours = [1] + tokenizer.encode(sentence, add_eos=False)
    np.testing.assert_array_equal(tokenizer.ids.order[ours], expected[:-1])
    rows.append(ours)
  width = max(map(len, rows))
  tokens = np.asarray([r + [0] * (width - len(r)) for r in rows])
  with torch.no_grad():
    hf = model(torch.tensor(tokenizer.ids.order[tokens]),
               attention_mask=torch.tensor(tokens > 0)).prediction_logits
  expected = hf.numpy()[..., tokenizer.ids.order]
  ours = np.asarray(trainer.task.model.apply(
      {'params': params}, jnp.asarray(tokens), deterministic=True,
      method='mlm_logits'))
  real = tokens > 0
  error = np.abs(ours[real] - expected[real]).max() / np.abs(
      expected[real]).max()
  assert error < 1e-5


def test_export_gives_back_the_published_tensors_and_tokenizer(published,
                                                               converted,
                                                               tmp_path):
  """The masked-LM workdir of a converted BertForPreTraining exported
  (`export.export`, as `convert --to=hf`): BertForMaskedLM with the
  published tensors, loaded by transformers with nothing missing, and a
  tokenizer that gives the published ids."""
  from transformer.interop import export  # pylint: disable=g-import-not-at-top
  from transformer.interop import files  # pylint: disable=g-import-not-at-top
  _, reference, directory = published
  _, _, workdir, _ = converted
  written = export.export(workdir, str(tmp_path / 'out'))
  assert written.startswith('BERT (BertForMaskedLM)')
  model, info = transformers.AutoModelForMaskedLM.from_pretrained(
      tmp_path / 'out', output_loading_info=True)
  assert not any(info.values()), info
  original = files.read_safetensors(directory)
  exported = files.read_safetensors(str(tmp_path / 'out'))
  assert len(exported) > 30
  for name, value in exported.items():
    np.testing.assert_array_equal(value, original[name], err_msg=name)
  tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / 'out')
  for sentence in SENTENCES:
    assert tokenizer(sentence)['input_ids'] == reference(sentence)[
        'input_ids']
  assert model.config.pad_token_id == reference.pad_token_id
