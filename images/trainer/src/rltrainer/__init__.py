"""rltrainer: the launcher and fabric tooling baked into the MoE RL trainer image.

Commands (see ``rltrainer --help`` and images/trainer/README.md):

- ``rltrainer launch``     turn the run config into a Miles training command and run it,
                           restoring from and uploading checkpoints to S3;
- ``rltrainer bench``      all-reduce and expert-parallel dispatch/combine benchmarks;
- ``rltrainer nodecheck``  check that a GPU node exposes what the trainer needs;
- ``rltrainer checkpoint`` list, upload or restore S3 checkpoints by hand.

This package never imports the CDK kit (infra/, stacks/, manifests/): it runs inside
the trainer image, where none of that exists.
"""

__version__ = "0.1.0"
