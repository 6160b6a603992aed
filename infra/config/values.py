"""Config rules on plain values: AWS tag rules, Kubernetes label and taint syntax, absolute
size caps and where the trainer may read its inputs."""

from __future__ import annotations

import re

from infra import names
from infra.catalog.ec2_instance_types import ec2_instance_types, family_sizes
from infra.catalog.instances import INSTANCE_TYPES
from infra.catalog.regions import botocore_version
from infra.config.errors import close_match, problem
from infra.config.model import KitConfig
from infra.trainer_contract import EP_BACKENDS
from infra.versions import DEFAULT_SYSTEM_INSTANCE_TYPE

LABEL_KEY_RE = re.compile(r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")

# Absolute caps, whatever cost_guard says: a typo such as max_size: 2000 must never reach
# CloudFormation. They are the kit's own guard rails, not AWS quotas; raise them here if a real
# environment needs more.
MAX_GPU_NODES_PER_GROUP = 256
MAX_SYSTEM_NODES = 32
# AWS tag rules [AWS General Reference, "Tagging AWS resources", tag naming limits]: keys 1-128
# and values 0-256 Unicode characters of letters, digits, spaces and _ . : / = + - @; the aws:
# prefix is reserved for AWS; at most 50 tags per resource (the kit adds its own).
_TAG_CHARS_RE = re.compile(r"[\w .:/=+\-@]*")
MAX_USER_TAGS = 40
KIT_TAG_PREFIX = "rlkit:"
_INSTANCE_TYPE_RE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9]+")
# The OCI distribution spec's tag grammar, for the tag the build pushes and the manifests pull,
# <training.image_tag>-<backend> (ops.image_build checks the same), and for training.image's tag.
IMAGE_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
MAX_IMAGE_TAG_CHARS = 128
# training.image_tag's room: the longest backend's tag must fit too.
MAX_IMAGE_VERSION_CHARS = MAX_IMAGE_TAG_CHARS - len(names.image_tag("", max(EP_BACKENDS, key=len)))
# Why training.image must not move: the trainer pods pull with imagePullPolicy IfNotPresent.
_MOVING_IMAGE = ("the trainer pods pull with imagePullPolicy IfNotPresent, so nodes that cached an "
                 "older image under it keep running that one while new nodes pull the new one, "
                 "and one job runs two images")


def validate_values(cfg: KitConfig, add) -> None:
    """Problems of plain values (tags, taints, caps, input locations), passed to ``add``."""
    _pod_address_problems(cfg, add)
    if len(cfg.tags) > MAX_USER_TAGS:
        add(problem("tags", f"{len(cfg.tags)} tags", f"at most {MAX_USER_TAGS} tags (AWS allows "
                    "50 per resource and the kit adds its own)", "drop some tags"))
    for key, value in cfg.tags.items():
        path = f"tags.{key}"
        if key.lower().startswith("aws:"):
            add(problem(path, key, "the aws: prefix is reserved for AWS",
                        "use another key, e.g. team or cost-center"))
        elif key.startswith(KIT_TAG_PREFIX):
            add(problem(path, key, f"the {KIT_TAG_PREFIX} prefix is reserved for the kit's own "
                        f"tags ({names.ENVIRONMENT_TAG}, {names.TTL_TAG})",
                        "use another key; the kit sets these itself"))
        elif not 1 <= len(key) <= 128 or not _TAG_CHARS_RE.fullmatch(key):
            add(problem(path, key, "a tag key is 1-128 letters, digits, spaces and _ . : / = + - @",
                        "rename the key"))
        if len(value) > 256 or not _TAG_CHARS_RE.fullmatch(value):
            add(problem(path, value, "a tag value is up to 256 letters, digits, spaces and "
                        "_ . : / = + - @", "shorten or simplify the value"))

    sn = cfg.system_nodes
    if not _INSTANCE_TYPE_RE.fullmatch(sn.instance_type):
        add(problem("system_nodes.instance_type", sn.instance_type,
                    "not an EC2 instance type name (family.size)",
                    "use e.g. m7i.xlarge"))
    elif sn.instance_type != DEFAULT_SYSTEM_INSTANCE_TYPE and \
            sn.instance_type not in ec2_instance_types():  # the default is checked by a test
        add(_unknown_instance_type("system_nodes.instance_type", sn.instance_type))
    else:
        family = sn.instance_type.split(".")[0]
        parts = re.fullmatch(r"([a-z]+)(\d+)([a-z-]*)", family)
        if family.startswith(("p", "g", "trn", "inf", "dl")) and sn.instance_type not in \
                INSTANCE_TYPES:
            add(problem("system_nodes.instance_type", sn.instance_type,
                        "an accelerated instance type costs GPU prices for CPU work",
                        f"use a general-purpose type such as {DEFAULT_SYSTEM_INSTANCE_TYPE}"))
        elif family == "a1" or (parts is not None and "g" in parts.group(3)):
            add(problem("system_nodes.instance_type", sn.instance_type,
                        "an Arm (Graviton) type, but system nodes run the x86_64 AL2023 AMI",
                        f"use an x86_64 type such as {DEFAULT_SYSTEM_INSTANCE_TYPE}"))
    if sn.max_size > MAX_SYSTEM_NODES:
        add(problem("system_nodes.max_size", sn.max_size,
                    f"at most {MAX_SYSTEM_NODES} system nodes (the kit's absolute cap)",
                    "use a small number such as 4"))

    for group, g in cfg.gpu_node_groups.items():
        path = f"gpu_node_groups.{group}"
        if g.max_size > MAX_GPU_NODES_PER_GROUP:
            add(problem(f"{path}.max_size", g.max_size,
                        f"at most {MAX_GPU_NODES_PER_GROUP} nodes per GPU group (the kit's "
                        "absolute cap, whatever cost_guard says)",
                        "check for a typo; split a larger fleet into several groups"))
        seen: set[tuple[str, str]] = set()
        for i, t in enumerate(g.taints):
            if not LABEL_KEY_RE.fullmatch(t.key):
                add(problem(f"{path}.taints[{i}].key", t.key, "not a valid Kubernetes taint key",
                            "use [prefix/]name, the name up to 63 letters, digits, '-', '_', '.'"))
            if not LABEL_VALUE_RE.fullmatch(t.value):
                add(problem(f"{path}.taints[{i}].value", t.value,
                            "not a valid Kubernetes taint value",
                            "use up to 63 letters, digits, '-', '_' or '.'"))
            if (t.key, t.effect) in seen:
                add(problem(f"{path}.taints[{i}]", f"{t.key}:{t.effect}",
                            "the same key and effect twice", "keep one"))
            seen.add((t.key, t.effect))

    t = cfg.training
    backend = max(EP_BACKENDS, key=len)
    if not IMAGE_TAG_RE.fullmatch(names.image_tag(t.image_tag, backend)):
        add(problem("training.image_tag", t.image_tag,
                    "not an image tag version: letters, digits, _ . -, not starting with . or -, "
                    f"at most {MAX_IMAGE_VERSION_CHARS} characters (the image is tagged "
                    f"<image_tag>-<backend>, {backend} the longest backend, and a tag is at most "
                    f"{MAX_IMAGE_TAG_CHARS})", "use a version such as 0.1.0"))
    if t.image is not None:
        _image_reference(t.image, add)
    if not t.prompt_data.startswith(("s3://", "/")) and \
            not t.prompt_data.startswith(names.DATASETS_PREFIX):
        add(problem("training.prompt_data", t.prompt_data,
                    f"a data-bucket key must live under {names.DATASETS_PREFIX} (the trainer's "
                    f"role may read only {names.DATASETS_PREFIX} and {names.CHECKPOINTS_PREFIX})",
                    f"upload the file to s3://<bucket>/{names.DATASETS_PREFIX} and use "
                    f"{names.DATASETS_PREFIX}{t.prompt_data.rsplit('/', 1)[-1]}, or give an "
                    "absolute path inside the image"))
    for field_name in ("prompt_data", "hf_checkpoint"):
        value = getattr(t, field_name)
        key = value[len("s3://"):].partition("/")[2] if value.startswith("s3://") else None
        if key is not None and not key.startswith(names.DATASETS_PREFIX):
            add(problem(f"training.{field_name}", value,
                        f"the trainer's role may read only the data bucket's "
                        f"{names.DATASETS_PREFIX} and {names.CHECKPOINTS_PREFIX} prefixes; this "
                        "URI is outside them, so the job would fail after the GPUs start",
                        f"copy the data into the data bucket under {names.DATASETS_PREFIX} and "
                        f"give its key, e.g. {names.DATASETS_PREFIX}"
                        f"{value.rstrip('/').rsplit('/', 1)[-1]}"))


def _unknown_instance_type(path: str, name: str):
    """The problem of a well-formed instance type name EC2 does not have, with a did-you-mean."""
    family = name.split(".", 1)[0]
    close = close_match(name, ec2_instance_types())
    sizes = family_sizes(family)
    if close:
        fix = f"did you mean {close!r}? If"
    elif sizes:
        fix = f"use a size of {family}: {', '.join(sizes)}; if"
    else:
        fix = f"check the spelling (e.g. {DEFAULT_SYSTEM_INSTANCE_TYPE}); if"
    return problem(path, name, f"not an EC2 instance type, by the EC2 service model of botocore "
                   f"{botocore_version()}", f"{fix} {name} is newer than this botocore, upgrade "
                   "boto3 and botocore")


def _image_reference(ref: str, add) -> None:
    """training.image: pinned by digest (always fine), or a version tag that does not move."""
    name, _, digest = ref.partition("@")
    if digest:
        return
    last = name.rsplit("/", 1)[-1]  # a registry's :port comes before the last /
    tag = last.partition(":")[2] if ":" in last else None
    fix = ("pin it by digest (<repository>@sha256:...), or use a version tag that is never "
           "pushed twice")
    if tag is None:
        add(problem("training.image", ref, f"names no tag and no digest, so it means :latest: "
                    f"{_MOVING_IMAGE}", fix))
    elif tag == "latest":
        add(problem("training.image", ref, f"the tag latest moves: {_MOVING_IMAGE}", fix))
    elif not IMAGE_TAG_RE.fullmatch(tag):
        add(problem("training.image", ref, f"{tag!r} is not an image tag (letters, digits, _ . -, "
                    f"at most {MAX_IMAGE_TAG_CHARS}, not starting with . or -)", fix))


def _pod_address_problems(cfg: KitConfig, add) -> None:
    """vpc.pod_addresses: the VPC CNI's warm pool and floor."""
    pods = cfg.vpc.pod_addresses
    if pods is None:
        return
    # WARM_IP_TARGET 0 with a minimum set stops the CNI from adding any address past the
    # floor (aws/amazon-vpc-cni-k8s@0c65d58cf2b4, tag v1.23.0, README.md:346, MINIMUM_IP_TARGET
    # note 2). A minimum of 0 is no floor, as if unset (same commit,
    # pkg/ipamd/ipamd.go:2043-2056 getMinimumIPTarget returns noMinimumIPTarget = 0, :91). The
    # kit pins no vpc-cni build (EKS's default, infra/versions.py): v1.23.0 is the release read.
    if pods.warm_ip_target < 1:
        add(problem("vpc.pod_addresses.warm_ip_target", pods.warm_ip_target,
                    "must be at least 1: with 0 the VPC CNI adds no address past the floor",
                    "use the default (warm_ip_target 2) or remove vpc.pod_addresses"))
    if pods.minimum_ip_target < 0:
        add(problem("vpc.pod_addresses.minimum_ip_target", pods.minimum_ip_target,
                    "must be 0 (no floor) or more",
                    "use the default (minimum_ip_target 12), or 0 for no floor"))
    # The VPC CNI draws pod addresses from network card 0's interfaces only, each keeping its
    # primary address (docs/operations.md, "Addresses a node holds"): a floor above card0_interfaces
    # x (ipv4_per_interface - 1) can never be met on that type, and the subnet warning would count
    # addresses no node holds. EC2's figures per type: infra/catalog/instances.py.
    limits = {g.instance_type: t.card0_interfaces * (t.ipv4_per_interface - 1)
              for g in cfg.gpu_node_groups.values()
              if (t := INSTANCE_TYPES.get(g.instance_type)) is not None
              and t.card0_interfaces and t.ipv4_per_interface}
    if limits:
        itype, limit = min(limits.items(), key=lambda kv: kv[1])
        if pods.minimum_ip_target > limit:
            t = INSTANCE_TYPES[itype]
            add(problem("vpc.pod_addresses.minimum_ip_target", pods.minimum_ip_target,
                        f"a {itype} node holds at most {limit} pod addresses (network card 0's "
                        f"{t.card0_interfaces} interfaces x {t.ipv4_per_interface - 1} secondary "
                        "addresses each, the VPC CNI's pool), so the floor could never be met",
                        f"use minimum_ip_target <= {limit} (the default is 12)"))
