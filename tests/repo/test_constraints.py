"""constraints.txt pins the whole environment that requirements-dev.txt installs.

The requirements files pin what the kit names; their dependencies' dependencies (typeguard under
jsii under aws-cdk-lib, for one) would otherwise float to the newest release on every clean
install. The closure is walked from the installed distributions' own metadata (Requires-Dist
with its markers and extras), so a new requirement that pulls in an unpinned package fails here.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
# The editable lines of requirements*.txt: this repository's own packages, never pinned.
EDITABLE = {".": "moe-rl-eks-kit", "images/trainer": "rltrainer"}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$")


def requirement_lines(path: Path) -> list[str]:
    """The requirements of ``path`` (``-r`` followed; editable lines as their project names)."""
    out = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-r "):
            out += requirement_lines(path.parent / line[3:].strip())
        elif line.startswith("-e "):
            out.append(EDITABLE[line[3:].strip()])
        else:
            out.append(line)
    return out


def closure(roots: list[str]) -> set[str]:
    """Every distribution ``roots`` pull in, by their installed metadata (canonical names)."""
    seen: set[tuple[str, str]] = set()
    names: set[str] = set()
    todo = [(Requirement(r), "") for r in roots]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        names.add(name)
        for want in {""} | set(req.extras):
            if (name, want) in seen:
                continue
            seen.add((name, want))
            for dep in metadata.distribution(name).requires or []:
                todo.append((Requirement(dep), want))
    return names


def constraints() -> dict[str, str]:
    pins = {}
    for raw in (ROOT / "constraints.txt").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = PIN.match(line)
        assert m, f"constraints.txt: {line!r} is not NAME==VERSION"
        pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def test_constraints_pin_every_package_the_requirements_pull_in():
    """Before: only the named packages were pinned; jsii, typeguard, botocore's urllib3 and the
    rest resolved to whatever was newest on the day of the install."""
    own = {canonicalize_name(n) for n in EDITABLE.values()}
    needed = closure(requirement_lines(ROOT / "requirements-dev.txt")) - own
    missing = sorted(needed - set(constraints()))
    assert not missing, (f"constraints.txt does not pin {', '.join(missing)}: regenerate it as its "
                         "header says (pip freeze of a fresh `scripts/setup.sh dev`)")


def test_the_environment_is_the_one_constraints_pin():
    """setup.sh installs with -c constraints.txt: what is installed is what is pinned."""
    wrong = {name: (pinned, metadata.version(name)) for name, pinned in constraints().items()
             if metadata.version(name) != pinned}
    assert not wrong, (f"installed versions differ from constraints.txt (pinned, installed): {wrong}; "
                       "run scripts/setup.sh dev in a fresh virtualenv, or regenerate constraints.txt")


def test_requirement_pins_agree_with_constraints():
    pins = constraints()
    for path in ("requirements.txt", "requirements-dev.txt"):
        for line in requirement_lines(ROOT / path):
            req = Requirement(line)
            name = canonicalize_name(req.name)
            if name in pins:
                assert req.specifier.contains(pins[name]), \
                    f"{path}: {line} but constraints.txt pins {name}=={pins[name]}"
