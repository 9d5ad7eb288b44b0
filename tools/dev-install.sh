#!/usr/bin/env bash
# Developer install: editable, no build isolation, serialized with a lock so that two people (or two
# agents) building at once cannot corrupt the shared build directory. Usage: tools/dev-install.sh
set -euo pipefail
cd "$(dirname "$0")/.."
exec flock /tmp/forestcc-build.lock \
  pip install --no-build-isolation --no-deps -e . -Cbuild-dir=build/dev "$@"
