#!/usr/bin/env bash
# Packs a Release build with CUDA for a lent GPU machine that has the CUDA driver, nvcc, PyTorch and
# Nsight Compute but none of our dependencies: the CUDA test binaries, benchmarks and
# verl_conformance (stripped), the shared libraries they need (fmt, the CUDA runtime, Open MPI with
# its plugins and PMIx for the NCCL test), and the 0.9.1 golden cases. Writes build-gpu/ (git-ignored:
# carry it with the device call) with pack.tar.xz and run.sh; on the device, `bash build-gpu/run.sh`
# unpacks into /tmp/g, relocates Open MPI there (nothing written under /usr) and runs
# scripts/gpu_checks.sh, its logs packed into $OUT/logs.tar.gz (VERL_SKIP_NCU=1 skips the Nsight Compute profiles).
#
#   scripts/gpu_pack.sh [BUILD_DIR] [GOLDEN_DIR]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
golden=${2:-$here/../shared/golden}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/tests/cuda" "$stage/build/tests/mpi" "$stage/build/bench" "$stage/build/bin" "$stage/build/lib"
for f in "$build"/tests/cuda/cuda_test_*; do [[ $f == *.cmake ]] || cp "$f" "$stage/build/tests/cuda/"; done
cp "$build"/bench/cuda_bench_* "$stage/build/bench/"
cp "$build/bin/verl_conformance" "$stage/build/bin/"
[[ -x $build/tests/mpi/mpi_test_nccl_communicator ]] && cp "$build/tests/mpi/mpi_test_nccl_communicator" "$stage/build/tests/mpi/"
strip "$stage"/build/tests/*/* "$stage"/build/bench/* "$stage"/build/bin/* 2>/dev/null || true
# Shared libraries outside the C/C++ runtime (the device image has glibc and libstdc++, newer).
for binary in "$stage"/build/tests/*/* "$stage"/build/bench/* "$stage"/build/bin/*; do
  ldd "$binary" | awk '/=> \// {print $3}'
done | sort -u | grep -vE '/(libc|libm|libgcc_s|libstdc\+\+|libdl|libpthread|librt|libnccl)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/build/lib/"; done
multiarch=/usr/lib/x86_64-linux-gnu
if [[ -d $multiarch/openmpi ]]; then
  mkdir -p "$stage/root/usr/bin" "$stage/root$multiarch" "$stage/root/usr/share"
  cp -a "$multiarch/openmpi" "$stage/root$multiarch/"
  [[ -d $multiarch/pmix2 ]] && cp -a "$multiarch/pmix2" "$stage/root$multiarch/"
  rm -rf "$stage/root$multiarch"/openmpi/include "$stage/root$multiarch"/pmix2/include
  cp -a /usr/bin/orted /usr/bin/orterun "$stage/root/usr/bin/"
  [[ -d /usr/share/openmpi ]] && cp -a /usr/share/openmpi "$stage/root/usr/share/"
  for lib in libpmix.so.2 libmunge.so.2 libevent-2.1.so.7 libz.so.1; do
    [[ -e $multiarch/$lib ]] && cp -L "$multiarch/$lib" "$stage/build/lib/"
  done
fi
[[ -d $golden ]] && cp -a "$golden" "$stage/golden091"
mkdir -p "$here/build-gpu"
tar -C "$stage" -cJf "$here/build-gpu/pack.tar.xz" .
cat >"$here/build-gpu/run.sh" <<'RUN'
#!/usr/bin/env bash
# Written by scripts/gpu_pack.sh: runs on the lent GPU machine, from the repository's root.
set -u
cd "$(dirname "$0")/.."
mkdir -p /tmp/g && tar -C /tmp/g -xJf build-gpu/pack.tar.xz
R=/tmp/g/root/usr
if [[ -d $R ]]; then
  mkdir -p /tmp/g/mpi && ln -sf "$R/bin/orterun" /tmp/g/mpi/mpirun
  export OPAL_PREFIX=$R PATH=/tmp/g/mpi:$R/bin:$PATH OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
  export OMPI_MCA_mca_base_component_path=$R/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
  export PMIX_MCA_mca_base_component_path=$R/lib/x86_64-linux-gnu/pmix2/lib/pmix
fi
export LD_LIBRARY_PATH=/tmp/g/build/lib:$R/lib/x86_64-linux-gnu/openmpi/lib:${LD_LIBRARY_PATH:-}
nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
[[ -n $nccl ]] && export LD_LIBRARY_PATH=$nccl:$LD_LIBRARY_PATH
golden=(); [[ -d /tmp/g/golden091 ]] && golden=(/tmp/g/golden091)
scripts/gpu_checks.sh /tmp/g/build "$OUT/logs" "${golden[@]}"
rc=$?
if [[ -z ${VERL_SKIP_NCU:-} ]] && command -v ncu >/dev/null; then
  for kernel in small_groups_kernel reverse_scan_kernel whiten_apply_kernel; do
    timeout 60 ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
      -k regex:$kernel -c 1 /tmp/g/build/bench/cuda_bench_advantages --iters 3 >"$OUT/logs/ncu_$kernel.log" 2>&1
    echo "$kernel: $(grep -E "Duration|DRAM Throughput|Achieved Occupancy" "$OUT/logs/ncu_$kernel.log" | tr -s ' ' | tr '\n' ';')"
  done
fi
tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$OUT/logs"
exit $rc
RUN
chmod +x "$here/build-gpu/run.sh"
du -sh "$here/build-gpu"
