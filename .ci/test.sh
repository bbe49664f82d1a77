#!/usr/bin/env bash
# The README test command: set up, build everything with warnings as errors
# and run every test, then the sanitizer build of the LibTorch-free core.
set -euo pipefail
cd "$(dirname "$0")/.."
.ci/setup.sh
cmake --workflow --preset ci
cmake --workflow --preset asan
