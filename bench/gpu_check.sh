#!/usr/bin/env bash
# Every GPU check in one run, for a GPU host that is lent for minutes (README, "GPU checks"):
# builds the GPU-check configuration (base, shm, kernels and their CUDA tests and benchmarks; no
# protobuf or seccomp needed; with the host PyTorch's LibTorch also model/ and rl/), runs the
# CUDA tests (kernels against the CPU references on random inputs, the adapter store's IPC
# handoff between processes with kill -9 of either side, the NCCL broadcast between processes
# when there are two or more GPUs, the model on the GPU against the CPU: LoRA pool steps, greedy
# generation, fused log-probs, a GRPO step, the base shared by two processes) and the GPU
# benchmarks, then prints one table last. Well within 8 minutes on a 16-core H200 host: the
# LibTorch-free targets build first and their tests run while the model (LibTorch) builds in the
# background; that build is paused (SIGSTOP) while the kernel and IPC benchmarks run, so they
# time an idle host without waiting for it, and the model's checks run once it is done.
#
#   bench/gpu_check.sh            (from anywhere; what comes back goes to $OUT, default
#                                  build-gpu/out: summary.txt, gpu_check.tgz with every log and
#                                  JSON, gpu_profile.json; the device tool returns 8 files at most)
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
LOGS="$PWD/build-gpu/logs"  # every log and JSON, packed into $OUT/gpu_check.tgz at the end
rm -rf "$LOGS"
mkdir -p "$OUT" "$LOGS"
t0=$(date +%s)
# `timeout` with a KILL after 10 s more: a process stuck in the driver may ignore SIGTERM.
tlimit() { timeout -k 10 "$(limit "$1")" "${@:2}"; }
# Every step's time limit is cut to what is left of the whole run's budget (8 minutes by default).
budget=${MARLAAS_GPU_CHECK_BUDGET_S:-480}
limit() { local left=$(( budget - ($(date +%s) - t0) )); (( left < $1 )) && echo $(( left > 1 ? left : 1 )) || echo "$1"; }
rows=()
failures=0
row() { rows+=("$1|$2|$3"); [[ "$2" == FAILED* || "$2" == MISSED* ]] && failures=$((failures + 1)); return 0; }
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }


# The table, summary.txt and the pack of logs, however the run ends (a step cut by the budget,
# SIGTERM): only what is under $OUT comes back from a lent machine.
finish() {
  local rc=$?
  trap - EXIT
  # The whole session of the background build: `timeout` moves itself and its child into a
  # process group of their own, so the group of the setsid'd shell is not all of it.
  if [[ -n "${model_build_pid:-}" ]]; then
    pkill -TERM -s "$model_build_pid" 2> /dev/null || kill -- "-$model_build_pid" 2> /dev/null
    pkill -CONT -s "$model_build_pid" 2> /dev/null  # a paused build takes the TERM only now
    wait "$model_build_pid" 2> /dev/null
  fi
  {
    echo
    echo "== GPU check summary ($(elapsed), ${ngpu:-?} GPU(s): $(head -1 "$LOGS/gpus.txt" 2>/dev/null))"
    printf '%-18s %-22s %s\n' check result figure
    for r in "${rows[@]}"; do
      IFS='|' read -r a b c <<< "$r"
      printf '%-18s %-22s %s\n' "$a" "$b" "$c"
    done
  } | tee "$OUT/summary.txt"
  [[ -f "$LOGS/gpu_profile.json" ]] && cp "$LOGS/gpu_profile.json" "$OUT/"
  tar czf "$OUT/gpu_check.tgz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")" 2> /dev/null
  if [[ $rc -eq 0 && $failures -gt 0 ]]; then rc=1; fi
  exit "$rc"
}
trap finish EXIT
trap 'row interrupted "FAILED" "signal at $(elapsed)"; exit 143' TERM INT

echo "== GPUs"
nvidia-smi -L 2>&1 | tee "$LOGS/gpus.txt"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
# The CUDA versions that must fit together: a toolkit newer than the driver makes every test
# skip ("driver version is insufficient"), and the model test loads PyTorch's runtime beside ours.
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
toolkit=$("$nvcc_bin" --version 2>/dev/null | grep -oE 'release [0-9.]+' | head -1)
torch_cuda=$(python3 -c 'import torch; print(torch.version.cuda)' 2>/dev/null)
driver_cuda=$(nvidia-smi 2>/dev/null | grep -oE 'CUDA Version: [0-9.]+' | grep -oE '[0-9.]+$' | head -1)
echo "driver ${driver:-?} (CUDA ${driver_cuda:-?}), nvcc ${toolkit:-?}, PyTorch's CUDA ${torch_cuda:-none}" |
  tee -a "$LOGS/gpus.txt"
# A toolkit newer than the driver builds programs that cannot start on it: say so, not only skips.
nvcc_major=${toolkit#release }; nvcc_major=${nvcc_major%%.*}
if [[ -n "$driver_cuda" && -n "$nvcc_major" && "$nvcc_major" -gt "${driver_cuda%%.*}" ]]; then
  row cuda_versions "FAILED" "nvcc ${toolkit#release } is newer than the driver's CUDA $driver_cuda"
fi

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
# The model's CUDA test needs a CUDA LibTorch: the one inside the host's PyTorch. Everything
# compiled here uses the C++ ABI that LibTorch was built with (its config may not say it), the
# .cu files' host code too: Status and its std::string cross between them.
torch_args=()
torch_why="no CUDA PyTorch (LibTorch) on this host"  # why the model's checks do not run
torch_prefix=$(python3 -c 'import torch; assert torch.version.cuda; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
if [[ -n "$torch_prefix" ]]; then
  abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>/dev/null || echo 1)
  torch_args=(-DMARLAAS_GPU_CHECK_TORCH=ON -DCMAKE_PREFIX_PATH="$torch_prefix")
  # GCC's default is the new ABI (1): flags only for an old-ABI LibTorch (then GoogleTest must be
  # built from .gpudeps' sources, not taken prebuilt).
  if [[ "$abi" == 0 && ! -d "$deps/usr/src/googletest" ]]; then
    # A prebuilt GoogleTest has the new ABI: every test would fail to link, not only the model's.
    echo "LibTorch: $torch_prefix has the old C++ ABI and .gpudeps has no GoogleTest sources"
    torch_why="old-ABI LibTorch without GoogleTest sources (.gpudeps)"
    torch_prefix="" torch_args=()
  elif [[ "$abi" == 0 ]]; then
    torch_args+=(-DCMAKE_CXX_FLAGS="-D_GLIBCXX_USE_CXX11_ABI=0"
                 -DCMAKE_CUDA_FLAGS="-Xcompiler=-D_GLIBCXX_USE_CXX11_ABI=0")
  fi
  [[ -n "$torch_prefix" ]] && echo "LibTorch: $torch_prefix (C++ ABI $abi)"
else
  echo "LibTorch: no CUDA PyTorch here; the model's CUDA test is not built"
fi
nccl_root=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
[[ -n "$nccl_root" && -d "$nccl_root/include" ]] && args+=(-DNCCL_ROOT="$nccl_root")
echo "cmake ${args[*]} ${torch_args[*]}"

echo "== configure ($(elapsed))"
configured=0
if tlimit 90 cmake -S . -B build-gpu "${args[@]}" "${torch_args[@]}" > "$LOGS/configure.log" 2>&1; then
  configured=1
elif [[ ${#torch_args[@]} -gt 0 ]]; then
  # Without LibTorch: if that configures, LibTorch's config was the problem, and the checks that
  # need no LibTorch still run; if not, the problem is elsewhere (both logs are kept).
  mv "$LOGS/configure.log" "$LOGS/configure-torch.log"
  rm -rf build-gpu/CMakeCache.txt build-gpu/CMakeFiles
  if tlimit 90 cmake -S . -B build-gpu "${args[@]}" > "$LOGS/configure.log" 2>&1; then
    configured=1
    tail -30 "$LOGS/configure-torch.log"
    row configure_torch "FAILED" "LibTorch's config: see configure-torch.log; built without it"
    torch_prefix="" torch_args=() torch_why="LibTorch's config failed (configure-torch.log)"
  fi
fi
if [[ $configured -eq 0 ]]; then
  tail -30 "$LOGS/configure.log"
  row configure "FAILED" "see configure.log"
fi
bin=build-gpu/bin

# Builds `targets` with ninja going on past a failed one (-k 0), then a row per build.
build() {
  local name=$1 limit=$2 log=$3
  shift 3
  if tlimit "$limit" cmake --build build-gpu -j "$(nproc)" --target "$@" -- -k 0 > "$log" 2>&1; then
    row "$name" "ok" "$(grep -c 'Building' "$log") objects, $(elapsed)"
  else
    grep -E 'error|FAILED' "$log" | head -20
    local missing=()
    for t in "$@"; do [[ -x "$bin/$t" ]] || missing+=("$t"); done
    row "$name" "FAILED" "not built: ${missing[*]:-none}; see $(basename "$log")"
  fi
}
if [[ $configured -eq 1 ]]; then
  echo "== build ($(elapsed))"
  base_targets=(kernels_test shm_cuda_test bench_lora_cuda bench_adapter_ipc)
  ninja -C build-gpu -t targets all 2> /dev/null | grep -q '^nccl_test:' && base_targets+=(nccl_test)
  build build 240 "$LOGS/build.log" "${base_targets[@]}"
  # The model's build (LibTorch: minutes) in the background, at low priority, while the
  # LibTorch-free tests run; the benchmarks wait for it.
  if [[ -n "$torch_prefix" ]]; then
    echo "== build model_cuda_test bench_model_profile, in the background ($(elapsed))"
    # Its own session (setsid), so that finish() can stop all of it.
    setsid nice -n 19 bash -c "$(declare -f limit tlimit elapsed); t0=$t0 budget=$budget; \
      tlimit 330 cmake --build build-gpu -j $(nproc) --target model_cuda_test bench_model_profile \
      -- -k 0" > "$LOGS/build-model.log" 2>&1 &
    model_build_pid=$!
  fi
fi

# A GoogleTest binary: passed / failed / skipped counts from its own summary. On a host with a
# GPU a skipped test is a failure: every test here skips only when CUDA is unusable.
gtest() {
  local name=$1 limit=$2
  shift 2
  if [[ ! -x "$bin/$name" ]]; then row "$name" "FAILED" "not built"; return; fi
  echo "== $name $* ($(elapsed))"
  tlimit "$limit" "$bin/$name" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$? ok fail skip
  count() { grep -oE "^\[  $1 *\] [0-9]+ test" "$LOGS/$name.log" | grep -oE '[0-9]+' | head -1; }
  ok=$(count PASSED); fail=$(count FAILED); skip=$(count SKIPPED)
  ok=${ok:-0}; fail=${fail:-0}; skip=${skip:-0}
  grep -E '^\[  FAILED  \]|Failure|Skipped|needs a CUDA|skip:' "$LOGS/$name.log" | head -20
  if [[ $rc -ne 0 ]]; then row "$name" "FAILED (rc $rc)" "$ok passed, $fail failed, $skip skipped"
  elif [[ $skip -gt 0 && $ngpu -gt 0 ]]; then
    row "$name" "FAILED (skips)" "$ok passed, $skip skipped on a host with $ngpu GPU(s)"
  elif [[ $ok -eq 0 ]]; then row "$name" "FAILED" "no test ran"
  else row "$name" "ok" "$ok passed, $skip skipped"; fi
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
  tlimit "$limit" "$bin/$name" --json "$LOGS/$name.json" 2>&1 | tee "$LOGS/$name.log"
  local rc=${PIPESTATUS[0]} figure
  figure=$(grep -E ' (met|MISSED)$' "$LOGS/$name.log" | sed -E 's/ +/ /g' | paste -sd ';' -)
  if [[ $rc -eq 0 ]]; then row "$name" "ok" "${figure:-no target line}"
  else row "$name" "MISSED/FAILED (rc $rc)" "${figure:-no target line}"; fi
}
# The LibTorch-free benchmarks now, with the model's build (if still going) paused: they time an
# idle host, and their time does not depend on how long that build takes.
paused=0
if [[ -n "${model_build_pid:-}" ]] && kill -0 "$model_build_pid" 2> /dev/null; then
  pkill -STOP -s "$model_build_pid" 2> /dev/null && paused=1
fi
bench bench_lora_cuda 90
bench bench_adapter_ipc 90
[[ $paused -eq 1 ]] && pkill -CONT -s "$model_build_pid" 2> /dev/null

if [[ -n "${model_build_pid:-}" ]]; then
  echo "== waiting for the model's build ($(elapsed))"
  wait "$model_build_pid"
  model_rc=$?
  model_build_pid=""
  if [[ $model_rc -eq 0 ]]; then
    row build_model "ok" "$(grep -c 'Building' "$LOGS/build-model.log") objects, done at $(elapsed)"
  else
    grep -E 'error|FAILED' "$LOGS/build-model.log" | head -20
    row build_model "FAILED (rc $model_rc)" "see build-model.log"
  fi
fi

# The model on the GPU against the CPU (built against the host PyTorch's LibTorch), then the
# GPU's stage costs as the simulator's profile: `marlaas bench sim --calibrate RUN --profile
# gpu_profile.json` projects with it.
if [[ -n "$torch_prefix" ]]; then
  gtest model_cuda_test 150
  if [[ -x "$bin/bench_model_profile" ]]; then
    echo "== bench_model_profile ($(elapsed))"
    tlimit 120 "$bin/bench_model_profile" --device cuda --model qwen2.5-0.5b \
      --profile "$LOGS/gpu_profile.json" --json "$LOGS/bench_model_profile.json" 2>&1 |
      tee "$LOGS/bench_model_profile.log"
    rc=${PIPESTATUS[0]}
    fit=$(grep -E '^(rollout pass|trainer step) =' "$LOGS/bench_model_profile.log" | paste -sd ';' -)
    if [[ $rc -eq 0 ]]; then row bench_model_profile "ok" "${fit:-no fit line}"
    else row bench_model_profile "MISSED/FAILED (rc $rc)" "${fit:-no fit line}"; fi
  else
    row bench_model_profile "FAILED" "not built"
  fi
else
  row model_cuda_test "skipped" "$torch_why"
fi
exit 0  # the status comes from the rows (finish)
