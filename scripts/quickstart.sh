#!/usr/bin/env bash
# The main job on the built-in default config, offline: install, synthesize every stack into
# cdk.out/, render the Kubernetes manifests into out/default/ and validate them.
set -euo pipefail
cd "$(dirname "$0")/.."
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20
bash scripts/setup.sh
echo "quickstart: synthesizing all stacks (no AWS account needed)"
.venv/bin/python app.py
ls -1 cdk.out/*.template.json
echo "quickstart: rendering manifests with placeholder stack outputs"
.venv/bin/rlkit render --out out/default
