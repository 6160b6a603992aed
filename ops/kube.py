"""A thin kubectl wrapper: argv in, text or JSON out, failures as messages that say what to do.

The CLI shells out to the kubectl the operator already uses (same kubeconfig, same context) rather
than talking to the API server itself: what `rlkit` runs can be copied and run by hand, and
``--dry-run`` prints exactly those commands instead of running them.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from infra import names

KUBECONFIG_FIX = ("point kubectl at the cluster: aws eks update-kubeconfig --name <cluster> "
                  "--region <region> (the cluster stack's UpdateKubeconfigCommand output)")


# kubectl logs through klog: `E1130 14:48:24.106592    3593 memcache.go:265] <message>`. API
# discovery retries log the same failure five times before kubectl's own one-line verdict.
_KLOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [^\]]+\] (.*)$")
_KLOG_ERR = re.compile(r'err="((?:[^"\\]|\\.)*)"')


def error_text(stderr: str) -> str:
    """kubectl's error, each message once: its own verdict lines when it printed any, else the
    distinct klog messages (their headers and quoting stripped)."""
    verdicts: list[str] = []
    logged: list[str] = []
    for line in (stderr or "").splitlines():
        line = line.strip()
        if not line:
            continue
        klog = _KLOG_LINE.match(line)
        if klog is None:
            if line not in verdicts:
                verdicts.append(line)
            continue
        message = klog.group(1)
        err = _KLOG_ERR.search(message)
        if err is not None:
            message = err.group(1).replace('\\"', '"')
        if message not in logged:
            logged.append(message)
    return "; ".join(verdicts or logged)


class KubectlError(RuntimeError):
    """A kubectl command that failed, with its stderr and a fix."""

    def __init__(self, command: str, message: str, fix: str = KUBECONFIG_FIX):
        self.command = command
        self.message = message
        self.fix = fix
        super().__init__(f"`{command}` failed: {message}. Fix: {fix}.")


class KubectlNotFound(KubectlError):
    """kubectl itself is missing (not on PATH)."""


class NoKubeContext(KubectlError):
    """There is no kubectl context to check here: kubectl is not installed, or no context is
    selected (no kubeconfig at all, or one without a current-context) and none was passed with
    --context. The real commands refuse it like any other KubectlError; a dry run reports the
    context as not checked (``preview_cluster_check``)."""


# No kubectl call may hang the CLI: each runs under a hard time limit (the process is killed and
# the error says so). Waits that kubectl bounds itself (delete --wait --timeout) get that bound
# plus this margin. `logs -f` follows interactively and is the one unbounded call.
COMMAND_TIMEOUT_S = 120.0
WAIT_MARGIN_S = 60.0


# How long the first call to the API server may take before rlkit says it is unreachable
# (`--request-timeout`); kubectl's own default waits for the operating system's TCP timeout.
REQUEST_TIMEOUT_S = 10.0
# A kubectl that ignores its own --request-timeout is stopped this much later.
REQUEST_KILL_MARGIN_S = 5.0


class Kubectl:
    def __init__(self, binary: str = "kubectl", context: str | None = None,
                 dry_run: bool = False, echo: Callable[[str], None] = print,
                 timeout_s: float = COMMAND_TIMEOUT_S,
                 request_timeout_s: float | None = REQUEST_TIMEOUT_S,
                 progress: Callable[[str], None] | None = None):
        self.binary = binary
        self.context = context
        self.dry_run = dry_run
        self.echo = echo
        self.timeout_s = timeout_s
        self.request_timeout_s = request_timeout_s
        # where the progress line goes while waiting for the API server (stderr by default)
        self.progress = progress

    def argv(self, args: Sequence[str]) -> list[str]:
        ctx = ["--context", self.context] if self.context else []
        return [self.binary, *ctx, *args]

    def command(self, args: Sequence[str]) -> str:
        return shlex.join(self.argv(args))

    def run(self, args: Sequence[str], *, check: bool = True, timeout: float | None = None,
            local: bool = False) -> subprocess.CompletedProcess:
        """Run kubectl under a time limit (``timeout``, else the client's); in dry-run mode print
        the command and return an empty success, unless ``local`` (a command that only reads the
        kubeconfig, such as ``config view``: dry runs run it too)."""
        cmd = self.command(args)
        timeout = self.timeout_s if timeout is None else timeout
        if self.dry_run and not local:
            self.echo(f"[dry-run] {cmd}")
            return subprocess.CompletedProcess(self.argv(args), 0, "", "")
        try:
            proc = subprocess.run(self.argv(args), capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            raise KubectlNotFound(cmd, f"{self.binary} is not installed or not on PATH",
                                  "install kubectl (https://kubernetes.io/docs/tasks/tools/) and "
                                  "run the command again") from None
        except subprocess.TimeoutExpired:
            raise KubectlError(cmd, f"no answer within {timeout:.0f} s (kubectl was stopped)",
                               "check that the cluster endpoint is reachable from here (VPN, "
                               "the endpoint's public_cidrs, `kubectl get --raw /healthz`)"
                               ) from None
        if check and proc.returncode != 0:
            raise KubectlError(cmd, error_text(proc.stderr) or proc.stdout.strip() or
                               f"exit code {proc.returncode}")
        return proc

    def get_json(self, args: Sequence[str]) -> dict[str, Any] | None:
        """`kubectl get ... -o json`; None when the object does not exist (or in dry-run)."""
        proc = self.run(["get", *args, "-o", "json", "--ignore-not-found"])
        text = proc.stdout.strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise KubectlError(self.command(["get", *args, "-o", "json"]),
                               f"not JSON ({err})", "check the kubectl version") from None

    def apply(self, paths: Sequence[Path | str]) -> str:
        args = ["apply"]
        for p in paths:
            args += ["-f", str(p)]
        return self.run(args).stdout

    def delete(self, paths: Sequence[Path | str], wait: bool = True,
               timeout_s: int = 120, cascade: str | None = None) -> str:
        """``cascade="foreground"``: the objects go only after what they own (with ``wait``, the
        call returns once those are gone too)."""
        args = ["delete", "--ignore-not-found", f"--wait={'true' if wait else 'false'}"]
        if cascade is not None:
            args.append(f"--cascade={cascade}")
        if wait:
            args.append(f"--timeout={timeout_s}s")
        for p in paths:
            args += ["-f", str(p)]
        return self.run(args, timeout=timeout_s + WAIT_MARGIN_S if wait else None).stdout

    def logs(self, pod: str, namespace: str) -> str:
        proc = self.run(["logs", "-n", namespace, pod, "--all-containers"], check=False)
        return proc.stdout + (proc.stderr if proc.returncode else "")

    def stream(self, args: Sequence[str]) -> int:
        """Run with the terminal attached (kubectl logs -f); returns the exit code."""
        if self.dry_run:
            self.echo(f"[dry-run] {self.command(args)}")
            return 0
        try:
            return subprocess.call(self.argv(args))
        except FileNotFoundError:
            raise KubectlNotFound(self.command(args), f"{self.binary} is not installed or not "
                                  "on PATH", "install kubectl and run the command again") from None

    def reachable(self) -> None:
        """Ask the API server whether it is ready (``get --raw /readyz``) within
        ``request_timeout_s``, saying so on the progress line first; KubectlError naming the
        context and the wait when it does not answer."""
        if self.dry_run or not self.request_timeout_s:
            return
        wait = self.request_timeout_s
        say = self.progress or (lambda line: print(line, file=sys.stderr, flush=True))
        say(f"Contacting the API server of kubectl context {self.context or '(current)'} (up to "
            f"{wait:g} s)...")
        args = ["get", "--raw", "/readyz", f"--request-timeout={wait:g}s"]
        try:
            self.run(args, timeout=wait + REQUEST_KILL_MARGIN_S)
        except KubectlError as err:
            raise KubectlError(
                self.command(args), f"no answer from the API server (waited up to {wait:g} s): "
                f"{err.message}",
                "check that the cluster's endpoint is reachable from here (VPN, proxy, the "
                "endpoint's public_cidrs in the config), or wait longer with --request-timeout"
                ) from None


def _eks_cluster_of(doc: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(context, cluster entry, EKS cluster named by the user's `aws eks get-token` args)."""
    contexts = doc.get("contexts") or [{}]
    context = contexts[0].get("name")
    entry = (contexts[0].get("context") or {}).get("cluster")
    named = None
    for user in doc.get("users") or []:
        args = ((user.get("user") or {}).get("exec") or {}).get("args") or []
        for flag in ("--cluster-name", "--cluster-id"):
            if flag in args and args.index(flag) + 1 < len(args):
                named = args[args.index(flag) + 1]
    return context, entry, named


# What kubectl says when no context is selected: client-go's MinifyConfig
# (tools/clientcmd/api/helpers.go) returns this error when current-context is empty, which is
# also what an absent kubeconfig gives (kubectl 1.32 prints "error: current-context must exist
# in order to minify"). A context named with --context that does not exist is a different error
# ("cannot locate context ...") and stays a refusal.
_NO_CONTEXT = "current-context must exist in order to minify"


def match_context(k: Kubectl, cluster_name: str, region: str) -> str:
    """The local half of the context check, shared by the real commands and their dry runs: read
    the (current or --context) context with ``kubectl config view --minify`` (kubeconfig only, no
    API call, so it runs in dry runs too) and return its name when it points at EKS cluster
    ``cluster_name`` in ``region``. It matches when the context's cluster entry is the cluster's
    ARN (``aws eks update-kubeconfig`` names it so) or its credentials ask EKS for a token for
    this cluster name. Raises NoKubeContext when there is no context to check (kubectl missing,
    none selected and no --context), KubectlError naming both clusters when it points elsewhere
    (or the kubeconfig cannot be read)."""
    args = ["config", "view", "--minify", "-o", "json"]
    fix = (f"point kubectl at this environment's cluster: aws eks update-kubeconfig --name "
           f"{cluster_name} --region {region} (or pass --context with its context)")
    nothing_named = k.context is None
    try:
        proc = k.run(args, check=False, local=True)
    except KubectlNotFound as err:
        raise (NoKubeContext(err.command, err.message, err.fix) if nothing_named else err) from None
    if proc.returncode != 0:
        message = error_text(proc.stderr) or proc.stdout.strip() or f"exit code {proc.returncode}"
        absent = nothing_named and _NO_CONTEXT in message
        raise (NoKubeContext if absent else KubectlError)(k.command(args), message, fix)
    try:
        doc = json.loads(proc.stdout or "{}")
    except json.JSONDecodeError:
        doc = {}
    context, entry, named = _eks_cluster_of(doc)
    if context is None:
        raise (NoKubeContext if nothing_named else KubectlError)(
            k.command(args), "no kubectl context is selected", fix)
    arn = re.fullmatch(r"arn:aws[a-z-]*:eks:([a-z0-9-]+):\d{12}:cluster/(.+)", entry or "")
    if arn is not None:
        ok = arn.groups() == (region, cluster_name)
    else:
        ok = named == cluster_name
    if not ok:
        raise KubectlError(
            k.command(args), f"context {context!r} points at cluster {entry or named!r}, not "
            f"this environment's EKS cluster {cluster_name} in {region}; nothing was applied or "
            "deleted", fix)
    return context


def check_cluster(k: Kubectl, cluster_name: str, region: str) -> str:
    """Make sure kubectl talks to this environment's EKS cluster, and pin that context.

    ``match_context`` checks the context locally. On a match ``k.context`` is set to it, so that
    every later call goes to the same cluster even if the current context changes meanwhile (a
    dry run previews its commands pinned the same way), and, except in a dry run, the API server
    is asked whether it answers (``Kubectl.reachable``: seconds, not minutes). Returns the context
    name; raises KubectlError (NoKubeContext when there is none) otherwise."""
    context = match_context(k, cluster_name, region)
    k.context = context
    if k.dry_run:
        k.echo(f"[dry-run] context check: {context} points at EKS cluster {cluster_name} in "
               f"{region} (read from the kubeconfig; a dry run does not contact the API server)")
    else:
        k.reachable()
    return context


def preview_cluster_check(k: Kubectl, cluster_name: str, region: str, command: str) -> int:
    """A dry run's context check (``check_cluster``, the real commands' own): 0 when the real
    ``command`` would go on, or when there is no kubectl context here to check (no kubeconfig or
    no kubectl: a CI job before the cluster exists), which it says; else 2, the exit code the real
    command stops with, after printing why. The preview goes on either way (docs/cli.md)."""
    try:
        check_cluster(k, cluster_name, region)
    except NoKubeContext as err:
        k.echo(f"[dry-run] context check: not run, there is no kubectl context here "
               f"({err.message}); the real {command} refuses until there is. Fix: {err.fix}")
        return 0
    except KubectlError as err:
        k.echo(f"[dry-run] the real {command} would REFUSE (exit 2): {err}")
        return 2
    return 0


def gpu_group_selector(group: str) -> str:
    """The label selector of GPU node group ``group``'s nodes (the labels the kit sets on them)."""
    return ",".join(f"{k}={v}" for k, v in names.gpu_node_labels(group).items())


def objects_in(path: Path) -> list[tuple[str, str, str | None]]:
    """(kind, name, namespace) of every object in the YAML files under ``path``."""
    import yaml

    files = sorted(path.rglob("*.yaml")) if path.is_dir() else [path]
    found = []
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            if isinstance(doc, dict) and "kind" in doc:
                meta = doc.get("metadata", {})
                found.append((doc["kind"], meta.get("name", "?"), meta.get("namespace")))
    return found


def kubectl_for(args: Any) -> Kubectl:
    """kubectl as a command's options ask for (--context, --dry-run, --request-timeout)."""
    return Kubectl(context=args.context, dry_run=getattr(args, "dry_run", False), echo=print,
                   request_timeout_s=args.request_timeout)


def pinned_kubectl(args: Any, cfg: Any) -> Kubectl:
    """kubectl pinned to the cluster of config ``cfg`` (names.eks_cluster_name, its region);
    KubectlError when the context points elsewhere or the API server does not answer."""
    k = kubectl_for(args)
    check_cluster(k, names.eks_cluster_name(cfg.name), cfg.region)
    return k
