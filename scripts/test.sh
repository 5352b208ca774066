#!/usr/bin/env bash
# Builds tutti and runs the whole test suite, in three stages:
#   1. plain: the sources against .clang-format, build/ (scripts/build.sh)
#      and every test through ctest but PyTorch's own distributed suite,
#      the network test-bed's and the benchmarks' brief runs;
#   2. PyTorch's suite (ctest label "torch_suite"), the test-bed's tests
#      (label "netbed") and those brief runs (label "bench"), the build matrix (tests/build/build_matrix.sh: library, tools and
#      Python package with g++ in Release and Debug, clang++ in Release; the
#      plain build is g++ RelWithDebInfo), pip install . and pip wheel . into
#      fresh venvs (tests/install/pip_test.sh), then sanitizers: the multi-rank tests
#      built with AddressSanitizer and UndefinedBehaviorSanitizer
#      (build-asan/), then with ThreadSanitizer (build-tsan/); any report,
#      in the test process or in a rank it forked, fails the test;
#   3. fuzz: the libFuzzer targets of tests/fuzz, built with clang
#      (build-fuzz/), both at once, each for $TUTTI_FUZZ_SECONDS (default
#      60) seconds; a crash, leak, timeout or failed check fails the command.
#
#   scripts/test.sh [--quick] [ctest arguments]
#
# --quick (or TUTTI_TEST_QUICK=1) runs the plain stage only. Other arguments
# go to the plain stage's ctest. TUTTI_JOBS sets the build parallelism
# (default: one job per core).
set -euo pipefail
cd "$(dirname "$0")/.."

quick=${TUTTI_TEST_QUICK:-0}
ctest_args=()
for a in "$@"; do
  if [ "$a" = "--quick" ]; then quick=1; else ctest_args+=("$a"); fi
done
jobs=${TUTTI_JOBS:-$(nproc)}
fuzz_seconds=${TUTTI_FUZZ_SECONDS:-60}

start=$(date +%s)
stage_start=$start
summary=()
stage_done() {
  local now
  now=$(date +%s)
  summary+=("$(printf '%-24s %5d s' "$1" $((now - stage_start)))")
  echo "== $1: $((now - stage_start)) s"
  stage_start=$now
}
# ctest starts the longest tests first where it knows their times
# (Testing/Temporary/CTestCostData.txt, which it rewrites after each run); a
# fresh build directory gets those of tests/ctest_costs/NAME.txt (a clean
# run's), so that no long test starts last with the other core idle.
seed_costs() {  # build directory, NAME
  local f=$1/Testing/Temporary/CTestCostData.txt
  if [ ! -f "$f" ]; then
    mkdir -p "$(dirname "$f")"
    cp "tests/ctest_costs/$2.txt" "$f"
  fi
}
finish() {
  echo "== stage times"
  printf '%s\n' "${summary[@]}"
  echo "test suite finished in $(( $(date +%s) - start )) s"
}

# ---- 1. plain build and every test ------------------------------------------
bash scripts/setup.sh
# Every build of the command goes through ccache (its cache lives outside the clone).
# Paths under the checkout are hashed relative to it, so that another clone
# (CI's) finds what this one compiled.
if [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
fi
# Every C and C++ source follows .clang-format.
mapfile -t sources < <(find src include tools tests python/src examples bench -name '*.cc' -o -name '*.h' -o -name '*.c')
if ! clang-format --dry-run -Werror "${sources[@]}"; then
  echo "sources that do not follow .clang-format (clang-format -i FILE fixes them): above" >&2
  exit 1
fi
TUTTI_JOBS=$jobs bash scripts/build.sh
stage_done "plain build"
seed_costs build plain
# PyTorch's own suite (ctest label "torch_suite"), the network test-bed's
# tests (label "netbed") and the benchmarks' brief runs (label "bench") wait
# for stage 2, unless ctest arguments choose the tests.
plain_filter=(-LE 'bench|torch_suite|netbed')
[ ${#ctest_args[@]} -gt 0 ] && plain_filter=()
(cd build && ctest --output-on-failure -j2 --timeout 900 ${plain_filter[@]+"${plain_filter[@]}"} \
  ${ctest_args[@]+"${ctest_args[@]}"})
stage_done "plain tests"
if [ "$quick" = 1 ]; then
  finish
  exit 0
fi

# ---- 2. PyTorch's suite, the benchmarks briefly, what users build, the sanitizers
# torch 2.13's distributed test suite against "tutti" (python/tests/torch_suite/).
(cd build && ctest --output-on-failure -j2 --timeout 900 -L torch_suite)
stage_done "PyTorch's suite"
# Four hosts as network namespaces (tests/netbed/; each test makes its own).
(cd build && ctest --output-on-failure -j2 --timeout 900 -L netbed)
stage_done "network test-bed"
# Each benchmark runs a few iterations and its own checks (every output
# element, the same losses on both backends).
(cd build && ctest --output-on-failure -j2 --timeout 900 -L bench)
stage_done "benchmarks, briefly"

# The library, tools and Python package with g++ and clang++ in Release,
# Debug and RelWithDebInfo, warnings as errors.
TUTTI_JOBS=$jobs bash tests/build/build_matrix.sh
stage_done "build matrix"
# As torch users install it: pip install . and pip wheel . into fresh venvs
# with torch 2.13, then the seed's torch programs, DDP and torchrun from
# there (tests/install/pip_test.sh).
bash tests/install/pip_test.sh "${TUTTI_VENV:-$PWD/.venv}/bin/python" .
stage_done "pip install and wheel"

# Every report is fatal and ends the process with exit code 86, never with a
# signal: a failure test may let some ranks die by a signal (may_die in
# tests/harness/spawn.h), and a report in such a rank must still fail it.
# Ranks leave through _exit, so the harness runs LeakSanitizer in each one.
# The large-message test uses smaller messages here (TUTTI_TEST_LARGE_BYTES),
# with chunks and slots scaled alike; everything else runs as in stage 1.
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:exitcode=86:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=0:exitcode=86:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:abort_on_error=0:exitcode=86:second_deadlock_stack=1
sanitized() {  # name, TUTTI_SANITIZE value, TUTTI_TEST_LARGE_BYTES
  local dir=build-$1
  # Line tables only (-g1): what the reports' stack traces need, in three
  # quarters of the compile time of full debug information.
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DTUTTI_SANITIZE="$2" -DTUTTI_WERROR=ON \
    -DTUTTI_BUILD_TESTS=ON -DTUTTI_BUILD_TOOLS=ON -DTUTTI_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$dir" -j"$jobs" --target tutti_multirank_tests
  stage_done "$1 build"
  seed_costs "$dir" "$1"
  (cd "$dir" && TUTTI_TEST_LARGE_BYTES=$3 ctest --output-on-failure -j2 --timeout 900 -L multirank)
  stage_done "$1 multi-rank tests"
}
sanitized asan address,undefined $((512 << 10))
sanitized tsan thread $((256 << 10))
unset ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS

# ---- 3. fuzz targets ----------------------------------------------------------
cmake -S tests/fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build build-fuzz -j"$jobs"
stage_done "fuzz build"
# The two targets run at once, one a core.
targets=(store_stream transport_stream)
pids=()
for target in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$target" build-fuzz/artifacts
  echo "fuzz_$target: ${fuzz_seconds} s (log: build-fuzz/$target.log)"
  # New inputs go to build-fuzz/corpus/; the checked-in seeds are only read.
  build-fuzz/fuzz_$target -max_total_time="$fuzz_seconds" -print_final_stats=1 -timeout=10 \
    -rss_limit_mb=2048 -max_len=8192 -artifact_prefix="build-fuzz/artifacts/$target-" \
    "build-fuzz/corpus/$target" "tests/fuzz/corpus/$target" >"build-fuzz/$target.log" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!targets[@]}"; do
  target=${targets[$i]}
  log=build-fuzz/$target.log
  if ! wait "${pids[$i]}"; then
    tail -n 80 "$log"
    echo "fuzz_$target failed; the input that failed is in build-fuzz/artifacts/" >&2
    failed=1
    continue
  fi
  echo "fuzz_$target:"
  grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::(number_of_executed_units|new_units_added)' "$log" || true
done
[ "$failed" = 0 ] || exit 1
stage_done "fuzzing"

finish
