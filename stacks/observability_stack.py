"""Observability stack: the CloudWatch observability EKS add-on, alone.

EKS validates an add-on's configuration against that add-on version's own schema (`aws eks
describe-addon-configuration`), not against the chart's values: a key the build does not know
fails the create or update with "The configuration values provided are invalid"
(aws-observability/helm-charts#173, add-on v3.0.0-eksbuild.1). The kit configures this add-on
(Fluent Bit files, Application Signals off, tolerations) but could not read any add-on build's
schema offline, so the version is EKS's default and the add-on sits in a stack of its own: a
rejected configuration fails and rolls back this stack, never the cluster stack with the control
plane, the system nodes and the other add-ons. docs/operations.md "Over time" has the steps to
pin a build once its schema has been read.

It depends on the cluster stack, so the log groups, the Pod Identity agent and the system nodes
exist before the add-on, and teardown deletes it first.
"""

from __future__ import annotations

from aws_cdk import Stack
from constructs import Construct

from infra import names, versions
from infra.config import KitConfig
from infra.constructs.observability import CloudWatchObservability


class ObservabilityStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: KitConfig, cluster_stack: Stack,
                 **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        self.add_stack_dependency(cluster_stack)
        self.observability = CloudWatchObservability(
            self, "Observability", cluster_name=names.eks_cluster_name(config.name),
            addon_name=versions.CLOUDWATCH_OBSERVABILITY_ADDON,
            addon_version=config.observability.addon_version
            or versions.CLOUDWATCH_OBSERVABILITY_ADDON_VERSION,
            application_signals=config.observability.application_signals)
