#!/usr/bin/env bash
# Every GPU check in one run, for a GPU host that is lent for minutes (README, "GPU checks"):
# builds the GPU-check configuration (base, shm, kernels and their CUDA tests and benchmarks; no
# protobuf or seccomp needed; with the host PyTorch's LibTorch also model/ and rl/), runs the
# CUDA tests (kernels against the CPU references on random inputs, the adapter store's IPC
# handoff between processes with kill -9 of either side, the NCCL broadcast between processes
# when there are two or more GPUs, the model on the GPU against the CPU: LoRA pool steps, greedy
# generation, fused log-probs, a GRPO step, the base shared by two processes) and the GPU
# benchmarks, then prints one table last. Well within 8 minutes on a 16-core H200 host.
#
#   bench/gpu_check.sh            (from anywhere; logs and JSON go to $OUT, default build-gpu/out)
#
# The host needs CUDA (nvcc), CMake, ninja and a C++ compiler. What it may lack comes from
# .gpudeps/ (bench/gpu_deps.sh fetches the Debian packages there; the device call carries it):
# Boost's headers and GoogleTest's sources, unpacked into a folder of their own, never into /.
# NCCL is taken from the CUDA toolkit or from the nvidia-nccl wheel of the host's PyTorch.
# Exit status: 0 when everything that ran passed and every benchmark target was met.
#
# With the device tool: fill .gpudeps/ here first (bench/gpu_deps.sh), then run
#   command "bash bench/gpu_check.sh", carry [".gpudeps"], timeout_s 540
# Every step is cut to what is left of an 8-minute budget (MARLAAS_GPU_CHECK_BUDGET_S).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-$PWD/build-gpu/out}"
mkdir -p "$OUT"
t0=$(date +%s)
# Every step's time limit is cut to what is left of the whole run's budget (8 minutes by default).
budget=${MARLAAS_GPU_CHECK_BUDGET_S:-480}
limit() { local left=$(( budget - ($(date +%s) - t0) )); (( left < $1 )) && echo $(( left > 1 ? left : 1 )) || echo "$1"; }
rows=()
failures=0
row() { rows+=("$1|$2|$3"); [[ "$2" == FAILED* || "$2" == MISSED* ]] && failures=$((failures + 1)); return 0; }
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }

echo "== GPUs"
nvidia-smi -L 2>&1 | tee "$OUT/gpus.txt"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$nvcc_bin" --version 2>&1 | tail -1

echo "== dependencies"
deps=/tmp/marlaas-gpudeps
args=(-G Ninja -DMARLAAS_GPU_CHECK_ONLY=ON -DCMAKE_BUILD_TYPE=Release
      -DCMAKE_CUDA_COMPILER="$nvcc_bin" -DCMAKE_CUDA_ARCHITECTURES="${MARLAAS_CUDA_ARCHS:-90}")
if compgen -G ".gpudeps/*.deb" > /dev/null; then
  mkdir -p "$deps"
  for f in .gpudeps/*.deb; do
    if command -v dpkg > /dev/null; then
      dpkg -x "$f" "$deps"
    else  # a .deb is an ar archive holding data.tar.*
      member=$(ar t "$f" | grep '^data.tar')
      ar p "$f" "$member" | tar -x -a -f - -C "$deps" 2> /dev/null ||
        ar p "$f" "$member" | tar -xJ -C "$deps"
    fi
  done
  [[ -d "$deps/usr/include/boost/interprocess" ]] && args+=(-DMARLAAS_BOOST_INCLUDE="$deps/usr/include")
  [[ -d "$deps/usr/src/googletest" ]] && args+=(-DMARLAAS_GTEST_SOURCE="$deps/usr/src/googletest")
  [[ -f "$deps/usr/include/nlohmann/json.hpp" ]] && args+=(-DMARLAAS_NLOHMANN_INCLUDE="$deps/usr/include")
fi
# The model's CUDA test needs a CUDA LibTorch: the one inside the host's PyTorch.
torch_args=()
torch_prefix=$(python3 -c 'import torch; assert torch.version.cuda; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
if [[ -n "$torch_prefix" ]]; then
  torch_args=(-DMARLAAS_GPU_CHECK_TORCH=ON -DCMAKE_PREFIX_PATH="$torch_prefix")
  echo "LibTorch: $torch_prefix"
else
  echo "LibTorch: no CUDA PyTorch here; the model's CUDA test is not built"
fi
nccl_root=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
[[ -n "$nccl_root" && -d "$nccl_root/include" ]] && args+=(-DNCCL_ROOT="$nccl_root")
echo "cmake ${args[*]} ${torch_args[*]}"

echo "== build ($(elapsed))"
configured=0
if timeout "$(limit 90)" cmake -S . -B build-gpu "${args[@]}" "${torch_args[@]}" > "$OUT/configure.log" 2>&1; then
  configured=1
elif [[ ${#torch_args[@]} -gt 0 ]]; then
  # LibTorch's CMake config failed here: the checks that need no LibTorch still run.
  tail -30 "$OUT/configure.log"
  row configure_torch "FAILED" "LibTorch's config: see configure-torch.log; built without it"
  mv "$OUT/configure.log" "$OUT/configure-torch.log"
  torch_prefix="" torch_args=()
  rm -rf build-gpu
  timeout "$(limit 90)" cmake -S . -B build-gpu "${args[@]}" > "$OUT/configure.log" 2>&1 && configured=1
fi
# The LibTorch-free checks first, so a failure in the model's build costs only its own test.
if [[ $configured -eq 1 ]] &&
   timeout "$(limit 240)" cmake --build build-gpu -j "$(nproc)" --target kernels_test shm_cuda_test \
     bench_lora_cuda bench_adapter_ipc $(ninja -C build-gpu -t targets all 2> /dev/null |
       grep -q '^nccl_test:' && echo nccl_test) \
     > "$OUT/build.log" 2>&1; then
  row build "ok" "$(grep -c 'Building' "$OUT/build.log") objects, $(elapsed)"
else
  tail -30 "$OUT/configure.log" "$OUT/build.log" 2>/dev/null
  row build "FAILED" "see configure.log / build.log"
fi
if [[ $configured -eq 1 && -n "$torch_prefix" ]]; then
  echo "== build model_cuda_test ($(elapsed))"
  if timeout "$(limit 300)" cmake --build build-gpu -j "$(nproc)" --target model_cuda_test \
       bench_model_profile \
       > "$OUT/build-model.log" 2>&1; then
    row build_model "ok" "$(grep -c 'Building' "$OUT/build-model.log") objects, $(elapsed)"
  else
    tail -30 "$OUT/build-model.log"
    row build_model "FAILED" "see build-model.log"
  fi
fi
bin=build-gpu/bin

# A GoogleTest binary: passed / failed / skipped counts from its own summary.
gtest() {
  local name=$1 limit=$2
  shift 2
  if [[ ! -x "$bin/$name" ]]; then row "$name" "FAILED" "not built"; return; fi
  echo "== $name $* ($(elapsed))"
  timeout "$(limit "$limit")" "$bin/$name" "$@" > "$OUT/$name.log" 2>&1
  local rc=$? ok fail skip
  count() { grep -oE "^\[  $1 *\] [0-9]+ test" "$OUT/$name.log" | grep -oE '[0-9]+' | head -1; }
  ok=$(count PASSED); fail=$(count FAILED); skip=$(count SKIPPED)
  ok=${ok:-0}; fail=${fail:-0}; skip=${skip:-0}
  grep -E '^\[  FAILED  \]|Failure|Skipped' "$OUT/$name.log" | head -20
  if [[ $rc -eq 0 ]]; then row "$name" "ok" "$ok passed, $skip skipped"
  else row "$name" "FAILED (rc $rc)" "$ok passed, $fail failed, $skip skipped"; fi
}

gtest kernels_test 90 --gtest_filter='*Cuda*:GpuInfo*'
gtest shm_cuda_test 120
if [[ "$ngpu" -ge 2 ]]; then
  gtest nccl_test 120
else
  row nccl_test "skipped" "$ngpu GPU: NCCL refuses two ranks on one GPU"
fi

# A benchmark: its own table and targets go to the log; the row carries its target lines.
bench() {
  local name=$1 limit=$2
  if [[ ! -x "$bin/$name" ]]; then row "$name" "FAILED" "not built"; return; fi
  echo "== $name ($(elapsed))"
  timeout "$(limit "$limit")" "$bin/$name" --json "$OUT/$name.json" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]} figure
  figure=$(grep -E ' (met|MISSED)$' "$OUT/$name.log" | sed -E 's/ +/ /g' | paste -sd ';' -)
  if [[ $rc -eq 0 ]]; then row "$name" "ok" "${figure:-no target line}"
  else row "$name" "MISSED/FAILED (rc $rc)" "${figure:-no target line}"; fi
}
bench bench_lora_cuda 90
bench bench_adapter_ipc 90
# The model on the GPU against the CPU (built against the host PyTorch's LibTorch), then the
# GPU's stage costs as the simulator's profile: `marlaas bench sim --calibrate RUN --profile
# gpu_profile.json` projects with it.
if [[ -n "$torch_prefix" ]]; then
  gtest model_cuda_test 150
  if [[ -x "$bin/bench_model_profile" ]]; then
    echo "== bench_model_profile ($(elapsed))"
    timeout "$(limit 120)" "$bin/bench_model_profile" --device cuda --model qwen2.5-0.5b \
      --profile "$OUT/gpu_profile.json" --json "$OUT/bench_model_profile.json" 2>&1 |
      tee "$OUT/bench_model_profile.log"
    rc=${PIPESTATUS[0]}
    fit=$(grep -E '^(rollout pass|trainer step) =' "$OUT/bench_model_profile.log" | paste -sd ';' -)
    if [[ $rc -eq 0 ]]; then row bench_model_profile "ok" "${fit:-no fit line}"
    else row bench_model_profile "MISSED/FAILED (rc $rc)" "${fit:-no fit line}"; fi
  else
    row bench_model_profile "FAILED" "not built"
  fi
else
  row model_cuda_test "skipped" "no CUDA PyTorch (LibTorch) on this host"
fi

echo
echo "== GPU check summary ($(elapsed), $ngpu GPU(s): $(head -1 "$OUT/gpus.txt" 2>/dev/null))"
printf '%-18s %-22s %s\n' check result figure
for r in "${rows[@]}"; do
  IFS='|' read -r a b c <<< "$r"
  printf '%-18s %-22s %s\n' "$a" "$b" "$c"
done
[[ $failures -eq 0 ]]
