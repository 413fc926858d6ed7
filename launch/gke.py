#!/usr/bin/env python3
"""Train on a GKE TPU slice: turn a transformer-plan JSON into a JobSet that
runs `python -m transformer.main` on every host of the slice, and apply it.

  transformer-plan --config=experiments/lm1b.py --topology=v5e:16x16 --search \\
      --json_out=plan.json
  python launch/gke.py --plan=plan.json --name=lm1b-v5e \\
      --image=us-docker.pkg.dev/PROJECT/REPO/transformer:latest \\
      --workdir=gs://BUCKET/lm1b --config.data.tfds_data_dir=gs://BUCKET/tfds

Run `python launch/gke.py --help` for every option.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import yaml

SCRIPT = 'launch/gke.py'
USAGE = f"""Usage: python {SCRIPT} --plan=PLAN.json --name=NAME --image=IMAGE --workdir=gs://BUCKET/DIR [--config.x=y ...] [--dry_run] [--output=FILE]

Writes a JobSet that runs python -m transformer.main on every host of the TPU
slice the plan was made for, and applies it with kubectl apply -f -.

Required:
  --plan=PLAN.json          what transformer-plan --json_out=PLAN.json wrote:
                            the experiment, the slice and the winning flags
  --name=NAME               the JobSet's name: lowercase letters, digits and
                            '-', starting with a letter, at most 40 characters
  --image=IMAGE             a container image holding this repository as its
                            working directory, with pip install -e '.[tpu]'
  --workdir=gs://BUCKET/DIR shared by all hosts; applying the same JobSet again
                            resumes from its latest checkpoint

Options:
  --output=FILE             write the manifest to FILE instead of applying it
  --dry_run                 print the manifest instead of applying it; runs
                            and writes nothing (DRY_RUN=1 does the same)
  -h, --help                this message

Every --config.x=y flag goes to transformer.main after the plan's flags; it
replaces the plan's flag for the same field. Flags take the --key=value form."""

# The cloud.google.com/gke-tpu-accelerator label of each generation's nodes.
ACCELERATORS = {'v4': 'tpu-v4-podslice', 'v5e': 'tpu-v5-lite-podslice',
                'v5p': 'tpu-v5p-slice', 'v6e': 'tpu-v6e-slice'}
PLAN_FIELDS = ('config', 'flags', 'topology', 'generation', 'chips', 'hosts',
               'chips_per_host', 'fits')
# The JobSet names its headless service after itself (a DNS-1035 label: it
# starts with a letter), and each pod's hostname NAME-slice-0-INDEX must fit
# in the 63 characters of a DNS label.
NAME = re.compile(r'[a-z]([-a-z0-9]{0,38}[a-z0-9])?')


class Refusal(Exception):
  """A problem with the command line or the plan (exit status 2)."""


def usage_error(message: str):
  print(f'{SCRIPT}: {message}\n{USAGE.splitlines()[0]}\n'
        f'Run python {SCRIPT} --help for all options.', file=sys.stderr)
  sys.exit(2)


def parse(argv: list[str]) -> tuple[dict[str, str], list[str], bool]:
  """The --key=value options, the --config.* flags and whether to dry-run."""
  options, extra = {}, []
  dry_run = os.environ.get('DRY_RUN', '0')
  if dry_run not in ('0', '1'):
    usage_error(f"DRY_RUN must be 0 or 1, got '{dry_run}'.")
  dry_run = dry_run == '1'
  for arg in argv:
    key, eq, value = arg.partition('=')
    if arg in ('-h', '--help'):
      print(USAGE)
      sys.exit(0)
    elif arg == '--dry_run':
      dry_run = True
    elif key in ('--plan', '--name', '--image', '--workdir', '--output'):
      if not eq:
        usage_error(f'write {key}=VALUE (with \'=\').')
      options[key[2:]] = value
    elif arg.startswith('--config.'):
      extra.append(arg)
    else:
      # A typo would otherwise reach every host and fail there.
      usage_error(f"unknown flag '{arg}' (the experiment comes from the plan; "
                  'other flags must be --config.x=y).')
  missing = [f'--{k}' for k in ('plan', 'name', 'image', 'workdir')
             if not options.get(k)]
  if missing:
    usage_error(f'missing required flags: {" ".join(missing)}')
  return options, extra, dry_run


def load_plan(path: str) -> dict:
  rerun = f'write it with transformer-plan ... --json_out={path}'
  try:
    with open(path) as f:
      plan = json.load(f)
  except FileNotFoundError:
    raise Refusal(f'no plan file {path}: {rerun}.') from None
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise Refusal(f'{path} is not JSON ({e}): {rerun}.') from None
  if not isinstance(plan, dict):
    raise Refusal(f'{path} is not a JSON object: {rerun}.')
  missing = [k for k in PLAN_FIELDS if k not in plan]
  if missing:
    raise Refusal(f'{path} lacks {", ".join(missing)}: {rerun}.')
  if plan['generation'] not in ACCELERATORS:
    raise Refusal(f"{path}: unknown TPU generation '{plan['generation']}'; "
                  f'GKE slices here are {", ".join(ACCELERATORS)}.')
  if plan['fits'] is not True:
    raise Refusal(f'{path}: the plan found that the configuration does not '
                  f'fit on {plan["topology"]}; rerun transformer-plan with '
                  '--search to find settings that fit.')
  shape = str(plan['topology']).partition(':')[2]
  if not re.fullmatch(r'\d+(x\d+)+', shape):
    raise Refusal(f"{path}: topology '{plan['topology']}' is not "
                  f'GENERATION:AxB[xC] (e.g. v5e:16x16): {rerun}.')
  if not all(isinstance(plan[k], int) and plan[k] > 0
             for k in ('chips', 'hosts', 'chips_per_host')):
    raise Refusal(f'{path}: chips, hosts and chips_per_host must be positive '
                  f'integers: {rerun}.')
  if plan['chips'] != plan['hosts'] * plan['chips_per_host']:
    raise Refusal(f'{path}: chips ({plan["chips"]}) != hosts '
                  f'({plan["hosts"]}) x chips_per_host '
                  f'({plan["chips_per_host"]}): {rerun}.')
  if not (isinstance(plan['flags'], list)
          and all(isinstance(f, str) for f in plan['flags'])):
    raise Refusal(f'{path}: flags must be a list of strings: {rerun}.')
  return plan


def jobset(plan: dict, name: str, image: str, workdir: str,
           extra: list[str]) -> dict:
  """The JobSet: one Job of `hosts` pods, one per TPU VM of the slice."""
  field = lambda flag: flag.partition('=')[0]
  overridden = {field(f) for f in extra}
  flags = [f for f in plan['flags'] if field(f) not in overridden] + extra
  hosts = plan['hosts']
  tpus = {'google.com/tpu': plan['chips_per_host']}
  pod = {
      'restartPolicy': 'Never',
      'nodeSelector': {
          'cloud.google.com/gke-tpu-accelerator':
              ACCELERATORS[plan['generation']],
          'cloud.google.com/gke-tpu-topology':
              plan['topology'].partition(':')[2],
      },
      # The TPU runtime of a multi-host slice talks over the hosts' network.
      'hostNetwork': True,
      'dnsPolicy': 'ClusterFirstWithHostNet',
      'containers': [{
          'name': 'transformer',
          'image': image,
          'command': ['python', '-m', 'transformer.main',
                      f'--config={plan["config"]}', f'--workdir={workdir}',
                      *flags],
          # So that kubectl logs shows print() output as it happens.
          'env': [{'name': 'PYTHONUNBUFFERED', 'value': '1'}],
          'resources': {'limits': dict(tpus), 'requests': dict(tpus)},
      }],
  }
  return {
      'apiVersion': 'jobset.x-k8s.io/v1alpha2',
      'kind': 'JobSet',
      'metadata': {
          'name': name,
          # All pods of the Job on one node pool, i.e. one physical slice.
          'annotations': {'alpha.jobset.sigs.k8s.io/exclusive-topology':
                              'cloud.google.com/gke-nodepool'},
      },
      'spec': {'replicatedJobs': [{
          'name': 'slice',
          'replicas': 1,
          'template': {'spec': {
              'parallelism': hosts,
              'completions': hosts,
              # One lost host stops the collective program on all of them.
              'backoffLimit': 0,
              'completionMode': 'Indexed',
              'template': {'spec': pod},
          }},
      }]},
  }


def main(argv: list[str]) -> int:
  options, extra, dry_run = parse(argv)
  try:
    if not NAME.fullmatch(options['name']):
      raise Refusal(f"--name={options['name']} is not a valid JobSet name: "
                    "use lowercase letters, digits and '-', starting with a "
                    'letter, ending with a letter or digit, at most 40 '
                    'characters (the pod names add to it).')
    if not options['workdir'].startswith('gs://'):
      # Every host writes its shards of each checkpoint into the workdir, and
      # a pod's disk is neither shared nor kept.
      raise Refusal(f"--workdir={options['workdir']} is not on GCS: the hosts "
                    'of a slice need one shared workdir; use gs://BUCKET/DIR.')
    plan = load_plan(options['plan'])
  except Refusal as e:
    print(f'{SCRIPT}: {e}', file=sys.stderr)
    return 2
  manifest = yaml.safe_dump(
      jobset(plan, options['name'], options['image'], options['workdir'],
             extra), sort_keys=False)
  if dry_run:
    print(manifest, end='')
    return 0
  if options.get('output'):
    with open(options['output'], 'w') as f:
      f.write(manifest)
    print(f'Wrote {options["output"]}; apply it with kubectl apply -f '
          f'{options["output"]}', file=sys.stderr)
    return 0
  if shutil.which('kubectl') is None:
    print(f'{SCRIPT}: kubectl is not on PATH: install it with gcloud '
          'components install kubectl, then gcloud container clusters '
          'get-credentials CLUSTER --location=LOCATION.', file=sys.stderr)
    return 1
  result = subprocess.run(['kubectl', 'apply', '-f', '-'], input=manifest,
                          text=True, check=False)
  if result.returncode == 0:
    print(f'Follow host 0: kubectl logs -f -l jobset.sigs.k8s.io/jobset-name='
          f'{options["name"]},batch.kubernetes.io/job-completion-index=0',
          file=sys.stderr)
  return result.returncode


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
