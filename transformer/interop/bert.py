"""BERT checkpoints in the Hugging Face layout (config.json and
safetensors) into `encoder.Bert`, in each layout people publish:
BertModel (no prefix, no head; with or without the pooler),
BertForPreTraining, BertForMaskedLM and BertForSequenceClassification
(`LAYOUTS`; the head models prefix the encoder's names with 'bert.').

The mapping: word, position and token-type embeddings and their LayerNorm;
attention self.query/key/value and output.dense Linear weights ([out, in])
-> [D, N, H] and [N, H, D]; attention.output.LayerNorm and
output.LayerNorm -> the post-LN norms; intermediate/output dense -> wi/wo;
where present, cls.predictions.transform -> the MLM transform and its norm,
cls.predictions.bias -> the MLM bias (the decoder is tied to the word
embeddings), pooler.dense -> the pooler and classifier -> the
classification head. The next-sentence head (cls.seq_relationship) is not
part of our model and is left out (`left_out`). Heads a checkpoint lacks
are initialised where a task needs them; convert reports both. Hugging Face's 'gelu' is
the erf form.

BertConfig, field by field (transformers' defaults, `DEFAULTS`, stand for
the fields a config.json omits):
- honoured: vocab_size, hidden_size, num_hidden_layers,
  num_attention_heads, intermediate_size, num_labels and id2label (the
  classifier's outputs), hidden_act
  (`files.HF_ACTIVATIONS`, also in the MLM head), max_position_embeddings,
  type_vocab_size, layer_norm_eps; hidden_dropout_prob and
  attention_probs_dropout_prob become the dropout rates of fine-tuning.
- refused unless they leave the computation ours (`REFUSED`):
  position_embedding_type (relative positions, in configs written before
  transformers 5), is_decoder (causal attention), add_cross_attention,
  tie_word_embeddings, pruned_heads; a cls.predictions.decoder that
  differs from the word embeddings and the MLM bias.
- ignored, as they do not change the logits: pad_token_id (the padding
  row of the embedding only stops its gradient; convert finds [PAD] by
  name), classifier_dropout (dropout, off at inference; fine-tuning uses
  hidden_dropout_prob),
  initializer_range, use_cache, bos_token_id, eos_token_id,
  gradient_checkpointing, and every model's architectures,
  transformers_version, dtype, output_*, return_dict,
  chunk_size_feed_forward (the same sums in chunks), label2id,
  problem_type (the loss; convert refuses multi-label classifiers) and
  generation settings.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer.data import published_ids
from transformer.interop import files
from transformer.interop import vocabulary_rows
from transformer.models import encoder

# Each published layout: the encoder (BertModel's tensors; the head models
# prefix them with 'bert.') and the heads it carries. The next-sentence head
# (cls.seq_relationship) has no place in our model and is dropped; the MLM
# head, pooler and classifier are read where present.
LAYOUTS = ('BertModel', 'BertForPreTraining', 'BertForMaskedLM',
           'BertForSequenceClassification')
_PREFIX = 'bert.'
# Tensors our model has no place for (the next-sentence head) or that are
# not parameters, named without the prefix.
_UNUSED = ('cls.seq_relationship.weight', 'cls.seq_relationship.bias',
           'embeddings.position_ids')
# The published heads among `_UNUSED`: their prefix -> what they are.
_HEADS_LEFT_OUT = {
    'cls.seq_relationship': "BertForPreTraining's next-sentence head"}
# Copies of other tensors (the MLM decoder tied to the word embeddings and
# to the MLM bias): dropped once checked equal.
_TIED = {'cls.predictions.decoder.weight': 'embeddings.word_embeddings'
                                           '.weight',
         'cls.predictions.decoder.bias': 'cls.predictions.bias'}

# BertConfig's defaults of the fields that change the computation (and
# PretrainedConfig's number of labels, the classifier's outputs).
DEFAULTS = dict(
    vocab_size=30_522, hidden_size=768, num_hidden_layers=12,
    num_attention_heads=12, intermediate_size=3_072, hidden_act='gelu',
    hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
    max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12,
    is_decoder=False, add_cross_attention=False, tie_word_embeddings=True,
    num_labels=2)
# field -> (values that compute what we do, what others make BERT compute).
REFUSED = {
    'position_embedding_type': (('absolute',), 'relative position '
                                'embeddings in the attention'),
    'is_decoder': ((False,), 'causal (left-to-right) attention'),
    'add_cross_attention': ((False,), 'cross-attention layers to an '
                            "encoder's states, which our encoder has not"),
    'tie_word_embeddings': ((True,), 'an MLM output projection of its own '
                            'instead of the word embeddings'),
}


def config_from_hf(hf: dict[str, Any]) -> encoder.Config:
  """Our encoder config for a BERT config.json (the classifier's outputs
  from id2label or num_labels, used where the checkpoint has one).

  Raises:
    ValueError: another model type, or naming each refused field.
  """
  hf, activation = files.hf_config(
      hf, 'bert', DEFAULTS, REFUSED, 'hidden_act',
      heads=('hidden_size', 'num_attention_heads'))
  return encoder.Config(
      vocab_size=hf['vocab_size'], max_length=hf['max_position_embeddings'],
      type_vocab_size=hf['type_vocab_size'],
      num_layers=hf['num_hidden_layers'], d_model=hf['hidden_size'],
      num_heads=hf['num_attention_heads'], d_ff=hf['intermediate_size'],
      activation=activation, norm_position='post',
      positional_encoding='learned',
      layer_norm_epsilon=hf['layer_norm_eps'],
      dropout_rate=hf['hidden_dropout_prob'],
      attention_dropout_rate=hf['attention_probs_dropout_prob'],
      num_classes=len(hf.get('id2label') or {}) or hf['num_labels'])


def layout(tensors: dict[str, np.ndarray]) -> str:
  """Which of `LAYOUTS` the tensor names are, by the heads they carry."""
  names = set(tensors)
  if not names & {'bert.embeddings.word_embeddings.weight',
                  'embeddings.word_embeddings.weight'}:
    return files.looks_like(names)
  if 'cls.seq_relationship.weight' in names:
    return 'BertForPreTraining'
  if 'classifier.weight' in names:
    return 'BertForSequenceClassification'
  if 'cls.predictions.bias' in names:
    return 'BertForMaskedLM'
  return 'BertModel'


def left_out(names) -> list[str]:
  """The published heads of a checkpoint (its tensor `names`) that the
  conversion leaves out, each with what it is, for convert to report:
  'cls.seq_relationship (BertForPreTraining's next-sentence head)'."""
  names = {name.removeprefix(_PREFIX) for name in names}
  return [f'{head} ({what})' for head, what in _HEADS_LEFT_OUT.items()
          if any(name.startswith(head + '.') for name in names)]


def _without_copies(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """`tensors` named as BertModel names them (without the head models'
  prefix), without the unused ones and the tied copies (`_TIED`), each
  checked equal to what it copies.

  Raises:
    ValueError: naming a copy that differs.
  """
  if _PREFIX + 'embeddings.word_embeddings.weight' in tensors:
    tensors = {k.removeprefix(_PREFIX): v for k, v in tensors.items()}
  tensors = {k: v for k, v in tensors.items() if k not in _UNUSED}
  for copy, original in _TIED.items():
    value = tensors.pop(copy, None)
    if value is not None and original in tensors and not np.array_equal(
        value, tensors[original]):
      raise ValueError(f'{copy} differs from {original}: the checkpoint does '
                       'not tie its MLM decoder, as our model does.')
  return tensors


def _expected(config: encoder.Config, heads: set[str]
              ) -> dict[str, tuple[int, ...]]:
  """BertModel's tensor names and shapes, with those of `heads` ('mlm',
  'pooler', 'classifier')."""
  d, f, v = config.d_model, config.mlp_dim, config.vocab_size
  e = 'embeddings.'
  expected = {e + 'word_embeddings.weight': (v, d),
              e + 'position_embeddings.weight': (config.max_length, d),
              e + 'token_type_embeddings.weight': (config.type_vocab_size, d),
              e + 'LayerNorm.weight': (d,), e + 'LayerNorm.bias': (d,)}
  if 'mlm' in heads:
    expected.update({'cls.predictions.bias': (v,),
                     'cls.predictions.transform.dense.weight': (d, d),
                     'cls.predictions.transform.dense.bias': (d,),
                     'cls.predictions.transform.LayerNorm.weight': (d,),
                     'cls.predictions.transform.LayerNorm.bias': (d,)})
  if 'pooler' in heads:
    expected.update({'pooler.dense.weight': (d, d), 'pooler.dense.bias': (d,)})
  if 'classifier' in heads:
    expected.update({'classifier.weight': (config.num_classes, d),
                     'classifier.bias': (config.num_classes,)})
  for i in range(config.num_layers):
    layer = f'encoder.layer.{i}.'
    shapes = {'attention.self.query': (d, d), 'attention.self.key': (d, d),
              'attention.self.value': (d, d), 'attention.output.dense': (d, d),
              'intermediate.dense': (f, d), 'output.dense': (d, f)}
    for name, shape in shapes.items():
      expected[f'{layer}{name}.weight'] = shape
      expected[f'{layer}{name}.bias'] = (shape[0],)
    for name in ('attention.output.LayerNorm', 'output.LayerNorm'):
      expected[f'{layer}{name}.weight'] = (d,)
      expected[f'{layer}{name}.bias'] = (d,)
  return expected


def params_from_hf(tensors: dict[str, np.ndarray], config: encoder.Config
                   ) -> dict[str, Any]:
  """Our parameter tree from any of `LAYOUTS`: the encoder, and the MLM
  head, pooler and classifier where the checkpoint has them; names and
  shapes checked.

  Raises:
    ValueError: a summary of the names that do not fit (`files.checked`).
  """
  original = tensors
  tensors = _without_copies(tensors)
  heads = {head for head, name in (('mlm', 'cls.predictions.bias'),
                                   ('pooler', 'pooler.dense.weight'),
                                   ('classifier', 'classifier.weight'))
           if name in tensors}
  t = files.checked(tensors, _expected(config, heads),
                    f'BERT ({", ".join(LAYOUTS)})', names=original)
  norm = lambda prefix: files.torch_layer_norm(t, prefix)
  dense = lambda prefix: {'kernel': t[f'{prefix}.weight'].T,
                          'bias': t[f'{prefix}.bias']}
  blocks = {}
  for i in range(config.num_layers):
    layer = f'encoder.layer.{i}.'
    blocks[f'layer_{i}'] = {
        'attention_sublayer': {'norm': norm(layer +
                                            'attention.output.LayerNorm')},
        'mlp_sublayer': {'norm': norm(layer + 'output.LayerNorm')},
        'self_attention': files.torch_attention(t, {
            'query': layer + 'attention.self.query',
            'key': layer + 'attention.self.key',
            'value': layer + 'attention.self.value',
            'out': layer + 'attention.output.dense'}, config.num_heads),
        'mlp': {'wi': dense(layer + 'intermediate.dense'),
                'wo': dense(layer + 'output.dense')}}
  e = 'embeddings.'
  params = {
      'embed': {'embed': {'embedding': t[e + 'word_embeddings.weight']}},
      'positions': {'embedding': t[e + 'position_embeddings.weight']},
      'token_types': {'embedding': t[e + 'token_type_embeddings.weight']},
      'embedding_norm': norm(e + 'LayerNorm'),
      'blocks': blocks}
  if 'mlm' in heads:
    params.update(mlm_transform=dense('cls.predictions.transform.dense'),
                  mlm_norm=norm('cls.predictions.transform.LayerNorm'),
                  mlm_bias=t['cls.predictions.bias'])
  if 'pooler' in heads:
    params['pooler'] = dense('pooler.dense')
  if 'classifier' in heads:
    params['classifier'] = dense('classifier')
  return params


def load(directory: str) -> tuple[encoder.Config, dict[str, Any]]:
  """(config, parameters) of a Hugging Face BERT directory."""
  return files.load_hf(directory, config_from_hf, params_from_hf,
                       DEFAULTS)


def to_hf(params: dict[str, Any], config: encoder.Config,
          ids: published_ids.IdOrder | None = None
          ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
  """The inverse of `config_from_hf` and `params_from_hf`: a BERT
  config.json dict and its tensors, with the heads the model has
  (BertForMaskedLM with its MLM head, BertForSequenceClassification with a
  classifier, else BertModel), the pooler's too where the architecture has
  one (BertForMaskedLM has none). A converted workdir's parameters (our
  ids) go back to BERT's ids with its tokenizer's `ids`
  (`task.tokenizer.ids`)."""
  if ids is not None:
    params = vocabulary_rows.in_published_ids(params, ids)
  if (config.norm_position, config.positional_encoding) != ('post',
                                                            'learned'):
    raise ValueError('Only BERT-shaped encoders (post-LN, learned positions) '
                     'export to the BERT layout.')
  activations = {ours: hf for hf, ours in files.HF_ACTIVATIONS.items()
                 if hf in ('gelu', 'gelu_new', 'relu', 'silu')}
  d = config.d_model
  e = 'bert.embeddings.'
  norm = lambda prefix, p: {f'{prefix}.weight': p['scale'],
                            f'{prefix}.bias': p['bias']}
  linear = lambda prefix, p: {f'{prefix}.weight': np.asarray(p['kernel']).T,
                              f'{prefix}.bias': p['bias']}
  tensors = {e + 'word_embeddings.weight': params['embed']['embed'][
                 'embedding'],
             e + 'position_embeddings.weight': params['positions'][
                 'embedding'],
             e + 'token_type_embeddings.weight': params['token_types'][
                 'embedding'],
             **norm(e + 'LayerNorm', params['embedding_norm'])}
  architecture = 'BertModel'
  if 'mlm_bias' in params:
    architecture = 'BertForMaskedLM'
    tensors.update({'cls.predictions.bias': params['mlm_bias'],
                    **linear('cls.predictions.transform.dense',
                             params['mlm_transform']),
                    **norm('cls.predictions.transform.LayerNorm',
                           params['mlm_norm'])})
  if 'classifier' in params:
    architecture = 'BertForSequenceClassification'
    tensors.update(linear('classifier', params['classifier']))
  # BertForMaskedLM has no pooler: a masked LM's (kept for fine-tuning
  # classifiers here) has no place there.
  if 'pooler' in params and architecture != 'BertForMaskedLM':
    tensors.update(linear('bert.pooler.dense', params['pooler']))
  for i in range(config.num_layers):
    ours, layer = params['blocks'][f'layer_{i}'], f'bert.encoder.layer.{i}.'
    attention = ours['self_attention']
    for name, hf_name in (('query', 'query'), ('key', 'key'),
                          ('value', 'value')):
      tensors[f'{layer}attention.self.{hf_name}.weight'] = np.asarray(
          attention[name]['kernel']).reshape(d, d).T
      tensors[f'{layer}attention.self.{hf_name}.bias'] = np.asarray(
          attention[name]['bias']).reshape(d)
    tensors[f'{layer}attention.output.dense.weight'] = np.asarray(
        attention['out']['kernel']).reshape(d, d).T
    tensors[f'{layer}attention.output.dense.bias'] = attention['out']['bias']
    tensors.update({
        **norm(layer + 'attention.output.LayerNorm',
               ours['attention_sublayer']['norm']),
        **norm(layer + 'output.LayerNorm', ours['mlp_sublayer']['norm']),
        **linear(layer + 'intermediate.dense', ours['mlp']['wi']),
        **linear(layer + 'output.dense', ours['mlp']['wo'])})
  hf = {'model_type': 'bert', 'architectures': [architecture],
        'vocab_size': config.vocab_size,
        'max_position_embeddings': config.max_length,
        'type_vocab_size': config.type_vocab_size,
        'num_hidden_layers': config.num_layers, 'hidden_size': d,
        'num_attention_heads': config.num_heads,
        'intermediate_size': config.mlp_dim,
        'hidden_act': activations[config.activation],
        'layer_norm_eps': config.layer_norm_epsilon,
        'hidden_dropout_prob': config.dropout_rate,
        'attention_probs_dropout_prob': config.attention_dropout_rate,
        'tie_word_embeddings': True, 'num_labels': config.num_classes}
  return hf, {k: np.ascontiguousarray(np.asarray(v, np.float32))
              for k, v in tensors.items()}


def save_hf(directory: str, params: dict[str, Any],
            config: encoder.Config,
            ids: published_ids.IdOrder | None = None) -> None:
  """Writes config.json and model.safetensors that transformers loads as
  the architecture `to_hf` names (`ids` as in `to_hf`)."""
  files.save_hf(directory, *to_hf(params, config, ids))
