"""Render the Kubernetes objects of one environment from a ``RenderContext``.

Each template under ``manifests/templates/`` makes one Kubernetes object; ``plan_files`` says
which template goes to which file of the output tree and with which per-object values. Jinja
runs with ``StrictUndefined``, so a template naming a value the context lacks fails loudly
instead of printing nothing [Jinja API docs, "Undefined Types"].

Output tree (``kubectl apply -f <dir>`` applies one directory's files in name order):

    00-namespace.yaml            Namespace
    01-networkpolicy.yaml        NetworkPolicy: only the namespace's pods and KubeRay reach its pods
    01-serviceaccount.yaml       trainer ServiceAccount (Pod Identity binds the IAM role to it;
                                 only the Ray head runs as it)
    02-shared-fs-pv.yaml         PersistentVolume of the shared FSx for Lustre file system
    03-shared-fs-pvc.yaml        its PersistentVolumeClaim (ReadWriteMany), mounted by the RL job
    rl-job/00-compute-domain.yaml  ComputeDomain (UltraServers only; also one per fabric job)
    rl-job/00-run-config.yaml    ConfigMap holding run.yaml
    rl-job/01-disruption-budget.yaml  PodDisruptionBudget: no drain of the run's GPU pods
                                 (not on a Capacity Block)
    rl-job/02-rayjob-retry-role.yaml, 03-...-rolebinding.yaml  the launcher may stop retries
    rl-job/04-rayjob.yaml        KubeRay RayJob (last: what it needs exists before it runs)
    fabric/nodecheck/00-job.yaml
    fabric/allreduce/00-service.yaml, 01-job.yaml
    fabric/ep/00-service.yaml, 01-job.yaml
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import jinja2
import yaml

from infra import names
from infra.addons import addon
from infra.names import HOSTNAME_LABEL
from manifests.context import (
    COMPUTE_DOMAIN_API,
    COMPUTE_DOMAIN_CLAIM,
    COMPUTE_DOMAIN_LABEL,
    GENERATED_MARKER,
    GPU_CLIQUE_LABEL,
    SUBMITTER_BACKOFF_LIMIT,
    WORKLOAD_LABEL,
    RenderContext,
    head_workload,
)
from manifests.errors import RenderError, RenderProblem

# KubeRay's name for the submitter container (ray-project/kuberay@59d663aeec13, tag v1.7.0,
# ray-operator/controllers/ray/utils/constant.go:356, SubmitterContainerName; its default submitter
# container has it, common/job.go:232). In K8sJobMode KubeRay fills in the command of the
# submitter template's first container, whatever its name, when that command is empty
# (rayjob_controller.go:591, Containers[RayContainerIndex = 0]; :643-647); the name matters to
# KubeRay only in SidecarMode (:1203, :1218, :1398). The kit renders one container, named as
# KubeRay's default one.
SUBMITTER_CONTAINER = "ray-job-submitter"
# Files every job of the environment needs before its own directory is applied (in this order).
SHARED_FS_FILES = ("02-shared-fs-pv.yaml", "03-shared-fs-pvc.yaml")
RAYJOB_FILE = "rl-job/04-rayjob.yaml"  # sorts last in rl-job/ (plan_files says why)
# What `rlkit gate` and `rlkit launch` apply before any pod of the namespace exists: the
# namespace, the NetworkPolicy every pod of it falls under, the trainer's service account.
NAMESPACE_FILES = ("00-namespace.yaml", "01-networkpolicy.yaml", "01-serviceaccount.yaml")
# How a render before the namespace-wide policy labelled its Ray-head-only one
# (rl-job/01-head-networkpolicy.yaml, named <run>-ray-head): `rlkit launch` deletes those.
LEGACY_HEAD_POLICY_SELECTOR = ("app.kubernetes.io/component=ray-head-ingress,"
                               "app.kubernetes.io/managed-by=rlkit")

TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("manifests", "templates"),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    autoescape=False,  # YAML, not HTML
)


# The self-check parses the kit's own output: libyaml's parser where PyYAML has it (the same
# objects, about ten times faster than the pure-Python one).
_OWN_OUTPUT_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _IndentedDumper(yaml.SafeDumper):
    """Indent sequences inside mappings (kubectl's style); PyYAML does not by default."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _multiline_literal(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    """A string of several lines (the Ray head's preStop script) as a literal block, read as written."""
    style = "|" if "\n" in value.rstrip("\n") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_IndentedDumper.add_representer(str, _multiline_literal)


# A render formats the same few values thousands of times (labels, tolerations, env lists: in
# the tests' renders, 9,000 scalars of 93 distinct values and 4,500 collections of 201), and
# PyYAML's emitter is pure Python. Values made only of dict, list, str, int, float, bool and None
# are formatted once, keyed by their repr (which tells 1 from True and 1.0, and {1: x} from
# {'1': x}); anything else (an Enum, a str subclass) is formatted every time.
_PLAIN = (str, int, float, bool, type(None))
_FORMATTED: dict[tuple[str, str], str] = {}


def _plain(value: Any) -> bool:
    if type(value) is dict:
        return all(type(k) in _PLAIN and _plain(v) for k, v in value.items())
    if type(value) is list:
        return all(_plain(v) for v in value)
    return type(value) in _PLAIN


def _formatted(kind: str, value: Any, dump: Callable[[Any], str]) -> str:
    if not _plain(value):
        return dump(value)
    key = (kind, repr(value))
    text = _FORMATTED.get(key)
    if text is None:
        if len(_FORMATTED) >= 4096:
            _FORMATTED.clear()
        text = _FORMATTED[key] = dump(value)
    return text


def _dump_scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 20)
    return text.removesuffix("\n...\n").removesuffix("\n")


def _dump_block(value: Any) -> str:
    return yaml.dump(value, Dumper=_IndentedDumper, sort_keys=False, default_flow_style=False,
                     width=1 << 20).rstrip("\n")


def _yaml_scalar(value: Any) -> str:
    """One scalar as YAML, quoted only where YAML needs it ('8' stays a string, etc.)."""
    if isinstance(value, (dict, list)):
        raise TypeError("q is for scalars; use to_yaml for collections")
    return _formatted("scalar", value, _dump_scalar)


def _to_yaml(value: Any) -> str:
    """A collection as block YAML without the final newline (pair it with Jinja's indent)."""
    return _formatted("block", value, _dump_block)


TEMPLATES.filters["q"] = _yaml_scalar
TEMPLATES.filters["to_yaml"] = _to_yaml
TEMPLATES.globals["HOSTNAME_LABEL"] = HOSTNAME_LABEL
TEMPLATES.globals["WORKLOAD_LABEL"] = WORKLOAD_LABEL
TEMPLATES.globals["SUBMITTER_BACKOFF_LIMIT"] = SUBMITTER_BACKOFF_LIMIT
# Resource names a GPU pod requests: one definition, shared with the CDK side (infra/names.py).
TEMPLATES.globals["GPU_RESOURCE"] = names.GPU_RESOURCE
TEMPLATES.globals["EFA_RESOURCE"] = names.EFA_RESOURCE
TEMPLATES.globals["HUGEPAGES_2MI_RESOURCE"] = names.HUGEPAGES_2MI_RESOURCE
TEMPLATES.globals["GPU_CLIQUE_LABEL"] = GPU_CLIQUE_LABEL
TEMPLATES.globals["COMPUTE_DOMAIN_CLAIM"] = COMPUTE_DOMAIN_CLAIM
TEMPLATES.globals["COMPUTE_DOMAIN_API"] = COMPUTE_DOMAIN_API
TEMPLATES.globals["COMPUTE_DOMAIN_LABEL"] = COMPUTE_DOMAIN_LABEL
TEMPLATES.globals["workload_domain"] = lambda ctx, workload: ctx.compute_domains.get(workload)


@dataclass(frozen=True)
class FileSpec:
    path: str  # relative to the output directory
    template: str
    kind: str
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RenderedFile:
    path: str
    kind: str
    name: str
    text: str
    obj: dict[str, Any]


def _meta(ctx: RenderContext, name: str, component: str, *, namespaced: bool = True,
          annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": ctx.namespace if namespaced else None,
        "labels": {**ctx.labels, "app.kubernetes.io/component": component},
        "annotations": {**ctx.annotations, **(annotations or {})},
    }


def _pod_labels(ctx: RenderContext, component: str, workload: str) -> dict[str, str]:
    labels = {**ctx.labels, "app.kubernetes.io/component": component, WORKLOAD_LABEL: workload}
    if (domain := ctx.compute_domains.get(workload)) is not None:
        labels[COMPUTE_DOMAIN_LABEL] = domain.name
    return labels


def _compute_domain_file(ctx: RenderContext, directory: str, workload: str) -> FileSpec:
    # "00-compute-domain" sorts before the directory's other files: `kubectl apply -f <dir>`
    # creates it (and the driver its ResourceClaimTemplate) before the pods that claim it.
    domain = ctx.compute_domains[workload]
    return FileSpec(f"{directory}/00-compute-domain.yaml", "compute-domain.yaml.j2",
                    "ComputeDomain", {"meta": _meta(ctx, domain.name, "compute-domain"),
                                      "domain": domain})


def plan_files(ctx: RenderContext) -> list[FileSpec]:
    """Which object goes where, with the per-object values its template prints."""
    worker_workload = f"{ctx.rayjob_name}-worker"
    files = [
        FileSpec("00-namespace.yaml", "namespace.yaml.j2", "Namespace",
                 {"meta": _meta(ctx, ctx.namespace, "namespace", namespaced=False)}),
        FileSpec("01-networkpolicy.yaml", "networkpolicy.yaml.j2", "NetworkPolicy", {
            "meta": _meta(ctx, f"{ctx.namespace}-ingress", "namespace-ingress"),
            "operator_namespace": addon("kuberay_operator").namespace}),
        FileSpec("01-serviceaccount.yaml", "serviceaccount.yaml.j2", "ServiceAccount", {
            "meta": _meta(ctx, ctx.service_account, "trainer-identity", annotations={
                # Informational: EKS Pod Identity binds the role; no IRSA annotation is needed.
                "rlkit.aws/pod-identity-role": ctx.trainer_role_arn}),
        }),
        FileSpec("rl-job/00-run-config.yaml", "run-configmap.yaml.j2", "ConfigMap",
                 {"meta": _meta(ctx, ctx.configmap_name, "run-config")}),
        *([FileSpec("rl-job/01-disruption-budget.yaml", "disruption-budget.yaml.j2",
                    "PodDisruptionBudget", {
                        "meta": _meta(ctx, ctx.rayjob_name, "rl-job-disruption-budget"),
                        "workloads": [f"{ctx.rayjob_name}-head", worker_workload]})]
          if ctx.disruption_budget else []),
        FileSpec("rl-job/02-rayjob-retry-role.yaml", "rayjob-retry-role.yaml.j2", "Role",
                 {"meta": _meta(ctx, f"{ctx.rayjob_name}-retry", "rayjob-retry")}),
        FileSpec("rl-job/03-rayjob-retry-rolebinding.yaml", "rayjob-retry-rolebinding.yaml.j2",
                 "RoleBinding", {"meta": _meta(ctx, f"{ctx.rayjob_name}-retry", "rayjob-retry"),
                                 "role_name": f"{ctx.rayjob_name}-retry"}),
        # The RayJob last: `kubectl apply -f rl-job/` goes in name order, so an apply cut short
        # (Ctrl-C, a refused object) never leaves a running job without its run config or the
        # Role that lets the launcher stop its retries; a rerun applies them all again.
        FileSpec(RAYJOB_FILE, "rayjob.yaml.j2", "RayJob", {
            "meta": _meta(ctx, ctx.rayjob_name, "rl-job", annotations={
                "rlkit.aws/node-group": f"{ctx.worker.node_group} ({ctx.nodegroup_name})"}),
            "head_labels": _pod_labels(ctx, "ray-head", head_workload(ctx.rayjob_name)),
            "worker_labels": _pod_labels(ctx, "ray-worker", worker_workload),
            "worker_workload": worker_workload,
            "submitter_labels": _pod_labels(ctx, "ray-job-submitter", f"{ctx.rayjob_name}-submitter"),
            "submitter_container": SUBMITTER_CONTAINER,
        }),
    ]
    if worker_workload in ctx.compute_domains:
        files.insert(len(NAMESPACE_FILES), _compute_domain_file(ctx, "rl-job", worker_workload))
    if ctx.shared_fs is not None:
        pv_file, pvc_file = SHARED_FS_FILES
        files[len(NAMESPACE_FILES):len(NAMESPACE_FILES)] = [
            FileSpec(pv_file, "shared-fs-pv.yaml.j2", "PersistentVolume", {
                "meta": _meta(ctx, ctx.shared_fs.pv_name, "shared-fs", namespaced=False),
                "csi_driver": names.SHARED_FS_CSI_DRIVER}),
            FileSpec(pvc_file, "shared-fs-pvc.yaml.j2", "PersistentVolumeClaim", {
                "meta": _meta(ctx, ctx.shared_fs.pvc_name, "shared-fs")}),
        ]
    for job in ctx.fabric:
        directory = f"fabric/{job.key}"
        index = 0
        if job.name in ctx.compute_domains:
            files.append(_compute_domain_file(ctx, directory, job.name))
        if job.service is not None:
            files.append(FileSpec(f"{directory}/00-service.yaml", "fabric-service.yaml.j2",
                                  "Service", {"meta": _meta(ctx, job.service, job.component),
                                              "job": job}))
            index = 1
        files.append(FileSpec(f"{directory}/{index:02d}-job.yaml", "fabric-job.yaml.j2", "Job", {
            "meta": _meta(ctx, job.name, job.component,
                          annotations={"rlkit.aws/description": job.description}),
            "job": job,
            "pod_labels": _pod_labels(ctx, job.component, job.name),
        }))
    return files


def comment_line(text: str) -> str:
    """One YAML comment line: line breaks and other non-printable characters escaped (\\n,
    \\u2028...), so a user string (a path with a newline) can never end the comment and start a
    key of the object."""
    safe = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
                   for ch in text)
    return safe if safe.startswith("#") else f"# {safe}"


def render(ctx: RenderContext) -> list[RenderedFile]:
    """Render every planned file; each must parse as exactly one object of the planned kind."""
    ctx = ctx.model_copy(update={"banner": [comment_line(line) for line in ctx.banner]})
    rendered = []
    for spec in plan_files(ctx):
        text = TEMPLATES.get_template(spec.template).render(ctx=ctx, **spec.values)
        text = text.rstrip("\n") + "\n"
        docs = [d for d in yaml.load_all(text, Loader=_OWN_OUTPUT_LOADER) if d is not None]
        if len(docs) != 1 or docs[0].get("kind") != spec.kind:
            raise AssertionError(  # a template bug, not a user error
                f"template {spec.template} must render one {spec.kind}, got "
                f"{[d.get('kind') for d in docs]}")
        obj = docs[0]
        rendered.append(RenderedFile(spec.path, spec.kind, obj["metadata"]["name"], text, obj))
    return rendered


def _written_by_us(path: Path) -> bool:
    try:
        with path.open() as f:
            return f.readline().startswith(GENERATED_MARKER)
    except (OSError, UnicodeDecodeError):
        return False


def out_dir_problem(out_dir: str | Path, environment: str | None = None,
                    keep: Iterable[str | Path] = ()) -> RenderProblem | None:
    """Why ``out_dir`` cannot take a rendered tree, or None when it can.

    ``write`` swaps the whole directory in (a path that is a file would be renamed away and
    deleted) and, where files it did not write live, removes every file an earlier render wrote
    anywhere under it. So it must be a directory of its own: not a file or a symbolic link (the
    swap would replace the link, not write where it points), not a repository's root, and not
    the working directory, ``keep`` (the config file) or a directory above them."""
    out = Path(out_dir)
    fix = f"pass a directory such as out/{environment or '<name>'} to --out"
    subject = f"output directory {out}"
    if out.is_symlink():
        return RenderProblem(
            subject, f"is a symbolic link (to {os.readlink(out)}); the render swaps in a new "
            "directory under this name, which would replace the link instead of writing where it "
            "points", f"{fix}, or the directory the link points to")
    if out.exists() and not out.is_dir():
        what = "a file" if out.is_file() else "not a directory"
        return RenderProblem(
            subject, f"is {what}, not a directory; rendering there would replace it with a "
            "directory of manifests", fix)
    if out.is_dir() and (out / ".git").exists():
        return RenderProblem(
            subject, "is the root of a git repository; the manifests would land among its files "
            "and the render would remove any file an earlier render wrote anywhere in it", fix)
    resolved = out.resolve()
    above = [(Path.cwd(), "is the working directory or a directory above it")]
    above += [(Path(k), f"holds the config file {k}") for k in keep]
    for path, what in above:
        if resolved == path.resolve() or resolved in path.resolve().parents:
            return RenderProblem(
                subject, f"{what}; the manifests would land among its files and the render would "
                "remove any file an earlier render wrote anywhere under it", fix)
    return None


def check_out_dir(out_dir: str | Path, environment: str | None = None,
                  keep: Iterable[str | Path] = ()) -> None:
    """Raise RenderError when ``out_dir`` cannot take a rendered tree (``out_dir_problem``);
    the commands that write manifests call it before they read anything else."""
    problem = out_dir_problem(out_dir, environment, keep)
    if problem is not None:
        raise RenderError([problem], "--out")


def write(files: list[RenderedFile], out_dir: str | Path,
          check: Callable[[Path], bool] | None = None) -> list[Path] | None:
    """Write the tree, all or nothing: files a previous render wrote and this one does not are
    removed; files without our marker line are left alone (and would be applied by
    ``kubectl apply``). Raises RenderError, changing nothing, for an ``out_dir`` that is not a
    directory of its own (``out_dir_problem``).

    The new tree is written to a temporary directory beside ``out_dir`` first; ``check`` (e.g.
    offline validation) runs on it there, and only when it passes does the tree replace
    ``out_dir``. Returns the written paths, or None (nothing changed) when the check fails.
    """
    out = Path(out_dir)
    check_out_dir(out)
    created = [p for p in reversed(out.parents) if not p.exists()]
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.render-"))
    done = False
    try:
        for f in files:
            path = staging / f.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f.text)
        if check is not None and not check(staging):
            return None
        foreign = [p for p in out.rglob("*") if p.is_file() and not _written_by_us(p)] \
            if out.exists() else []
        if not out.exists():
            os.rename(staging, out)
        elif not foreign:
            # Only our files: swap the directories (a rename each), then drop the old tree.
            old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
            os.rename(out, old / "tree")
            os.rename(staging, out)
            shutil.rmtree(old)
        else:
            # Foreign files live in the tree: keep them, replace ours file by file.
            _merge(staging, out, files)
        done = True
        return [out / f.path for f in files]
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if not done:  # leave no empty parent directories behind either
            for parent in reversed(created):
                try:
                    parent.rmdir()
                except OSError:
                    break


def _merge(staging: Path, out: Path, files: list[RenderedFile]) -> None:
    keep = {out / f.path for f in files}
    emptied: set[Path] = set()
    for old in sorted(out.rglob("*")):
        if old.is_file() and old.suffix in (".yaml", ".yml") and old not in keep \
                and _written_by_us(old):
            old.unlink()
            emptied.add(old.parent)
    for f in files:
        path = out / f.path
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / f.path, path)
    # Only the directories our deletes emptied go (deepest first, up to out): an empty directory
    # someone else made under out is theirs.
    for d in sorted(emptied, key=lambda p: len(p.parts), reverse=True):
        while d != out and d.is_dir() and not any(d.iterdir()):
            d.rmdir()
            d = d.parent


def tree(out_dir: str | Path) -> str:
    """The written file tree as text, like `tree` prints it."""
    out = Path(out_dir)
    lines = [f"{out}/"]

    def walk(directory: Path, prefix: str) -> None:
        entries = sorted(directory.iterdir(), key=lambda p: (p.is_file(), p.name))
        for i, entry in enumerate(entries):
            last = i == len(entries) - 1
            lines.append(f"{prefix}{'└── ' if last else '├── '}{entry.name}"
                         f"{'/' if entry.is_dir() else ''}")
            if entry.is_dir():
                walk(entry, prefix + ("    " if last else "│   "))

    walk(out, "")
    return "\n".join(lines)


def describe(files: list[RenderedFile]) -> str:
    """One line per object: path, kind, name (for the CLI and the docs)."""
    return "\n".join(f"{f.path}: {f.kind} {f.name}" for f in files)


__all__ = ["FileSpec", "RenderedFile", "NAMESPACE_FILES", "LEGACY_HEAD_POLICY_SELECTOR",
           "check_out_dir", "comment_line", "out_dir_problem", "plan_files", "render", "write",
           "tree", "describe"]
