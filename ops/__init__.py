"""The operator CLI (`rlkit`): the steps between `cdk deploy` and a finished training run."""

# The kit's version: pyproject.toml reads it from here (one place); `rlkit --version` prints it.
__version__ = "0.1.0"
