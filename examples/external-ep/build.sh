#!/usr/bin/env bash
# Build the EP: `./build.sh` compiles build/librelu_ep.so and prints its path on the last
# line of stdout (what `epbench compare-commits --build` reads); the rest goes to stderr.
#
# ONNX Runtime's C headers are never committed: $ORT_INCLUDE_DIR names a folder holding
# onnxruntime_c_api.h (the epbench action sets it with `ort-headers: true`), else epbench
# fetches and caches them (`python3 -m epbench.engine.build --headers-only`).
#
# The file `delay_ns` is a knob for the example's own test: nanoseconds the EP spends at
# the start of every Run of a model with a symbolic dimension (0: none).
set -euo pipefail
cd "$(dirname "$0")"
include="${ORT_INCLUDE_DIR:-}"
if [ -z "$include" ]; then
  include="$("${PYTHON:-python3}" -m epbench.engine.build --headers-only 2>/dev/null | tail -n 1 || true)"
fi
if [ ! -f "$include/onnxruntime_c_api.h" ]; then
  echo "build.sh: no onnxruntime_c_api.h in '${include}': set ORT_INCLUDE_DIR to ONNX Runtime's include folder" >&2
  exit 1
fi
delay_ns="$(tr -d '[:space:]' < delay_ns)"
case "$delay_ns" in
  '' | *[!0-9]*) echo "build.sh: delay_ns holds '${delay_ns}', not a whole number of nanoseconds" >&2; exit 1 ;;
esac
mkdir -p build
"${CC:-gcc}" -std=c11 -O2 -Wall -Wextra -Werror -fPIC -shared \
  -I"$include" -DXRELU_DELAY_NS="${delay_ns}LL" \
  -Wl,--version-script=src/relu_ep.map -Wl,--no-undefined \
  src/plugin.c src/ep.c -o build/librelu_ep.so >&2
echo "$PWD/build/librelu_ep.so"
