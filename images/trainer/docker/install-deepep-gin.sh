#!/usr/bin/env bash
# DeepEP V2 over NCCL GIN (GPU-initiated networking) on EFA.
#
# DeepEP V2 (amazon-contributing/DeepEP) carries internode traffic through NCCL's GIN
# device API; on EFA, aws-ofi-nccl >= 1.21 (EFA installer >= 1.50) provides the GIN
# backends (GPU-initiated EFA-GDA, NCCL_GIN_TYPE=5, on p5en/p6; a CPU proxy otherwise).
# Needs NCCL >= 2.31.2 (nccl_device.h) and GDRCopy >= 2.5.
# (awslabs/awsome-distributed-ai micro-benchmarks/expert-parallelism/deepep-v2-benchmark)
#
# 1. build the GIN-capable NCCL from NVIDIA's tag into /opt/nccl/build;
# 2. run the samples' setup_deepep_gin.sh (pinned commit) to build DeepEP V2 against it;
# 3. leave exactly one NCCL: DeepEP refuses to import next to a second NCCL runtime, so
#    the pip NCCL wheel and the distro libnccl go, and the loader cache points at ours.
# Usage: install-deepep-gin.sh <nccl tag> <awsome-distributed-ai commit> <script sha256 or "">
#        <DeepEP ref: a commit of amazon-contributing/DeepEP> <TORCH_CUDA_ARCH_LIST>
set -euo pipefail
nccl_ref="$1"
samples_commit="$2"
script_sha256="$3"
deepep_ref="$4"
arch_list="$5"

if [[ -z "${deepep_ref}" ]]; then
    cat >&2 <<'MSG'
ERROR: EP_BACKEND=deepep-gin needs --build-arg DEEPEP_GIN_REF=<commit of amazon-contributing/DeepEP>.
This kit ships no verified pin for the fork (it is developed on main). Choose one and pin it:
    git ls-remote https://github.com/amazon-contributing/DeepEP refs/heads/main
MSG
    exit 1
fi
# A branch, tag or short SHA would build whatever the fork holds that day under the same tag
# (`rlkit image build --deepep-gin-ref` refuses them too).
if [[ ! "${deepep_ref}" =~ ^[0-9a-f]{40}$ ]]; then
    echo "ERROR: DEEPEP_GIN_REF=${deepep_ref} is not a full commit SHA (40 lowercase hex digits): pass the commit, e.g. from git ls-remote https://github.com/amazon-contributing/DeepEP refs/heads/main" >&2
    exit 1
fi
# The GIN op-table export is what installers >= 1.50 add to aws-ofi-nccl (the same gate
# as awsome-distributed-ai's deepep-v2-benchmark Dockerfile). Symbols go through a
# variable: `nm | grep -q` can die of SIGPIPE under pipefail and fail a good plugin.
plugin=/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so
symbols=$( [[ -f "${plugin}" ]] && nm -D "${plugin}" || true )
if ! grep -qw ncclGinPlugin_v14 <<< "${symbols}"; then
    echo "ERROR: ${plugin} has no GIN plugin export (ncclGinPlugin_v14): use EFA installer >= 1.50.0" >&2
    exit 1
fi

# "9.0;10.0" -> "-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_100,code=sm_100"
gencode=""
IFS=';' read -r -a archs <<< "${arch_list}"
for a in "${archs[@]}"; do
    n="${a/./}"
    gencode+=" -gencode=arch=compute_${n},code=sm_${n}"
done

git clone --depth 1 --branch "${nccl_ref}" https://github.com/NVIDIA/nccl.git /opt/nccl
make -C /opt/nccl -j"$(nproc)" src.build CUDA_HOME=/usr/local/cuda NVCC_GENCODE="${gencode# }"
test -f /opt/nccl/build/include/nccl_device.h || { echo "ERROR: NCCL ${nccl_ref} has no nccl_device.h (not GIN-capable)" >&2; exit 1; }
rm -rf /opt/nccl/build/obj /opt/nccl/src /opt/nccl/.git
echo /opt/nccl/build/lib > /etc/ld.so.conf.d/000-nccl-gin.conf
ldconfig

url="https://raw.githubusercontent.com/awslabs/awsome-distributed-ai/${samples_commit}/micro-benchmarks/expert-parallelism/deepep-v2-benchmark/setup_deepep_gin.sh"
curl -fsSL --retry 3 -o /tmp/setup_deepep_gin.sh "${url}"
if [[ -n "${script_sha256}" ]]; then
    echo "${script_sha256}  /tmp/setup_deepep_gin.sh" | sha256sum -c -
else
    # No sha256 of this script is known to the kit (the pinned commit is not in any copy it could
    # read); the URL names a commit, so its bytes are fixed by git, but say what ran.
    echo "WARNING: setup_deepep_gin.sh at awslabs/awsome-distributed-ai ${samples_commit} is not checked (AWSOME_DEEPEP_V2_SHA256 is empty); its sha256 is $(sha256sum /tmp/setup_deepep_gin.sh | cut -d' ' -f1): read the script, then pin that in the Dockerfile" >&2
fi
TORCH_CUDA_ARCH_LIST="${arch_list}" bash /tmp/setup_deepep_gin.sh \
    --deepep-ref "${deepep_ref}" \
    --deepep-prefix /opt/amazon/deepep \
    --nccl-root /opt/nccl/build
rm -f /tmp/setup_deepep_gin.sh

pip uninstall -y nvidia-nccl-cu12 nvidia-nccl-cu13
nccl_pkgs=$(dpkg-query -W -f='${Package} ${Status}\n' libnccl2 libnccl-dev 2>/dev/null \
    | awk '$NF == "installed" { print $1 }' || true)
if [[ -n "${nccl_pkgs}" ]]; then
    # shellcheck disable=SC2086 # word splitting of the package list is intended
    apt-get remove -y --allow-change-held-packages ${nccl_pkgs}
fi
ldconfig
rm -rf /opt/amazon/deepep/build
# torch links libnccl.so.2 by name: it must now resolve to the GIN-capable build.
python3 -c 'import sys, torch; v = torch.cuda.nccl.version(); print("torch sees NCCL", v); sys.exit(tuple(v) < (2, 31, 2))'
python3 -c 'import importlib.util, sys; spec = importlib.util.find_spec("deep_ep"); print("deep_ep:", spec and spec.origin); sys.exit(spec is None)'
