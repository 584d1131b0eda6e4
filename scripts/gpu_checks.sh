#!/usr/bin/env bash
# The checks that need a GPU, from a Release build with CUDA (BUILD_DIR, default build): every CUDA
# test binary, verl_conformance --device cuda over the golden cases, the NCCL communicator at one
# rank (and two when the machine has two GPUs and mpirun), the CUDA benchmarks, and PyTorch's
# equivalents when torch is importable. Each step's output goes to OUT_DIR/<step>.log and has a
# time limit (STEP_TIMEOUT seconds, default 150), so the whole script fits a short lease; the script
# goes on after a failing step and exits non-zero if any failed.
#
# The test binaries are run directly rather than through ctest, so a build copied to another
# machine (a device lent for minutes, with no compiler toolchain for our dependencies) runs as is:
# copy BUILD_DIR/{tests/cuda,tests/mpi,bench,bin} and point LD_LIBRARY_PATH at the shared libraries
# they need.
#
#   scripts/gpu_checks.sh [BUILD_DIR] [OUT_DIR] [EXTRA_GOLDEN_DIR...]
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
out=${2:-$here/gpu-checks}
shift $(($# < 2 ? $# : 2))
extra_golden=("$@")
step_timeout=${STEP_TIMEOUT:-150}
export GTEST_COLOR=no
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$here"
failed=()
summary=()

step() {
  local name=$1
  shift
  local started=$SECONDS
  echo "== $name: $*"
  if timeout --kill-after=10 "$step_timeout" "$@" >"$out/$name.log" 2>&1; then
    summary+=("ok      $name ($((SECONDS - started)) s): $(tail -n 1 "$out/$name.log" | cut -c1-160)")
  else
    local rc=$?
    summary+=("FAILED  $name ($((SECONDS - started)) s, rc $rc): $(tail -n 1 "$out/$name.log" | cut -c1-160)")
    failed+=("$name")
  fi
  echo "   ${summary[-1]}"
}

run_without_skips() {
  local log
  log=$("$@" 2>&1)
  local rc=$?
  printf '%s\n' "$log"
  if grep -q '^\[  SKIPPED \]' <<<"$log"; then
    echo "tests skipped on a GPU machine: $(grep -m1 'skipped:' <<<"$log")"
    return 1
  fi
  return $rc
}
export -f run_without_skips

nvidia-smi >"$out/nvidia-smi.log" 2>&1 || echo "nvidia-smi failed; the steps below will say why"
for test_binary in "$build"/tests/cuda/cuda_test_*; do
  [[ -x $test_binary && $test_binary != *.cmake ]] || continue
  # A CUDA test skips itself where no GPU is usable; on a GPU machine a skip is a failure.
  step "$(basename "$test_binary")" bash -c 'run_without_skips "$@"' - "$test_binary" --gtest_brief=1
done
step conformance_cuda "$build/bin/verl_conformance" --device cuda tests/data/golden
for golden in "${extra_golden[@]}"; do
  step "conformance_cuda_$(basename "$golden")" "$build/bin/verl_conformance" --device cuda "$golden"
  step "conformance_cpu_$(basename "$golden")" "$build/bin/verl_conformance" --device cpu "$golden"
done

nccl_test=$build/tests/mpi/mpi_test_nccl_communicator
if [[ -x $nccl_test ]]; then
  if command -v mpirun >/dev/null; then
    step nccl_np1 bash -c 'run_without_skips "$@"' - mpirun --allow-run-as-root --oversubscribe -np 1 "$nccl_test"
    gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
    if ((gpus >= 2)); then
      step nccl_np2 bash -c 'run_without_skips "$@"' - mpirun --allow-run-as-root --oversubscribe -np 2 "$nccl_test"
    else
      echo "== nccl_np2 skipped: $gpus GPU(s)"
    fi
  else
    # Open MPI starts a single process without mpirun (singleton), which is the one-rank case.
    step nccl_np1_singleton bash -c 'run_without_skips "$@"' - "$nccl_test"
  fi
fi

for bench in "$build"/bench/cuda_bench_*; do
  [[ -x $bench ]] && step "$(basename "$bench")" "$bench"
done
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  step torch_logprob_entropy python3 tools/scripts/bench_torch_cuda.py
  step torch_advantages python3 tools/scripts/bench_torch_cuda_advantages.py
else
  echo "== PyTorch with CUDA not importable: its baselines are skipped"
fi

echo
echo "== summary (logs in $out)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed steps: ${failed[*]}"
  exit 1
fi
echo "all GPU checks passed"
