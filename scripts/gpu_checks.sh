#!/usr/bin/env bash
# The checks that need a GPU, from an existing Release build with CUDA (BUILD_DIR, default build):
# the CUDA tests, verl_conformance --device cuda over the repository's golden cases, the CUDA
# benchmarks, and PyTorch's equivalents when torch is importable. Each step's output goes to
# OUT_DIR/<step>.log; the script goes on after a failing step and exits non-zero if any failed.
#
#   scripts/gpu_checks.sh [BUILD_DIR] [OUT_DIR]
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
out=${2:-$here/gpu-checks}
mkdir -p "$out"
cd "$here"
failed=()

step() {
  local name=$1
  shift
  echo "== $name: $*"
  if "$@" >"$out/$name.log" 2>&1; then
    echo "   ok ($(tail -n 1 "$out/$name.log"))"
  else
    echo "   FAILED (see $out/$name.log)"
    failed+=("$name")
  fi
}

nvidia-smi >"$out/nvidia-smi.log" 2>&1 || echo "nvidia-smi failed; the steps below will say why"
step cuda_tests ctest --test-dir "$build" -L cuda --output-on-failure
step cuda_conformance "$build/bin/verl_conformance" --device cuda tests/data/golden
for bench in "$build"/bench/cuda_bench_*; do
  [ -x "$bench" ] && step "$(basename "$bench")" "$bench"
done
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  step torch_logprob_entropy python3 tools/scripts/bench_torch_cuda.py
  step torch_advantages python3 tools/scripts/bench_torch_cuda_advantages.py
else
  echo "== PyTorch with CUDA not importable: its baselines are skipped"
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "failed steps: ${failed[*]}"
  exit 1
fi
echo "all GPU checks passed"
