"""Splitting one save's upload into parts that run at the same time, manifest still last.

A save lives on the shared file system, which every node of the job mounts, so any process on
any node can upload any of its files. ``partition`` splits the files into parts of about equal
bytes (largest first onto the lightest part); ``S3CheckpointStore.upload`` runs one task per part
through a runner and writes the manifest only once every part has finished.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable


def partition(sizes: dict[str, int], parts: int) -> list[list[str]]:
    """``sizes`` (relative path -> bytes) in at most ``parts`` non-empty lists of about equal
    bytes; each list keeps the paths in their sorted order."""
    if parts < 1:
        raise ValueError(f"parts must be at least 1, not {parts}")
    bins: list[tuple[int, list[str]]] = [(0, []) for _ in range(min(parts, max(len(sizes), 1)))]
    for rel in sorted(sizes, key=lambda r: (-sizes[r], r)):
        i = min(range(len(bins)), key=lambda b: (bins[b][0], b))
        total, members = bins[i]
        bins[i] = (total + sizes[rel], members + [rel])
    return [sorted(members) for _, members in bins if members]


def run_in_threads(tasks: list[Callable[[], Any]]) -> list[Any]:
    """Run ``tasks`` at once in this process; their results in order. The first exception raised
    by any task is raised here, after all tasks have ended."""
    with ThreadPoolExecutor(max_workers=max(len(tasks), 1)) as pool:
        futures = [pool.submit(task) for task in tasks]
        return [f.result() for f in futures]
