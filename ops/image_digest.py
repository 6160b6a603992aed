"""The trainer image's digest, read when `rlkit gate` and `rlkit launch` render a run.

A tag names content only while the image exists: the kit's repository has immutable tags, but
teardown empties it (empty_on_delete) and anyone may delete an image, after which `rlkit image
build` pushes other content under the same tag. So the commands that start pods pin the image to
the digest the tag names now (``<repo>:<tag>@sha256:...``): every node pulls the same content
whatever it has cached under the tag, and the gate record's image names content, not a name.
The tag stays in the reference for people; a reference with both pulls by its digest
(distribution/reference@aeed5e66379b normalize.go, ParseDockerRef drops the tag).
`rlkit render` (offline) and dry runs keep the tag.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from botocore.exceptions import BotoCoreError, ClientError

from infra.config import KitConfig
from manifests import StackOutputs
from manifests.context import image_for
from manifests.errors import RenderError, RenderProblem
from ops.aws import describe_error, error_code

# <account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>:<tag>
_ECR = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?"
                  r"/(?P<repository>[^:@]+):(?P<tag>[^:@/]+)$")


def split_reference(ref: str) -> tuple[str, str | None]:
    """(name[:tag], digest or None) of an image reference."""
    name, _, digest = ref.partition("@")
    return name, digest or None


def resolve_digest(cfg: KitConfig, outputs: StackOutputs, clients: Any,
                   warn: Callable[[str], None]) -> str | None:
    """The digest the run's image tag names now, or None where the image is not pinned here
    (a reference that already has a digest, or an image outside ECR of the config's region,
    with a warning). ``clients``: an ops.aws.AwsClients, whose ECR client is made only when
    read. Raises RenderError when ECR cannot say: the tag is not in the repository
    (build it), or the call failed (credentials, permissions)."""
    image = image_for(cfg, outputs)
    field = "training.image" if cfg.training.image is not None else "training.image_tag"
    if split_reference(image)[1] is not None:
        return None
    m = _ECR.match(image)
    if m is None or m["region"] != cfg.region:
        warn(f"WARNING: {field} = {image!r} is not in ECR of {cfg.region}, so rlkit cannot read "
             "its digest: the job pulls it by a tag, which can name other content later (nodes "
             "that cached the old content keep running it). Fix: give the image with its digest "
             "(<repo>:<tag>@sha256:...)")
        return None
    try:
        ecr = clients.ecr
        found = ecr.describe_images(registryId=m["account"], repositoryName=m["repository"],
                                    imageIds=[{"imageTag": m["tag"]}])
    except ClientError as err:
        if error_code(err) in ("ImageNotFoundException", "RepositoryNotFoundException"):
            fix = ("build it: `rlkit image build --config <this config>`"
                   if cfg.training.image is None else "push it, or point training.image at an "
                   "image that exists")
            raise RenderError([RenderProblem(f"{field} = {image!r}", "the image is not in ECR "
                                             "(never built, or deleted since)", fix)],
                              "trainer image") from err
        raise _unreadable(field, image, describe_error(err)) from err
    except BotoCoreError as err:
        raise _unreadable(field, image, describe_error(err)) from err
    details = found.get("imageDetails") or []
    if not details or not details[0].get("imageDigest"):
        raise _unreadable(field, image, "DescribeImages returned no digest")
    return str(details[0]["imageDigest"])


def _unreadable(field: str, image: str, why: str) -> RenderError:
    return RenderError([RenderProblem(
        f"{field} = {image!r}", f"could not read the digest the tag names ({why}); the job would "
        "pull by a tag, which can name other content than the gate measured",
        "grant ecr:DescribeImages on the repository (docs/operations.md, IAM permissions) and "
        "check the AWS credentials, then run the command again")], "trainer image")
