#!/usr/bin/env bash
# Leave exactly one NCCL in the runtime image: the GIN-capable build in /opt/nccl/build.
# DeepEP V2 refuses to import next to a second NCCL runtime, so the pip NCCL wheel and the
# distro libnccl go, the loader cache points at /opt/nccl/build/lib, and torch (which links
# libnccl.so.2 by name) must then see NCCL >= 2.31.2.
# Usage: keep-one-nccl.sh
set -euo pipefail
pip uninstall -y nvidia-nccl-cu12 nvidia-nccl-cu13
nccl_pkgs=$(dpkg-query -W -f='${Package} ${Status}\n' libnccl2 libnccl-dev 2>/dev/null \
    | awk '$NF == "installed" { print $1 }' || true)
if [[ -n "${nccl_pkgs}" ]]; then
    # shellcheck disable=SC2086 # word splitting of the package list is intended
    apt-get remove -y --allow-change-held-packages ${nccl_pkgs}
fi
ldconfig
python3 -c 'import sys, torch; v = torch.cuda.nccl.version(); print("torch sees NCCL", v); sys.exit(tuple(v) < (2, 31, 2))'
