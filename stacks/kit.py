"""Compose the kit's stacks for one validated config."""

from __future__ import annotations

from dataclasses import dataclass, field

from aws_cdk import App, Environment, Tags

from infra import names
from infra.config import KitConfig
from infra.config.derived import resource_tags
from stacks.cluster_stack import ClusterStack
from stacks.data_stack import DataStack
from stacks.feature_flags import cdk_json_context
from stacks.gpu_stack import GpuStack
from stacks.network_stack import NetworkStack
from stacks.observability_stack import ObservabilityStack
from stacks.storage_access_stack import StorageAccessStack
from stacks.storage_stack import StorageStack


def make_app(outdir: str | None = None) -> App:
    """An App with cdk.json's context (the kit's feature flags), as the CDK CLI would pass it.

    So `python app.py`, `cdk synth` and the tests build identical templates; see feature_flags.py.
    """
    return App(outdir=outdir, context=cdk_json_context())


@dataclass
class KitStacks:
    network: NetworkStack | None
    data: DataStack
    cluster: ClusterStack
    storage: StorageStack | None = None
    storage_access: StorageAccessStack | None = None
    observability: ObservabilityStack | None = None
    gpu: dict[str, GpuStack] = field(default_factory=dict)

    def all(self) -> list:
        return [s for s in (self.network, self.data, self.cluster, self.storage,
                            self.storage_access, self.observability) if s] + list(self.gpu.values())


def build_stacks(app: App, config: KitConfig) -> KitStacks:
    """Add every stack of ``config`` to ``app``. The config must already be validated."""
    env = Environment(account=config.account, region=config.region)
    if config.account:
        # Stacks with a concrete account look AZs up through context; answer that lookup from
        # the config so synth stays offline and records no missing context.
        app.node.set_context(
            f"availability-zones:account={config.account}:region={config.region}",
            config.availability_zones,
        )
    stack_names = names.stack_names(config.name)
    network = None
    if config.vpc.existing is None:
        network = NetworkStack(app, stack_names["network"], config=config, env=env,
                               description="MoE RL kit: VPC")
    data = DataStack(app, stack_names["data"], config=config, env=env,
                     description="MoE RL kit: checkpoint/dataset bucket and trainer image repo")
    cluster = ClusterStack(app, stack_names["cluster"], config=config,
                           vpc=network.vpc if network else None,
                           trainer_role=data.trainer_role, env=env,
                           description="MoE RL kit: EKS cluster, add-ons, trainer identity")
    stacks = KitStacks(network=network, data=data, cluster=cluster)
    if config.observability.enabled:
        stacks.observability = ObservabilityStack(
            app, stack_names["observability"], config=config, cluster_stack=cluster, env=env,
            description="MoE RL kit: CloudWatch observability add-on (metrics, container logs)")
    if config.storage.shared_filesystem.type == "fsx-lustre":
        # Needs only the network and the bucket: deploys in parallel with the cluster.
        stacks.storage = StorageStack(
            app, stack_names["storage"], config=config, vpc=network.vpc if network else None,
            bucket=data.bucket, bucket_key=data.bucket_key, env=env,
            description="MoE RL kit: shared FSx for Lustre file system linked to the data bucket")
        stacks.storage_access = StorageAccessStack(
            app, stack_names["storage_access"],
            file_system_security_group=stacks.storage.security_group,
            node_security_group_id=cluster.cluster.cluster_security_group_id, env=env,
            description="MoE RL kit: Lustre ports between the file system and the EKS nodes")
    for group_name in config.gpu_node_groups:
        stacks.gpu[group_name] = GpuStack(
            app, names.gpu_stack_name(config.name, group_name), config=config,
            group_name=group_name, cluster=cluster.cluster, vpc=cluster.vpc, env=env,
            local_zone_subnets=network.local_zone_subnets if network else None,
            description=f"MoE RL kit: EFA GPU node group {group_name}",
        )

    tags = resource_tags(config)
    for stack in stacks.all():
        for key, value in tags.items():
            Tags.of(stack).add(key, value)  # every resource in the stack
            # The stack itself (rlkit teardown reads these): with @aws-cdk/core:explicitStackTags,
            # Tags.of(stack) no longer does that.
            stack.tags.set_tag(key, value)
    return stacks
