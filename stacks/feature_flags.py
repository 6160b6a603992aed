"""The CDK feature flags the kit builds with: cdk.json is the one list, this module says why.

``cdk.json``'s ``context`` holds every flag that the installed aws-cdk-lib recommends (the list it
ships as ``recommended-feature-flags.json``), at the recommended value except where
``NOT_RECOMMENDED`` below says otherwise and why (JSON has no comments). The CDK CLI hands that
context to ``python3 app.py``; ``make_app`` reads the same file, so ``cdk synth``, ``python app.py``
and the tests build identical templates. tests/stacks/test_feature_flags.py holds cdk.json to aws-cdk-lib's
list and to this module; scripts/feature_flag_effects.py prints what each flag changes.

Effect of turning the recommended flags on, measured on every example with aws-cdk-lib 2.275.0
(templates before and after; none replaces a resource that holds data):
- ``@aws-cdk/aws-iam:minimizePolicies``: actions sorted inside the same IAM statements.
- ``@aws-cdk/core:enablePartitionLiterals``: ``arn:aws:`` literals in KMS key policies (in-place).
- ``@aws-cdk/aws-eks:nodegroupNameAttribute``: the GPU stacks' NodegroupName output is the node
  group's name, no longer ``<cluster>/<nodegroup>`` (what the manifests and rlkit expect).
- ``@aws-cdk/core:explicitStackTags``: ``Tags.of(stack)`` no longer tags the stack itself, so
  ``build_stacks`` sets the stack tags explicitly (rlkit teardown reads them).
- ``@aws-cdk/aws-lambda:useCdkManagedLogGroup``: the kubectl provider's two functions get
  CloudFormation-managed log groups (tagged, 2-year retention, deleted with the stack) instead of
  ones Lambda creates on first run and nobody deletes; infra/constructs/cluster.py orders them
  before the first Helm release and after the last uninstall.
- ``@aws-cdk/aws-ec2:restrictDefaultSecurityGroup``: kept off, see NOT_RECOMMENDED.
The other recommended flags change nothing in today's templates.
"""

from __future__ import annotations

import json
from pathlib import Path

CDK_JSON = Path(__file__).resolve().parent.parent / "cdk.json"

# Flag -> (the value in cdk.json, why not the value aws-cdk-lib recommends).
NOT_RECOMMENDED: dict[str, tuple[object, str]] = {
    "@aws-cdk/core:defaultCrossStackReferences": (
        "strong",
        "Recommended is 'weak' (Fn::GetStackOutput). 'strong' keeps today's Fn::ImportValue "
        "references and CloudFormation's guarantee that a stack other stacks read from cannot "
        "be deleted first (network before cluster, cluster before GPU groups). 'weak' rewrites "
        "the references inside the EKS cluster, node groups and FSx file system (same values, "
        "new intrinsics), and deployed environments could move only through 'both' over two "
        "deploys. Set explicitly, so synth does not warn that it defaulted."),
    "@aws-cdk/aws-ec2:restrictDefaultSecurityGroup": (
        False,
        "Recommended true adds a Lambda-backed custom resource (Custom::VpcRestrictDefaultSG) to "
        "the network stack to strip the rules of the new VPC's default security group. The kit "
        "accepts one Lambda-backed provider, the kubectl provider (tests/stacks/test_synth_offline.py), "
        "and nothing it creates joins the default group (tests/stacks/test_feature_flags.py). Setting "
        "it true replaces nothing, for teams that want AWS Security Hub control EC2.2 clean."),
}


def recommended_flags() -> dict[str, object]:
    """The flags and values the installed aws-cdk-lib recommends (what ``cdk init`` writes)."""
    import tarfile

    import aws_cdk

    [package] = (Path(aws_cdk.__file__).parent / "_jsii").glob("aws-cdk-lib@*.jsii.tgz")
    wanted = "package/recommended-feature-flags.json"
    with tarfile.open(package, "r|gz") as tgz:  # streamed: stop at the file, skip the index
        for member in tgz:
            if member.name == wanted:
                return json.load(tgz.extractfile(member))
    raise FileNotFoundError(f"{package} has no {wanted}")


def cdk_json_context() -> dict[str, object]:
    """The ``context`` of the kit's cdk.json: the feature flags (and any context a user adds)."""
    if not CDK_JSON.is_file():
        raise FileNotFoundError(
            f"{CDK_JSON} is missing: the kit builds with the feature flags in its cdk.json. "
            "Fix: use the kit from its clone (requirements.txt installs it with pip -e).")
    return dict(json.loads(CDK_JSON.read_text())["context"])
