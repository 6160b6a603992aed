"""Preflight checks of the services the environment needs besides EC2 capacity: FSx for Lustre
where the file system goes, and CodeBuild's quota for the image build's machine size.

- **FSx for Lustre in the region** (offline): botocore's bundled endpoint data lists the regions
  with an FSx endpoint (``infra.catalog.regions``).
- **The file system's AZ** (DescribeAvailabilityZones): it exists for this account, is
  available, and is a real Availability Zone: FSx file systems cannot be created in a Local or
  Wavelength Zone subnet. FSx has no API that lists which deployment types an AZ offers;
  CreateFileSystem is the first to refuse a PERSISTENT_2 file system there, so the check names
  the zone ID to compare with the FSx for Lustre user guide.
- **CodeBuild's 2XLARGE concurrency** (Service Quotas): the image build runs on
  ``BUILD_GENERAL1_2XLARGE``, whose per-account concurrency quota is 0 on many new accounts;
  StartBuild then fails with "Cannot have more than 0 builds in queue for the account"
  (rebuy-de/aws-nuke#1209, a 2xlarge project). The quota is found by its name
  (``QUOTA_NAME_PATTERN``), since its code could not be read offline.
"""

from __future__ import annotations

import re
from typing import Any

from infra.catalog.regions import botocore_version, regions
from infra.config import KitConfig, has_shared_fs
from infra.config.derived import shared_fs_availability_zone, shared_fs_availability_zone_field
from infra.problems import FAIL, PASS, WARN
from infra.versions import IMAGE_BUILD_COMPUTE_TYPE
from ops.aws import AWS_ERRORS, describe_error
from ops.check_result import Check

FSX_REGION = "FSx for Lustre in the region"
FSX_ZONE = "FSx for Lustre AZ"
BUILD_QUOTA = "image build quota"
# "Concurrently running builds for Linux/2XLarge environment" in the CodeBuild quotas; GPU and
# ARM sizes have their own quotas and must not match.
QUOTA_NAME_PATTERN = re.compile(r"linux/2xlarge", re.IGNORECASE)
_FSX_DEPLOYMENT = "PERSISTENT_2"


def offline_service_checks(cfg: KitConfig) -> list[Check]:
    """The checks here that need no AWS call."""
    return [check_fsx_region(cfg)] if has_shared_fs(cfg) else []


def service_checks(ec2: Any, quotas: Any, cfg: KitConfig, region: str) -> list[Check]:
    """The checks here that call AWS (read-only)."""
    checks = [check_fsx_zone(ec2, cfg)] if has_shared_fs(cfg) else []
    return checks + [check_image_build_quota(quotas, region)]


def check_fsx_region(cfg: KitConfig) -> Check:
    subject = f"region = {cfg.region!r}"
    if cfg.region in regions("fsx"):
        return Check(FSX_REGION, subject, PASS, f"FSx has an endpoint in {cfg.region}")
    return Check(FSX_REGION, subject, FAIL,
                 f"botocore {botocore_version()}'s endpoint data lists no FSx endpoint in "
                 f"{cfg.region}: the storage stack cannot create its file system there",
                 "choose a region with FSx for Lustre, or set storage.shared_filesystem.type: "
                 "none with training.nodes: 1 (upgrade botocore first if the region is new)")


def check_fsx_zone(ec2: Any, cfg: KitConfig) -> Check:
    zone, field = shared_fs_availability_zone(cfg), shared_fs_availability_zone_field(cfg)
    subject = f"{field} = {zone!r}"
    # Without storage.shared_filesystem.availability_zone the file system follows the group.
    why = ("" if cfg.storage.shared_filesystem.availability_zone else
           " (the file system goes in the training group's zone)")
    try:
        found = ec2.describe_availability_zones(ZoneNames=[zone], AllAvailabilityZones=True)[
            "AvailabilityZones"]
    except AWS_ERRORS as err:
        return Check(FSX_ZONE, subject, WARN, f"could not read the zone: {describe_error(err)}",
                     "allow ec2:DescribeAvailabilityZones, or check the zone in the EC2 console")
    if not found:
        return Check(FSX_ZONE, subject, FAIL, f"{zone} is not a zone of {cfg.region} for this "
                     f"account", f"set {field} to one of `aws ec2 describe-availability-zones "
                     f"--region {cfg.region}`{why}")
    az = found[0]
    kind, state = az.get("ZoneType", "availability-zone"), az.get("State", "available")
    zone_id = az.get("ZoneId", "?")
    if kind != "availability-zone":
        return Check(FSX_ZONE, subject, FAIL,
                     f"{zone} ({zone_id}) is a {kind}: FSx for Lustre file systems live in "
                     "Availability Zones only",
                     f"set {field} to an Availability Zone of {cfg.region}{why}")
    if state != "available":
        return Check(FSX_ZONE, subject, FAIL, f"{zone} ({zone_id}) is {state}",
                     f"set {field} to an available zone of {cfg.region}{why}")
    return Check(FSX_ZONE, subject, PASS,
                 f"{zone} is zone ID {zone_id}, available; FSx lists no per-AZ offering, so "
                 f"whether it takes a {_FSX_DEPLOYMENT} file system shows at the storage stack's "
                 "create (compare the zone ID with the FSx for Lustre user guide)")


def check_image_build_quota(quotas: Any, region: str) -> Check:
    subject = f"CodeBuild {IMAGE_BUILD_COMPUTE_TYPE} ({region})"
    fix_console = ("check 'Concurrently running builds for Linux/2XLarge environment' in the "
                   "Service Quotas console (AWS CodeBuild)")
    try:
        found = [q for page in quotas.get_paginator("list_service_quotas").paginate(
            ServiceCode="codebuild") for q in page.get("Quotas", [])
            if QUOTA_NAME_PATTERN.search(q.get("QuotaName", ""))
            and not re.search(r"gpu|arm", q.get("QuotaName", ""), re.IGNORECASE)]
    except AWS_ERRORS as err:
        return Check(BUILD_QUOTA, subject, WARN, f"could not read the quota: "
                     f"{describe_error(err)}",
                     f"allow servicequotas:ListServiceQuotas, or {fix_console}")
    if not found:
        return Check(BUILD_QUOTA, subject, WARN,
                     "Service Quotas lists no CodeBuild quota named like Linux/2XLarge",
                     fix_console)
    quota = found[0]
    value, code = int(quota.get("Value", 0)), quota.get("QuotaCode", "?")
    if value < 1:
        return Check(BUILD_QUOTA, subject, FAIL,
                     f"'{quota['QuotaName']}' is {value}: `rlkit image build` would fail with "
                     "\"Cannot have more than 0 builds in queue for the account\"",
                     "request 1 or more: aws service-quotas request-service-quota-increase "
                     f"--service-code codebuild --quota-code {code} --desired-value 1 "
                     f"--region {region}")
    return Check(BUILD_QUOTA, subject, PASS,
                 f"'{quota['QuotaName']}' is {value} (the image build needs 1)")
