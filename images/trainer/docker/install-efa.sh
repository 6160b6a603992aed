#!/usr/bin/env bash
# EFA user-space stack from the AWS EFA installer: libfabric with the efa provider
# (/opt/amazon/efa), rdma-core, Open MPI (/opt/amazon/openmpi) and the aws-ofi-nccl
# plugin (/opt/amazon/ofi-nccl). Container flags as in the AWS EFA docs and the
# awsome-distributed-ai Dockerfiles: no kernel module (--skip-kmod, the node has it),
# no /etc/security/limits change (--skip-limit-conf, the pod's ulimits apply), and no
# device verification at build time (--no-verify, there is no EFA device in a build).
# Installers from 1.48 on also take --disable-ngc (and 1.48/1.49 --disable-build-ngc),
# exactly as awsome-distributed-ai's deepep.Dockerfile (1.48.0) and
# deepep-v2-benchmark/deepep.Dockerfile (1.50.0) pass them.
# The plugin names its own version in its init message ("Initializing aws-ofi-nccl X.Y.Z",
# src/nccl_ofi_net.cpp); given the expected version, the install fails when it differs.
# Usage: install-efa.sh <installer version, e.g. 1.50.0> [sha256 of the tarball] [aws-ofi-nccl version]
set -euo pipefail
version="$1"
sha256="${2:-}"
expected_ofi_nccl="${3:-}"

work=$(mktemp -d)
cd "${work}"
curl -fsSL --retry 3 -o efa.tar.gz "https://efa-installer.amazonaws.com/aws-efa-installer-${version}.tar.gz"
if [[ -n "${sha256}" ]]; then
    echo "${sha256}  efa.tar.gz" | sha256sum -c -
else
    # No first-party sha256 of this tarball is known to the kit; the tarball is fetched by version
    # name, which AWS could re-publish, so say what was installed.
    echo "WARNING: aws-efa-installer-${version}.tar.gz is not checked (EFA_INSTALLER_SHA256 is empty); its sha256 is $(sha256sum efa.tar.gz | cut -d' ' -f1): compare it with AWS's published checksum (EC2 user guide, \"Verify the EFA installer using a checksum\") and pin it in the Dockerfile" >&2
fi
tar -xf efa.tar.gz
cd aws-efa-installer

flags=(-y --skip-kmod --skip-limit-conf --no-verify)
if [[ "$(printf '%s\n' 1.48.0 "${version}" | sort -V | head -n1)" == "1.48.0" ]]; then
    # version >= 1.48.0
    if [[ "$(printf '%s\n' 1.50.0 "${version}" | sort -V | head -n1)" == "1.50.0" ]]; then
        flags+=(--disable-ngc)
    else
        flags+=(--disable-build-ngc --disable-ngc)
    fi
fi
apt-get update
./efa_installer.sh "${flags[@]}"
cd /
rm -rf "${work}" /var/lib/apt/lists/*
ldconfig

shopt -s nullglob
plugins=(/opt/amazon/ofi-nccl/lib/libnccl-net*.so)
if (( ${#plugins[@]} == 0 )); then
    echo "ERROR: EFA installer ${version} did not install aws-ofi-nccl under /opt/amazon/ofi-nccl/lib" >&2
    exit 1
fi
# A variable, not a pipe into grep -q: a closed pipe would fail a good plugin under pipefail.
strings_found=$(grep -a -o 'aws-ofi-nccl [0-9][0-9.]*[0-9]' "${plugins[0]}" || true)
ofi_nccl="${strings_found%%$'\n'*}"
ofi_nccl="${ofi_nccl#aws-ofi-nccl }"
if [[ -n "${expected_ofi_nccl}" && "${ofi_nccl}" != "${expected_ofi_nccl}" ]]; then
    echo "ERROR: EFA installer ${version} installed aws-ofi-nccl '${ofi_nccl:-unknown}', not ${expected_ofi_nccl}: set --build-arg AWS_OFI_NCCL_VERSION to what this installer ships" >&2
    exit 1
fi
echo "EFA installer ${version}: $(/opt/amazon/efa/bin/fi_info --version | head -n1 || true); NCCL plugin ${plugins[0]} (aws-ofi-nccl ${ofi_nccl:-unknown})"
