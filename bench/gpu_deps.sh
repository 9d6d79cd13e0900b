#!/usr/bin/env bash
# Fetches, on a machine with apt (this development machine), the Debian packages that
# bench/gpu_check.sh needs on a GPU host that can install nothing: Boost's headers (shm/ maps
# segments with Boost.Interprocess), GoogleTest's sources and nlohmann/json's headers (the model,
# built against the host's PyTorch LibTorch for its CUDA test). They land in .gpudeps/ (ignored by
# git), which the device call carries; gpu_check.sh unpacks them into a folder of its own.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p .gpudeps
cd .gpudeps
# apt's sandbox user cannot write here when we run as root; downloading unsandboxed is fine.
apt-get -o APT::Sandbox::User=root download libboost1.74-dev googletest nlohmann-json3-dev
ls -l
