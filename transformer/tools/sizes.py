"""The model-size table of the lectures, with this codebase's counts.

    python -m transformer.tools.sizes

For every model of the table in the lectures (Transformer base and big,
BERT, RoBERTa, GPT-2, Megatron-LM, Turing-NLG, GPT-3, Gopher; and ViLBERT,
the lectures' vision-and-language model, text-stream layers) prints the
layers, width and heads of our configuration (a named size of a model
module) and its parameter count, computed from shapes alone
(`jax.eval_shape`: even 280B parameters take no memory), beside the
published figure. Our configurations use each family's architecture here
(e.g. learned absolute positions and LayerNorm for all decoders), so the
largest models differ where their papers changed those details.
"""

from transformer.tools import cli
from transformer.models import decoder
from transformer.models import encoder
from transformer.models import encoder_decoder
from transformer.models import vilbert

# name, module, size, published parameters, source of the published figure
ROWS = (
    ('Transformer-Base', encoder_decoder, 'base', 65e6, 'Vaswani et al. T3'),
    ('Transformer-Big', encoder_decoder, 'big', 213e6, 'Vaswani et al. T3'),
    ('BERT-Base', encoder, 'bert-base', 110e6, 'Devlin et al.'),
    ('BERT-Large', encoder, 'bert-large', 340e6, 'Devlin et al.'),
    ('RoBERTa-Large', encoder, 'roberta-large', 355e6, 'Liu et al.'),
    ('GPT-2 (XL)', decoder, 'gpt2-xl', 1.5e9, 'Radford et al.'),
    ('Megatron-LM', decoder, 'megatron-8.3b', 8.3e9, 'Shoeybi et al.'),
    ('Turing-NLG', decoder, 'turing-nlg', 17e9, 'Microsoft'),
    ('GPT-3', decoder, 'gpt3', 175e9, 'Brown et al.'),
    ('Gopher', decoder, 'gopher', 280e9, 'Rae et al.'),
    ('LLaMA-2 7B', decoder, 'llama2-7b', 7e9, 'Touvron et al.'),
    ('LLaMA-2 13B', decoder, 'llama2-13b', 13e9, 'Touvron et al.'),
    ('LLaMA-2 70B', decoder, 'llama2-70b', 70e9, 'Touvron et al.'),
    # The paper states no count; the reference code's layers (config
    # bert_base_6layer_6conect) hold the same 235,705,856 plus 11,020,800
    # in two projections it never uses.
    ('ViLBERT', vilbert, 'vilbert', None, 'Lu et al. (none published)'),
)


def parameters(module, size: str) -> int:
  """Parameters of a named size; the encoder-decoder at the paper's shared
  37,000-token vocabulary."""
  if module is encoder_decoder:
    config = module.config_for(size, vocab_size=37_000)
    return module.param_count(config)
  return module.param_count(module.config_for(size))


def table() -> str:
  lines = [f'{"model":<17}{"layers":>7}{"width":>7}{"heads":>6}'
           f'{"ours":>18}{"published":>11}  source',
           '-' * 80]
  for name, module, size, published, source in ROWS:
    config = module.config_for(size)
    layers = config.num_layers * (2 if module is encoder_decoder else 1)
    count = parameters(module, size)
    lines.append(f'{name:<17}{layers:>7}{config.d_model:>7}'
                 f'{config.num_heads:>6}{count:>18,}'
                 f'{_short(published):>11}  {source}')
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
