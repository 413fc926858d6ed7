"""Shared test helpers."""

import importlib.util
import os

# Test programs are tiny and compile time dominates: skip most of XLA's
# optimisation passes (also in the subprocesses tests start).
os.environ.setdefault('JAX_DISABLE_MOST_OPTIMIZATIONS', '1')

import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_experiment(name: str, arg: str = ''):
  """`get_config(arg)` of experiments/<name>.py, as config_flags loads it."""
  path = os.path.join(REPO, 'experiments', f'{name}.py')
  spec = importlib.util.spec_from_file_location(f'experiment_{name}', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg) if arg else module.get_config()


@pytest.fixture
def experiment():
  return load_experiment
