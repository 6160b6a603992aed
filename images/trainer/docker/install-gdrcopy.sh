#!/usr/bin/env bash
# GDRCopy user-space library (libgdrapi), built from NVIDIA's release tag, checked against the
# commit the tag named when it was pinned (a tag can be moved; a commit cannot).
# The kernel module (gdrdrv) belongs to the node (the EKS NVIDIA AMI loads it); the
# container only needs the library and /dev/gdrdrv. aws-ofi-nccl uses it for GPUDirect
# flushes, and its NCCL GIN backend opens a gdr handle at init, so DeepEP V2 needs
# GDRCopy >= 2.5 (awslabs/awsome-distributed-ai deepep-v2-benchmark README).
# Usage: install-gdrcopy.sh <git tag, e.g. v2.5.2> <prefix> <the tag's full 40-hex commit>
set -euo pipefail
version="$1"
prefix="$2"
commit="${3:-}"

if [[ ! "${commit}" =~ ^[0-9a-f]{40}$ ]]; then
    echo "ERROR: GDRCOPY_COMMIT=${commit:-<empty>} is not a full 40-hex commit. Fix: set --build-arg GDRCOPY_COMMIT to \`git rev-parse ${version}^{commit}\` in a clone of NVIDIA/gdrcopy" >&2
    exit 1
fi
src=$(mktemp -d)
git clone --depth 1 --branch "${version}" https://github.com/NVIDIA/gdrcopy.git "${src}"
head="$(git -C "${src}" rev-parse HEAD)"
if [[ "${head}" != "${commit}" ]]; then
    echo "ERROR: NVIDIA/gdrcopy tag ${version} is at ${head}, not the pinned ${commit} (the tag was moved upstream, or the pin is wrong). Fix: check what changed, then set GDRCOPY_VERSION and GDRCOPY_COMMIT together in the Dockerfile" >&2
    exit 1
fi
make -C "${src}" prefix="${prefix}" CUDA=/usr/local/cuda -j"$(nproc)" lib lib_install
rm -rf "${src}"
echo "${prefix}/lib" > /etc/ld.so.conf.d/000-gdrcopy.conf
ldconfig
test -e "${prefix}/lib/libgdrapi.so" || { echo "ERROR: libgdrapi.so missing under ${prefix}/lib" >&2; exit 1; }
