"""Running the fabric acceptance jobs on the cluster: one job at a time through kubectl.

``GateRunner`` applies a job, waits for it with progress (and a heartbeat while nothing
changes), collects its pods' logs and deletes it; a failed node check stops it before the
benchmarks. It first deletes the fabric Jobs an earlier, interrupted run of this environment left
(bisection's subset jobs too), saying so. A kubectl call that fails is tried again a few times
before it ends the gate (exit 2): an API server that throttles or restarts must not end an hour of
jobs, nor turn into a fabric verdict. After Ctrl-C, SIGTERM (a CI job cancelled) or SIGHUP (the SSH
session dropped) it deletes what it applied, or says exactly what is left (``GateInterrupted``).
Judging the logs is ``ops.gate.judges``'.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from infra.catalog import INSTANCE_TYPES
from manifests.context import SharedFs
from manifests.render import NAMESPACE_FILES
from ops.gate.findings import FAIL, Finding
from ops.gate.judges import judge_allocatable, judge_nodecheck
from ops.gate.bisect import NOT_STARTED, subset_job
from ops.gate.traffic import POD_LINE
from ops.kube import Kubectl, KubectlError, KubectlNotFound, objects_in
from ops.shared_volume import ensure_shared_volume

# Failed reads of a running job in a row that the wait rides out (polls apart) before it gives up;
# every other kubectl call of the gate is tried this many times in all, RETRY_BACKOFF_S, twice that,
# ... apart.
POLL_FAILURES_TOLERATED = 5
RETRY_BACKOFF_S = 2.0
# While a job's state does not change the wait prints nothing; after this long it says it is still
# waiting (a CI log or a terminal that shows no sign of life for an hour looks hung).
HEARTBEAT_S = 300.0
# The signals that stop the gate the way Ctrl-C does: deleting what it applied first.
STOP_SIGNALS = {signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}


class GateInterrupted(Exception):
    """Ctrl-C, SIGTERM or SIGHUP during the gate; the message says what was cleaned up or is left."""


class _Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the gate is, so that it takes Ctrl-C's way out."""


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``_Stopped`` (a KeyboardInterrupt) while inside; the previous
    handlers come back after. Only the main thread can set handlers: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: Any) -> None:
        raise _Stopped(STOP_SIGNALS.get(signum, str(signum)))

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _started(pod: dict[str, Any]) -> bool:
    """Did the pod's containers ever run (a log to read, a benchmark that ran)?"""
    status = pod.get("status", {})
    phase = status.get("phase")
    if phase in ("Running", "Succeeded"):
        return True
    states = status.get("containerStatuses") or []
    return any((c.get("state") or {}).get("running") or (c.get("state") or {}).get("terminated")
               or (c.get("lastState") or {}).get("terminated") for c in states)


def why_not_started(pod: dict[str, Any]) -> str:
    """The pod's phase and, when it says, why it did not start (scheduling, admission, an image
    pull or a crash loop of an init container or a container). `rlkit status` names a Ray
    cluster's stuck pods with it too."""
    status = pod.get("status", {})
    why = status.get("phase", "Unknown")
    for c in status.get("conditions", []):
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return f"{why}: {c.get('message') or c.get('reason') or 'unschedulable'}"
    if status.get("reason") or status.get("message"):
        why += ": " + " ".join(x for x in (status.get("reason"), status.get("message")) if x)
    # An init container that waits (KubeRay v1.7.0 gives a worker a wait-gcs-ready init container
    # with the worker's image: ray-project/kuberay@59d663aeec13
    # ray-operator/controllers/ray/common/pod.go:610-611)
    # holds the others at PodInitializing: its reason is the one that says why.
    for key, who in (("initContainerStatuses", "init container "), ("containerStatuses", "")):
        for c in status.get(key) or []:
            waiting = (c.get("state") or {}).get("waiting") or {}
            if waiting.get("reason"):
                name = f"{who}{c.get('name', '?')}: " if who else ""
                return (f"{why}: {name}{waiting['reason']}"
                        + (f" ({waiting['message']})" if waiting.get("message") else ""))
    return why


class GateRunner:
    """Applies one fabric job at a time, waits, collects logs, deletes it."""

    def __init__(self, kubectl: Kubectl, namespace: str, out: Path,
                 jobs: list[tuple[str, str]], instance_type: str, nodes: int,
                 timeout_s: float, poll_s: float, echo: Callable[[str], None],
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 node_selector: str | None = None, shared_fs: SharedFs | None = None):
        self.k = kubectl
        self.ns = namespace
        self.out = out
        self.jobs = jobs
        self.instance_type = instance_type
        self.nodes = nodes
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.echo = echo
        self.sleep = sleep
        self.clock = clock
        self.node_selector = node_selector
        self.shared_fs = shared_fs  # the node check mounts it (it writes there)
        self.applied: list[Path] = []
        self.problems: list[Finding] = []
        self.not_started: list[str] = []  # the last waited job's pods that never ran, and why
        self.deadline_passed = False  # the last waited job was failed by its own deadline

    def job_dir(self, key: str) -> Path:
        return self.out / "fabric" / key

    def retry(self, what: str, call: Callable[[], Any]) -> Any:
        """``call()``, tried up to POLL_FAILURES_TOLERATED times while kubectl fails (backing
        off RETRY_BACKOFF_S, twice that, ...); the last failure ends the gate as before."""
        for attempt in range(1, POLL_FAILURES_TOLERATED + 1):
            try:
                return call()
            except KubectlNotFound:
                raise
            except KubectlError as err:
                if attempt == POLL_FAILURES_TOLERATED:
                    raise
                self.echo(f"  could not {what} ({err.message}); trying again ({attempt} of "
                          f"{POLL_FAILURES_TOLERATED - 1})")
                self.sleep(RETRY_BACKOFF_S * 2 ** (attempt - 1))

    def _fabric_labels(self) -> tuple[str | None, list[str]]:
        """This environment's fabric Jobs' instance label and components (the rendered jobs'
        labels; bisection's subset jobs keep them)."""
        instance, components = None, []
        for key, _ in self.jobs:
            for f in sorted(self.job_dir(key).glob("*.yaml")):
                for doc in yaml.safe_load_all(f.read_text()):
                    labels = ((doc or {}).get("metadata") or {}).get("labels") or {}
                    instance = labels.get("app.kubernetes.io/instance", instance)
                    component = labels.get("app.kubernetes.io/component")
                    if component and component not in components:
                        components.append(component)
        return instance, components

    def _fabric_selector(self) -> str | None:
        """The label selector of this environment's fabric Jobs and Services."""
        instance, components = self._fabric_labels()
        if instance is None or not components:
            return None
        return f"app.kubernetes.io/instance={instance},app.kubernetes.io/component in ({','.join(components)})"

    def owns(self, namespace: str, labels: dict[str, str]) -> bool:
        """Whether a pod in ``namespace`` with ``labels`` is one of this environment's fabric
        jobs' (this run's, or one an earlier run left, which the gate deletes first)."""
        instance, components = self._fabric_labels()
        return (namespace == self.ns and instance is not None
                and labels.get("app.kubernetes.io/instance") == instance
                and labels.get("app.kubernetes.io/component") in components)

    def running_fabric_jobs(self) -> tuple[list[str], str | None]:
        """(the fabric Jobs of this environment still running, the label selector that finds
        them): another gate's (a second terminal, a CI job) or one killed before it cleaned up.
        The cluster cannot tell which, so the gate stops rather than delete them."""
        selector = self._fabric_selector()
        if selector is None:
            return [], None
        doc = self.retry("list the fabric jobs of this environment", lambda: self.k.get_json(
            ["jobs", "-n", self.ns, "-l", selector])) or {}
        running = []
        for job in doc.get("items", []):
            st = job.get("status") or {}
            ended = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                        for c in st.get("conditions") or [])
            if not ended and st.get("active"):
                running.append(f"job/{(job.get('metadata') or {}).get('name', '?')} (started "
                               f"{st.get('startTime', '?')}, {st['active']} pod(s) active)")
        return running, selector

    def delete_leftovers(self) -> None:
        """Delete the fabric Jobs (and their Services) an earlier run of this environment left:
        one stopped by SIGKILL or a lost machine, and bisection's subset jobs, which a new run
        would not otherwise know of. Says which first; nothing when there are none. A running one
        stops the gate before it starts (``running_fabric_jobs``), so these have finished."""
        selector = self._fabric_selector()
        if selector is None:
            return
        doc = self.retry("list the fabric jobs left by an earlier run", lambda: self.k.get_json(
            ["jobs,services", "-n", self.ns, "-l", selector])) or {}
        left = [f"{i['kind'].lower()}/{i['metadata']['name']}" for i in doc.get("items", [])]
        if not left:
            return
        self.echo(f"Deleting what an earlier fabric gate of this environment left in namespace "
                  f"{self.ns} (label {selector}): {', '.join(left)}")
        args = ["delete", "jobs,services", "-n", self.ns, "-l", selector, "--ignore-not-found",
                "--wait=true", "--timeout=120s"]
        self.retry("delete them", lambda: self.k.run(args, timeout=180))

    def run(self) -> dict[str, str]:
        logs: dict[str, str] = {}
        try:
            with stop_on_signals():
                self.delete_leftovers()
                # The namespace's NetworkPolicy with it: no fabric pod runs before it exists.
                self.retry("apply the namespace", lambda: self.k.apply(
                    [self.out / name for name in NAMESPACE_FILES]))
                ensure_shared_volume(self.k, self.out, self.shared_fs, self.ns, self.echo)
                for key, name in self.jobs:
                    directory = self.job_dir(key)
                    state, text = self._run_job(name, directory, key)
                    if not self.k.dry_run:
                        logs[key] = text
                    if key == "nodecheck" and self.node_selector is not None and not self.k.dry_run:
                        # Read even when the job did not finish: a node offering fewer EFA devices
                        # than the pod requests is the usual reason a pod stays Pending.
                        selector = self.node_selector
                        nodes = self.retry("read the GPU nodes", lambda: self.k.get_json(
                            ["nodes", "-l", selector])) or {}
                        logs["nodes"] = json.dumps(nodes, indent=1)
                    if state != "complete":
                        self.problems.append(self._job_problem(key, name, state))
                        break
                    if key == "nodecheck" and not self.k.dry_run:
                        itype = INSTANCE_TYPES[self.instance_type]
                        findings = judge_nodecheck(logs[key], self.nodes, itype.efa_devices)
                        if "nodes" in logs:
                            findings += judge_allocatable(logs["nodes"], itype.efa_devices)
                        if any(f.status == FAIL for f in findings):
                            self.echo("Node check failed: the benchmarks are skipped.")
                            break
        except KeyboardInterrupt as err:
            raise GateInterrupted(self.cleanup(err)) from None
        return logs

    def _run_job(self, name: str, directory: Path, label: str) -> tuple[str, str]:
        """Apply the job in ``directory``, wait, read its pods' logs, delete it: (state, logs)."""
        # A finished Job of an earlier run would not run again: remove it first.
        self.retry(f"delete an earlier {name}", lambda: self.k.delete([directory]))
        self.applied.append(directory)
        self.retry(f"apply {name}", lambda: self.k.apply([directory]))
        state = self.wait(label, name)
        text = ""
        try:
            if self.k.dry_run:
                self.k.run(["logs", "-n", self.ns, "-l", f"job-name={name}",
                            "--all-containers", "--tail=-1"])
            else:
                text = self.collect(name)
        except KubectlError:
            # A log that cannot be read must not leave the job holding the nodes: delete it, and
            # report the read (a delete that fails too leaves it in ``applied``, which is printed).
            try:
                self.k.delete([directory], wait=False)
                self.applied.remove(directory)
            except KubectlError:
                pass
            raise
        self.retry(f"delete {name}", lambda: self.k.delete([directory], wait=False))
        self.applied.remove(directory)
        return state, text

    def run_subset(self, key: str, nodes: list[str], suffix: str) -> tuple[str, str]:
        """Rerun fabric job ``key`` on ``nodes`` only, as ``<job>-<suffix>`` (bisection and the
        rerun after --isolate): (state, logs). The state is ``NOT_STARTED`` and why when a pod of
        it never ran (a node gone, unschedulable): the rerun then says nothing about the nodes.
        The rewritten manifests are kept under ``<out>/fabric-subsets/`` for review."""
        name = dict(self.jobs)[key]
        docs = [d for f in sorted(self.job_dir(key).glob("*.yaml"))
                for d in yaml.safe_load_all(f.read_text()) if d]
        directory = self.out / "fabric-subsets" / f"{key}-{suffix}"
        directory.mkdir(parents=True, exist_ok=True)
        for i, doc in enumerate(subset_job(docs, name, nodes, suffix)):
            (directory / f"{i:02d}-{doc['kind'].lower()}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        sub = f"{name}-{suffix}"
        try:
            with stop_on_signals():
                state, logs = self._run_job(sub, directory, f"{key} on {len(nodes)} node(s)")
        except KeyboardInterrupt as err:
            raise GateInterrupted(self.cleanup(err)) from None
        if state != "complete" and self.not_started:
            state = f"{NOT_STARTED}: {'; '.join(self.not_started[:2])}"
        return state, logs

    def _job_problem(self, key: str, name: str, state: str) -> Finding:
        if state == "timeout":
            pending = (f"; pods that never ran: {'; '.join(self.not_started[:2])}"
                       if self.not_started else "")
            measured = ("failed by its deadline (activeDeadlineSeconds)" if self.deadline_passed
                        else f"still running after {self.timeout_s:.0f} s")
            return Finding(f"{key} job", FAIL, measured,
                           "finished", f"job {name} did not finish in time (deleted){pending}",
                           "look for pods stuck Pending (kubectl describe pods -n "
                           f"{self.ns} -l job-name={name}); raise --timeout if the nodes are slow "
                           "to join")
        if self.not_started:  # no log to read: the pods say why they did not run
            return Finding(f"{key} job", FAIL, "failed", "complete",
                           f"job {name} failed; pods that never ran: {'; '.join(self.not_started[:2])}",
                           f"read why they did not start: kubectl describe pods -n {self.ns} "
                           f"-l job-name={name}")
        return Finding(f"{key} job", FAIL, "failed", "complete",
                       f"job {name} failed; its logs are judged below and kept in gate-logs/",
                       "read the job's log for the error")

    def _pods(self, name: str) -> list[dict[str, Any]]:
        doc = self.k.get_json(["pods", "-n", self.ns, "-l", f"job-name={name}"])
        return sorted((doc or {}).get("items", []), key=lambda p: p["metadata"]["name"])

    def wait(self, key: str, name: str) -> str:
        """complete | failed | timeout, printing progress when something changes, and every
        HEARTBEAT_S while nothing does. A Job failed by its own deadline (activeDeadlineSeconds)
        is a timeout. Afterwards ``not_started`` lists the pods that never ran, and why."""
        self.not_started = []
        self.deadline_passed = False
        if self.k.dry_run:
            self.k.run(["wait", "-n", self.ns, f"job/{name}", "--for=condition=Complete",
                        f"--timeout={self.timeout_s:.0f}s"])
            return "complete"
        start = self.clock()
        last = None
        said_at = start
        failures = 0
        started: set[str] = set()  # pods seen running (or done) at some poll
        while True:
            try:
                job = self.k.get_json(["job", name, "-n", self.ns]) or {}
                pods = self._pods(name)
            except KubectlError as err:
                # A poll, not a change: one refused or timed-out read (API server throttling or
                # restarting) must not end a gate that ran for an hour; several in a row do.
                failures += 1
                if failures >= POLL_FAILURES_TOLERATED:
                    raise
                self.echo(f"  {key}: could not read the job ({err.message}); trying again "
                          f"({failures} of {POLL_FAILURES_TOLERATED - 1})")
                self.sleep(self.poll_s)
                continue
            failures = 0
            status = job.get("status", {})
            conditions = {c["type"]: c for c in status.get("conditions", [])}
            elapsed = self.clock() - start
            phases: dict[str, int] = {}
            for p in pods:
                phase = p.get("status", {}).get("phase", "Unknown")
                phases[phase] = phases.get(phase, 0) + 1
                if _started(p):
                    started.add(p["metadata"]["name"])
            line = (f"  {key}: {status.get('succeeded', 0)} succeeded, {status.get('failed', 0)} "
                    f"failed, pods {', '.join(f'{n} {ph}' for ph, n in sorted(phases.items())) or 'none yet'}")
            pending = [p for p in pods if p.get("status", {}).get("phase") == "Pending"]
            for p in pending[:1]:
                for c in p.get("status", {}).get("conditions", []):
                    if c.get("type") == "PodScheduled" and c.get("status") == "False":
                        line += f" ({c.get('message', c.get('reason', 'unschedulable'))})"
            if line != last:
                self.echo(f"{line} [{elapsed:.0f} s]")
                last, said_at = line, self.clock()
            elif self.clock() - said_at >= HEARTBEAT_S:
                self.echo(f"{line} [{elapsed:.0f} s, still waiting; gives up after "
                          f"{self.timeout_s:.0f} s]")
                said_at = self.clock()

            def true(kind: str) -> bool:
                return (conditions.get(kind) or {}).get("status") == "True"

            state = None
            if true("Complete") or true("SuccessCriteriaMet"):
                state = "complete"
            elif true("Failed"):
                self.deadline_passed = conditions["Failed"].get("reason") == "DeadlineExceeded"
                state = "timeout" if self.deadline_passed else "failed"
            elif elapsed >= self.timeout_s:
                state = "timeout"
            if state is not None:
                if state != "complete":
                    self.not_started = [f"{p['metadata']['name']} {why_not_started(p)}"
                                        for p in pods if p["metadata"]["name"] not in started]
                    expected = (job.get("spec") or {}).get("completions")
                    if not pods and isinstance(expected, int) and not started:
                        self.not_started = [f"none of its {expected} pod(s) ran"]
                return state
            self.sleep(self.poll_s)

    def collect(self, name: str) -> str:
        """Every pod's log, each after a line naming its pod and node (the EFA traffic rows
        name their pod's hostname; the gate names nodes). A pod that never ran has no log: a line
        says why instead. A log that cannot be read after a few tries ends the gate (KubectlError
        naming the pod), never a fabric verdict."""
        parts = []
        for p in self.retry(f"list the pods of {name}", lambda: self._pods(name)):
            pod = p["metadata"]["name"]
            node = p.get("spec", {}).get("nodeName") or "unscheduled"
            if not _started(p):
                text = f"(no log: the pod never ran: {why_not_started(p)})\n"
            else:
                text = self._log(pod)
            parts.append(POD_LINE.format(pod=pod, node=node) + "\n" + text)
        return "\n".join(parts)

    def _log(self, pod: str) -> str:
        args = ["logs", "-n", self.ns, pod, "--all-containers"]
        try:
            return self.retry(f"read the log of pod {pod}", lambda: self.k.run(args).stdout)
        except KubectlNotFound:
            raise
        except KubectlError as err:
            raise KubectlError(err.command, f"could not read the log of pod {pod}: {err.message}",
                               "run `rlkit gate` again; if the log stays unreadable, read it with "
                               f"`kubectl logs -n {self.ns} {pod} --all-containers` (the node's "
                               "kubelet must answer)") from None

    def cleanup(self, why: BaseException | None = None) -> str:
        """After Ctrl-C, SIGTERM or SIGHUP: delete what this run applied, or say exactly what is
        left."""
        how = f"Interrupted ({why})" if isinstance(why, _Stopped) else "Interrupted"
        if not self.applied:
            return f"{how}; nothing of the gate is left on the cluster."
        objects = [f"{kind.lower()}/{name}" for d in self.applied
                   for kind, name, _ in objects_in(d)]
        try:
            with stop_on_signals():
                self.k.delete(self.applied, wait=True, timeout_s=60)
        except (KubectlError, KeyboardInterrupt) as err:
            cmd = " ".join(f"-f {d}" for d in self.applied)
            again = "interrupted again" if isinstance(err, KeyboardInterrupt) else str(err)
            return (f"{how}; could not delete what the gate applied ({again}). Left in "
                    f"namespace {self.ns}: {', '.join(objects)}. Delete them with: kubectl delete "
                    f"--ignore-not-found {cmd}")
        self.applied.clear()
        return f"{how}; deleted {', '.join(objects)} from namespace {self.ns}."
