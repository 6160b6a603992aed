#!/usr/bin/env bash
# DeepEP V1 over EFA through NVSHMEM's libfabric host-proxy transport.
#
# EFA has no IBGDA, so upstream DeepEP's internode kernels cannot post RDMA from the
# GPU. awslabs/awsome-distributed-ai ships setup_deepep_efa.sh, which installs
# NVSHMEM (3.7.0 release, libfabric transport), clones deepseek-ai/DeepEP at the only
# commit its patch supports (567632d), applies that patch (IBGDA calls replaced by
# NVSHMEM host-proxy QP APIs) and builds DeepEP against that NVSHMEM. We run that
# script from a pinned commit of the sample repository rather than carry a copy.
# Runtime (set by the manifests): NVSHMEM_REMOTE_TRANSPORT=libfabric,
# NVSHMEM_LIBFABRIC_PROVIDER=efa.
# Usage: install-deepep-nvshmem.sh <awsome-distributed-ai commit> <script sha256>
#        <nvshmem version> <deepep commit, as the setup script takes it> <TORCH_CUDA_ARCH_LIST>
#        <the same deepep commit, full 40-hex SHA>
set -euo pipefail
samples_commit="$1"
script_sha256="$2"
nvshmem_version="$3"
deepep_commit="$4"
arch_list="$5"
deepep_sha="${6:-}"

# The setup script wants the short form (its compatibility gate compares strings); the full SHA
# is what the clone must be at afterwards.
if [[ ! "${deepep_sha}" =~ ^[0-9a-f]{40}$ || "${deepep_sha}" != "${deepep_commit}"* ]]; then
    echo "ERROR: DEEPEP_V1_SHA=${deepep_sha:-<empty>} is not the full 40-hex commit that DEEPEP_V1_COMMIT=${deepep_commit} abbreviates. Fix: set --build-arg DEEPEP_V1_SHA to \`git rev-parse ${deepep_commit}\` in a clone of deepseek-ai/DeepEP" >&2
    exit 1
fi

# The script runs as root in the build: its bytes are checked, always (the Dockerfile pins them).
if [[ ! "${script_sha256}" =~ ^[0-9a-f]{64}$ ]]; then
    echo "ERROR: AWSOME_DEEPEP_V1_SHA256=${script_sha256:-<empty>} is not a sha256 (64 lowercase hex digits). Fix: set it to the sha256 of micro-benchmarks/expert-parallelism/deepep-benchmark/setup_deepep_efa.sh at awslabs/awsome-distributed-ai ${samples_commit} (\`git show ${samples_commit}:<that path> | sha256sum\`)" >&2
    exit 1
fi
url="https://raw.githubusercontent.com/awslabs/awsome-distributed-ai/${samples_commit}/micro-benchmarks/expert-parallelism/deepep-benchmark/setup_deepep_efa.sh"
curl -fsSL --retry 3 -o /tmp/setup_deepep_efa.sh "${url}"
echo "${script_sha256}  /tmp/setup_deepep_efa.sh" | sha256sum -c -

TORCH_CUDA_ARCH_LIST="${arch_list}" bash /tmp/setup_deepep_efa.sh \
    --nvshmem-version "${nvshmem_version}" \
    --nvshmem-prefix /opt/amazon/nvshmem \
    --deepep-commit "${deepep_commit}" \
    --deepep-prefix /opt/amazon/deepep \
    --cuda-home /usr/local/cuda \
    --gen-ldconfig
rm -f /tmp/setup_deepep_efa.sh

head="$(git -C /opt/amazon/deepep rev-parse HEAD)"
if [[ "${head}" != "${deepep_sha}" ]]; then
    echo "ERROR: the DeepEP clone is at ${head}, not ${deepep_sha} (DEEPEP_V1_COMMIT=${deepep_commit} resolved to another commit). Fix: check DEEPEP_V1_COMMIT and DEEPEP_V1_SHA in the Dockerfile" >&2
    exit 1
fi

# The pip NVSHMEM wheel (pulled in by torch/sglang) shadows the standalone build at
# Python runtime; the setup script itself says to remove it.
pip uninstall -y nvidia-nvshmem-cu12 nvidia-nvshmem-cu13 nvidia-nvshmem
rm -rf /opt/amazon/deepep/build

# deep_ep cannot be imported without a GPU driver, so check that it is installed.
python3 -c 'import importlib.util, sys; spec = importlib.util.find_spec("deep_ep"); print("deep_ep:", spec and spec.origin); sys.exit(spec is None)'
