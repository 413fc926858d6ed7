"""The model-size table of the lectures, with this codebase's counts.

    python -m transformer.tools.sizes

For every model of the table in the lectures (Transformer base and big,
BERT, XLNet, RoBERTa, GPT-2, Megatron-LM, Turing-NLG, GPT-3, Gopher; and
LLaMA-2, and ViLBERT, the lectures' vision-and-language model, by its
text-stream layers) prints the layers, width and heads of our
configuration (a named size of a model module) and its parameter count,
computed from shapes alone (`jax.eval_shape`: even 280B parameters take no
memory), beside the published figure, the training data and hardware, and
the source. Our configurations use each family's architecture here (e.g.
learned absolute positions and LayerNorm for the GPT-style decoders, a
BERT-shaped encoder for XLNet), so some models differ where their papers
changed those details.
"""

import functools

from transformer.models import decoder
from transformer.models import encoder
from transformer.models import encoder_decoder
from transformer.models import vilbert
from transformer.tools import cli

# name, module, size, published parameters, source of the published
# figure, training data, training hardware (data and hardware as the
# lectures' table gives them from the papers; '?' where it has none; the
# LLaMA-2 and ViLBERT rows from their papers).
ROWS = (
    ('Transformer-Base', encoder_decoder, 'base', 65e6, 'Vaswani et al. T3',
     '?', '8x P100 (12 hours)'),
    ('Transformer-Big', encoder_decoder, 'big', 213e6, 'Vaswani et al. T3',
     '?', '8x P100 (3.5 days)'),
    ('BERT-Base', encoder, 'bert-base', 110e6, 'Devlin et al.', '13GB', '?'),
    ('BERT-Large', encoder, 'bert-large', 340e6, 'Devlin et al.', '13GB',
     '?'),
    ('XLNet-Large', encoder, 'xlnet-large', 340e6, 'Yang et al.', '126GB',
     '512x TPU-v3 (2.5 days)'),
    ('RoBERTa-Large', encoder, 'roberta-large', 355e6, 'Liu et al.', '160GB',
     '1024x V100 (1 day)'),
    ('GPT-2 (XL)', decoder, 'gpt2-xl', 1.5e9, 'Radford et al.', '40GB', '?'),
    ('Megatron-LM', decoder, 'megatron-8.3b', 8.3e9, 'Shoeybi et al.',
     '174GB', '512x V100 (9 days)'),
    ('Turing-NLG', decoder, 'turing-nlg', 17e9, 'Microsoft', '?',
     '256x V100'),
    ('GPT-3', decoder, 'gpt3', 175e9, 'Brown et al.', '694GB', '?'),
    ('Gopher', decoder, 'gopher', 280e9, 'Rae et al.', '10.55TB',
     '4096x TPU-v3 (38 days)'),
    ('LLaMA-2 7B', decoder, 'llama2-7b', 7e9, 'Touvron et al.',
     '2T tokens', '184,320 A100-hours'),
    ('LLaMA-2 13B', decoder, 'llama2-13b', 13e9, 'Touvron et al.',
     '2T tokens', '368,640 A100-hours'),
    ('LLaMA-2 70B', decoder, 'llama2-70b', 70e9, 'Touvron et al.',
     '2T tokens', '1,720,320 A100-hours'),
    # The paper states no count; the reference code's layers (config
    # bert_base_6layer_6conect) hold the same 235,705,856 plus 11,020,800
    # in two projections it never uses.
    ('ViLBERT', vilbert, 'vilbert', None, 'Lu et al. (none published)',
     '3.3M image-caption pairs', '8x TitanX (10 epochs)'),
)


@functools.cache  # the table and its test ask for each row's count
def parameters(module, size: str) -> int:
  """Parameters of a named size; the encoder-decoder at the paper's shared
  37,000-token vocabulary."""
  if module is encoder_decoder:
    config = module.config_for(size, vocab_size=37_000)
    return module.param_count(config)
  return module.param_count(module.config_for(size))


def table() -> str:
  lines = [f'{"model":<17}{"layers":>7}{"width":>7}{"heads":>6}'
           f'{"ours":>18}{"published":>11}  {"data":<25}{"training":<24}'
           f'source', '-' * 128]
  for name, module, size, published, source, data, hardware in ROWS:
    config = module.config_for(size)
    layers = config.num_layers * (2 if module is encoder_decoder else 1)
    count = parameters(module, size)
    lines.append(f'{name:<17}{layers:>7}{config.d_model:>7}'
                 f'{config.num_heads:>6}{count:>18,}'
                 f'{_short(published):>11}  {data:<25}{hardware:<24}{source}')
  return '\n'.join(lines)


def _short(count: float | None) -> str:
  if count is None:
    return '-'
  return f'{count / 1e9:g}B' if count >= 1e9 else f'{count / 1e6:g}M'


def main(argv):
  cli.no_arguments(argv)
  print(table())


def run() -> None:
  """The `transformer-sizes` console script."""
  cli.run(main)


if __name__ == '__main__':
  run()
