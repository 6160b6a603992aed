"""Fabric gate: judge the acceptance jobs' output against published figures.

Input is the text of each job's pod logs (stdout and stderr mixed, as ``kubectl logs`` returns
them): the JSON lines that ``rltrainer nodecheck`` and ``rltrainer bench allreduce|ep`` print
(formats in images/trainer/README.md) plus what NCCL, aws-ofi-nccl and NVSHMEM logged (the fabric
jobs run with NCCL_DEBUG=INFO and NVSHMEM_DEBUG=INFO), and the GPU nodes as ``kubectl get nodes
-o json`` returns them. Output is a list of findings, each pass, warn or fail with the measured
and expected figure and, for anything that is not a pass, what to do. Thresholds live in
``infra.catalog.acceptance``. No kubectl or AWS in the judging: ``ops.gate.runner`` collects the logs,
the judges only read them, so recorded logs test them.

What it catches (docs/gate.md explains each number):

- node check failures: missing EFA devices, an NVIDIA driver older than the image's CUDA needs,
  an EFA driver or PeerMappingOverride missing for EFA-GDA, GDRCopy missing where the backend
  uses it; and allocatable ``vpc.amazonaws.com/efa`` on a node that differs from the pod request;
- the transport, proved from the libraries' own log lines (each finding names the line it
  looked for): NCCL loaded aws-ofi-nccl and uses it rather than sockets; NVSHMEM initialised its
  libfabric transport on the EFA provider; NCCL's GIN type is the one the profile set;
- a degraded fabric: all-reduce or DeepEP-accounted expert-parallel bandwidth below the
  published figure for the same tool, shape and instance type;
- anything without a published figure: a warning saying the numbers were recorded only.

- a NIC that carried nothing: each node's EFA port counters before and after each benchmark
  (``traffic``) name an idle, missing or unreadable device and its node;
- the EP backend chosen from the all-to-all inside the run's own EP groups (training decides,
  rollout is reported; ``infra.config.ep_spans``), the published-shape run as the acceptance test;
- the node that drags a failed or slow run: ``bisect`` reruns it on halves and pairs against the
  published figures and the instance type's baseline; ``nodes`` prints, and on request applies,
  the cordon and taint commands and reruns on the remaining nodes.

The package: ``findings`` (result types, log parsing), ``judges`` (the verdicts), ``traffic`` (the
EFA counter proof), ``record`` (the gate.json document, the baseline, the comparison of runs,
reading it back), ``runner`` (the jobs on the cluster, through kubectl, and reruns on subsets),
``bisect`` (the search and the subset jobs) and ``nodes`` (bisection, isolation and the rerun
after it). Importing ``ops.gate`` gives the judging names; the runner is imported from
``ops.gate.runner``.
"""

from __future__ import annotations

from ops.gate.findings import (  # noqa: F401
    BAD_NODE_FIX,
    DEBUG_HINT,
    DEGRADED_FIX,
    FAIL,
    GIN_GDAKI,
    GIN_TYPE,
    JOB_KEYS,
    NET_ANY,
    NET_OFI,
    NET_SOCKET,
    NVSHMEM_EFA,
    NVSHMEM_FAILED,
    NVSHMEM_OK,
    NVSHMEM_TRANSPORT,
    OFI_FAILED,
    OFI_LOADED,
    OFI_PLUGIN_NAMES,
    PASS,
    RECORDED,
    SOCKET_FIX,
    WARN,
    EpMeasurement,
    Finding,
    GateReport,
    first_line,
    gbps,
    nccl_transport,
    parse_rows,
    size_text,
)
from ops.gate.judges import (  # noqa: F401
    EFA_RESOURCE,
    SHAPE_KEYS,
    evaluate,
    judge_allocatable,
    judge_allreduce,
    judge_ep,
    judge_gin,
    judge_nccl_net,
    judge_nodecheck,
    judge_nvshmem,
)
from ops.gate.record import (  # noqa: F401
    STATE_VERSION,
    GateStateError,
    compare,
    default_state_root,
    faster_backend,
    figures,
    legacy_results,
    load_state,
    results_path,
    state_dir,
    state_document,
    write_record,
    write_started,
)
