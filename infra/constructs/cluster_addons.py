"""Helm charts that make GPU nodes useful: one per registered add-on (``infra.addons``).

Each record says which chart, which version, its values and what its install waits for; this
construct installs the enabled ones and names none of them. There is no order between the charts:
CloudFormation creates them in parallel, each after the cluster's kubectl access (and what its
record waits for). That is safe while no chart renders a kind another chart's ``crds/`` define;
the chart contract test checks it, and a chart that needs one must depend on that chart here.
Tolerations, node selectors and labels come from ``infra.names`` and the config's node groups, the
same definitions the EFA node group applies, so a chart can never miss the nodes it is meant for.
``tests/ops/test_chart_contract.py`` renders the real charts with these values and checks where
their pods land.
"""

from __future__ import annotations


from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from infra import addons as registry
from infra.addons import Wait
from infra.config import KitConfig
from infra.config.derived import chart_values


class ClusterAddons(Construct):
    """Install the enabled charts on ``cluster`` through its kubectl provider.

    A chart whose record waits for nothing (device plugins: DaemonSets) installs without
    waiting, so GPU node groups at desired 0 never block cluster creation (their pods appear
    when GPU nodes join). One that waits (the KubeRay operator, a Deployment on the system
    nodes) uses Helm's wait and depends on what it waits for.
    """

    def __init__(self, scope: Construct, id: str, *, cluster: eks.Cluster, config: KitConfig,
                 system_nodegroup: IConstruct) -> None:
        super().__init__(scope, id)
        waitables: dict[Wait, IConstruct] = {Wait.SYSTEM_NODES: system_nodegroup}
        self.charts: dict[str, eks.HelmChart] = {}
        addons = config.addons
        for record in registry.ADDONS:
            name = record.key
            if not config.addon_enabled(name):
                continue
            waits = bool(record.waits_for)
            chart = eks.HelmChart(
                self, name,
                cluster=cluster,
                repository=record.repository,
                chart=record.chart,
                release=record.release,
                namespace=record.namespace,
                create_namespace=True,
                version=addons.chart_version(name),
                values=chart_values(name, config),
                wait=waits,
                timeout=Duration.minutes(10) if waits else None,
            )
            for target in record.waits_for:
                chart.node.add_dependency(waitables[target])
            self.charts[name] = chart
