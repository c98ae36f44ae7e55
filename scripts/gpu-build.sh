#!/usr/bin/env bash
# Builds tpfuse with the CUDA backend and the NCCL communicator on the GPU
# machine (CUDA 13 nvcc, NCCL and Open MPI in system folders, meson, ninja).
# protobuf-c and cmocka come from the .debs that scripts/gpu-deps.sh put in
# .deps/: they are unpacked (dpkg -x, no root needed) into $TPF_DEPS_PREFIX
# (default /opt/tpfdeps).  Writes BUILDDIR/gpu-env.sh, which sets PATH,
# LD_LIBRARY_PATH and NCCL_NVLS_ENABLE=0 for running the results.
#
# Usage: scripts/gpu-build.sh [BUILDDIR [TARGET...]]  (default build-gpu;
#   the targets ninja builds, default all)
#   then: . BUILDDIR/gpu-env.sh && meson test -C BUILDDIR --suite gpu
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
shift $(($# > 0 ? 1 : 0))
prefix=${TPF_DEPS_PREFIX:-/opt/tpfdeps}
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
libdir=$prefix/usr/lib/$arch
if ! command -v protoc-c >/dev/null 2>&1 || ! pkg-config --exists libprotobuf-c cmocka 2>/dev/null; then
	ls .deps/*.deb >/dev/null 2>&1 || { echo "no .deps/*.deb: run scripts/gpu-deps.sh on a machine with network" >&2; exit 1; }
	mkdir -p "$prefix"
	for f in .deps/*.deb; do dpkg -x "$f" "$prefix"; done
	# the packages' pkg-config files name /usr: point them at the prefix
	sed -i -e "s|^prefix=/usr\$|prefix=$prefix/usr|" -e "s|-L/usr/|-L$prefix/usr/|" \
		-e "s|-I/usr/|-I$prefix/usr/|" "$libdir"/pkgconfig/*.pc
fi
cuda_bin=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")
export PATH="$prefix/usr/bin:$cuda_bin:$PATH"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export NCCL_NVLS_ENABLE=0
if [ ! -d "$build" ]; then
	meson setup "$build" -Dcuda=enabled -Dnccl=enabled -Dmpi=enabled -Dpython=python3 \
		--buildtype=release
fi
ninja -C "$build" -j"$(nproc)" "$@"
cat > "$build/gpu-env.sh" <<ENV
export PATH="$prefix/usr/bin:$cuda_bin:\$PATH"
export LD_LIBRARY_PATH="$libdir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ENV
echo "built $build; for runs: . $build/gpu-env.sh"
