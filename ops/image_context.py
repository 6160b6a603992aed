"""The trainer image's build context: the files of images/trainer that .dockerignore lets through
(Docker's own matching rules), zipped the same way every time, so the same files give the same
zip and the same S3 key (CodeBuild's source)."""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from pathlib import Path

from infra import names

TRAINER_DIR = Path(__file__).resolve().parent.parent / "images" / "trainer"
# Zip entries get a fixed time stamp, so the same files give the same zip and the same S3 key.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def _segment_regex(part: str) -> str:
    """One path segment of a .dockerignore pattern (Go filepath.Match syntax) as a regex."""
    out, i = "", 0
    while i < len(part):
        c = part[i]
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "\\" and i + 1 < len(part):
            i += 1
            out += re.escape(part[i])
        elif c == "[" and "]" in part[i + 1:]:
            end = part.index("]", i + 1)
            body = part[i + 1:end]
            out += "[" + ("^" + body[1:] if body.startswith(("!", "^")) else body) + "]"
            i = end
        else:
            out += re.escape(c)
        i += 1
    return out


def _dockerignore_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex over slash-separated relative paths (Docker's rules:
    filepath.Match per segment, ``**`` for any number of directories)."""
    parts = [p for p in pattern.strip("/").split("/") if p not in ("", ".")]
    out = ""
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            out += ".*" if last else "(?:.*/)?"
        else:
            out += _segment_regex(part) + ("" if last else "/")
    return re.compile(out + r"\Z")


def _read_dockerignore(root: Path) -> list[tuple[bool, re.Pattern[str]]]:
    path = root / ".dockerignore"
    rules = []
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            keep = line.startswith("!")
            rules.append((keep, _dockerignore_regex(line[1:] if keep else line)))
    return rules


def _ignored(rel: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parent directories
    decides; ``!`` patterns re-include."""
    parents = [rel]
    parts = rel.split("/")
    parents += ["/".join(parts[:i]) for i in range(1, len(parts))]
    ignored = False
    for keep, regex in rules:
        if any(regex.match(p) for p in parents):
            ignored = not keep
    return ignored


def context_files(root: Path = TRAINER_DIR) -> list[str]:
    """Relative paths of the files a ``docker build`` of ``root`` would send, sorted."""
    rules = _read_dockerignore(root)
    files = []
    for path in root.rglob("*"):
        if path.is_file():
            rel = path.relative_to(root).as_posix()
            if not _ignored(rel, rules):
                files.append(rel)
    return sorted(files)


def context_zip(root: Path = TRAINER_DIR) -> bytes:
    """The build context as a zip, byte-for-byte the same for the same files and modes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel in context_files(root):
            path = root / rel
            info = zipfile.ZipInfo(rel, date_time=_ZIP_TIME)
            info.external_attr = (0o100755 if path.stat().st_mode & 0o111 else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    return buf.getvalue()


def context_key(data: bytes) -> str:
    """Content-addressed key under the bucket's build prefix: one upload per distinct context."""
    return f"{names.IMAGE_BUILDS_PREFIX}trainer-{hashlib.sha256(data).hexdigest()[:32]}.zip"
