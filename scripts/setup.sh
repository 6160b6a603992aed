#!/usr/bin/env bash
# Create .venv (Python 3.11) and install the kit. `scripts/setup.sh dev` adds tests and linters.
set -euo pipefail
cd "$(dirname "$0")/.."
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
req=requirements.txt
[ "${1:-}" = "dev" ] && req=requirements-dev.txt
echo "setup: installing $req"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$req" -c constraints.txt
if [ "${1:-}" = "dev" ]; then
  # checkov pins a boto3 the kit cannot use, so it gets a virtualenv of its own.
  echo "setup: installing requirements-checkov.txt into .venv/checkov"
  [ -x .venv/checkov/bin/python ] || "$PYTHON" -m venv .venv/checkov
  .venv/checkov/bin/python -m pip install --quiet --disable-pip-version-check \
    -r requirements-checkov.txt
fi
echo "setup: done"
