#!/usr/bin/env python3
"""Fetch every artifact in artifacts.lock.json into the local cache and verify its checksum.

    python scripts/fetch_artifacts.py            # fetch what the cache lacks; verify everything
    python scripts/fetch_artifacts.py NAME ...   # only these lock entries
    python scripts/fetch_artifacts.py --check    # verify what is there (../shared and cache); no network
    python scripts/fetch_artifacts.py --relock   # rewrite the lock's checksums and file lists from ../shared

The cache is $RLKIT_ARTIFACTS, else $XDG_CACHE_HOME/rlkit/artifacts, else ~/.cache/rlkit/artifacts;
the tests and `rlkit check`/`validate` look there after ../shared (ops/artifacts.py). A download
whose checksum differs from the lock is refused and nothing is written. Charts come from the
lock's URL, else from the chart repository's index.yaml; a chart archive is accepted when its
file sha256 or its content digest (the files inside it) matches. Source trees come from a GitHub archive at the
pinned commit (only the locked files are kept) or from one raw URL per file. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support import artifacts as A  # noqa: E402

TIMEOUT_S = 120


class Refused(Exception):
    """A download that cannot be used: unreachable, or not the locked bytes."""


def download(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "rlkit-fetch-artifacts"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.read()
    except OSError as err:
        raise Refused(f"cannot download {url}: {err}") from None


def chart_urls(entry: dict):
    """The lock's URL first; then (only if needed) what the chart repository's index.yaml lists."""
    yield entry["url"]
    index_url = entry["repository"].rstrip("/") + "/index.yaml"
    try:
        text = download(index_url).decode()
    except Refused:
        return
    # Every "- <url>" line of index.yaml whose file name is ours (the name holds chart and version),
    # so no YAML parser is needed.
    name = Path(entry["path"]).name
    for line in text.splitlines():
        item = line.strip().removeprefix("- ").strip("'\"")
        url = urllib.parse.urljoin(index_url, item)
        if item.rsplit("/", 1)[-1] == name and url != entry["url"]:
            yield url


def content_digest(data: bytes) -> str | None:
    try:
        return A.digest_of(A.archive_files(data))
    except Exception:  # not a .tgz at all (an error page, a truncated download)
        return None


def fetch_chart(entry: dict, target: Path) -> str:
    if entry["url"].startswith("oci://"):
        raise Refused(f"{entry['name']}: an OCI chart, which this script cannot download; run "
                      f"`helm pull {entry['repository']} --version {entry['version']}` and put "
                      f"the .tgz at {target} (its content digest is checked by the tests)")
    tried = []
    for url in chart_urls(entry):
        try:
            data = download(url)
        except Refused as err:
            tried.append(str(err))
            continue
        if hashlib.sha256(data).hexdigest() == entry["sha256"]:
            how = "sha256 matches"
        elif content_digest(data) == entry["content_sha256"]:
            how = "content digest matches (other archive metadata)"
        else:
            tried.append(f"{url}: neither sha256 nor content digest matches the lock")
            continue
        write_atomically(target, lambda tmp: tmp.write_bytes(data))
        return f"{url} ({how})"
    raise Refused(f"{entry['name']}: " + "; ".join(tried))


def tree_from_archive(entry: dict, tmp: Path) -> None:
    data = download(entry["url"])
    wanted = set(entry["files"])
    root = entry.get("archive_root", "").strip("/")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar:
            if not member.isfile():
                continue
            rel = member.name.split("/", 1)[-1]  # GitHub archives have one top folder
            if root:
                if not rel.startswith(root + "/"):
                    continue
                rel = rel[len(root) + 1:]
            if rel in wanted:
                out = tmp / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(tar.extractfile(member).read())


def tree_from_urls(entry: dict, tmp: Path) -> None:
    for rel, url in entry["urls"].items():
        out = tmp / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(download(url))


def fetch_tree(entry: dict, target: Path) -> str:
    def build(tmp: Path) -> None:
        tmp.mkdir(parents=True)
        (tree_from_urls if "urls" in entry else tree_from_archive)(entry, tmp)
        found = A.problems(entry, tmp)
        if found:
            raise Refused("; ".join(found))

    write_atomically(target, build)
    return entry.get("url") or "raw URLs"


def write_atomically(target: Path, build) -> None:
    """Build ``target`` beside it and move it into place only once it is complete and verified."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".partial-") as tmp:
        partial = Path(tmp) / target.name
        build(partial)
        if target.exists():
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        partial.rename(target)


def check(names: list[str]) -> int:
    bad = 0
    for name in names:
        entry = A.entries()[name]
        for base in (A.SHARED, A.cache_root()):
            path = base / entry["path"]
            if path.exists():
                found = A.problems(entry, path)
                bad += bool(found)
                print(f"{'MISMATCH' if found else 'ok'} {name}: {path}" + "".join(f"\n  {p}" for p in found))
                break
        else:
            bad += 1
            print(f"MISSING {name} (run python scripts/fetch_artifacts.py {name})")
    return 1 if bad else 0


def relock() -> int:
    """Recompute every entry's checksums (and file lists) from ../shared: after a deliberate update."""
    lock = A.load_lock()
    for entry in lock["artifacts"]:
        path = A.SHARED / entry["path"]
        if entry["kind"] == "chart":
            data = path.read_bytes()
            entry["sha256"] = hashlib.sha256(data).hexdigest()
            entry["content_sha256"] = A.digest_of(A.archive_files(data))
        else:
            files = A.tree_files(path)
            entry["files"], entry["tree_sha256"] = sorted(files), A.digest_of(files)
    A.LOCK_FILE.write_text(json.dumps(lock, indent=1) + "\n")
    print(f"rewrote {A.LOCK_FILE} from {A.SHARED}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="lock entries (default: all)")
    parser.add_argument("--check", action="store_true", help="verify only; no download")
    parser.add_argument("--relock", action="store_true", help="rewrite the lock from ../shared")
    args = parser.parse_args(argv)
    if args.relock:
        return relock()
    known = A.entries()
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"not in {A.LOCK_FILE.name}: {', '.join(unknown)} (known: {', '.join(known)})")
    names = args.names or list(known)
    if args.check:
        return check(names)
    failed = 0
    for name in names:
        entry = known[name]
        if A.find(name) is not None and not A.problems(entry, A.find(name)):
            print(f"ok {name}: {A.find(name)}")
            continue
        target = A.cache_root() / entry["path"]
        try:
            source = (fetch_chart if entry["kind"] == "chart" else fetch_tree)(entry, target)
        except Refused as err:
            failed += 1
            print(f"REFUSED {err}", file=sys.stderr)
            continue
        print(f"fetched {name}: {target} from {source}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
