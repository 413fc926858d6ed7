#!/usr/bin/env bash
# Train on this machine: all its devices in one process, simulated CPU
# devices, or several processes joined by jax.distributed on localhost.
#
#   launch/local.sh --config=experiments/mt_offline.py --workdir=/tmp/mt \
#       [--cpu_devices=N] [--processes=N] [--config.train.num_steps=100 ...]
#
# Run `launch/local.sh --help` for every option.
set -euo pipefail

readonly USAGE="Usage: launch/local.sh --config=FILE[:ARG] --workdir=DIR [options] [--config.x=y ...]

Runs python -m transformer.main on this machine.

Required:
  --config=FILE[:ARG]     experiment config, e.g. experiments/mt_offline.py:runlocal
  --workdir=DIR           checkpoints, TensorBoard events and reports; rerun
                          the same command to resume from its latest checkpoint

Options:
  --cpu_devices=N         simulate N devices per process on the CPU
                          (XLA_FLAGS=--xla_force_host_platform_device_count=N,
                          JAX_PLATFORMS=cpu)
  --processes=N           start N processes on this machine joined by
                          jax.distributed (JAX_COORDINATOR_ADDRESS=localhost:PORT,
                          JAX_NUM_PROCESSES=N, JAX_PROCESS_ID=i); default 1
  --port=PORT             coordinator port for --processes; default 8476
  --devices_per_process=K with --processes on GPUs: process i sees GPUs
                          i*K .. i*K+K-1 (JAX_LOCAL_DEVICE_IDS)
  --dry_run               print the commands (prefixed '+ ') instead of
                          running them; DRY_RUN=1 does the same
  -h, --help              this message

Every other flag (e.g. --config.train.num_steps=100, --config.mesh.fsdp=2)
goes to transformer.main unchanged. Flags take the --name=value form.
Environment: PYTHON (default python), DRY_RUN."

readonly SCRIPT=launch/local.sh
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

positive_int() {  # name value
  [[ "$2" =~ ^[1-9][0-9]*$ ]] || usage_error "$1 must be a positive integer, got '$2'."
}

config='' workdir='' cpu_devices='' processes=1 port=8476
devices_per_process='' dry_run="${DRY_RUN:-0}"
extra=()
for arg in "$@"; do
  case "$arg" in
    -h|--help) echo "$USAGE"; exit 0 ;;
    --config=*) config="${arg#*=}" ;;
    --workdir=*) workdir="${arg#*=}" ;;
    --cpu_devices=*) cpu_devices="${arg#*=}" ;;
    --processes=*) processes="${arg#*=}" ;;
    --port=*) port="${arg#*=}" ;;
    --devices_per_process=*) devices_per_process="${arg#*=}" ;;
    --dry_run) dry_run=1 ;;
    --config|--workdir|--cpu_devices|--processes|--port|--devices_per_process)
      usage_error "write $arg=VALUE (with '=')." ;;
    *) extra+=("$arg") ;;
  esac
done

missing=()
[[ -n "$config" ]] || missing+=(--config)
[[ -n "$workdir" ]] || missing+=(--workdir)
((${#missing[@]} == 0)) || usage_error "missing required flags: ${missing[*]}"
[[ -z "$cpu_devices" ]] || positive_int --cpu_devices "$cpu_devices"
positive_int --processes "$processes"
positive_int --port "$port"
[[ -z "$devices_per_process" ]] \
  || positive_int --devices_per_process "$devices_per_process"
[[ "$dry_run" == 0 || "$dry_run" == 1 ]] \
  || usage_error "DRY_RUN must be 0 or 1, got '$dry_run'."

# The repository root on PYTHONPATH, so `python -m transformer.main` works
# from any directory without `pip install -e .`; relative --config and
# --workdir paths stay relative to where the script is called from.
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base_env=("PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH}")
if [[ -n "$cpu_devices" ]]; then
  base_env+=(JAX_PLATFORMS=cpu
             "XLA_FLAGS=${XLA_FLAGS:+$XLA_FLAGS }--xla_force_host_platform_device_count=$cpu_devices")
fi
program=("${PYTHON:-python}" -m transformer.main "--config=$config"
         "--workdir=$workdir" ${extra[@]+"${extra[@]}"})

# The full command of process $1 (env VAR=... python -m transformer.main ...).
process_command() {
  local i="$1" env=("${base_env[@]}")
  if ((processes > 1)); then
    env+=("JAX_COORDINATOR_ADDRESS=localhost:$port"
          "JAX_NUM_PROCESSES=$processes" "JAX_PROCESS_ID=$i")
    if [[ -n "$devices_per_process" ]]; then
      local ids
      ids="$(seq -s, $((i * devices_per_process)) \
                 $(((i + 1) * devices_per_process - 1)))"
      env+=("JAX_LOCAL_DEVICE_IDS=$ids")
    fi
  fi
  command=(env "${env[@]}" "${program[@]}")
}

if ((dry_run)); then
  for ((i = 0; i < processes; i++)); do
    process_command "$i"
    echo "+ $(quote_line "${command[@]}")"
  done
  exit 0
fi

if ((processes == 1)); then
  process_command 0
  exec "${command[@]}"
fi

# Several processes: each line of output is prefixed with its process id. If
# one process fails the others would wait for it in a collective until the
# heartbeat timeout, so the first failure stops them all. Each process gets
# its own process group (set -m) so that stopping it also stops whatever it
# started (input-pipeline workers) that still holds its output open.
pids=()
stop_all() {
  local pid
  for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
}
trap 'stop_all; exit 130' INT TERM
set -m
for ((i = 0; i < processes; i++)); do
  process_command "$i"
  "${command[@]}" > >(sed -u "s/^/[process $i] /") 2>&1 &
  pids+=("$!")
done
set +m
# Polled rather than `wait -n`, which needs bash 5.1 to name the processes.
status=0 running=("${pids[@]}")
while ((${#running[@]})); do
  still=()
  for pid in "${running[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      still+=("$pid")
    elif ! wait "$pid"; then
      status=1
    fi
  done
  running=(${still[@]+"${still[@]}"})
  if ((status)); then
    echo "launch/local.sh: a process failed; stopping the others." >&2
    stop_all
    break
  fi
  sleep 1
done
wait
exit "$status"
