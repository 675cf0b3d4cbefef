# Sourced from the repository root by the sessions' device scripts: `. benchmarks/session_prelude.sh NAME`. Sets the
# environment every GPU run here wants, $o (the logs' folder: $OUT under the device tool, else /tmp/NAME), $t0 (for the
# "at N s" stamps) and $g (the GPU's name, printed), and defines build_library.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
o=${OUT:-/tmp/$1}; mkdir -p "$o"; t0=$SECONDS
g=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "GPU: $g"

# The library for sm_90 into this Python without build isolation, so against the jaxlib that will run it. The log goes
# to /tmp/build.log; its lines matching $1 (default " error") are printed.
build_library() {
  JAX_MEMOPS_CUDA=ON JAX_MEMOPS_CUDA_ARCHS=90 python3 -m pip install --no-build-isolation --no-deps -v . \
    > /tmp/build.log 2>&1
  echo "library build rc=$? at $((SECONDS - t0)) s"; grep -iE "${1:- error}" /tmp/build.log | head
}
