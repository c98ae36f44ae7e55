#!/usr/bin/env bash
# Fetches, on a Debian/Ubuntu machine with network, the packages that the
# GPU machine (Ubuntu 24.04, CUDA 13, NCCL, Open MPI; no network) lacks to
# build tpfuse: protobuf-c (compiler and library) and cmocka.  They land in
# .deps/ (ignored by git); copy or carry that folder to the GPU machine and
# run scripts/gpu-build.sh there, which unpacks them into a private prefix.
#
# Usage: scripts/gpu-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
cd .deps
rm -f ./*.deb
apt-get download protobuf-c-compiler libprotobuf-c1 libprotobuf-c-dev libprotoc32 libprotobuf32 \
	libcmocka0 libcmocka-dev
ls -l ./*.deb
