# Sourced by the bench/run-*.sh drivers as
#   . "$(dirname "${BASH_SOURCE[0]}")/bench-env.sh" PROGRAM WORK_NAME DEFAULT_LAYERS
# Enters the repository root and sets build_dir (BUILD_DIR, default build),
# bench (the build's bench/PROGRAM), work (BENCH_DIR, default
# .bench/WORK_NAME), py (.venv/bin/python, else python3) and the array layers
# (LAYERS, default DEFAULT_LAYERS).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${BUILD_DIR:-build}
bench=$build_dir/bench/$1
work=${BENCH_DIR:-.bench/$2}
py=.venv/bin/python
[ -x "$py" ] || py=python3
read -r -a layers <<<"${LAYERS:-$3}"
