#!/usr/bin/env bash
# Remove what the EFA user-space stack replaces or what cannot work over EFA.
#
# - Distro InfiniBand user-space packages: the EFA installer ships its own rdma-core
#   (libibverbs with the efa provider); the distro copies shadow it on the loader path.
#   Same package list as awslabs/awsome-distributed-ai's DeepEP-over-EFA Dockerfiles
#   (micro-benchmarks/expert-parallelism/deepep-benchmark/deepep.Dockerfile).
# - HPC-X (NVIDIA's MPI/UCX bundle in NGC-derived images): its UCX/OpenMPI and
#   ld.so.conf entry conflict with the installer's Open MPI and libfabric.
# - A deep_ep the base image may carry: it is built for InfiniBand GPU-initiated RDMA
#   (IBGDA), which EFA does not have, so it would fail at the first internode dispatch.
#   The DeepEP variants of this image build their own; EP_BACKEND=none has none, so
#   `rltrainer bench ep --backend deepep` and SGLang fail with a clear message instead.
set -euo pipefail

ib_pkgs=(ibverbs-utils libibverbs-dev libibverbs1 libmlx5-1)
installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${ib_pkgs[@]}" 2>/dev/null \
    | awk '$NF == "installed" { print $1 }' || true)
if [[ -n "${installed}" ]]; then
    echo "removing distro InfiniBand user-space packages: ${installed}"
    # shellcheck disable=SC2086 # word splitting of the package list is intended
    apt-get remove -y --allow-change-held-packages ${installed}
fi

rm -rf /opt/hpcx /usr/local/mpi /etc/ld.so.conf.d/hpcx.conf
ldconfig

pip uninstall -y deep-ep
if python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("deep_ep") is None)'; then
    echo "ERROR: a deep_ep module is still importable after 'pip uninstall deep-ep':" >&2
    python3 -c 'import importlib.util; print(importlib.util.find_spec("deep_ep").origin)' >&2
    echo "remove it in this script before building on this base image" >&2
    exit 1
fi
