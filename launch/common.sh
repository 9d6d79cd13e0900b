# Shared by launch/marlaas and launch/check: install what the build needs (Debian packages),
# configure once, build incrementally. Sourced, not run.
#
# Environment:
#   MARLAAS_BUILD_DIR   build folder (default: <repo>/build)
#   MARLAAS_CMAKE_ARGS  extra arguments for the first configure (e.g. -DMARLAAS_WITH_CUDA=OFF)
#   MARLAAS_JOBS        parallel build jobs (default: number of cores)

MARLAAS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MARLAAS_BUILD_DIR="${MARLAAS_BUILD_DIR:-$MARLAAS_ROOT/build}"

# Build tools, libraries, and OpenBLAS: Debian's libtorch otherwise runs on the reference BLAS,
# about 12x slower on matrix products.
MARLAAS_PACKAGES=(
  g++ cmake ninja-build pkg-config ccache
  libboost-dev libprotobuf-dev protobuf-compiler libgtest-dev libgmock-dev libseccomp-dev
  nlohmann-json3-dev
  libtorch-dev libopenblas0-pthread
  python3  # the interpreter sandboxed verifiers run (Debian's, at /usr/bin/python3)
  bubblewrap  # only for bench_sandbox's comparison
)

marlaas_log() { printf '[marlaas] %s\n' "$*" >&2; }

marlaas_missing_packages() {
  local p
  for p in "${MARLAAS_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
      printf '%s ' "$p"
    fi
  done
}

marlaas_install_packages() {
  local missing
  missing="$(marlaas_missing_packages)"
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    marlaas_log "missing Debian packages: $missing"
    marlaas_log "install them as root, then run this again:"
    printf '  sudo apt-get update && sudo apt-get install -y --no-install-recommends %s\n' "$missing" >&2
    exit 1
  fi
  marlaas_log "installing Debian packages: $missing"
  local t0=$SECONDS
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  # shellcheck disable=SC2086
  apt-get install -y -q --no-install-recommends $missing >/dev/null
  marlaas_log "packages installed in $((SECONDS - t0)) s"
}

marlaas_build() {
  local jobs="${MARLAAS_JOBS:-$(nproc)}"
  local t0=$SECONDS
  if [ ! -f "$MARLAAS_BUILD_DIR/CMakeCache.txt" ]; then
    marlaas_log "configuring in $MARLAAS_BUILD_DIR"
    mkdir -p "$MARLAAS_BUILD_DIR"
    local gen=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    # shellcheck disable=SC2086
    cmake -S "$MARLAAS_ROOT" -B "$MARLAAS_BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
      ${MARLAAS_CMAKE_ARGS:-} >"$MARLAAS_BUILD_DIR/configure.log" 2>&1 || {
      cat "$MARLAAS_BUILD_DIR/configure.log" >&2
      marlaas_log "configure failed (log above)"
      exit 1
    }
  fi
  # ninja prints [done/total] progress; a terminal shows it on one line.
  cmake --build "$MARLAAS_BUILD_DIR" --parallel "$jobs" || {
    marlaas_log "build failed"
    exit 1
  }
  local dt=$((SECONDS - t0))
  [ "$dt" -gt 5 ] && marlaas_log "build took ${dt} s"
  return 0
}

marlaas_setup() {
  marlaas_install_packages
  marlaas_build
}
