"""The files commands write, as `tools/cli.py` promises them under
everything a user or the machine does meanwhile (issue 38's third trust
pass): Ctrl-C ends any command in one line and leaves none of its files, a
second run writing the same file fails naming it instead of replacing it, a
full disk names the file and leaves nothing that blocks the rerun, names too
long for the file system are refused before any work, what a command
prints or reads line by line keeps one record per line, and a float flag or
an experiment argument that cannot be used is refused naming the fix. (The
cases that run a command in a process, or need a trained workdir or a full
disk: e2e/test_trust_tools_e2e.py.)"""

import errno
import math
import os

import pytest

from conftest import fake_workdir
from conftest import leftovers
from conftest import raises_naming
from transformer import configs
from transformer.tools import cli
from transformer.tools import kernel_regression
from transformer.tools import predict


# -- A second run writing the same file (#125).


def test_a_file_written_meanwhile_is_never_replaced(tmp_path):
  out = tmp_path / 'race.txt'
  outputs = [cli.Output('--output', str(out))]
  cli.check_outputs(outputs)  # passes: the other run has not written yet
  with raises_naming(FileExistsError, str(out), '--overwrite', '--output'):
    with cli.Writing(outputs) as writing:
      writing.write(str(out), 'ours\n')
      out.write_text('theirs\n')  # the other run finished first
  assert out.read_text() == 'theirs\n'
  assert not leftovers(tmp_path)
  with cli.Writing(outputs, overwrite=True) as writing:
    writing.write(str(out), 'ours\n')
  assert out.read_text() == 'ours\n'


def test_outputs_put_in_place_are_taken_back_when_one_cannot_be(tmp_path):
  outputs = [cli.Output('--output', str(tmp_path / 'hyp.txt')),
             cli.Output('--alignments', str(tmp_path / 'a' / 'al.jsonl'))]
  with raises_naming(FileExistsError, f'{tmp_path}/a/al.jsonl',
                     'another --alignments', '--overwrite'):
    with cli.Writing(outputs) as writing:
      writing.write(outputs[0].path, 'hyp\n')
      writing.write(outputs[1].path, '{}\n')
      (tmp_path / 'a' / 'al.jsonl').write_text('theirs')
  assert sorted(os.listdir(tmp_path)) == ['a']
  assert os.listdir(tmp_path / 'a') == ['al.jsonl']


# -- A full disk (#57, #58).


def test_the_works_own_errors_pass_unchanged(tmp_path):
  """Only a failed write is renamed after an output: an error of the work
  (a missing checkpoint) is left as it is."""
  out = tmp_path / 'f.png'
  with pytest.raises(FileNotFoundError, match='no checkpoint'):
    with cli.Writing([cli.Output('--output', str(out))]) as writing:
      writing.path(str(out))
      raise FileNotFoundError(errno.ENOENT, 'no checkpoint', '/w/4')
  assert not os.listdir(tmp_path)


# -- Names too long for the file system (#15).


def test_a_name_too_long_is_refused_before_any_work(tmp_path):
  image = tmp_path / ('x' * 250 + '.png')
  image.write_bytes(b'not read: refused before')
  workdir = fake_workdir(tmp_path / 'w', 'image_classification')
  with raises_naming(ValueError, '--attention_dir',
                     'x' * 250 + '_attention.png', '264 bytes', '241',
                     'Shorten'):
    predict.classify(workdir, [str(image)],
                     attention_dir=str(tmp_path / 'maps'))
  assert not (tmp_path / 'maps').exists()


def test_name_and_path_lengths_count_the_temporary_names(tmp_path):
  most = os.pathconf(tmp_path, 'PC_NAME_MAX') - 14
  fits = cli.Output('--output', str(tmp_path / ('a' * (most - 4) + '.txt')))
  cli.check_outputs([fits])
  with cli.Writing([fits]) as writing:
    writing.write(fits.path, 'fits')
  assert open(fits.path).read() == 'fits'
  series = cli.Output('--attention_dir',
                      str(tmp_path / ('b' * (most - 7) + '_.png')),
                      numbered=True)
  with raises_naming(ValueError, '--attention_dir',
                     'b' * (most - 7) + '_N.png', f'{most} at most'):
    cli.check_outputs([series])
  deep = tmp_path / '/'.join(['d' * 200] * 20) / 'out.txt'
  with raises_naming(ValueError, '--output', str(deep), 'too long',
                     'shorter path'):
    cli.check_outputs([cli.Output('--output', str(deep))])


# -- One record per line (#17, #133).


@pytest.mark.parametrize('task,lines,names', [
    ('entailment', ['no tab here', 'a\tb'],
     ('sentence pairs', 'sentence1<TAB>sentence2', 'line 1 (no tab)')),
    ('entailment', ['a\tb', 'a\tb\tc', 'x', 'p\tq'],
     ('sentence pairs', 'lines 2 (2 tabs), 3 (no tab).')),
    ('sst2', ['fine', 'a\tb'],
     ('single sentences', 'without tabs', 'line 2 (1 tab)')),
])
def test_lines_must_fit_a_pair_or_single_sentence_model(task, lines, names,
                                                        tmp_path):
  workdir = fake_workdir(tmp_path / 'w', 'text_classification',
                         glue_task=task)
  with raises_naming(ValueError, *names):
    predict.classify_texts(workdir, lines)


def test_a_converted_classifier_takes_one_sentence_or_a_pair(tmp_path):
  from transformer import tasks  # pylint: disable=g-import-not-at-top
  config = tasks.default_config('text_classification')
  config.data.tokenizer = 'bert'  # without init_from: a converted one
  assert predict.reads_pairs(config) is None
  predict._check_shape(['one', 'a\tpair'], None)  # pylint: disable=protected-access
  with raises_naming(ValueError, 'line 2 (2 tabs)', 'f.txt',
                     'sentence1<TAB>sentence2'):
    predict._check_shape(['a', 'b\tc\td'], None, 'f.txt')  # pylint: disable=protected-access


# -- Float flags (#121).


@pytest.mark.parametrize('bandwidth', [math.nan, 1e308, math.inf, 0.0, -1.0])
def test_kernel_regression_refuses_bandwidths_it_cannot_compute(bandwidth):
  with raises_naming(ValueError, f'--bandwidth={bandwidth}',
                     '[1e-06, 1000000.0]'):
    kernel_regression.fit(bandwidth=bandwidth, steps=2)


# -- Experiment arguments (#90).


def test_a_comma_in_an_experiment_argument_suggests_the_field_flag():
  with pytest.raises(ValueError) as error:
    configs.parse_args('path=/data/dir,with=comma,src=de,tgt=en,runlocal',
                       name='experiments/mt_local.py',
                       known=('path', 'src', 'tgt', 'runlocal'))
  message = str(error.value)
  assert "unknown arguments ['with']" in message
  assert 'path=/data/dir,with=comma' in message, message
  assert '--config.data.path=/data/dir,with=comma' in message, message
