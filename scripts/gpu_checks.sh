#!/bin/bash
# The checks that need an NVIDIA GPU, as one script for a lent GPU machine that
# has the CUDA driver and PyTorch but none of shardrec's build dependencies.
# Here (the build machine): scripts/gpu_checks.sh --pack BUILD_DIR BUNDLE
# packs the stripped test programs, host, plugins and the shared libraries they
# need (not libnccl or the driver) into BUNDLE (a .tar.xz). There: 
# scripts/gpu_checks.sh BUNDLE OUT_DIR runs the CUDA kernel's and NCCL backend's
# GoogleTests, the host's CUDA command-line test, compute-sanitizer's memcheck
# over the kernel's on-GPU tests, and `bench kernel --kernel cuda` (fp32
# training, and the forward over INT8/INT4/INT2 quantized rows) beside
# PyTorch's EmbeddingBag (scripts/torch_embedding_bag_peer.py), writing a log
# of each to OUT_DIR. Every step has its own time limit; the script goes on
# past a failing step and exits non-zero if any failed.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)

if [ "${1:-}" = "--pack" ]; then
  build=${2:?usage: gpu_checks.sh --pack BUILD_DIR BUNDLE}; bundle=${3:?usage: gpu_checks.sh --pack BUILD_DIR BUNDLE}
  stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/bin" "$stage/lib/shardrec/plugins" "$stage/deps"
  for f in kernel_cuda_test comm_nccl_test shardrec; do strip -o "$stage/bin/$f" "$build/bin/$f" || exit 1; done
  for f in "$build"/lib/shardrec/plugins/*.so; do strip --strip-unneeded -o "$stage/lib/shardrec/plugins/${f##*/}" "$f" || exit 1; done
  # Every shared library they load, less the C runtime, the driver and NCCL
  # (the GPU machine brings its own, matched to its driver).
  for f in "$stage"/bin/* "$stage"/lib/shardrec/plugins/*.so; do ldd "$f"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*|libnccl|libcuda)\.so' |
    while read -r lib; do cp -L "$lib" "$stage/deps/"; done
  # The GoogleTests load plugins from the build's own folder, compiled in.
  (cd "$build" && pwd) | sed 's|$|/lib/shardrec/plugins|' > "$stage/built_plugin_dir"
  tar -C "$stage" -cJf "$bundle" bin lib deps built_plugin_dir && echo "packed $(du -h "$bundle" | cut -f1) into $bundle"
  exit
fi

bundle=${1:?usage: gpu_checks.sh BUNDLE OUT_DIR}; out=${2:?usage: gpu_checks.sh BUNDLE OUT_DIR}
export PATH="$PATH:/usr/local/cuda/bin"
mkdir -p "$out"; b=$(mktemp -d); tar -C "$b" -xJf "$bundle" || exit 1
nccl=$(python3 - <<'PY'
import glob, site
hits = [p for d in site.getsitepackages() for p in glob.glob(d + "/nvidia/**/libnccl.so*", recursive=True)]
print(hits[0].rsplit("/", 1)[0] if hits else "")
PY
)
export LD_LIBRARY_PATH="$b/deps${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The GoogleTests look for plugins where the build put them.
built=$(cat "$b/built_plugin_dir")
[ -n "$built" ] && [ ! -e "$built" ] && mkdir -p "${built%/*}" && ln -s "$b/lib/shardrec/plugins" "$built"
nvidia-smi -L; echo "libnccl from: ${nccl:-none found}"
failed=()
step() {  # step NAME SECONDS COMMAND...: runs it, logs to OUT_DIR/NAME.log, prints its tail
  local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1; local rc=$?
  echo "=== $name: exit $rc in $((SECONDS - t0)) s"; tail -n 25 "$out/$name.log"
  [ $rc -eq 0 ] || failed+=("$name")
}
step kernel_cuda_test 150 "$b/bin/kernel_cuda_test"
step comm_nccl_test 90 "$b/bin/comm_nccl_test"
step cuda_cli_test 150 python3 "$here/tests/host/cuda_cli_test.py" "$b/bin/shardrec" "$b/lib/shardrec/plugins/libshardrec_kernel_cuda.so"
step memcheck 100 compute-sanitizer --tool memcheck --error-exitcode 9 "$b/bin/kernel_cuda_test" --gtest_filter='CudaKernelOnGpu.*:*CudaMatchesCpu*/0'
args=(--rows 1000000 --dim 128 --batch 16384 --pooling 20)
step bench_cuda_sgd 60 "$b/bin/shardrec" bench kernel --kernel cuda "${args[@]}" --optimizer sgd --reps 3
step bench_cuda_rowwise 60 "$b/bin/shardrec" bench kernel --kernel cuda "${args[@]}" --reps 3
step bench_cuda_zipf 60 "$b/bin/shardrec" bench kernel --kernel cuda "${args[@]}" --ids zipf:1.05 --reps 3
step bench_cuda_quantized 90 "$b/bin/shardrec" bench kernel --kernel cuda "${args[@]}" --optimizer none --quantized int8,int4,int2 --reps 3
step torch_peer 60 python3 "$here/scripts/torch_embedding_bag_peer.py" "${args[@]}"
echo "failed steps: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
