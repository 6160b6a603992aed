"""Multi-node NVLink readiness of this pod (UltraServers): its IMEX channel and the GPU fabric.

Two checks, for ``rltrainer nodecheck --expect-imex-channel`` (the kit passes it where the node
group's NVLink spans instances):

- ``imex_channel``: the pod sees an IMEX channel under ``/dev/nvidia-caps-imex-channels``. The
  NVIDIA DRA driver injects it when the pod's ComputeDomain claim is prepared on the node, which
  happens once that domain's IMEX daemon runs there (kubernetes-sigs/dra-driver-nvidia-gpu@
  764900e78337, v0.4.1, demo/specs/imex/channel-injection.yaml lists this directory). NCCL names
  the same path when MNNVL "is available but not working" (NVIDIA/nccl@73cf112295c3, tag
  v2.30.7-1, src/mnnvl.cc:74-77).
- ``gpu_fabric``: ``nvidia-smi -q`` reports each GPU's fabric registration finished with success,
  and all GPUs of the pod in one clique (ClusterUUID and CliqueId), the domain NCCL's MNNVL uses.
  The exact ``nvidia-smi -q`` wording ("Fabric", "State", "Status", "CliqueId", "ClusterUUID") was
  not read from an NVIDIA source here and nothing ran on a GB200: treat a failure that names an
  unexpected format as a prompt to look, not as proof.

Standard library only; results are plain tuples that ``rltrainer.nodecheck`` turns into its own.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any, Callable

CHANNEL_DIR = "dev/nvidia-caps-imex-channels"
CHANNEL_FIX = ("the pod's ComputeDomain channel was not injected: check that the pod claims the "
               "run's ComputeDomain (resourceClaims), that `kubectl get computedomains -n "
               "<namespace> -o yaml` shows status Ready, and that the DRA kubelet plugin "
               "(dra-driver-nvidia-gpu-kubelet-plugin) runs on this node")
FABRIC_FIX = ("the GPUs' NVLink fabric is not ready or not one clique: check nvidia-fabricmanager "
              "on the node (the EKS AL2023 NVIDIA AMI enables it), that GPU feature discovery "
              "labels the node nvidia.com/gpu.clique, and `nvidia-smi -q` Fabric section")

Result = tuple[str, bool, Any, Any, str]  # name, ok, expected, found, fix


def _nvidia_smi_q() -> str | None:
    try:
        return subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=60,
                              check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def check_imex_channel(root: str = "/") -> Result:
    """At least one IMEX channel device is visible in the pod."""
    directory = Path(root) / CHANNEL_DIR
    channels = sorted(p.name for p in directory.glob("channel*")) if directory.is_dir() else []
    return ("imex_channel", bool(channels), f"an IMEX channel in /{CHANNEL_DIR}",
            channels or "none", CHANNEL_FIX)


def fabric_sections(text: str) -> list[dict[str, str]]:
    """The key/value lines of each GPU's "Fabric" section in ``nvidia-smi -q`` output."""
    sections, current = [], None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == "Fabric":
            current = {}
            sections.append(current)
            indent = len(line) - len(line.lstrip())
            continue
        if current is not None:
            if not stripped or len(line) - len(line.lstrip()) <= indent:
                current = None
                continue
            m = re.match(r"([^:]+?)\s*:\s*(.*)", stripped)
            if m:
                current[m.group(1)] = m.group(2)
    return sections


def check_gpu_fabric(expect_gpus: int, smi: Callable[[], str | None] = _nvidia_smi_q) -> Result:
    """Every GPU's fabric registration completed with success, all in one clique."""
    expected = f"{expect_gpus} GPUs with fabric State Completed, Status Success, one clique"
    text = smi()
    if text is None:
        return ("gpu_fabric", False, expected, "nvidia-smi -q did not run", FABRIC_FIX)
    sections = fabric_sections(text)
    done = [s for s in sections if s.get("State") == "Completed" and s.get("Status") == "Success"]
    cliques = {(s.get("ClusterUUID"), s.get("CliqueId")) for s in done}
    found = (f"{len(done)} of {len(sections)} GPU fabric sections completed; "
             f"cliques {sorted(str(c) for c in cliques) or 'none'}")
    ok = len(done) >= expect_gpus and len(cliques) == 1
    return ("gpu_fabric", ok, expected, found, FABRIC_FIX)
