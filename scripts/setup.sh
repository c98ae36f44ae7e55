#!/usr/bin/env bash
# Sets up everything tpfuse needs to build and test, then builds it.
# Idempotent: each step is skipped when its result is already there.
#
#   1. Debian packages (apt-get, only when one is missing)
#   2. the project virtual environment .venv with scripts/requirements.txt at
#      the exact versions of scripts/constraints.txt (transitive ones too),
#      checked afterwards: a package that differs from the lock stops setup
#   3. meson setup of build/ (python option -> .venv/bin/python) and ninja
#
#   setup.sh [TARGET ...]   builds only these ninja targets in step 3 (the
#                           demo: cli/tpfuse); default: everything
#
# Environment: BUILD_DIR (default: build), TPF_SKIP_APT=1 to skip step 1,
# MESON_ARGS (extra arguments for the first `meson setup`).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
build_dir=${BUILD_DIR:-build}
venv=$root/.venv
req=$root/scripts/requirements.txt
lock=$root/scripts/constraints.txt

say() { printf '==> %s\n' "$*"; }

# ------------------------------------------------------------------ 1. packages
packages=(gcc clang libclang-rt-14-dev meson ninja-build pkg-config protobuf-c-compiler libprotobuf-c-dev libcmocka-dev
	openmpi-bin libopenmpi-dev graphviz python3-venv python3-dev)

missing=()
if [ "${TPF_SKIP_APT:-0}" != 1 ] && command -v dpkg-query >/dev/null 2>&1; then
	for p in "${packages[@]}"; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
			missing+=("$p")
		fi
	done
fi
if [ ${#missing[@]} -gt 0 ]; then
	say "installing Debian packages: ${missing[*]}"
	sudo=()
	if [ "$(id -u)" -ne 0 ]; then
		if command -v sudo >/dev/null 2>&1; then
			sudo=(sudo)
		else
			echo "setup.sh: need root (or sudo) to install: ${missing[*]}" >&2
			exit 1
		fi
	fi
	export DEBIAN_FRONTEND=noninteractive
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends "${missing[@]}" </dev/null
else
	say "Debian packages: all present"
fi

# ------------------------------------------------------------------ 2. virtual environment
if [ -x "$venv/bin/python" ] && ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
	say "removing a broken $venv"
	rm -rf "$venv"
fi
if [ ! -x "$venv/bin/python" ]; then
	say "creating $venv"
	python3 -m venv "$venv"
fi
stamp=$venv/.tpfuse-requirements
want=$(cat "$req" "$lock" | sha256sum | cut -d' ' -f1)
pip_install() {
	say "installing Python packages into .venv: $(grep -v '^#' "$req" | xargs) (locked: scripts/constraints.txt)"
	"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input -r "$req" -c "$lock"
}
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] ||
	! "$venv/bin/python" -c 'import onnx, onnxruntime, numpy' >/dev/null 2>&1; then
	pip_install
	echo "$want" >"$stamp"
else
	say "Python packages: up to date"
fi
# The environment must be the lock, every transitive package included: an
# unpinned one changes the tests' reference outputs when it is released.
if ! "$venv/bin/python" "$root/scripts/check-lock.py" "$lock" --python "$venv/bin/python" >/dev/null 2>&1; then
	say ".venv differs from scripts/constraints.txt: installing the lock again"
	pip_install
	if ! "$venv/bin/python" "$root/scripts/check-lock.py" "$lock" --python "$venv/bin/python"; then
		echo "setup.sh: .venv is not scripts/constraints.txt (above): pin the package there" \
			"(scripts/lock.py venv), or remove what was installed by hand (rm -rf .venv)" >&2
		exit 1
	fi
fi
say "Python packages: .venv matches scripts/constraints.txt"

# ------------------------------------------------------------------ 3. build
if [ ! -f "$build_dir/build.ninja" ]; then
	say "configuring $build_dir/"
	# shellcheck disable=SC2086
	meson setup "$build_dir" -Dpython="$venv/bin/python" ${MESON_ARGS:-}
else
	current=$(meson introspect "$build_dir" --buildoptions 2>/dev/null |
		python3 -c 'import json,sys; print(next((o["value"] for o in json.load(sys.stdin) if o["name"]=="python"), ""))' \
		2>/dev/null || true)
	if [ "$current" != "$venv/bin/python" ]; then
		meson configure "$build_dir" -Dpython="$venv/bin/python"
	fi
fi
say "building $build_dir/${1:+: $*}"
ninja -C "$build_dir" "$@"
say "setup done: $build_dir/cli/tpfuse"
