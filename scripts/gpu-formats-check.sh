#!/usr/bin/env bash
# On a GPU machine: the CPU and CUDA back ends give identical results (HR-cases, exact
# cases, skipped runs, phase counts) on the named formats' new cases (subnormal results,
# underflow and overflow listed, negative ranges at binade edges, binary80), then the binary80
# benchmark: exp on [1, 2) at 54 bits (CORE-MATH's binary80 threshold), one GPU, with the time
# projected to the whole binade. Prints PASS or FAIL per check and exits 1 on any FAIL.
#
# Zero and subnormal arguments and trivial runs are among the checks,
# and the far trivial runs and clear pieces (tanh, expm1, erf, erfc far out; exp, sin bands).
#
# Usage: scripts/gpu-formats-check.sh [BENCH_UNITS (2; 0 skips the benchmark)]
#   W=path/to/tmd-worker: a prebuilt worker (a GPU machine without cargo).
#   ONLY=REGEX: only the checks whose name matches.
#   GPU=cpu NO_GPU=1 scripts/gpu-formats-check.sh: a dry run on a machine without a GPU (the
#   comparisons against the CPU itself; no self-test, no benchmark).
# Needs: a release build of tmd-worker (built here when missing), python3, a CUDA device.
set -uo pipefail
cd "$(dirname "$0")/.."

BENCH_UNITS=${1:-2}
GPU=${GPU:-cuda}
W=${W:-target/release/tmd-worker}
if [ ! -x "$W" ]; then
  cargo build --release -p tmd-worker || { echo "FAIL: build"; exit 1; }
fi
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ -z "${NO_GPU:-}" ]; then
  echo "== GPU self-test"
  if "$W" selftest; then echo "PASS selftest"; else echo "FAIL selftest"; fail=1; fi
fi

# The part of a JSON result both back ends must agree on.
claim() {
  python3 -c 'import json,sys
v=json.load(open(sys.argv[1]))
print(json.dumps({k: v[k] for k in ("format","arguments","stats","hr_cases","exact_cases","skipped")}, sort_keys=True))' "$1"
}

# check NAME FUNCTION FORMAT FROM TO MIN_BITS UNIT_BITS
check() {
  local name=$1 f=$2 fmt=$3 from=$4 to=$5 k=$6 u=$7 b side t0 t1
  if [ -n "${ONLY:-}" ] && ! [[ $name =~ $ONLY ]]; then return; fi
  for side in ref gpu; do
    if [ "$side" = ref ]; then b=cpu; else b=$GPU; fi
    t0=$EPOCHREALTIME
    if ! "$W" search -f "$f" --format "$fmt" --from "$from" --to "$to" --min-bits "$k" \
      --unit-bits "$u" --backend "$b" --threads "$(nproc)" --output json --quiet >"$tmp/$side.json" 2>"$tmp/$side.err"; then
      echo "FAIL $name: the $b search failed: $(tail -n 3 "$tmp/$side.err")"
      fail=1
      return
    fi
    t1=$EPOCHREALTIME
    awk -v n="$name" -v b="$b" -v a="$t0" -v z="$t1" 'BEGIN { printf "   %s, %s: %.2f s\n", n, b, z - a }' </dev/null
  done
  if [ "$(claim "$tmp/ref.json")" = "$(claim "$tmp/gpu.json")" ]; then
    echo "PASS $name: $(python3 -c 'import json,sys
v=json.load(open(sys.argv[1])); print(len(v["hr_cases"]), "HR-cases,", len(v["exact_cases"]), "exact,", sum(s["count"] for s in v["skipped"]), "skipped,", v["stats"]["domains"], "domains")' "$tmp/ref.json")"
  else
    echo "FAIL $name: the CPU and CUDA results differ"
    diff <(claim "$tmp/ref.json" | python3 -m json.tool) <(claim "$tmp/gpu.json" | python3 -m json.tool) | head -n 20
    fail=1
  fi
}

echo "== CPU and CUDA identical on the new cases"
check "exp binary32 subnormal (issue example)" exp binary32 -0x1.9p+6 -0x1.8fe8p+6 12 16
check "exp binary32 deep subnormal" exp binary32 -0x1.9p+6 -0x1.8p+6 12 16
check "exp binary32 across 2^-126" exp binary32 -0x1.5ep+6 -0x1.5dp+6 12 16
check "exp binary32 into underflow" exp binary32 -0x1.a4p+6 -0x1.a2p+6 12 16
check "exp binary32 into overflow" exp binary32 0x1.62p+6 0x1.64p+6 12 16
check "expm1 binary32 negative binade edge" expm1 binary32 -0x1.01p+0 -0x1p+0 12 16
check "exp binary64 negative binade edge" exp binary64 -0x1.0000001p+0 -0x1p+0 20 24
check "exp binary64 k=1 (saturated threshold)" exp binary64 0x1p+0 0x1.0000000001p+0 1 12
check "sinh binary16 every argument" sinh binary16 -0x1.ffcp+15 0x1.ffcp+15 7 10
check "exp binary80 slice" exp binary80 0x1p+0 0x1.0000000002p+0 40 24
check "exp p24 (unbounded) into underflow" exp p24 -0x1.a4p+6 -0x1.a2p+6 12 16
check "sin binary32 through 0 (trivial runs, exact 0)" sin binary32 -0x1p-100 0x1p-100 20 24
check "erf binary32 subnormal arguments (polynomial on the subnormal grid)" erf binary32 0x1p-140 0x1p-127 12 16
check "sinpi binary32 negative, subnormal to normal" sinpi binary32 -0x1.1p-126 -0x1p-140 12 16
check "log binary32 zero (pole) and subnormal arguments" log binary32 0 0x1p-128 12 16
check "exp binary32 across the trivial region's end" exp binary32 0x1p-38 0x1p-35 12 16
check "cos binary32 through 0, trivial region and beyond" cos binary32 -0x1p-17 0x1p-17 12 16
check "atan binary16 every argument" atan binary16 -0x1.ffcp+15 0x1.ffcp+15 7 10
check "exp bfloat16 every argument" exp bfloat16 -0x1.fep+127 0x1.fep+127 5 10
# Far trivial runs and clear pieces (monotone.rs, docs/error-analysis.md §11): the cut happens
# before the back end, so both must list the same runs and count the same clear arguments.
check "tanh binary64 far: clear, then rounds like 1" tanh binary64 20 40 44 40
check "expm1 binary64 far: rounds like -1" expm1 binary64 -800 -40 44 40
check "exp binary64 band beyond the trivial region (negative)" exp binary64 -0x1p-96 -0x1p-100 44 40
check "sin binary64 band beyond the trivial region" sin binary64 0x1p-50 0x1p-40 44 40
check "erf binary32 far edge" erf binary32 4 8 16 16
check "erfc binary32 near 2" erfc binary32 -8 -2 16 16
check "tanh bfloat16 every argument" tanh bfloat16 -0x1.fep+127 0x1.fep+127 5 10
check "erfc binary16 every argument" erfc binary16 -0x1.ffcp+15 0x1.ffcp+15 7 10
# A unit on a run's edge (one run, no case), periodic verdicts copied per class,
# and pieces split where the curvature fills the circle (new piece shapes on the back end).
check "exp2m1 binary32 unit on a run's edge" exp2m1 binary32 -0x1.5p+5 -0x1.4p+5 16 18
check "sinpi binary32 [2^19, 2^20) (periodic classes)" sinpi binary32 0x1p+19 0x1p+20 16 16
check "erfc binary32 [9, 9.0625) (curvature splits, dense route)" erfc binary32 9 0x1.22p+3 16 16
check "erfc binary64 near 9 (curvature splits)" erfc binary64 9 0x1.2000000001p+3 40 24

echo "== binary80 benchmark: exp on [1, 2) at 54 bits, $BENCH_UNITS units of 2^40, one GPU"
if [ -n "${NO_GPU:-}" ] || [ "$BENCH_UNITS" = 0 ]; then
  echo "   (skipped)"
elif "$W" bench -f exp --format binary80 --min-bits 54 --units "$BENCH_UNITS" --backend cuda \
  --devices 0 --json >"$tmp/bench.json" 2>"$tmp/bench.err"; then
  python3 - "$tmp/bench.json" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
per_unit = v["seconds_per_unit"]
units_per_binade = 2 ** (63 - v["unit_bits"])
total = per_unit * units_per_binade
print("PASS bench: %s %s k=%d, %d units of 2^%d in %.2f s: %.3f s per unit, %.3e arguments/s"
      % (v["function"], v["format"], v["min_bits"], v["units"], v["unit_bits"], v["wall_s"],
         per_unit, v["arguments_per_s"]))
print("   per unit: " + ", ".join("%s %.3f s" % kv for kv in v["phase_s_per_unit"].items()))
print("   stats: " + json.dumps(v["stats"]))
print("   projected for the binade [1, 2) (2^63 arguments, %d units): %.3e s = %.1f GPU-days"
      % (units_per_binade, total, total / 86400))
EOF
else
  echo "FAIL bench: $(tail -n 3 "$tmp/bench.err")"
  fail=1
fi

if [ "$fail" = 0 ]; then echo "ALL PASS"; else echo "SOME CHECKS FAILED"; fi
exit "$fail"
