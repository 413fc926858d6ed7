"""Tests of the launch scripts that read them without running them (their
argument checks and the commands a dry run prints: e2e/test_launch_e2e.py)."""

from conftest import SLURM_SCRIPT as SLURM


def test_slurm_asks_for_requeue():
  with open(SLURM) as f:
    header = [line.split()[1] for line in f if line.startswith('#SBATCH')]
  assert '--requeue' in header
