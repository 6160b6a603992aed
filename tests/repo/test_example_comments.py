"""What the examples and the config docs point a newcomer at exists and says what they claim:
the file paths in the examples' comments, the version lists a `version:` comment names, and the
editor schema path from where the README puts a config."""

from __future__ import annotations

import re

import yaml

from tests.support import REPO_ROOT

EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.yaml"))
# a path inside the repository: its first part is a top-level entry (infra/..., docs/..., .github/...)
PATH = re.compile(r"(?<![\w./-])(\.?[A-Za-z0-9_-]+(?:/[A-Za-z0-9_.-]+)+)")
TOP_LEVEL = {p.name for p in REPO_ROOT.iterdir()}


def comments(path):
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if "#" in line:
            yield number, line, line[line.index("#"):]


def test_every_repo_path_in_an_example_comment_exists():
    missing = []
    for example in EXAMPLES:
        for number, _, comment in comments(example):
            for match in PATH.finditer(comment):
                path = match.group(1).rstrip(".,;:")
                if path.split("/")[0] in TOP_LEVEL and not (REPO_ROOT / path).exists():
                    missing.append(f"{example.name}:{number}: {path}")
    assert not missing, missing


def test_a_version_comment_names_the_file_that_lists_that_version():
    """`version: "0.17.1"  # one of the versions ... <file>`: the file lists it."""
    seen = 0
    for example in EXAMPLES:
        for number, line, comment in comments(example):
            version = re.match(r"\s*version:\s*\"?([\w.-]+)\"?", line)
            named = [m.group(1) for m in PATH.finditer(comment) if m.group(1).endswith(".py")]
            if version and named:
                seen += 1
                for path in named:
                    assert f'"{version.group(1)}"' in (REPO_ROOT / path).read_text(), (
                        f"{example.name}:{number}: {path} does not list {version.group(1)}")
    assert seen  # p5-2node pins the device plugin's chart version


def test_the_schema_path_the_docs_give_resolves_from_where_the_readme_puts_a_config():
    readme = (REPO_ROOT / "README.md").read_text()
    # the README's first deploy copies an example to the repository root
    [target] = re.findall(r"cp examples/\S+\.yaml (\S+\.yaml)", readme)
    config_dir = (REPO_ROOT / target).parent
    for doc in ("README.md", "docs/config-reference.md"):
        text = (REPO_ROOT / doc).read_text().replace("\n", " ")
        [first, *_] = re.findall(r"\$schema=(\S+?)`", text)
        assert (config_dir / first).resolve() == REPO_ROOT / "config.schema.json", (doc, first)
    for example in EXAMPLES:  # a header in an example must resolve from examples/
        for header in re.findall(r"\$schema=(\S+)", example.read_text()):
            assert (example.parent / header).resolve() == REPO_ROOT / "config.schema.json"


def test_the_team_example_needs_no_crds_from_outside_the_kit():
    """The README's example for a real account deploys on a new cluster: no ServiceMonitor."""
    from infra.config import config_warnings, parse_config

    for example in EXAMPLES:
        raw = yaml.safe_load(example.read_text())
        dcgm = ((raw.get("addons") or {}).get("dcgm_exporter") or {})
        assert not (dcgm.get("enabled") and dcgm.get("service_monitor")), example.name
        assert not [w for w in config_warnings(parse_config(raw)) if "service_monitor" in w]
