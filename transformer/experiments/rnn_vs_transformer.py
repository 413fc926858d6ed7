r"""RNN encoder-decoders with and without attention beside the Transformer.

    python -m transformer.main --config=experiments/rnn_vs_transformer.py:model=rnn_attention \
        --workdir=workdirs/compare/rnn_attention
    python -m transformer.tools.compare --workdir=workdirs/compare  # all three

Arguments (comma-separated): model = rnn (no attention: the context is the
encoder's final state, the bottleneck of the lectures) | rnn_attention
(Bahdanau additive attention) | rnn_dot (Luong dot-product attention) |
transformer | convs2s (Gehring et al.'s convolutional encoder-decoder, 4
gated convolution blocks of kernel 3 a side); for a local corpus path=DIR,src=..,tgt=..[,eval=SPLIT] (default:
the offline grammar with 1 to 4 clauses per sentence, 5 to 53 words, so that
the length effect can show); runlocal (seconds, for tests).

All models see the same data in the same length-bucketed, unpacked batches
(an LSTM cannot be reset inside a packed row), are decoded by the same beam
search and scored by the same sacreBLEU. RNNs use Adam at 1e-3 with gradient
clipping at 1.0, the Transformer the rsqrt schedule. Measured results, on
earlier code: docs/earlier_results.md ("RNN encoder-decoders and the
Transformer").
"""

from transformer import configs
from transformer.models import encoder_decoder
from transformer.tasks import translation

MODELS = {
    'rnn': ('rnn', dict(attention='none')),
    'rnn_attention': ('rnn', dict(attention='additive')),
    'rnn_dot': ('rnn', dict(attention='dot')),
    'transformer': ('transformer', {}),
    'convs2s': ('convs2s', {}),
}
KEYS = ('model', 'path', 'src', 'tgt', 'eval', 'runlocal')


def get_config(arg: str = 'model=rnn_attention'):
  name = 'experiments/rnn_vs_transformer.py'
  args = configs.parse_args(arg, name=name, known=KEYS, required=('model',))
  if args['model'] not in MODELS:
    raise ValueError(f'{name}: model={args["model"]!r}; choose one of '
                     f'{sorted(MODELS)}.')
  if 'path' in args:
    configs.parse_args(arg, name=name, known=KEYS,
                       required=('model', 'path', 'src', 'tgt'))
  family, fields = MODELS[args['model']]
  config = translation.default_config()
  config.data.update(dict(
      source='offline', max_clauses=4, num_train=100_000, num_eval=1_000,
      num_test=1_000, eval_split='test', vocab_size=1_000, max_length=96,
      tokens_per_batch=4_096, packing=False, eval_batch_size=100))
  if 'path' in args:
    config.data.update(dict(
        source='local', path=args['path'], source_lang=args['src'],
        target_lang=args['tgt'], eval_split=args.get('eval', 'val'),
        vocab_size=8_000, max_length=64))
  config.model.update(dict(family=family, size='mini', dropout_rate=0.1,
                           **fields))
  if family in ('rnn', 'convs2s'):
    # ConvS2S's paper used Nesterov SGD with weight normalisation; here it
    # takes the RNNs' Adam, the same for both non-attention baselines.
    config.optimizer.update(dict(schedule='constant', learning_rate=1e-3,
                                 grad_clip_norm=1.0))
  else:
    config.optimizer.update(dict(
        learning_rate=2 * encoder_decoder.SIZES['mini']['d_model']**-0.5,
        warmup_steps=400))
  config.train.update(dict(num_steps=3_000, log_every=100, eval_every=1_000,
                           checkpoint_every=500, keep_checkpoints=3))
  config.eval.update(dict(beam_size=4, max_length_offset=10,
                          num_bleu_examples=0, average_checkpoints=1))
  if 'runlocal' in args:
    config.data.update(dict(num_train=500, num_eval=8, num_test=8,
                            vocab_size=200, max_length=64,
                            tokens_per_batch=512, eval_batch_size=8))
    config.model.update(dict(size='tiny', dropout_rate=0.0))
    config.train.update(dict(num_steps=6, log_every=3, eval_every=6,
                             checkpoint_every=6))
    config.eval.update(dict(beam_size=2))
  return config
