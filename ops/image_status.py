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


def image_labels(ecr: Any, repository: str, digest: str,
                 fetch: Callable[[str], bytes] = fetch_url) -> dict[str, str]:
    """The image config's labels (manifest -> config blob through ECR's layer download URL)."""
    images = ecr.batch_get_image(
        repositoryName=repository, imageIds=[{"imageDigest": digest}],
        acceptedMediaTypes=["application/vnd.docker.distribution.manifest.v2+json",
                            "application/vnd.oci.image.manifest.v1+json"])["images"]
    if not images:
        return {}
    manifest = json.loads(images[0]["imageManifest"])
    config_digest = manifest.get("config", {}).get("digest")
    if not config_digest:
        return {}
    url = ecr.get_download_url_for_layer(repositoryName=repository,
                                         layerDigest=config_digest)["downloadUrl"]
    config = json.loads(fetch(url))
    return config.get("config", {}).get("Labels") or {}


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
