"""The convolutional encoder-decoder (ConvS2S) trained on a translation
task and evaluated with beam search; its one-head attention has no heads
to prune."""

from conftest import load_experiment
from conftest import raises_naming
from transformer import train
from transformer import workdir as workdir_lib
from transformer.insight import heads


def test_translation_runs_with_the_convolution_family(tmp_path):
  config = load_experiment('rnn_vs_transformer', 'model=convs2s,runlocal')
  assert config.model.family == 'convs2s'
  result = train.train_and_evaluate(config, str(tmp_path))
  assert {'bleu', 'loss', 'perplexity'} <= set(result)
  # Its single-head attention has no heads to prune: said as ConvS2S's.
  with raises_naming(ValueError, 'no multi-head attention', 'ConvS2S',
                     'one dot-product head'):
    heads.head_importance(workdir_lib.restore(str(tmp_path)))
