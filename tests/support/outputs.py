"""Stack outputs as `cdk deploy --all --outputs-file` writes them, with made-up values."""

from __future__ import annotations

from infra import names
from infra.config import KitConfig
from infra.names import OutputKeys


def real_outputs(cfg: KitConfig) -> dict[str, dict[str, str]]:
    """What `cdk deploy --all --outputs-file` writes for ``cfg`` (values made up)."""
    stacks = names.stack_names(cfg.name)
    account = cfg.account or "123456789012"
    return {
        stacks["network"]: {OutputKeys.VPC_ID: "vpc-0123456789abcdef0"},
        stacks["data"]: {
            OutputKeys.BUCKET_NAME: f"{cfg.name}-data-{account}",
            OutputKeys.ECR_REPOSITORY_URI:
                f"{account}.dkr.ecr.{cfg.region}.amazonaws.com/{cfg.name}-trainer",
            OutputKeys.TRAINER_ROLE_ARN: f"arn:aws:iam::{account}:role/{cfg.name}-trainer",
        },
        stacks["cluster"]: {
            OutputKeys.CLUSTER_NAME: cfg.name,
            OutputKeys.REGION: cfg.region,
            OutputKeys.CLUSTER_ENDPOINT: "https://ABC.gr7.example.eks.amazonaws.com",
            OutputKeys.KUBECONFIG_COMMAND: f"aws eks update-kubeconfig --name {cfg.name}",
            OutputKeys.TRAINER_NAMESPACE: names.TRAINER_NAMESPACE,
            OutputKeys.TRAINER_SERVICE_ACCOUNT: names.TRAINER_SERVICE_ACCOUNT,
        },
        names.gpu_stack_name(cfg.name, cfg.training.node_group): {
            OutputKeys.NODEGROUP_NAME: f"{cfg.name}-{cfg.training.node_group}",
            OutputKeys.NODE_ROLE_ARN: f"arn:aws:iam::{account}:role/{cfg.name}-nodes",
        },
        stacks["storage"]: {
            OutputKeys.SHARED_FS_ID: "fs-0123456789abcdef0",
            OutputKeys.SHARED_FS_DNS_NAME: f"fs-0123456789abcdef0.fsx.{cfg.region}.amazonaws.com",
            OutputKeys.SHARED_FS_MOUNT_NAME: "abcdefgh",
        },
    }
