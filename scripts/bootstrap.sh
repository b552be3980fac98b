#!/usr/bin/env bash
# Set-up shared by scripts/run and scripts/test: make sure .venv holds exactly the pins in
# conda.yaml's pip section (the project's one list of pins) and that Fashion-MNIST is on disk.
# Idempotent: a second call with nothing changed takes about a second.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
# The pins are the `- name==version` lines that follow `- pip:`; the first other line ends them.
pins() { awk '/^ *- pip:/{inpip=1; next} inpip && /^ *- /{sub(/^ *- /, ""); print; next} {inpip=0}' conda.yaml; }
# `scripts/bootstrap.sh --pins` prints what would be installed (the tests check it against the YAML).
if [ "${1:-}" = --pins ]; then pins; exit 0; fi
stamp=$(pins | sha256sum | cut -c1-16)

if [ ! -f .venv/.pins-"$stamp" ]; then
  echo "bootstrap: installing the pinned environment into .venv (a few minutes the first time)" >&2
  command -v "$PYTHON" >/dev/null || { echo "bootstrap: $PYTHON not found; install Python 3.11 or set PYTHON=" >&2; exit 1; }
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
  pins > .venv/requirements.txt
  .venv/bin/python -m pip install --quiet -r .venv/requirements.txt
  rm -f .venv/.pins-*
  touch .venv/.pins-"$stamp"
fi

# Fashion-MNIST: Debian's package where we can install it; otherwise the pipeline downloads it
# on first use through torchvision (pipeline/data/sources.py checks the MD5 sums either way).
if [ ! -d /usr/share/datasets/fashion-mnist ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  echo "bootstrap: installing Debian package dataset-fashion-mnist" >&2
  { apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1; }; } ||
    echo "bootstrap: could not install dataset-fashion-mnist; the first run will download Fashion-MNIST" >&2
fi
