"""Offline validation of rendered manifests against real schemas.

- Built-in kinds: ``kubernetes_validate.validate(obj, version, strict=True)`` with the JSON
  schemas kubernetes-validate ships (its ``-strict`` set forbids unknown fields, as
  ``kubectl apply --validate=strict`` does). The package ships one schema set per Kubernetes
  minor (1.25 .. 1.37 in kubernetes-validate 1.37.0); ``schema_version_for`` picks the set for
  the cluster's version, falling back to the newest older set with a note.
- Custom resources (RayJob, RayCluster): the ``openAPIV3Schema`` of their
  CustomResourceDefinition, read from a directory the caller names (the CRD YAML as shipped by
  the operator's Helm chart), translated to JSON Schema by ``crd_to_jsonschema`` and checked with
  ``jsonschema``. The object's ``metadata`` is checked as an ObjectMeta with kubernetes-validate.
- A kind with no schema is never a silent pass: in strict mode (CI) it is an error, otherwise an
  explicit skip whose message says how to provide the schemas.

What offline validation cannot do: CEL rules (``x-kubernetes-validations``) are not evaluated,
admission webhooks do not run, and nothing checks that referenced objects exist. On a live
cluster ``kubectl apply --dry-run=server -f <dir>`` is the real check.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jsonschema
import kubernetes_validate
import yaml
from kubernetes_validate.utils import all_versions as _shipped_versions
from packaging.version import Version

Status = Literal["ok", "error", "skipped"]

CRD_DIR_HINT = ("pass --crd-dir with a directory holding the operator's CustomResourceDefinition "
                "YAML, or run `python scripts/fetch_artifacts.py` (it puts the pinned KubeRay "
                "CRDs in the artifact cache, where rlkit looks after ../shared/crds)")


# --- Kubernetes schema version ------------------------------------------------------------------


def _minor(version: str) -> Version:
    parts = version.lstrip("v").split(".")
    return Version(".".join(parts[:2]))


def schema_version_for(kubernetes_version: str) -> tuple[str, str | None]:
    """The kubernetes-validate schema set for a cluster version, and a note if not exact."""
    wanted = _minor(kubernetes_version)
    shipped = sorted({_minor(v) for v in _shipped_versions()})
    if wanted in shipped:
        return str(wanted), None
    older = [v for v in shipped if v < wanted]
    if not older:
        raise ValueError(
            f"kubernetes-validate {kubernetes_validate.__version__} ships schemas for "
            f"{shipped[0]} to {shipped[-1]}, nothing for Kubernetes {wanted}: use a supported "
            "cluster version")
    return str(older[-1]), (
        f"kubernetes-validate {kubernetes_validate.__version__} has no schemas for Kubernetes "
        f"{wanted}; validating against {older[-1]}, the newest older set (upgrade "
        "kubernetes-validate for an exact match)")


# --- CRD schemas --------------------------------------------------------------------------------


def crd_to_jsonschema(schema: dict[str, Any]) -> dict[str, Any]:
    """Translate a CRD ``openAPIV3Schema`` into JSON Schema that behaves like the API server.

    - ``nullable: true`` -> null is also allowed.
    - ``x-kubernetes-int-or-string: true`` -> integer or string.
    - ``x-kubernetes-preserve-unknown-fields: true`` -> unknown fields allowed there; every other
      object with ``properties`` rejects unknown fields (strict field validation).
    - ``required`` fields that carry a ``default`` are not required of the manifest: the API
      server applies defaults before it validates (structural schema defaulting).
    """
    s = {k: v for k, v in schema.items() if not k.startswith("x-kubernetes-")
         and k not in ("nullable", "default", "description")}
    props = schema.get("properties")
    if props is not None:
        s["properties"] = {name: crd_to_jsonschema(sub) for name, sub in props.items()}
        if "required" in schema:
            s["required"] = [r for r in schema["required"]
                             if "default" not in props.get(r, {})]
            if not s["required"]:
                del s["required"]
    if isinstance(schema.get("additionalProperties"), dict):
        s["additionalProperties"] = crd_to_jsonschema(schema["additionalProperties"])
    elif (props is not None and "additionalProperties" not in schema
          and not schema.get("x-kubernetes-preserve-unknown-fields")):
        s["additionalProperties"] = False
    if isinstance(schema.get("items"), dict):
        s["items"] = crd_to_jsonschema(schema["items"])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in schema:
            s[key] = [crd_to_jsonschema(sub) for sub in schema[key]]
    if schema.get("x-kubernetes-int-or-string") and "type" not in schema and "anyOf" not in schema:
        s["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable"):
        if "type" in s:
            s["type"] = [s["type"], "null"]
        if "enum" in s:
            s["enum"] = [*s["enum"], None]
        if "anyOf" in s:
            s["anyOf"] = [*s["anyOf"], {"type": "null"}]
    return s


@dataclass(frozen=True)
class CrdVersion:
    source: Path
    group: str
    kind: str
    version: str
    served: bool
    schema: dict[str, Any]


class CrdIndex:
    """Every CustomResourceDefinition found under a directory, by (group, kind)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.by_kind: dict[tuple[str, str], dict[str, CrdVersion]] = {}
        self.problems: list[str] = []
        for path in sorted(directory.rglob("*")):
            if path.suffix not in (".yaml", ".yml", ".json") or not path.is_file():
                continue
            try:
                docs = crd_documents(path.read_bytes())
            except yaml.YAMLError as err:
                self.problems.append(f"{path}: not valid YAML ({err})")
                continue
            for doc in docs:
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    self._add(path, doc)

    def _add(self, path: Path, crd: dict[str, Any]) -> None:
        spec = crd.get("spec", {})
        group, kind = spec.get("group"), spec.get("names", {}).get("kind")
        key = (group, kind)
        if key in self.by_kind:
            first = next(iter(self.by_kind[key].values())).source
            self.problems.append(
                f"{kind}.{group} is defined twice ({first} and {path}): point --crd-dir at the "
                "directory of the one operator version the cluster runs")
            return
        self.by_kind[key] = {
            v["name"]: CrdVersion(path, group, kind, v["name"], bool(v.get("served", True)),
                                  crd_to_jsonschema(v.get("schema", {}).get("openAPIV3Schema", {})))
            for v in spec.get("versions", [])
        }

    def lookup(self, api_version: str, kind: str) -> CrdVersion | None | str:
        """The schema, None if the kind is unknown, or a message if the version is not served."""
        group, _, version = api_version.rpartition("/")
        versions = self.by_kind.get((group, kind))
        if versions is None:
            return None
        v = versions.get(version)
        if v is None or not v.served:
            served = [name for name, x in versions.items() if x.served]
            return (f"{kind}.{group} in {next(iter(versions.values())).source} does not serve "
                    f"version {version} (served: {', '.join(served)})")
        return v


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # trusted CRD files: fast


@functools.lru_cache(maxsize=16)
def crd_documents(content: bytes) -> list[Any]:
    """The documents of one CRD file, by content: a CRD file of an operator is megabytes of YAML
    (KubeRay's RayJob: 1.4 MB, about a second to parse), and the same files are read again from
    other directories (a copy, the cluster's CRDs written out by `rlkit render`). JSON, which is
    what kubectl writes, is read as JSON: the same objects, a hundred times faster. Callers must
    not change the documents."""
    text = content.decode()
    if text.lstrip().startswith("{"):
        try:
            return [json.loads(text)]
        except json.JSONDecodeError:
            pass  # not JSON after all: YAML says what is wrong with it
    return list(yaml.load_all(text, Loader=_LOADER))


class _ManifestLoader(yaml.SafeLoader):
    """For manifests a user points at: Kubernetes objects need no anchors or aliases, and
    refusing aliases keeps a few hundred bytes from expanding into gigabytes (an alias bomb)."""

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases are not allowed in manifests", event.start_mark)
        return super().compose_node(parent, index)


@functools.lru_cache(maxsize=8)
def _crd_index(directory: str, stamp: tuple[tuple[str, float], ...]) -> CrdIndex:
    return CrdIndex(Path(directory))


def load_crds(directory: str | Path) -> CrdIndex:
    """Parse (and cache, until a file changes) the CRDs under ``directory``."""
    d = Path(directory).resolve()
    stamp = tuple(sorted((str(p), p.stat().st_mtime) for p in d.rglob("*") if p.is_file()))
    return _crd_index(str(d), stamp)


# --- validation ---------------------------------------------------------------------------------


@dataclass
class ObjectResult:
    source: str  # file (and document index when a file holds several)
    kind: str
    name: str
    status: Status
    checked_with: str = ""
    messages: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        head = f"{self.status.upper():7} {self.source}: {self.kind} {self.name}"
        if self.checked_with:
            head += f" [{self.checked_with}]"
        return "\n".join([head] + [f"          - {m}" for m in self.messages])


@dataclass
class ValidationReport:
    kubernetes_version: str
    schema_version: str
    crd_dir: Path | None
    strict: bool
    results: list[ObjectResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    crd_source: str | None = None  # where the CRDs in crd_dir came from, when not a user's dir

    @property
    def errors(self) -> list[ObjectResult]:
        return [r for r in self.results if r.status == "error"]

    @property
    def skipped(self) -> list[ObjectResult]:
        return [r for r in self.results if r.status == "skipped"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def summary(self) -> str:
        n_ok = sum(r.status == "ok" for r in self.results)
        line = (f"{len(self.results)} object(s): {n_ok} valid, {len(self.errors)} invalid, "
                f"{len(self.skipped)} NOT validated (no schema)")
        return line

    def format(self) -> str:
        lines = [
            f"Kubernetes {self.kubernetes_version}: built-in kinds checked with "
            f"kubernetes-validate {kubernetes_validate.__version__} (strict, schemas "
            f"{self.schema_version}); custom resources with CRD schemas from "
            f"{self.crd_source or self.crd_dir or '(no --crd-dir)'}"
            f"{'; strict mode: a kind without a schema is an error' if self.strict else ''}.",
        ]
        lines += [f"note: {n}" for n in self.notes]
        lines += [str(r) for r in self.results]
        lines.append(self.summary())
        if self.ok:
            lines.append("CEL rules (x-kubernetes-validations) and admission webhooks are not "
                         "evaluated offline; `kubectl apply --dry-run=server -f <dir>` on the "
                         "cluster is the final check.")
        return "\n".join(lines)


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _name_problems(obj: dict[str, Any]) -> list[str]:
    """The API server's name rules, which the JSON schemas do not carry."""
    name = (obj.get("metadata") or {}).get("name")
    kind = obj.get("kind")
    if not isinstance(name, str) or not name:
        return ["metadata.name: every object needs a name"]
    if kind == "Service":
        if len(name) > 63 or not _DNS_1035.match(name):
            return [f"metadata.name: {name!r} is not a DNS-1035 label (Service names start with "
                    "a letter, then lowercase letters, digits and '-', at most 63 characters)"]
    elif kind == "Namespace":
        if len(name) > 63 or not _DNS_LABEL.match(name):
            return [f"metadata.name: {name!r} is not a DNS-1123 label"]
    elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        return [f"metadata.name: {name!r} is not a DNS-1123 subdomain"]
    return []


def _path(error: jsonschema.ValidationError, prefix: tuple = ()) -> str:
    return ".".join(str(p) for p in (*prefix, *error.absolute_path)) or "(object)"


@functools.lru_cache(maxsize=None)
def _strict_validator(schema_version: str, kind: str, api_version: str
                      ) -> jsonschema.Draft202012Validator | None:
    """kubernetes-validate's strict schema for ``kind`` in ``api_version`` (None: it ships none),
    as a validator built once. ``kubernetes_validate.validate`` reads the same files for every
    object, 1.5 MB of ``_definitions.json`` each time; the files and the draft are its own."""
    from kubernetes_validate.utils import schema_contents
    from referencing import Registry, Resource

    [full] = {v for v in _shipped_versions() if str(_minor(v)) == schema_version}
    folder = f"kubernetes-json-schema/v{full}-local-strict"
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)  # apps/v1 -> apps-v1
    try:
        schema = schema_contents(f"{folder}/{kind.lower()}-{group_version}.json", schema_version)
    except FileNotFoundError:
        return None
    definitions = schema_contents(f"{folder}/_definitions.json", schema_version)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _strict_error(obj: dict[str, Any], schema_version: str) -> jsonschema.ValidationError | None:
    """The first error kubernetes-validate's strict check finds, as its ``validate`` reports it;
    ``SchemaNotFoundError`` for a kind it has no schema for."""
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    validator = _strict_validator(schema_version, str(kind), str(api_version))
    if validator is None:
        raise kubernetes_validate.SchemaNotFoundError(kind=kind, version=schema_version,
                                                      api_version=api_version)
    return next(validator.iter_errors(obj), None)  # validate() raises the first, as here


def _check_builtin(obj: dict[str, Any], schema_version: str) -> tuple[Status, str, list[str]]:
    """kubernetes-validate strict; ("skipped", ...) when it has no schema for the kind."""
    try:
        err = _strict_error(obj, schema_version)
    except kubernetes_validate.SchemaNotFoundError:
        return "skipped", "", []
    if err is not None:
        return "error", f"kubernetes-validate {schema_version} strict", [
            f"{_path(err)}: {err.message}"]
    return "ok", f"kubernetes-validate {schema_version} strict", []


def _check_crd(obj: dict[str, Any], crd: CrdVersion, schema_version: str) -> list[str]:
    validator = jsonschema.Draft4Validator(crd.schema)
    messages = [f"{_path(e)}: {e.message}"
                for e in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))]
    # The CRD schema leaves metadata open: the API server checks it as an ObjectMeta.
    meta_probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj.get("metadata", {})}
    err = _strict_error(meta_probe, schema_version)
    if err is not None:
        messages.append(f"{_path(err)}: {err.message} (ObjectMeta)")
    return messages[:20]


def validate_objects(objects: list[tuple[str, Any]], *, kubernetes_version: str,
                     crd_dir: str | Path | None, strict: bool,
                     crd_source: str | None = None) -> ValidationReport:
    """Validate ``(source, object)`` pairs; see the module docstring for what is checked.
    ``crd_source`` names where the CRDs in ``crd_dir`` came from (e.g. a live cluster) in the
    messages, instead of the directory."""
    schema_version, note = schema_version_for(kubernetes_version)
    crd_path = Path(crd_dir) if crd_dir is not None else None
    report = ValidationReport(kubernetes_version, schema_version, crd_path, strict,
                              crd_source=crd_source)
    if note:
        report.notes.append(note)
    crds: CrdIndex | None = None
    if crd_path is not None:
        if not crd_path.is_dir():
            report.notes.append(f"CRD directory {crd_path} does not exist")
        else:
            crds = load_crds(crd_path)
            report.notes += crds.problems

    for source, obj in objects:
        if not isinstance(obj, dict) or not obj.get("apiVersion") or not obj.get("kind"):
            report.results.append(ObjectResult(source, "?", "?", "error", "", [
                "not a Kubernetes object (needs apiVersion and kind)"]))
            continue
        kind, api_version = obj["kind"], obj["apiVersion"]
        name = str((obj.get("metadata") or {}).get("name", "?"))
        result = ObjectResult(source, kind, name, "ok")
        result.messages += _name_problems(obj)
        status, how, messages = _check_builtin(obj, schema_version)
        if status != "skipped":
            result.checked_with = how
            result.messages += messages
        else:
            crd = crds.lookup(api_version, kind) if crds is not None else None
            if isinstance(crd, CrdVersion):
                result.checked_with = f"CRD {crd.source.name} ({crd.version})"
                result.messages += _check_crd(obj, crd, schema_version)
            elif isinstance(crd, str):
                result.messages.append(crd)
            else:
                where = (f"no CustomResourceDefinition for {kind} ({api_version}) "
                         + (f"on {crd_source}" if crd_source else f"under {crd_path}")
                         if crds is not None else
                         f"no schema for {kind} ({api_version}): kubernetes-validate knows only "
                         "built-in kinds and no CRD directory was given")
                if strict:
                    result.messages.append(f"{where}. Fix: {CRD_DIR_HINT}")
                else:
                    result.status = "skipped"
                    result.messages.append(f"NOT VALIDATED: {where}. To validate it, {CRD_DIR_HINT}")
        if result.status != "skipped" and result.messages:
            result.status = "error"
        report.results.append(result)
    return report


def load_objects(path: str | Path, *, trusted: bool = False
                 ) -> tuple[list[tuple[str, Any]], list[ObjectResult]]:
    """Every document of every .yaml/.yml/.json file under ``path`` (a file or a directory).
    ``trusted``: the kit's renderer wrote these files just now, so the fast C loader reads them;
    anything else goes through the loader that refuses aliases."""
    loader = _LOADER if trusted else _ManifestLoader
    root = Path(path)
    files = [root] if root.is_file() else sorted(
        p for p in root.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml", ".json"))
    objects, broken = [], []
    for f in files:
        rel = str(f.relative_to(root)) if root.is_dir() else str(f)
        try:
            docs = [d for d in yaml.load_all(f.read_text(), Loader=loader)
                    if d is not None]
        except yaml.YAMLError as err:
            broken.append(ObjectResult(rel, "?", "?", "error", "", [f"not valid YAML: {err}"]))
            continue
        for i, doc in enumerate(docs):
            objects.append((rel if len(docs) == 1 else f"{rel}#{i}", doc))
    return objects, broken


def validate_path(path: str | Path, *, kubernetes_version: str, crd_dir: str | Path | None,
                  strict: bool, crd_source: str | None = None,
                  trusted: bool = False) -> ValidationReport:
    """Validate every object in a rendered tree (or one file); ``trusted`` as in load_objects."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root} does not exist: render first (rlkit render ... --out {root})")
    objects, broken = load_objects(root, trusted=trusted)
    report = validate_objects(objects, kubernetes_version=kubernetes_version, crd_dir=crd_dir,
                              strict=strict, crd_source=crd_source)
    report.results = broken + report.results
    if not objects and not broken:
        report.results.append(ObjectResult(str(root), "?", "?", "error", "", [
            "no .yaml/.yml/.json files found: nothing to validate"]))
    return report
