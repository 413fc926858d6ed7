"""`transformer-plan` without libtpu names the command that installs it.
The command as a user runs it (the report, its JSON for launch/gke.py, the
exit status of a plan that does not fit, bad input refused in one line,
the bytes a plan gives each chip against a real state's on 8 simulated
devices): e2e/test_plan_command_e2e.py."""

import pytest

from conftest import raises_naming
from transformer.plan import topology

pytestmark = pytest.mark.skipif(
    not topology.libtpu_installed(),
    reason=f'libtpu (the TPU compiler) is not installed: {topology.INSTALL}')


def test_without_libtpu_the_install_command_is_named(monkeypatch):
  monkeypatch.setattr(topology, 'libtpu_installed', lambda: False)
  with raises_naming(ValueError, 'v5e:2x2', 'libtpu',
                     'pip install -e ".[tpu]"'):
    topology.resolve('v5e:2x2')
