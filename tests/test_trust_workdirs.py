"""The third trust pass's workdir cases, by class: a vocabulary that no
longer matches the checkpoints, checkpoints that change while a command
reads them, workdir paths and entries of the wrong kind, and a vocabulary
that records what it was built from. (Its other cases: the checkpoint
folder replaced mid-run in test_checkpoint_faults.py, signals outside the
training steps in test_faults.py, a config refused before anything is
written in test_train.py, config.json's sections and values in
test_workdir_files.py.)"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import copy_of
from conftest import tiny_training_config as tiny_config
from conftest import REPO
from transformer import checkpoints
from transformer import configs
from transformer import train
from transformer import workdir as workdir_lib
from transformer.data import offline_mt
from transformer.data import tokenizers

ENV = {**os.environ, 'JAX_PLATFORMS': 'cpu'}
EXPERIMENT = os.path.join(REPO, 'experiments', 'mt_offline.py:runlocal')


# -- Workdir paths and entries of the wrong kind (#34, #118, #44, #83) -------


@pytest.mark.parametrize('experiment, arg', [
    ('sst2', 'runlocal,init_from='), ('sst2', 'init_from'),
    ('glue', 'task=rte,runlocal,init_from='),
    ('vit_finetune', 'init_from=,runlocal')])
def test_an_empty_init_from_is_refused_naming_it(experiment, arg):
  with pytest.raises(ValueError) as error:
    configs.load_experiment(os.path.join(REPO, 'experiments',
                                         f'{experiment}.py:{arg}'))
  message = str(error.value)
  assert message.startswith(
      f'experiments/{experiment}.py: init_from is empty')
  assert 'init_from=WORKDIR' in message
