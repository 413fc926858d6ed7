"""Head importance and pruning on parameters alone: scanned layers and
streams of other widths (on a trained workdir, and the command:
e2e/test_heads_e2e.py)."""

import jax.numpy as jnp
import numpy as np

from transformer.insight import heads


def test_scanned_layers_and_streams_of_other_widths():
  """Stacked (scanned) kernels are one row per layer; a stream with fewer
  heads pads its row, and pruning touches only the marked heads."""
  projection = lambda *shape: {'kernel': jnp.ones(shape)}
  attention = lambda heads, stack=(): {
      'query': projection(*stack, 8, heads, 2),
      'key': projection(*stack, 8, heads, 2),
      'value': projection(*stack, 8, heads, 2),
      'out': projection(*stack, heads, 2, 8)}
  params = {'text': {'layers': {'block': {'self_attention': attention(
      4, (3,))}}}, 'visual': {'attention': attention(2)},
            'dense': {'kernel': jnp.ones((8, 8))}}
  paths = heads.attention_layers(params)
  assert paths == [('text', 'layers', 'block', 'self_attention'),
                   ('visual', 'attention')]
  assert heads._layer_names(params, paths) == [  # pylint: disable=protected-access
      'text/layers/block/self_attention[0]',
      'text/layers/block/self_attention[1]',
      'text/layers/block/self_attention[2]', 'visual/attention']
  pruned = np.zeros((4, 4), bool)
  pruned[1, 2] = pruned[3, 0] = True
  cut = heads.without_heads(params, pruned)
  text = np.asarray(cut['text']['layers']['block']['self_attention']['out']
                    ['kernel'])
  assert (text[1, 2] == 0).all() and text.sum() == (12 - 1) * 16
  visual = np.asarray(cut['visual']['attention']['out']['kernel'])
  assert (visual[0] == 0).all() and (visual[1] == 1).all()
  assert (np.asarray(params['visual']['attention']['out']['kernel']) == 1).all()
