# shellcheck shell=bash
# Shared by launch/local.sh and launch/tpu_vm.sh (sourced; not run).
# slurm_gpu.sbatch keeps its own copies: sbatch runs a spooled copy of the
# script, away from this folder.

# The command line, shell-quoted only where a word needs it, so a printed
# line can be pasted back into a shell.
quote_line() {
  local word out=()
  for word in "$@"; do
    if [[ "$word" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
      out+=("$word")
    else
      out+=("'${word//\'/\'\\\'\'}'")
    fi
  done
  echo "${out[*]}"
}

# Prints the problem and the usage line of the sourcing script ($SCRIPT,
# $USAGE), and exits with status 2.
usage_error() {
  echo "$SCRIPT: $1" >&2
  echo "${USAGE%%$'\n'*}" >&2
  echo "Run $SCRIPT --help for all options." >&2
  exit 2
}
