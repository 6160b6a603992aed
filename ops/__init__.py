"""The operator CLI (`rlkit`): the steps between `cdk deploy` and a finished training run."""
