#!/usr/bin/env bash
# Developer install: editable, no build isolation, serialized with a lock so that two people (or two
# agents) building at once cannot corrupt the shared build directory. Usage: tools/dev-install.sh
#
# Without build isolation pip builds with this environment's packages, so the build requirements
# come first: pyproject.toml's [build-system] requires (scikit-build-core, pybind11), then what
# scikit-build-core asks for on this machine (cmake, ninja when no suitable one is installed), as
# pip would for an isolated build. Each is a no-op once installed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${FORESTCC_DEV_INSTALL_LOCKED:-}" ]; then
  FORESTCC_DEV_INSTALL_LOCKED=1 exec flock /tmp/forestcc-build.lock "$0" "$@"
fi
mapfile -t build_requires < <(python - <<'EOF'
import ast, re
section = open("pyproject.toml").read().split("[build-system]", 1)[1].split("\n[", 1)[0]
for requirement in ast.literal_eval(re.search(r"^requires\s*=\s*(\[.*?\])", section, re.M | re.S)[1]):
    print(requirement)
EOF
)
pip install "${build_requires[@]}"
mapfile -t tools < <(python -c "from scikit_build_core.build import get_requires_for_build_editable
for requirement in get_requires_for_build_editable(): print(requirement)")
if [ ${#tools[@]} -gt 0 ]; then pip install "${tools[@]}"; fi
pip install --no-build-isolation --no-deps -e . -Cbuild-dir=build/dev "$@"
