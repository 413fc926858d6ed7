"""Published checkpoints in every common layout: BERT as BertModel (with and
without its pooler), BertForPreTraining, BertForMaskedLM and
BertForSequenceClassification; GPT-2 as GPT2Model and GPT2LMHeadModel; ViT
as ViTModel and ViTForImageClassification. Each, randomised and saved by
transformers, loads to the reference's outputs (relative error < 2e-5);
converted, it makes a workdir of the right task, with its tokenizer read
from tokenizer.json alone. Mismatches are summarised, and a ViT the image
task cannot feed is refused before anything is written. Skipped without
`transformers` and `torch` (`pip install -e ".[interop]"`)."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import convert_and_restore
from conftest import randomised
from transformer import workdir as workdir_lib
from transformer.data import text
from transformer.interop import bert
from transformer.interop import files
from transformer.interop import gpt2
from transformer.interop import vit as vit_interop
from transformer.interop import workdirs
from transformer.models import decoder
from transformer.models import encoder
from transformer.models import vit
from transformer.tools import predict

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')
tokenizers_lib = pytest.importorskip('tokenizers')

VOCAB = 40
BERT = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=16)


def relative_error(ours, theirs) -> float:
  theirs = np.asarray(theirs)
  return float(np.abs(np.asarray(ours) - theirs).max() /
               np.abs(theirs).max())


def publish(directory, architecture, config, **kwargs):
  torch.manual_seed(0)
  model = randomised(getattr(transformers, architecture)(config, **kwargs))
  model.save_pretrained(directory)
  return model


BERT_LAYOUTS = [('BertModel', {}), ('BertModel', dict(add_pooling_layer=False)),
                ('BertForPreTraining', {}), ('BertForMaskedLM', {}),
                ('BertForSequenceClassification', {})]


@pytest.mark.parametrize('architecture,kwargs', BERT_LAYOUTS,
                         ids=['BertModel', 'BertModel-no-pooler',
                              'BertForPreTraining', 'BertForMaskedLM',
                              'BertForSequenceClassification'])
def test_every_bert_layout_gives_the_reference_outputs(tmp_path, architecture,
                                                       kwargs):
  config = transformers.BertConfig(**BERT, num_labels=3)
  reference = publish(tmp_path, architecture, config, **kwargs)
  ours_config, params = bert.load(str(tmp_path))
  assert bert.layout(files.read_safetensors(str(tmp_path))) == architecture
  heads = {'mlm_bias', 'pooler', 'classifier'} & set(params)  # as loaded
  expected_heads = {
      'BertModel': {'pooler'} if kwargs == {} else set(),
      'BertForPreTraining': {'mlm_bias', 'pooler'},
      'BertForMaskedLM': {'mlm_bias'},
      'BertForSequenceClassification': {'pooler', 'classifier'}}
  assert heads == expected_heads[architecture]
  tokens = np.random.default_rng(0).integers(1, VOCAB, (2, 12))
  tokens[1, 9:] = 0  # padding at the end, masked on both sides
  mask = torch.tensor(tokens > 0)
  model = encoder.Bert(ours_config)
  # `encode` also pools: a checkpoint without a pooler gets a stand-in.
  pooler = {'kernel': np.zeros((32, 32), np.float32),
            'bias': np.zeros(32, np.float32)}
  params = {'pooler': pooler, **params}
  apply = lambda method: model.apply({'params': params}, jnp.asarray(tokens),
                                     deterministic=True, method=method)
  with torch.no_grad():
    out = reference(torch.tensor(tokens), attention_mask=mask,
                    output_hidden_states=True)
  states, pooled = apply('encode')
  real = tokens > 0
  assert relative_error(np.asarray(states)[real],
                        out.hidden_states[-1].numpy()[real]) < 2e-5
  if 'pooler' in heads and architecture == 'BertModel':
    assert relative_error(pooled, out.pooler_output) < 2e-5
  if 'mlm_bias' in heads:
    logits = out.prediction_logits if architecture == 'BertForPreTraining' \
        else out.logits
    assert relative_error(np.asarray(apply('mlm_logits'))[real],
                          logits.numpy()[real]) < 2e-5
  if 'classifier' in heads:
    assert ours_config.num_classes == 3
    assert relative_error(apply('classify'), out.logits) < 2e-5


def _wordpiece(directory):
  """A WordPiece tokenizer trained on generated text, saved as
  tokenizer.json alone (as recent repositories publish it)."""
  wordpiece = tokenizers_lib.BertWordPieceTokenizer(lowercase=True)
  wordpiece.train_from_iterator(text.offline_splits(200, 10, seed=0)['train'],
                                vocab_size=300, show_progress=False)
  wordpiece.enable_truncation(8)  # switched off by convert
  wordpiece.save(str(directory / 'tokenizer.json'))
  return tokenizers_lib.Tokenizer.from_file(str(directory / 'tokenizer.json'))


@pytest.fixture(scope='module')
def classifier(tmp_path_factory):
  """A BertForSequenceClassification (3 named classes) with a
  tokenizer.json only, and its converted workdir."""
  directory = tmp_path_factory.mktemp('classifier')
  wordpiece = _wordpiece(directory)
  wordpiece.no_truncation()
  config = transformers.BertConfig(
      **{**BERT, 'vocab_size': wordpiece.get_vocab_size(),
         'max_position_embeddings': 64},
      id2label={0: 'entailment', 1: 'neutral', 2: 'contradiction'})
  model = publish(directory, 'BertForSequenceClassification', config)
  assert not (directory / 'vocab.txt').exists()
  restored, _, workdir = convert_and_restore(
      str(directory), str(tmp_path_factory.mktemp('converted') / 'workdir'))
  return model, wordpiece, restored, workdir


def test_a_sequence_classifier_converts_into_a_workdir_predict_reads(
    classifier):
  model, wordpiece, restored, workdir = classifier
  assert restored.task.config.task == 'text_classification'
  assert restored.task.class_names == ['entailment', 'neutral',
                                       'contradiction']
  lines = ['a small cat sees the dog', 'the red house\tthe house is red',
           'The Dog SAW a cat.\ta dog']
  predictions, step = predict.classify_texts(workdir, lines, top_k=3)
  assert step == 0
  names = restored.task.class_names
  for line, (shown, best) in zip(lines, predictions):
    assert shown == line
    ids, types = [wordpiece.token_to_id('[CLS]')], [0]
    for kind, sentence in enumerate(line.split('\t')):  # [CLS] a [SEP] b [SEP]
      piece = wordpiece.encode(sentence, add_special_tokens=False).ids + [
          wordpiece.token_to_id('[SEP]')]
      ids, types = ids + piece, types + [kind] * len(piece)
    with torch.no_grad():
      logits = model(torch.tensor([ids]),
                     token_type_ids=torch.tensor([types])).logits
    expected = torch.softmax(logits, -1).numpy()[0]
    ours = np.asarray([dict(best)[name] for name in names])
    np.testing.assert_allclose(ours, expected, atol=2e-6)
    assert best[0][0] == names[int(expected.argmax())]


def test_a_bert_model_converts_with_a_fresh_mlm_head(tmp_path, capsys):
  _wordpiece(tmp_path)
  size = tokenizers_lib.Tokenizer.from_file(
      str(tmp_path / 'tokenizer.json')).get_vocab_size()
  publish(tmp_path / 'published', 'BertModel', transformers.BertConfig(
      **{**BERT, 'vocab_size': size}))
  os.rename(tmp_path / 'tokenizer.json',
            tmp_path / 'published' / 'tokenizer.json')
  written = workdirs.convert('hf', str(tmp_path / 'published'),
                             str(tmp_path / 'workdir'))
  assert 'BertModel' in written and 'masked-LM' in written
  assert 'initialised: mlm_bias, mlm_norm, mlm_transform' in capsys.readouterr(
  ).out
  tokenizer = workdir_lib.restore(str(tmp_path / 'workdir')).task.tokenizer
  # The tokenizer.json's truncation to 8 tokens is not applied.
  assert len(tokenizer.encode('the dog sees a cat ' * 4, add_eos=False)) > 8


@pytest.mark.parametrize('architecture', ['GPT2Model', 'GPT2LMHeadModel'])
def test_both_gpt2_layouts_give_the_reference_logits(tmp_path, architecture):
  config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=16,
                                   n_embd=32, n_layer=2, n_head=4)
  reference = publish(tmp_path, architecture, config)
  ours_config, params = gpt2.load(str(tmp_path))
  tokens = np.random.default_rng(0).integers(0, VOCAB, (2, 12))
  with torch.no_grad():
    out = reference(torch.tensor(tokens))
    if architecture == 'GPT2Model':  # the logits of the tied output layer
      theirs = (out.last_hidden_state @ reference.wte.weight.T).numpy()
    else:
      theirs = out.logits.numpy()
  ours = decoder.Decoder(ours_config).apply(
      {'params': params}, jnp.asarray(tokens), deterministic=True)
  assert relative_error(ours, theirs) < 2e-5


@pytest.mark.parametrize('eos', ['last', 'first'])
def test_a_gpt2_converts_with_tokenizer_json_alone(tmp_path, eos):
  """GPT-2's vocab.json and merges.txt saved by transformers as
  tokenizer.json, the older files deleted: the converted workdir
  tokenizes and scores as the reference and exports back to its tensors,
  with <|endoftext|> last (as GPT-2 has it) or first (as tokenizers trained
  from scratch often put their special tokens)."""
  source = tmp_path / 'source'
  source.mkdir()
  bpe = tokenizers_lib.ByteLevelBPETokenizer()
  bpe.train_from_iterator(text.offline_splits(200, 10, seed=0)['train'],
                          vocab_size=300, min_frequency=2,
                          show_progress=False)
  bpe.save_model(str(source))
  vocab = json.loads((source / 'vocab.json').read_text())
  if eos == 'last':
    vocab['<|endoftext|>'] = eos_id = len(vocab)
  else:
    vocab = {'<|endoftext|>': 0, **{t: i + 1 for t, i in vocab.items()}}
    eos_id = 0
  (source / 'vocab.json').write_text(json.dumps(vocab))
  reference = transformers.GPT2TokenizerFast(str(source / 'vocab.json'),
                                             str(source / 'merges.txt'))
  published = tmp_path / 'published'
  model = publish(published, 'GPT2LMHeadModel', transformers.GPT2Config(
      vocab_size=len(vocab), n_positions=32, n_embd=32, n_layer=1, n_head=4,
      eos_token_id=eos_id, bos_token_id=eos_id))
  reference.save_pretrained(str(published))
  for name in ('vocab.json', 'merges.txt'):
    if (published / name).exists():
      os.remove(published / name)
  assert (published / 'tokenizer.json').exists()
  restored, params, _ = convert_and_restore(str(published),
                                            str(tmp_path / 'workdir'))
  ours = restored.task.tokenizer
  sentence = 'the red house sees a small cat'
  ids = ours.encode(sentence, add_eos=False)
  published_ids = reference(sentence)['input_ids']
  assert ours.ids.to_published(ids).tolist() == published_ids
  assert ours.decode(ours.encode(sentence)) == sentence
  with torch.no_grad():
    theirs = model(torch.tensor([[eos_id] + published_ids])).logits.numpy()
  logits = restored.task.model.apply(
      {'params': params}, jnp.asarray([[1] + ids]), deterministic=True)
  assert relative_error(
      np.asarray(logits)[..., ours.ids.to_ours(np.arange(len(vocab)))],
      theirs) < 2e-5
  gpt2.save_hf(str(tmp_path / 'exported'), params, restored.task.model_config,
               ours.ids)
  exported = files.read_safetensors(str(tmp_path / 'exported'))
  for name, value in files.read_safetensors(str(published)).items():
    np.testing.assert_array_equal(
        exported.get(name, exported.get('transformer.' + name)), value,
        err_msg=name)


VIT = dict(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2,
           num_attention_heads=4, intermediate_size=48, num_labels=3)


def _our_class_token_state(config, params, images):
  """The final norm's output at the class token (what the head reads)."""
  _, state = vit.VisionTransformer(config).apply(
      {'params': params}, jnp.asarray(images), deterministic=True,
      capture_intermediates=True, mutable=['intermediates'])
  return np.asarray(state['intermediates']['encoder']['final_norm'][
      '__call__'][0])[:, 0]


@pytest.mark.parametrize('architecture', ['ViTModel',
                                          'ViTForImageClassification'])
def test_both_vit_layouts_give_the_reference_states(tmp_path, architecture):
  reference = publish(tmp_path, architecture, transformers.ViTConfig(**VIT))
  config, params = vit_interop.load(str(tmp_path))
  assert ('head' in params) == (architecture != 'ViTModel')
  images = np.random.default_rng(0).standard_normal(
      (2, 16, 16, 3)).astype(np.float32)
  with torch.no_grad():
    out = reference(torch.tensor(images.transpose(0, 3, 1, 2)),
                    output_hidden_states=True)
  if architecture == 'ViTModel':
    theirs = out.last_hidden_state[:, 0].numpy()
    head = {**params, 'head': {'kernel': np.zeros((32, 3), np.float32),
                               'bias': np.zeros(3, np.float32)}}
    ours = _our_class_token_state(config, head, images)
  else:
    theirs = out.logits.numpy()
    ours = vit.VisionTransformer(config).apply(
        {'params': params}, jnp.asarray(images), deterministic=True)
  assert relative_error(ours, theirs) < 2e-5


def test_a_vit_model_converts_with_a_fresh_head(tmp_path, capsys):
  publish(tmp_path / 'published', 'ViTModel', transformers.ViTConfig(**VIT))
  written = workdirs.convert('hf', str(tmp_path / 'published'),
                             str(tmp_path / 'workdir'))
  assert '3 classes' in written
  assert 'initialised: head' in capsys.readouterr().out


def test_a_vit_of_channels_the_task_cannot_feed_is_refused_first(tmp_path):
  publish(tmp_path / 'published', 'ViTForImageClassification',
          transformers.ViTConfig(**VIT, num_channels=2))
  with pytest.raises(ValueError) as error:
    workdirs.convert('hf', str(tmp_path / 'published'),
                     str(tmp_path / 'out'))
  assert str(error.value).startswith('num_channels=2')
  assert 'dataset.json' not in str(error.value)
  assert sorted(os.listdir(tmp_path)) == ['published']


def test_a_mismatch_is_summarised_naming_the_architecture(tmp_path):
  """A RoBERTa given to the BERT loader: one line naming what the names
  look like and what was expected, counts and a few names of each kind,
  not every tensor."""
  config = transformers.RobertaConfig(**{**BERT, 'vocab_size': VOCAB + 8,
                                         'max_position_embeddings': 18})
  publish(tmp_path, 'RobertaForMaskedLM', config)
  hf = files.read_config(str(tmp_path))
  ours = bert.config_from_hf({**hf, 'model_type': 'bert'})
  with pytest.raises(ValueError) as error:
    bert.params_from_hf(files.read_safetensors(str(tmp_path)), ours)
  message = str(error.value)
  assert '\n' not in message
  assert 'look like RobertaModel' in message and 'BertModel' in message
  assert 'missing' in message and 'unexpected' in message
  missing = len(bert._expected(ours, set()))  # pylint: disable=protected-access
  assert f'{missing} missing' in message
  assert message.count('encoder.layer') <= 6  # a few, not all of them
  assert len(message) < 1200
