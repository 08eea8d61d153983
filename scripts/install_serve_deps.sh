#!/usr/bin/env bash
# Installs the serving tests' clients and servers into a virtual environment at
# ${KILN_SERVE_VENV:-~/.cache/kiln/serve-venv}: tritonclient[http,grpc] 2.47.0 (the last wheel whose
# perf_analyzer runs on Debian 12's glibc), nvidia-cuda-runtime-cu12 (perf_analyzer links
# libcudart.so.12 even for CPU-only servers) and nvidia-pytriton 0.7.0 without its dependencies
# (only its Triton Inference Server 2.51 binary is used). Nothing is installed when it is there.
set -euo pipefail
VENV=${KILN_SERVE_VENV:-$HOME/.cache/kiln/serve-venv}
if [ -x "$VENV/bin/perf_analyzer" ] && compgen -G "$VENV/lib/python3*/site-packages/pytriton/tritonserver/bin/tritonserver" >/dev/null &&
   "$VENV/bin/python" -c "import tritonclient.grpc, tritonclient.http" 2>/dev/null; then
  exit 0
fi
echo "== installing the serving test tools into $VENV (tritonclient, perf_analyzer, Triton server)"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip >/dev/null
"$VENV/bin/pip" install -q "tritonclient[http,grpc]==2.47.0" nvidia-cuda-runtime-cu12
"$VENV/bin/pip" install -q --no-deps "nvidia-pytriton==0.7.0"
