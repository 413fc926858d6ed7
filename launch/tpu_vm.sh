#!/usr/bin/env bash
# Train on a Cloud TPU VM or pod slice: create (or reuse) it, copy the code
# to every worker, and start the same command on all of them.
#
#   launch/tpu_vm.sh up --name=my-tpu --zone=us-central2-b \
#       --accelerator_type=v4-32 --config=experiments/lm1b.py \
#       --workdir=gs://BUCKET/lm1b --config.data.tfds_data_dir=gs://BUCKET/tfds
#
# Run `launch/tpu_vm.sh --help` for every subcommand and option.
set -euo pipefail

readonly USAGE="Usage: launch/tpu_vm.sh COMMAND --name=NAME --zone=ZONE [options] [--config.x=y ...]

Commands:
  up       create (or reuse), setup and run: the whole path in one command
  create   create the TPU VM or pod slice, or reuse it if it exists (a
           preempted spot one is deleted and created again)
  setup    copy this working tree (or --git_url) to every worker and
           pip install -e '.[tpu]' into a virtual environment there
  run      start python -m transformer.main on every worker (--worker=all),
           detached; its output goes to ~/transformer_run.log on each worker
  logs     follow the log of worker --worker (default 0)
  kill     stop the training processes on every worker (the VM stays)
  stop     stop the VM (where the TPU type supports it; start it again
           with gcloud compute tpus tpu-vm start)
  delete   delete the VM; the gs:// workdir stays

Required:
  --name=NAME               the TPU VM's name (all commands)
  --zone=ZONE               e.g. us-central2-b (all commands)
  --accelerator_type=TYPE   e.g. v4-8, v4-32, v5litepod-16 (create, up)
  --config=FILE[:ARG]       experiment config (run, up)
  --workdir=gs://BUCKET/DIR shared by all workers (run, up); rerunning the
                            same command resumes from its latest checkpoint

Options:
  --project=PROJECT         default: gcloud's configured project
  --version=RUNTIME         TPU software version; default from the
                            accelerator type (tpu-ubuntu2204-base for v2-v4,
                            v2-alpha-tpuv5-lite, v2-alpha-tpuv5, v2-alpha-tpuv6e)
  --spot | --preemptible    cheaper VMs that can be preempted (create, up)
  --git_url=URL             setup clones URL instead of copying this tree
  --git_ref=REF             branch, tag or commit to check out (with --git_url)
  --python=PYTHON           interpreter for the workers' venv; default python3.11
  --worker=N|all            worker for logs; default 0
  --dry_run                 print the commands (prefixed '+ ') instead of
                            running them; DRY_RUN=1 does the same
  -h, --help                this message

Every other flag (e.g. --config.train.num_steps=100, --config.mesh.fsdp=4)
goes to transformer.main unchanged. Flags take the --name=value form."

# Where things live on every worker, relative to the remote $HOME.
readonly REMOTE_REPO=transformer
readonly REMOTE_VENV=transformer_venv
readonly REMOTE_LOG=transformer_run.log
readonly REMOTE_PID=transformer_run.pid

readonly SCRIPT=launch/tpu_vm.sh
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

command='' name='' zone='' project='' accelerator_type='' version=''
config='' workdir='' git_url='' git_ref='' python=python3.11 worker=0
capacity='' dry_run="${DRY_RUN:-0}"
extra=()
for arg in "$@"; do
  case "$arg" in
    -h|--help) echo "$USAGE"; exit 0 ;;
    --name=*) name="${arg#*=}" ;;
    --zone=*) zone="${arg#*=}" ;;
    --project=*) project="${arg#*=}" ;;
    --accelerator_type=*) accelerator_type="${arg#*=}" ;;
    --version=*) version="${arg#*=}" ;;
    --config=*) config="${arg#*=}" ;;
    --workdir=*) workdir="${arg#*=}" ;;
    --git_url=*) git_url="${arg#*=}" ;;
    --git_ref=*) git_ref="${arg#*=}" ;;
    --python=*) python="${arg#*=}" ;;
    --worker=*) worker="${arg#*=}" ;;
    --spot|--preemptible) capacity="$arg" ;;
    --dry_run) dry_run=1 ;;
    --name|--zone|--project|--accelerator_type|--version|--config|--workdir|\
    --git_url|--git_ref|--python|--worker)
      usage_error "write $arg=VALUE (with '=')." ;;
    -*) extra+=("$arg") ;;
    *)
      [[ -z "$command" ]] || usage_error "one command at a time, got '$command' and '$arg'."
      command="$arg" ;;
  esac
done

# Which flags each command needs.
case "$command" in
  up) needs=(name zone accelerator_type config workdir) ;;
  create) needs=(name zone accelerator_type) ;;
  run) needs=(name zone config workdir) ;;
  setup|logs|kill|stop|delete) needs=(name zone) ;;
  '') usage_error "missing the command (up, create, setup, run, logs, kill, stop or delete)." ;;
  *) usage_error "unknown command '$command'." ;;
esac
missing=()
for flag in "${needs[@]}"; do
  [[ -n "${!flag}" ]] || missing+=("--$flag")
done
((${#missing[@]} == 0)) \
  || usage_error "missing required flags for '$command': ${missing[*]}"
[[ "$worker" == all || "$worker" =~ ^[0-9]+$ ]] \
  || usage_error "--worker must be a number or 'all', got '$worker'."
[[ -z "$git_ref" || -n "$git_url" ]] || usage_error "--git_ref needs --git_url."
[[ "$dry_run" == 0 || "$dry_run" == 1 ]] \
  || usage_error "DRY_RUN must be 0 or 1, got '$dry_run'."
if [[ -n "$workdir" && "$workdir" != gs://* ]]; then
  # Every worker writes its share of each checkpoint into the workdir, so it
  # must be one place that all of them see; a VM's disk also dies with it.
  echo "launch/tpu_vm.sh: warning: --workdir=$workdir is not on GCS; use" \
       "gs://BUCKET/... unless it is a filesystem mounted on every worker." >&2
fi
if [[ -z "$version" && -n "$accelerator_type" ]]; then
  case "$accelerator_type" in
    v5litepod-*|v5e-*) version=v2-alpha-tpuv5-lite ;;
    v5p-*) version=v2-alpha-tpuv5 ;;
    v6e-*) version=v2-alpha-tpuv6e ;;
    *) version=tpu-ubuntu2204-base ;;
  esac
fi

location=("--zone=$zone")
[[ -z "$project" ]] || location+=("--project=$project")
readonly TPU=(gcloud compute tpus tpu-vm)

run() {
  if ((dry_run)); then
    echo "+ $(quote_line "$@")"
  else
    "$@"
  fi
}

# Runs shell statements on workers ($1: a worker number or all), joined into
# one line so that a dry run prints one line per command.
on_workers() {
  local worker="$1" script="$2" statement
  shift 2
  for statement in "$@"; do script+="; $statement"; done
  run "${TPU[@]}" ssh "$name" "${location[@]}" "--worker=$worker" \
    --command="$script"
}

create() {
  if ((dry_run)); then
    echo "# create runs only when describe finds no VM (or a preempted one):"
    run "${TPU[@]}" describe "$name" "${location[@]}" '--format=value(state)'
  else
    local state
    state="$("${TPU[@]}" describe "$name" "${location[@]}" \
             '--format=value(state)' 2>/dev/null || true)"
    if [[ "$state" == PREEMPTED ]]; then
      echo "$name was preempted: deleting it to create it again." >&2
      run "${TPU[@]}" delete "$name" "${location[@]}" --quiet
    elif [[ -n "$state" ]]; then
      echo "Reusing $name (state $state)." >&2
      return
    fi
  fi
  run "${TPU[@]}" create "$name" "${location[@]}" \
    "--accelerator-type=$accelerator_type" "--version=$version" \
    ${capacity:+"$capacity"}
}

setup() {
  local fetch
  if [[ -n "$git_url" ]]; then
    fetch="rm -rf \$HOME/$REMOTE_REPO && git clone $(quote_line "$git_url") \$HOME/$REMOTE_REPO"
    [[ -z "$git_ref" ]] \
      || fetch+=" && git -C \$HOME/$REMOTE_REPO checkout $(quote_line "$git_ref")"
  else
    # The working tree as git sees it: tracked and untracked files, not
    # ignored ones (virtual environments, caches) nor local runs' workdirs.
    local repo archive="${TMPDIR:-/tmp}/$name-transformer.tgz" pack
    repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    pack="git -C $(quote_line "$repo") ls-files -z --cached --others --exclude-standard -- . ':(exclude)workdirs' | tar -czf $(quote_line "$archive") -C $(quote_line "$repo") --null -T -"
    if ((dry_run)); then
      echo "+ $pack"
    else
      bash -c "set -o pipefail; $pack"
    fi
    run "${TPU[@]}" scp "$archive" "$name:$REMOTE_REPO.tgz" "${location[@]}" \
      --worker=all
    fetch="rm -rf \$HOME/$REMOTE_REPO && mkdir \$HOME/$REMOTE_REPO && tar -xzf \$HOME/$REMOTE_REPO.tgz -C \$HOME/$REMOTE_REPO"
  fi
  # TPU images ship an older Python than the package needs (3.11).
  local py
  py="$(quote_line "$python")"
  on_workers all "set -e" "$fetch" \
    "command -v $py >/dev/null || { sudo apt-get update -qq && sudo apt-get install -y -qq $py $py-venv; }" \
    "[ -d \$HOME/$REMOTE_VENV ] || $py -m venv \$HOME/$REMOTE_VENV" \
    "\$HOME/$REMOTE_VENV/bin/pip install -q -U pip" \
    "\$HOME/$REMOTE_VENV/bin/pip install -q -e \"\$HOME/${REMOTE_REPO}[tpu]\""
}

run_training() {
  local main
  # The trainer reads and writes gs:// itself (orbax, config, events,
  # reports); every value that reaches the remote shell is quoted.
  main="\$HOME/$REMOTE_VENV/bin/python -m transformer.main $(quote_line \
        "--config=$config" "--workdir=$workdir" ${extra[@]+"${extra[@]}"})"
  # nohup with every stream redirected so that ssh returns and the run
  # outlives the session; the pid file is what `kill` stops.
  on_workers all "cd \$HOME/$REMOTE_REPO || exit 1" \
    "if [ -f \$HOME/$REMOTE_PID ] && kill -0 \"\$(cat \$HOME/$REMOTE_PID)\" 2>/dev/null; then echo \"A run is already going on \$(hostname); stop it first: launch/tpu_vm.sh kill\" >&2; exit 1; fi" \
    "nohup $main > \$HOME/$REMOTE_LOG 2>&1 < /dev/null & echo \$! > \$HOME/$REMOTE_PID"
  ((dry_run)) || echo "Started on all workers of $name. Follow it with:" \
    "launch/tpu_vm.sh logs --name=$name --zone=$zone${project:+ --project=$project}" >&2
}

case "$command" in
  up) create; setup; run_training ;;
  create) create ;;
  setup) setup ;;
  run) run_training ;;
  logs) on_workers "$worker" "tail -n 200 -F \$HOME/$REMOTE_LOG" ;;
  kill) on_workers all "[ ! -f \$HOME/$REMOTE_PID ] || kill \"\$(cat \$HOME/$REMOTE_PID)\" 2>/dev/null || true" "rm -f \$HOME/$REMOTE_PID" ;;
  stop) run "${TPU[@]}" stop "$name" "${location[@]}" ;;
  delete) run "${TPU[@]}" delete "$name" "${location[@]}" --quiet ;;
esac
