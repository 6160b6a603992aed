"""What a gate run leaves behind: the gate.json document, its figures, and the comparison of
recorded runs (`rlkit gate --compare`), and reading gate.json back (what `rlkit launch` trusts).

The file lives at ``<state root>/<environment name>/gate.json``, with the logs it judged in
``gate-logs/`` beside it. The state root is ``--state-dir``, else ``$XDG_STATE_HOME/rlkit``, else
``~/.local/state/rlkit`` (the XDG base directory default), so results do not depend on the working
directory. The functions here are the results store's API (``state_dir``, ``results_path``,
``load_state``, ``write_started``, ``write_record``): code that reads earlier results goes through
them. Every write of gate.json is atomic (``write_json``).
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any, Callable

from ops.gate.findings import FAIL, JOB_KEYS, Finding, GateReport, size_text
from ops.gate.traffic import pod_nodes


LEGACY_ROOT = Path(".rlkit")  # before 0.1.0's XDG move: relative to the working directory


def default_state_root() -> Path:
    """``$XDG_STATE_HOME/rlkit``, else ``~/.local/state/rlkit``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "rlkit"


def state_dir(root: str | Path | None, config_name: str) -> Path:
    """Where one environment's gate result and logs live (``root`` None: the default root)."""
    return Path(root if root is not None else default_state_root()) / config_name


def results_path(config_name: str, root: str | Path | None = None) -> Path:
    """The environment's gate.json (it may not exist yet)."""
    return state_dir(root, config_name) / "gate.json"


def legacy_results(config_name: str) -> Path | None:
    """A gate.json an older rlkit wrote under ./.rlkit, when there is one (launch names it)."""
    path = LEGACY_ROOT / config_name / "gate.json"
    return path if path.is_file() else None

# --- state file ----------------------------------------------------------------------------------

STATE_VERSION = 2


def measurement_passed(backend: str, measurement: dict[str, Any],
                       state: dict[str, Any] | None) -> bool:
    """Whether an EP measurement was taken by a gate that passed (only those may choose the
    backend). gate.json records it per measurement (``passed``); one an older rlkit recorded
    without it counts only when it is that gate's own backend (``ep_backend_measured``) and that
    gate passed: the others may come from a gate that failed."""
    if "passed" in measurement:
        return measurement["passed"] is True
    return bool(state) and state.get("ok") is True and state.get("ep_backend_measured") == backend


def marked(measurements: dict[str, dict[str, Any]],
           state: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """``state``'s EP measurements, each with whether its gate passed (``measurement_passed``), so
    they keep their verdict in a document written later."""
    return {b: {**m, "passed": measurement_passed(b, m, state)} for b, m in measurements.items()}


def faster_backend(measurements: dict[str, dict[str, Any]]) -> str | None:
    """The EP backend with the lowest dispatch + combine step time for the same shape, among the
    measurements taken by a gate that passed (None when there is none)."""
    passed = {b: m for b, m in measurements.items() if m.get("passed") is True}
    if not passed:
        return None
    return min(passed, key=lambda b: passed[b]["time_us"])


def measured_nodes(logs: dict[str, str], bad: dict[str, str] | None = None) -> list[dict[str, str]]:
    """The nodes the gate's jobs ran on (their pod lines), less the nodes it named bad: each with
    its EC2 instance ID where the node list (``logs["nodes"]``) gives one. A node name can come
    back on another instance (names are private IP addresses), an instance ID cannot."""
    ran = {n for key in JOB_KEYS for n in pod_nodes(logs.get(key, "")).values() if n != "unscheduled"}
    instances = instance_ids(logs.get("nodes"))
    return [{"name": n, **({"instance": instances[n]} if instances.get(n) else {})}
            for n in sorted(ran - set(bad or {}))]


def instance_ids(nodes_json: str | None) -> dict[str, str]:
    """Node name -> EC2 instance ID (from its providerID) in a `kubectl get nodes -o json` text."""
    try:
        items = json.loads(nodes_json or "{}").get("items", [])
    except (json.JSONDecodeError, AttributeError):
        items = []
    return {i["metadata"]["name"]: iid for i in items
            if (i.get("metadata") or {}).get("name") and (iid := instance_id(i))}


def instance_id(node: dict[str, Any]) -> str | None:
    """A Kubernetes node's EC2 instance ID, from its providerID (``aws:///<zone>/<id>``)."""
    provider = (node.get("spec") or {}).get("providerID") or ""
    last = provider.rsplit("/", 1)[-1]
    return last if provider.startswith("aws://") and last.startswith("i-") else None


def state_document(report: GateReport, config_name: str, finished_at: str,
                   previous: dict[str, Any] | None = None,
                   nodes: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """gate.json: the verdict, every measured figure, the nodes measured (``measured_nodes``;
    `rlkit launch` compares them with the group's nodes then), and the EP step times merged with
    earlier runs of the same shape (for the backend choice), each marked with whether the gate
    that measured it passed (``passed``: a failed gate's figure never chooses the backend) and
    with the image it ran (``image``; also the run's own, top level: `rlkit launch` refuses
    another; None when unknown, as for saved logs judged with --logs-dir)."""
    measurements: dict[str, dict[str, Any]] = {}
    layout = None
    if report.ep is not None:
        # the EP groups measured, where each ran: backends compare only on the same layout
        layout = {p: {k: s[k] for k in ("ep_size", "ep_nodes", "where")} for p, s in report.ep.spans.items()}
    if previous and report.ep is not None:
        prev_ep = previous.get("ep") or {}
        if (previous.get("instance_type") == report.instance_type
                and previous.get("nodes") == report.nodes
                and prev_ep.get("shape") == report.ep.shape
                and prev_ep.get("layout") == layout):
            measurements.update(marked(prev_ep.get("measurements", {}), previous))
    ep_doc = None
    if report.ep is not None:
        measurements[report.ep.backend] = {
            "time_us": report.ep.time_us, "decided_by": report.ep.decided_by,
            "spans": report.ep.spans, "acceptance": report.ep.acceptance,
            "measured_at": finished_at, "passed": report.ok, "image": report.image}
        ep_doc = {"shape": report.ep.shape, "layout": layout, "decided_by": report.ep.decided_by,
                  "measurements": measurements, "faster": faster_backend(measurements)}
    elif previous:
        ep_doc = previous.get("ep")
    return {
        "version": STATE_VERSION,
        "config": config_name,
        "finished_at": finished_at,
        "ok": report.ok,
        "instance_type": report.instance_type,
        "nodes": report.nodes,
        "measured_nodes": nodes or [],
        "ep_backend_measured": report.ep_backend,
        "image": report.image,
        "findings": [f.to_dict() for f in report.findings],
        "figures": figures(report),
        "ep": ep_doc,
    }


def figure_name(size: int) -> str:
    """The all-reduce figure's name in gate.json and the baseline."""
    return f"all-reduce busbw @ {size_text(size)} (GB/s)"


def figures(report: GateReport) -> dict[str, float]:
    """This run's numbers, flat, for `rlkit gate --compare` (name -> value)."""
    out: dict[str, float] = {}
    for size, busbw in sorted(report.allreduce.items()):
        out[figure_name(size)] = busbw
    ep = report.ep
    if ep is not None:
        for purpose, span in ep.spans.items():
            out[f"EP {ep.backend} step time, model shape, {purpose} {span['where']} (us)"] = span["time_us"]
        for key in ("dispatch_rdma_GBps", "combine_rdma_GBps", "dispatch_nvl_GBps", "combine_nvl_GBps"):
            value = (ep.acceptance or {}).get(key)
            if value is not None:
                direction, link, _ = key.split("_")
                out[f"EP {ep.backend} {direction} {link.upper()}, published shape (GB/s)"] = float(value)
    return out


def compare(documents: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[list[str]]]:
    """A table of every figure across recorded runs: (header, rows), the last column the change
    from the first run to the last. Runs of another instance type or node count are marked."""
    header = ["figure"] + [f"{label} ({d.get('nodes')} x {d.get('instance_type')}, "
                           f"{d.get('finished_at', '?')})" for label, d in documents] + ["change"]
    names: list[str] = []
    for _, d in documents:
        for name in (d.get("figures") or {}):
            if name not in names:
                names.append(name)
    rows = []
    for name in names:
        values = [(d.get("figures") or {}).get(name) for _, d in documents]
        cells = [f"{v:.6g}" if v is not None else "-" for v in values]
        first = next((v for v in values if v is not None), None)
        last = next((v for v in reversed(values) if v is not None), None)
        change = (f"{(last - first) / first:+.1%}" if first and last is not None and
                  sum(v is not None for v in values) > 1 else "-")
        rows.append([name, *cells, change])
    return header, rows


# --- the per-instance-type baseline --------------------------------------------------------------
# What passing gates measured on one instance type (any config, any node count >= 2: busbw is
# normalised for the rank count): per all-reduce message size, the median of the last
# BASELINE_RUNS passing gates. Bisection holds each subset to it. A median of recent runs, not the
# best ever: one lucky run, or a software stack since replaced, would otherwise set a bar healthy
# nodes miss for good, and bisection would name them. It is a gate.json-like document, so
# `rlkit gate --compare` shows it beside runs.

BASELINE_RUNS = 5
BASELINES = ".baselines"  # not a config name (those are DNS labels): no collision in the store


def baseline_file(root: str | Path, instance_type: str) -> Path:
    return state_dir(root, BASELINES) / f"{instance_type}.json"


def load_baseline(root: str | Path, instance_type: str) -> dict[str, Any]:
    """The baseline document of ``instance_type`` (empty figures when none was recorded)."""
    path = baseline_file(root, instance_type)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {"instance_type": instance_type, "figures": {}, "sources": {}}
    return doc if isinstance(doc, dict) and isinstance(doc.get("figures"), dict) else {
        "instance_type": instance_type, "figures": {}, "sources": {}}


def update_baseline(root: str | Path, doc: dict[str, Any]) -> Path | None:
    """Fold a passing gate.json document into its instance type's baseline (per figure, the
    median of the last ``BASELINE_RUNS`` passing gates)."""
    if not doc.get("ok") or (doc.get("nodes") or 0) < 2:
        return None
    base = load_baseline(root, doc["instance_type"])
    if not isinstance(base.get("recent"), dict):  # none yet (or an older rlkit's file)
        base["recent"] = {}
    recent = base["recent"]
    for name, value in (doc.get("figures") or {}).items():
        if not name.startswith("all-reduce busbw"):
            continue
        # a baseline an older rlkit wrote holds only its best figure: one run among the recent
        runs = recent.get(name) or ([base["figures"][name]] if name in base["figures"] else [])
        runs = recent[name] = (runs + [value])[-BASELINE_RUNS:]
        base["figures"][name] = statistics.median(runs)
        base.setdefault("sources", {})[name] = (
            f"median of the last {len(runs)} passing gate(s); latest {doc.get('config')} "
            f"{doc.get('finished_at')} ({doc.get('nodes')} nodes)")
    base.update(config=f"baseline {doc['instance_type']}", instance_type=doc["instance_type"],
                nodes=doc.get("nodes"), finished_at=doc.get("finished_at"), ok=True)
    path = baseline_file(root, doc["instance_type"])
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, base)
    return path


# --- reading it back -----------------------------------------------------------------------------


class GateStateError(ValueError):
    """A gate.json that cannot be trusted; the message names the file and the fix."""


# What the readers of gate.json (`rlkit launch`, `rlkit gate --compare`, the next gate's merge)
# rely on: each field may be absent (records of older rlkit versions lack image, measured_nodes,
# ep_backend_measured, figures, a measurement's passed and image), but where present it has
# this shape. (type or types, what to call it in a message)
_NUMBER = ((int, float), "a number")
_TEXT = ((str,), "a string")
_TEXT_OR_NULL = ((str, type(None)), "a string or null")
_FLAG = ((bool,), "true or false")
_OBJECT = ((dict,), "an object")
_STATE_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "ok": _FLAG, "in_progress": _FLAG, "instance_type": _TEXT, "nodes": ((int,), "an integer"),
    "findings": ((list,), "a list"), "ep": ((dict, type(None)), "an object or null"),
    "measured_nodes": ((list,), "a list"), "image": _TEXT_OR_NULL,
    "ep_backend_measured": _TEXT_OR_NULL, "figures": _OBJECT,
}
_FINDING_FIELDS = {"check": _TEXT, "status": _TEXT}  # required; the others are text if present
_FINDING_TEXT = ("measured", "expected", "detail", "fix")
_MEASUREMENT_FIELDS = {"time_us": _NUMBER, "passed": _FLAG, "image": _TEXT_OR_NULL}


def _wrong(where: str, value: Any, shape: tuple[tuple[type, ...], str]) -> str | None:
    """Why ``value`` at ``where`` does not have ``shape`` (None when it does). A JSON true is
    not a number here, though Python counts bool as int."""
    types, name = shape
    if isinstance(value, types) and not (isinstance(value, bool) and bool not in types):
        return None
    return f"{where} is {json.dumps(value)[:40]}, not {name}"


def state_problem(doc: Any) -> str | None:
    """The first place where a gate.json document lacks the shape its readers rely on (e.g.
    ``findings[0] lacks 'check'``), None when it has it. Fields an older rlkit did not write may
    be absent."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    for key, shape in _STATE_FIELDS.items():
        if key in doc and (why := _wrong(key, doc[key], shape)):
            return why
    for i, finding in enumerate(doc.get("findings", [])):
        where = f"findings[{i}]"
        if not isinstance(finding, dict):
            return _wrong(where, finding, _OBJECT)
        for key, shape in _FINDING_FIELDS.items():
            if key not in finding:
                return f"{where} lacks {key!r}"
            if why := _wrong(f"{where}.{key}", finding[key], shape):
                return why
        for key in _FINDING_TEXT:
            if key in finding and (why := _wrong(f"{where}.{key}", finding[key], _TEXT)):
                return why
    for i, node in enumerate(doc.get("measured_nodes", [])):
        where = f"measured_nodes[{i}]"
        if not isinstance(node, dict):
            return _wrong(where, node, _OBJECT)
        if "name" not in node:
            return f"{where} lacks 'name'"
        for key in ("name", "instance"):
            if key in node and (why := _wrong(f"{where}.{key}", node[key], _TEXT)):
                return why
    for name, value in (doc.get("figures") or {}).items():
        if why := _wrong(f"figures[{json.dumps(name)}]", value, _NUMBER):
            return why
    return _ep_problem(doc.get("ep") or {})


def _ep_problem(ep: dict[str, Any]) -> str | None:
    for key, shape in (("measurements", _OBJECT), ("layout", ((dict, type(None)), "an object or "
                       "null")), ("decided_by", _TEXT)):
        if key in ep and (why := _wrong(f"ep.{key}", ep[key], shape)):
            return why
    for backend, m in (ep.get("measurements") or {}).items():
        where = f"ep.measurements.{backend}"
        if not isinstance(m, dict):
            return _wrong(where, m, _OBJECT)
        if "time_us" not in m:
            return f"{where} lacks 'time_us'"
        for key, shape in _MEASUREMENT_FIELDS.items():
            if key in m and (why := _wrong(f"{where}.{key}", m[key], shape)):
                return why
    for purpose, span in (ep.get("layout") or {}).items():
        where = f"ep.layout.{purpose}"
        if not isinstance(span, dict):
            return _wrong(where, span, _OBJECT)
        if "ep_size" in span and (why := _wrong(f"{where}.ep_size", span["ep_size"],
                                                ((int,), "an integer"))):
            return why
    return None


def load_state(path: Path) -> dict[str, Any] | None:
    """The last gate result, None when no gate ran; GateStateError (naming the file, the first
    bad place, ``state_problem``, and the fix) when it cannot be read or lacks the shape its
    readers rely on."""
    if not path.is_file():
        return None

    def corrupt(why: str) -> GateStateError:
        return GateStateError(
            f"{path} is corrupt ({why}), so the last gate result cannot be trusted. Fix: delete "
            f"it and run `rlkit gate` again (or judge saved logs: rlkit gate --logs-dir "
            f"{path.parent / 'gate-logs'})")

    try:
        raw = path.read_bytes()
    except OSError as err:
        raise GateStateError(f"{path} cannot be read ({err.strerror}). Fix: make it readable, or "
                             "delete it and run `rlkit gate` again") from None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise corrupt(f"not UTF-8 text: byte {raw[err.start]:#04x} at offset {err.start}") from None
    except (json.JSONDecodeError, RecursionError) as err:
        raise corrupt(f"not JSON: {str(err)[:120]}") from None
    if why := state_problem(doc):
        raise corrupt(why)
    return doc


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` to ``path`` whole or not at all: a temporary file beside it, then os.replace
    (atomic on one file system), so a write cut short (disk full, the process killed) leaves the
    previous file, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _previous(path: Path, warn: Callable[[str], None]) -> dict[str, Any] | None:
    """The gate.json this run replaces, or None (absent, or unreadable: ``warn`` says so)."""
    try:
        return load_state(path)
    except GateStateError as err:  # this run's record replaces it
        warn(f"warning: {err}; writing a fresh one.")
        return None


def write_started(config_name: str, sdir: Path, started_at: str, instance_type: str, nodes: int,
                  ep_backend: str, warn: Callable[[str], None], image: str | None = None) -> Path:
    """Before a gate's first job: gate.json says a gate of this config is under way and has not
    passed (``in_progress``; ``ok`` false), until the run's verdict replaces it. A gate cut short
    (Ctrl-C, a kubectl error, the process killed) then leaves that, never the pass of an earlier
    gate for `rlkit launch` to trust. The earlier EP measurements of the same instance type and
    node count are kept, with their verdicts, for the next gate to compare backends with."""
    sdir.mkdir(parents=True, exist_ok=True)
    path = sdir / "gate.json"
    previous = _previous(path, warn)
    ep = None
    if previous and (previous.get("instance_type"), previous.get("nodes")) == (instance_type, nodes):
        ep = previous.get("ep")
        if ep:
            ep = {**ep, "measurements": marked(ep.get("measurements") or {}, previous)}
    unfinished = Finding(
        "gate run", FAIL, "did not finish", "a verdict",
        f"the gate started {started_at} was stopped before it judged its jobs (Ctrl-C, a kubectl "
        "error, the process killed)", "run `rlkit gate` again until it passes")
    write_json(path, {
        "version": STATE_VERSION, "config": config_name, "started_at": started_at, "ok": False,
        "in_progress": True, "instance_type": instance_type, "nodes": nodes,
        "measured_nodes": [], "ep_backend_measured": ep_backend, "image": image,
        "findings": [unfinished.to_dict()], "figures": {}, "ep": ep})
    return path


def write_record(report: GateReport, config_name: str, sdir: Path, logs: dict[str, str],
                 finished_at: str, warn: Callable[[str], None]) -> tuple[Path, dict[str, Any]]:
    """Write the judged logs to ``sdir/gate-logs/`` and the result to ``sdir/gate.json`` (EP
    figures merged with the previous result's, which a corrupt file cannot give: ``warn`` says
    so); returns the path and the document."""
    sdir.mkdir(parents=True, exist_ok=True)
    logdir = sdir / "gate-logs"
    logdir.mkdir(exist_ok=True)
    for key, text in logs.items():
        (logdir / (f"{key}.json" if key == "nodes" else f"{key}.log")).write_text(text)
    path = sdir / "gate.json"
    previous = _previous(path, warn)
    doc = state_document(report, config_name, finished_at, previous,
                         measured_nodes(logs, report.bad_nodes))
    write_json(path, doc)
    return path, doc
