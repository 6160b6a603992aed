"""Preflight checks of a Kubernetes version change (read-only): what the next deploy of this
config does to the deployed cluster, its node groups and its EKS add-ons.

- **Kubernetes upgrade** (CloudFormation DescribeStacks, DescribeStackResources and GetTemplate of
  the cluster and GPU stacks; EKS DescribeCluster, ListNodegroups, DescribeNodegroup). EKS moves a
  cluster one minor version at a time and never back [EKS user guide, "Update existing cluster
  to new Kubernetes version"], and UpdateClusterVersion requires every managed node group of the
  cluster at the cluster's version [botocore 1.44.8 botocore/data/eks/2017-11-01/service-2.json.gz,
  UpdateClusterVersion]. The kit names the config's ``kubernetes_version`` as every node group's
  ``Version`` (infra/constructs/node_hardening.py), so the deploy that moves the control plane
  then moves each group: EKS UpdateNodegroupVersion replaces every node of the group in a rolling
  update, and CloudFormation refuses a Version change combined with any other change of the group
  ("Version and ReleaseVersion updates cannot be combined with other updates",
  aws/containers-roadmap#1258). A kit before that named no ``Version`` unless the config named an
  AMI release, so a deployed group can run an older version than its cluster (then the next
  upgrade fails), and the first deploy of this kit adds ``Version`` to a group whose template had
  none.
- **Add-on versions** (EKS ListAddons, DescribeAddon, DescribeAddonVersions). EKS does not update
  an add-on when the cluster moves to a new minor version [EKS user guide, "Update an Amazon EKS
  add-on"], and the kit pins no add-on build (infra/versions.py, MANAGED_ADDONS: None is EKS's
  default when the add-on is created), so CloudFormation leaves each add-on at the build it has:
  the synthesized ``AWS::EKS::Addon`` resources are the same for every Kubernetes version
  (tests/stacks/test_kubernetes_upgrade.py). The build an add-on runs must be one EKS offers for
  the config's version; the fix is the ``aws eks update-addon`` that moves it.

Each passes before the cluster stack is deployed, and warns when what it needs cannot be read.
"""

from __future__ import annotations

import re

from infra import names
from infra.config import KitConfig
from infra.problems import FAIL, PASS, WARN
from infra.versions import kubernetes_minor
from ops.aws import AWS_ERRORS, describe_error
from ops.check_result import Check
from ops.deployed import nodegroup_id
from ops.preflight_reads import PreflightReads, not_deployed

KUBERNETES_UPGRADE = "kubernetes upgrade"
ADDON_VERSION = "add-on version"
PROCEDURE = 'docs/operations.md, "Kubernetes upgrades"'
_CLUSTER_PERMISSIONS = ("cloudformation:DescribeStacks, eks:DescribeCluster, eks:ListNodegroups "
                        "and eks:DescribeNodegroup")
_ADDON_PERMISSIONS = "eks:ListAddons, eks:DescribeAddon and eks:DescribeAddonVersions"
_ONE_MINOR = ("EKS moves a cluster one minor version at a time and never back (EKS user guide, "
              "\"Update existing cluster to new Kubernetes version\")")
_MATCH_RULE = ("EKS UpdateClusterVersion requires every managed node group at the cluster's "
               "version (EKS API reference, UpdateClusterVersion)")
_NOT_COMBINED = ("CloudFormation refuses a node group's Version change combined with any other "
                 "change of that group (aws/containers-roadmap#1258)")
_JOB = ("a running RL job's disruption budget stops the drain of its GPU nodes, so that group's "
        "update fails after EKS's drain timeout and its stack rolls back (with force_update the "
        "drain evicts the job instead), and the KubeRay operator and CoreDNS move to new system "
        "nodes")


def _cluster(reads: PreflightReads, cfg: KitConfig, check: str,
             subject: str) -> tuple[str, str] | Check:
    """(name, Kubernetes version) of the deployed cluster, or the verdict that ends the check."""
    stack = names.stack_names(cfg.name)["cluster"]
    try:
        outputs = reads.stack_outputs(stack)
        name = (outputs or {}).get(names.OutputKeys.CLUSTER_NAME)
        if not name:
            return Check(check, subject, PASS,
                         f"{stack} is not deployed: the first deploy creates the cluster at "
                         f"Kubernetes {cfg.kubernetes_version}")
        return name, str(reads.cluster(name)["version"])
    except AWS_ERRORS as err:
        if not_deployed(err):
            return Check(check, subject, PASS,
                         f"{stack} is not deployed: the first deploy creates the cluster at "
                         f"Kubernetes {cfg.kubernetes_version}")
        return Check(check, subject, WARN,
                     f"cannot read the deployed cluster's version: {describe_error(err)}",
                     f"allow {_CLUSTER_PERMISSIONS}, then run preflight again")


def _kit_groups(reads: PreflightReads, cfg: KitConfig) -> dict[str, tuple[str, str]]:
    """node group name -> (what the config calls it, its stack), for the kit's deployed groups
    (a stack not deployed or not readable has none here)."""
    stacks = {"system_nodes": names.stack_names(cfg.name)["cluster"],
              **{f"gpu_node_groups.{g}": names.gpu_stack_name(cfg.name, g)
                 for g in cfg.gpu_node_groups}}
    found = {}
    for label, stack in stacks.items():
        try:
            ids = nodegroup_id(reads.stack_resources(stack))
        except AWS_ERRORS:
            continue
        if ids is not None:
            found[ids[1]] = (label, stack)
    return found


def _template_names_version(reads: PreflightReads, stack: str) -> bool | None:
    """Does the deployed template of ``stack`` name its node group's Version? None: unknown."""
    try:
        template = reads.stack_template(stack)
    except AWS_ERRORS:
        return None
    groups = [r.get("Properties") or {} for r in template.get("Resources", {}).values()
              if r.get("Type") == "AWS::EKS::Nodegroup"]
    return all("Version" in g for g in groups) if groups else None


def _group_line(name: str, group: dict, kit: dict[str, tuple[str, str]]) -> str:
    label = kit[name][0] if name in kit else "not the kit's"
    desired = int((group.get("scalingConfig") or {}).get("desiredSize") or 0)
    return f"{name} ({label}; {desired} node{'s' if desired != 1 else ''})"


def _update_nodegroup(cfg: KitConfig, cluster: str, nodegroup: str, version: str) -> str:
    return (f"aws eks update-nodegroup-version --cluster-name {cluster} --nodegroup-name "
            f"{nodegroup} --kubernetes-version {version} --region {cfg.region}")


def check_kubernetes_upgrade(reads: PreflightReads, cfg: KitConfig) -> Check:
    """Can the next deploy move the deployed cluster to ``kubernetes_version``, and which node
    groups does it roll?"""
    stack = names.stack_names(cfg.name)["cluster"]
    subject = f"kubernetes_version ({stack})"
    found = _cluster(reads, cfg, KUBERNETES_UPGRADE, subject)
    if isinstance(found, Check):
        return found
    cluster, deployed = found
    target = cfg.kubernetes_version
    try:
        groups = {n: reads.nodegroup(cluster, n) for n in reads.nodegroup_names(cluster)}
    except AWS_ERRORS as err:
        return Check(KUBERNETES_UPGRADE, subject, WARN,
                     f"cannot read the node groups of cluster {cluster}: {describe_error(err)}",
                     f"allow {_CLUSTER_PERMISSIONS}, then run preflight again")
    now, then = kubernetes_minor(deployed), kubernetes_minor(target)
    if then < now:
        return Check(KUBERNETES_UPGRADE, subject, FAIL,
                     f"cluster {cluster} runs Kubernetes {deployed}, newer than {target}: "
                     f"{_ONE_MINOR}, so the deploy would fail and roll back",
                     f"set kubernetes_version: \"{deployed}\"")
    following = f"{now[0]}.{now[1] + 1}"
    if then[:1] != now[:1] or then[1] > now[1] + 1:
        return Check(KUBERNETES_UPGRADE, subject, FAIL,
                     f"cluster {cluster} runs Kubernetes {deployed}; {target} is more than one "
                     f"minor version ahead: {_ONE_MINOR}, so the deploy would fail and roll back",
                     f"set kubernetes_version: \"{following}\" and deploy, then each next minor "
                     f"version in a deploy of its own, up to {target} ({PROCEDURE})")
    kit = _kit_groups(reads, cfg)
    behind = {n: g for n, g in groups.items() if g.get("version") and str(g["version"]) != deployed}
    if then > now and behind:
        lines = ", ".join(f"{_group_line(n, g, kit)} at {g.get('version')}"
                          for n, g in behind.items())
        others = [n for n in behind if n not in kit]
        return Check(
            KUBERNETES_UPGRADE, subject, FAIL,
            f"cluster {cluster} runs Kubernetes {deployed}, but node group(s) {lines} do not: "
            f"{_MATCH_RULE}, so the control plane's move to {target} would fail and the deploy "
            "roll back",
            f"first deploy with kubernetes_version: \"{deployed}\" (the kit names each of its "
            f"node groups' Version, so that deploy moves them to {deployed}, replacing their "
            "nodes: deploy it when no job runs)"
            + ("; and move the groups the kit does not manage: "
               + "; ".join(_update_nodegroup(cfg, cluster, n, deployed) for n in others)
               if others else "")
            + f"; then set kubernetes_version: \"{target}\" again ({PROCEDURE})")
    if then > now:
        lines = ", ".join(_group_line(n, g, kit) for n, g in groups.items())
        return Check(
            KUBERNETES_UPGRADE, subject, WARN,
            f"the deploy moves cluster {cluster}'s control plane from Kubernetes {deployed} to "
            f"{target} (no way back), then every node group to {target}: EKS replaces each "
            f"group's nodes in a rolling update ({lines or 'no node groups'}); {_JOB}. EKS "
            "leaves the add-ons at their builds (the add-on version checks)",
            "deploy when no job runs (rlkit status), with no other change to the node groups in "
            f"the same deploy ({_NOT_COMBINED}); run the add-on version checks' commands first "
            f"({PROCEDURE})")
    kit_behind = {n: g for n, g in behind.items() if n in kit}
    others = [n for n in behind if n not in kit]
    if kit_behind:
        lines = ", ".join(f"{_group_line(n, g, kit)} at {g.get('version')}"
                          for n, g in kit_behind.items())
        return Check(
            KUBERNETES_UPGRADE, subject, WARN,
            f"node group(s) {lines} run an older Kubernetes version than cluster {cluster} "
            f"({deployed}), left behind by an earlier upgrade (a kit that named no node group "
            "Version, or a group update that failed and rolled back): the deploy "
            f"moves them to {deployed}, replacing their nodes in a rolling update; {_JOB}",
            "deploy when no job runs (rlkit status), with no other change to those node groups "
            f"in the same deploy ({_NOT_COMBINED})")
    unnamed = sorted({stack for _, stack in kit.values()
                      if _template_names_version(reads, stack) is False})
    if unnamed:
        return Check(
            KUBERNETES_UPGRADE, subject, WARN,
            f"the node groups of {', '.join(unnamed)} were deployed by a kit that named no "
            f"Version: this deploy adds Version \"{target}\", the version they run. CloudFormation "
            "may pass it to EKS UpdateNodegroupVersion, which for the group's own version moves "
            "the group to the newest AMI release of that version (EKS API reference, "
            "UpdateNodegroupVersion), replacing its nodes unless it runs that release already "
            f"(not verified offline); {_NOT_COMBINED}",
            "make this deploy when no job runs (rlkit status) and change nothing else of the "
            "node groups in it; it happens once, on the first deploy of a kit that names Version"
            + ("; node groups the kit does not manage run another version: "
               + "; ".join(_update_nodegroup(cfg, cluster, n, deployed) for n in others)
               if others else ""))
    if others:
        return Check(
            KUBERNETES_UPGRADE, subject, WARN,
            f"node group(s) {', '.join(others)}, not the kit's, run another Kubernetes version "
            f"than cluster {cluster} ({deployed}): {_MATCH_RULE}, so the next upgrade would fail",
            "; ".join(_update_nodegroup(cfg, cluster, n, deployed) for n in others))
    return Check(KUBERNETES_UPGRADE, subject, PASS,
                 f"cluster {cluster} and its {len(groups)} node group(s) run Kubernetes "
                 f"{deployed}, the config's version")


def _build_order(build: str) -> tuple[int, ...]:
    """An add-on build (v1.19.5-eksbuild.1) as numbers, for ordering."""
    return tuple(int(n) for n in re.findall(r"\d+", build))


def _offered(builds: list[dict], version: str) -> set[str]:
    """The builds DescribeAddonVersions lists for Kubernetes ``version``: those whose
    compatibilities name it (the request asked for that version: one listing none counts)."""
    return {b["addonVersion"] for b in builds
            if not b.get("compatibilities")
            or any(c.get("clusterVersion") == version for c in b["compatibilities"])}


def _default(builds: list[dict], version: str) -> str | None:
    for b in builds:
        if any(c.get("clusterVersion") == version and c.get("defaultVersion")
               for c in b.get("compatibilities") or []):
            return b["addonVersion"]
    return None


def _update_addon(cfg: KitConfig, cluster: str, addon: str, build: str) -> str:
    # OVERWRITE, as the kit's own add-on resources (infra/constructs/cluster.py); the add-on's
    # configuration values are not part of the call.
    return (f"aws eks update-addon --cluster-name {cluster} --addon-name {addon} --addon-version "
            f"{build} --resolve-conflicts OVERWRITE --region {cfg.region}")


def check_addon_versions(reads: PreflightReads, cfg: KitConfig) -> list[Check]:
    """Does each deployed EKS add-on run a build EKS offers for ``kubernetes_version``? Nothing
    when the version change itself is refused (the Kubernetes upgrade check fails it)."""
    stack = names.stack_names(cfg.name)["cluster"]
    found = _cluster(reads, cfg, ADDON_VERSION, f"EKS add-ons ({stack})")
    if isinstance(found, Check):
        return [found]
    cluster, deployed = found
    target = cfg.kubernetes_version
    now, then = kubernetes_minor(deployed), kubernetes_minor(target)
    if then < now or then[:1] != now[:1] or then[1] > now[1] + 1:
        return []
    try:
        addons = reads.addon_names(cluster)
    except AWS_ERRORS as err:
        return [Check(ADDON_VERSION, f"EKS add-ons ({stack})", WARN,
                      f"cannot list the add-ons of cluster {cluster}: {describe_error(err)}",
                      f"allow {_ADDON_PERMISSIONS}, then run preflight again")]
    return [_addon_check(reads, cfg, cluster, deployed, addon) for addon in addons]


def _addon_check(reads: PreflightReads, cfg: KitConfig, cluster: str, deployed: str,
                 addon: str) -> Check:
    target = cfg.kubernetes_version
    subject = f"add-on {addon} (cluster {cluster})"
    upgrade = kubernetes_minor(target) > kubernetes_minor(deployed)
    try:
        running = str(reads.addon(cluster, addon).get("addonVersion") or "")
        builds = reads.addon_versions(addon, target)
        offered = _offered(builds, target)
        both = (offered & _offered(reads.addon_versions(addon, deployed), deployed)
                if upgrade and running not in offered else set())
    except AWS_ERRORS as err:
        return Check(ADDON_VERSION, subject, WARN,
                     f"cannot read the add-on's build or the builds EKS offers for Kubernetes "
                     f"{target}: {describe_error(err)}",
                     f"allow {_ADDON_PERMISSIONS}, then run preflight again")
    default = _default(builds, target) or max(offered, key=_build_order, default=None)
    if running in offered:
        after = (f"; EKS leaves it there after the upgrade (its default for {target} is "
                 f"{default}: `{_update_addon(cfg, cluster, addon, default)}` once the deploy is "
                 "done)" if upgrade and default and default != running else "")
        return Check(ADDON_VERSION, subject, PASS,
                     f"runs {running}, a build EKS offers for Kubernetes {target}{after}")
    unsupported = (f"runs {running or '(unknown)'}, which EKS does not offer for Kubernetes "
                   f"{target}, and EKS does not update an add-on when the cluster moves")
    if upgrade and both:
        build = max(both, key=_build_order)
        return Check(ADDON_VERSION, subject, FAIL,
                     f"{unsupported}: after the deploy it would run unsupported on the new "
                     "control plane",
                     f"before deploying, move it to {build}, offered for both {deployed} and "
                     f"{target}: {_update_addon(cfg, cluster, addon, build)}; wait until `aws eks "
                     f"describe-addon --cluster-name {cluster} --addon-name {addon} --query "
                     f"addon.status --region {cfg.region}` says ACTIVE ({PROCEDURE})")
    if not default:
        return Check(ADDON_VERSION, subject, WARN,
                     f"{unsupported}; EKS lists no build of it for {target}",
                     f"check the add-on's page in the EKS user guide before moving to {target}")
    when = ("right after the deploy (no build is offered for both "
            f"{deployed} and {target})" if upgrade else "now")
    return Check(ADDON_VERSION, subject, WARN,
                 f"{unsupported}" + ("" if upgrade else " (left by an earlier upgrade)"),
                 f"{when}: {_update_addon(cfg, cluster, addon, default)} ({PROCEDURE})")


def upgrade_checks(reads: PreflightReads, cfg: KitConfig) -> list[Check]:
    """The Kubernetes upgrade check and one add-on version check per deployed add-on."""
    return [check_kubernetes_upgrade(reads, cfg), *check_addon_versions(reads, cfg)]
