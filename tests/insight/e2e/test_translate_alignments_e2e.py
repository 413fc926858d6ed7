"""translate --alignments on a trained workdir: each sentence's
source-target attention, the decoder's own cross-attention over the source
while it reads its translation, averaged or picked by layer and head."""

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import raises_naming
from transformer import layers
from transformer import workdir as workdir_lib
from transformer.tools import translate


SENTENCES = ['the red house', 'a dog sees the cat', 'the cat']


@pytest.fixture(scope='module')
def aligned(trained):
  return translate.translate(str(trained), SENTENCES, alignments=True)


def _teacher_forced(workdir, sentence):
  """Every decoder cross-attention layer [N, T, S] for the sentence and its
  translation, from the hook on one plain forward pass."""
  restored = workdir_lib.restore(str(workdir))
  task, config = restored.task, restored.task.config
  with restored.active():
    [(source, target)] = task.translate_ids(
        restored.params, [sentence], beam_size=config.eval.beam_size,
        length_penalty=config.eval.length_penalty,
        max_length_offset=config.eval.max_length_offset)
  _, state = task.model.apply(
      {'params': restored.params}, source[None], target[None],
      deterministic=True, mutable=['intermediates'])
  weights = layers.attention_weights(state['intermediates'])
  return [np.asarray(weights[f'decoder/layer_{i}/cross_attention'][0])
          for i in range(task.model_config.num_layers)]


def test_one_record_per_sentence_with_its_translation(trained, aligned):
  plain = translate.translate(str(trained), SENTENCES)
  assert plain.alignments is None
  assert aligned.translations == plain.translations
  assert len(aligned.alignments) == len(SENTENCES)
  for sentence, translation, record in zip(SENTENCES, aligned.translations,
                                           aligned.alignments):
    assert (record['source'], record['translation']) == (sentence,
                                                         translation)
    weights = np.asarray(record['weights'])
    # One row per piece written (EOS included), one column per piece read.
    assert weights.shape == (len(record['translation_pieces']),
                             len(record['source_pieces']))
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-3)
    pairs = [tuple(map(int, p.split('-')))
             for p in record['alignment'].split()]
    assert pairs == [(int(np.argmax(row)), j)
                     for j, row in enumerate(weights)]


def test_weights_are_the_decoders_cross_attention(trained, aligned):
  record = aligned.alignments[1]
  layers_ = _teacher_forced(trained, SENTENCES[1])
  mean = np.mean(layers_, 0).mean(0)
  np.testing.assert_allclose(record['weights'], mean, atol=1e-4)
  assert (record['layer'], record['head']) == ('mean', 'mean')
  head = translate.translate(str(trained), SENTENCES[1:2], alignments=True,
                             alignment_layer=0, alignment_head=1)
  picked = head.alignments[0]
  assert (picked['layer'], picked['head']) == (0, 1)
  np.testing.assert_allclose(picked['weights'], layers_[0][1], atol=1e-4)
  # A head is not the mean: the choice is honoured, not ignored.
  assert np.abs(np.asarray(picked['weights']) - mean).max() > 1e-3


def test_a_layer_or_head_the_model_lacks_is_refused(trained):
  with raises_naming(ValueError, '--alignment_layer=7', 'decoder layers',
                     'leave --alignment_layer out'):
    translate.translate(str(trained), ['a dog'], alignments=True,
                        alignment_layer=7)
  with raises_naming(ValueError, '--alignment_head=-1', '>= 0'):
    translate.translate(str(trained), ['a dog'], alignments=True,
                        alignment_head=-1)


def test_the_command_writes_json_lines(trained, tmp_path):
  path = tmp_path / 'alignments.jsonl'
  run = subprocess.run(
      [sys.executable, '-m', 'transformer.tools.translate',
       f'--workdir={trained}', f'--alignments={path}',
       f'--output={tmp_path / "hyp.txt"}'],
      input='\n'.join(SENTENCES).encode(), capture_output=True, check=False)
  assert run.returncode == 0, run.stderr.decode()[-2000:]
  records = [json.loads(line) for line in path.read_text().splitlines()]
  assert [r['source'] for r in records] == SENTENCES
  assert ([r['translation'] for r in records]
          == (tmp_path / 'hyp.txt').read_text().splitlines())
  # Layer and head only mean something with --alignments.
  run = subprocess.run(
      [sys.executable, '-m', 'transformer.tools.translate',
       f'--workdir={trained}', '--alignment_layer=0'],
      input=b'a dog\n', capture_output=True, check=False)
  assert run.returncode != 0
  assert 'give --alignments too' in run.stderr.decode()
  assert 'Traceback' not in run.stderr.decode()
