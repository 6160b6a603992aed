"""What the trainer image repository holds (`rlkit image status`): each image's tags, digest,
push time, size, scan summary and EP backend, read from the image's label or else its tag."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable

from infra.trainer_contract import EP_BACKENDS
from ops.image_build import BACKEND_LABEL


@dataclass
class ImageRow:
    tags: list[str]
    digest: str
    pushed: str
    size_mb: int
    backend: str
    backend_from: str  # "label" | "tag" | "-"
    scan: str


def _backend_from_tags(tags: list[str]) -> str | None:
    for tag in tags:
        for backend in sorted(EP_BACKENDS, key=len, reverse=True):
            if tag.endswith(f"-{backend}"):
                return backend
    return None


def _scan_summary(detail: dict[str, Any]) -> str:
    status = detail.get("imageScanStatus", {}).get("status")
    counts = detail.get("imageScanFindingsSummary", {}).get("findingSeverityCounts", {})
    if status is None:
        return "not scanned"
    if status != "COMPLETE":
        return status.lower()
    if not counts:
        return "no findings"
    order = ["CRITICAL", "HIGH", "MEDIUM", "LOW", "INFORMATIONAL", "UNDEFINED"]
    return ", ".join(f"{counts[s]} {s.lower()}" for s in order if counts.get(s))


def fetch_url(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - an ECR layer URL
        return response.read()


# What a tag may point at. The build pushes with --provenance=false (images/trainer/buildspec.yml),
# so a single-platform build is one manifest and a multi-arch build one index.
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


def _manifest(ecr: Any, repository: str, digest: str, media_types: list[str]) -> dict | None:
    images = ecr.batch_get_image(repositoryName=repository, imageIds=[{"imageDigest": digest}],
                                 acceptedMediaTypes=media_types).get("images", [])
    return json.loads(images[0]["imageManifest"]) if images else None


def _config_blob(ecr: Any, repository: str, manifest: dict,
                 fetch: Callable[[str], bytes]) -> dict | None:
    """An image manifest's config blob, through ECR's layer download URL (None without one)."""
    config_digest = manifest.get("config", {}).get("digest")
    if not config_digest:
        return None
    url = ecr.get_download_url_for_layer(repositoryName=repository,
                                         layerDigest=config_digest)["downloadUrl"]
    return json.loads(fetch(url))


def image_labels(ecr: Any, repository: str, digest: str,
                 fetch: Callable[[str], bytes] = fetch_url) -> dict[str, str]:
    """The image config's labels (manifest -> config blob through ECR's layer download URL). A
    multi-arch tag (an index) is read through its first platform image: every platform is built
    from the same Dockerfile with the same labels."""
    manifest = _manifest(ecr, repository, digest,
                         [OCI_INDEX, DOCKER_MANIFEST_LIST, DOCKER_MANIFEST, OCI_MANIFEST])
    if manifest and "manifests" in manifest:
        platform = next((m["digest"] for m in manifest["manifests"]
                         if m.get("platform", {}).get("os") not in (None, "unknown")), None)
        manifest = platform and _manifest(ecr, repository, platform,
                                          [DOCKER_MANIFEST, OCI_MANIFEST])
    config = _config_blob(ecr, repository, manifest, fetch) if manifest else None
    return (config or {}).get("config", {}).get("Labels") or {}


def image_platforms_held(ecr: Any, repository: str, digest: str,
                         fetch: Callable[[str], bytes] = fetch_url) -> set[str]:
    """The platforms (``os/architecture``) the image ``digest`` holds: an index's entries, or a
    single manifest's config blob. Raises ValueError when ECR returns neither; AWS and fetch
    errors reach the caller."""
    manifest = _manifest(ecr, repository, digest,
                         [OCI_INDEX, DOCKER_MANIFEST_LIST, OCI_MANIFEST, DOCKER_MANIFEST])
    if manifest is None:
        raise ValueError(f"ECR returned no manifest for {digest}")
    if "manifests" in manifest:
        held = {f"{m.get('platform', {}).get('os')}/{m.get('platform', {}).get('architecture')}"
                for m in manifest["manifests"]}
        # BuildKit's attestation manifests say unknown/unknown; they run nowhere.
        held.discard("unknown/unknown")
        return held
    config = _config_blob(ecr, repository, manifest, fetch)
    if not config or not config.get("os") or not config.get("architecture"):
        raise ValueError(f"the manifest of {digest} names no image config with os and architecture")
    return {f"{config['os']}/{config['architecture']}"}


def list_images(ecr: Any, repository: str, *, labels: bool = True,
                fetch: Callable[[str], bytes] = fetch_url,
                warn: Callable[[str], None] = lambda _: None) -> list[ImageRow]:
    """Every image in ``repository``, newest first."""
    details = []
    for page in ecr.get_paginator("describe_images").paginate(repositoryName=repository):
        details += page.get("imageDetails", [])
    details.sort(key=lambda d: str(d.get("imagePushedAt", "")), reverse=True)
    rows = []
    for d in details:
        tags = sorted(d.get("imageTags", []))
        backend, source = None, "-"
        if labels and tags:
            try:
                backend = image_labels(ecr, repository, d["imageDigest"], fetch).get(BACKEND_LABEL)
                source = "label" if backend else "-"
            except Exception as err:  # noqa: BLE001 - a label is a nicety; the tag still says
                warn(f"could not read the labels of {d['imageDigest'][:19]}: {err}")
        if not backend:
            backend = _backend_from_tags(tags)
            source = "tag" if backend else "-"
        rows.append(ImageRow(tags=tags, digest=d["imageDigest"],
                             pushed=str(d.get("imagePushedAt", "")),
                             size_mb=int(d.get("imageSizeInBytes", 0)) // 1_000_000,
                             backend=backend or "-", backend_from=source,
                             scan=_scan_summary(d)))
    return rows
