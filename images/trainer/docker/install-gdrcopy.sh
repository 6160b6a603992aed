#!/usr/bin/env bash
# GDRCopy user-space library (libgdrapi), built from NVIDIA's release tag.
# The kernel module (gdrdrv) belongs to the node (the EKS NVIDIA AMI loads it); the
# container only needs the library and /dev/gdrdrv. aws-ofi-nccl uses it for GPUDirect
# flushes, and its NCCL GIN backend opens a gdr handle at init, so DeepEP V2 needs
# GDRCopy >= 2.5 (awslabs/awsome-distributed-ai deepep-v2-benchmark README).
# Usage: install-gdrcopy.sh <git tag, e.g. v2.5.2> <prefix>
set -euo pipefail
version="$1"
prefix="$2"

src=$(mktemp -d)
git clone --depth 1 --branch "${version}" https://github.com/NVIDIA/gdrcopy.git "${src}"
make -C "${src}" prefix="${prefix}" CUDA=/usr/local/cuda -j"$(nproc)" lib lib_install
rm -rf "${src}"
echo "${prefix}/lib" > /etc/ld.so.conf.d/000-gdrcopy.conf
ldconfig
test -e "${prefix}/lib/libgdrapi.so" || { echo "ERROR: libgdrapi.so missing under ${prefix}/lib" >&2; exit 1; }
