#!/usr/bin/env bash
# On a GPU machine: what the reductions (exp2, cbrt, sqrt, rsqrt: binades derived from a base
# region instead of searched) give and cost.
#  1. Searches on the GPU with and without the reduction, the HR-cases compared (PASS/FAIL),
#     the times side by side: exp2 on [1, 8), cbrt on [1, 64), sqrt and
#     rsqrt on [1, 16), binary64 at 44 bits.
#  2. Whole-function estimates (`tmd-worker estimate --whole`) with and without it, binary64 at
#     44 bits, and with it for binary80 at 54 bits (FUNCTIONS80), one line each.
# Everything goes to $OUT (default: a temporary folder) as text; exits 1 on any FAIL.
#
# Usage: W=carry/tmd-worker OUT=/some/dir scripts/gpu-reduce-run.sh
#   PARTS="1 2" (default), FUNCTIONS (exp2 cbrt sqrt rsqrt), FUNCTIONS80 (cbrt rsqrt sqrt),
#   OTHERS (functions without a reduction, estimated whole in binary64: none by default),
#   BUDGET (seconds of extra sampling per estimate, 0).
set -uo pipefail
cd "$(dirname "$0")/.."
W=${W:-target/release/tmd-worker}
OUT=${OUT:-$(mktemp -d)}
PARTS=${PARTS:-"1 2"}
FUNCTIONS=${FUNCTIONS:-"exp2 cbrt sqrt rsqrt"}
FUNCTIONS80=${FUNCTIONS80:-"cbrt rsqrt sqrt"}
OTHERS=${OTHERS:-}
BUDGET=${BUDGET:-0}
mkdir -p "$OUT"
fail=0

# compare NAME FUNCTION FROM TO: the same search with and without the reduction, as wc files
# (HR-cases only; a sqrt binade holds 2^26 exact cases), compared line by line.
compare() {
  local name=$1 f=$2 from=$3 to=$4 mode t0 t1
  for mode in reduced full; do
    local extra=()
    [ "$mode" = full ] && extra=(--no-reduction)
    t0=$EPOCHREALTIME
    if ! "$W" search -f "$f" --format binary64 --from "$from" --to "$to" --min-bits 44 \
      --backend cuda --output wc -o "$OUT/$name-$mode.wc" "${extra[@]}" 2>"$OUT/$name-$mode.err"; then
      echo "FAIL $name: the $mode search failed: $(tail -n 3 "$OUT/$name-$mode.err")"
      fail=1
      return
    fi
    t1=$EPOCHREALTIME
    awk -v n="$name" -v m="$mode" -v a="$t0" -v z="$t1" 'BEGIN { printf "   %s %s: %.2f s wall\n", n, m, z - a }' </dev/null
    echo "   $(grep -E 'derived and judged|HR-cases, .* exact cases' "$OUT/$name-$mode.err" | tr '\n' ' ')"
  done
  if cmp -s <(grep -v '^#' "$OUT/$name-reduced.wc") <(grep -v '^#' "$OUT/$name-full.wc"); then
    echo "PASS $name: $(grep -vc '^#' "$OUT/$name-full.wc") HR-cases, the same lists"
  else
    echo "FAIL $name: the lists differ"
    fail=1
  fi
  rm -f "$OUT/$name-reduced.wc" "$OUT/$name-full.wc"
}

# estimate FUNCTION FORMAT BITS [--no-reduction]
estimate() {
  local f=$1 fmt=$2 k=$3 mode=reduced
  shift 3
  [ "${1:-}" = --no-reduction ] && mode=full
  local file="$OUT/estimate-$f-$fmt-$mode.txt" t0=$EPOCHREALTIME
  if "$W" estimate -f "$f" --format "$fmt" --whole --min-bits "$k" --backend cuda --budget "$BUDGET" "$@" \
    >"$file" 2>"$file.err"; then
    awk -v a="$t0" -v z="$EPOCHREALTIME" -v n="$f $fmt $mode" \
      'BEGIN { printf "   estimate %s took %.0f s\n", n, z - a }' </dev/null
    echo "   $f $fmt $mode: $(grep -E '^(total|H100-hours|derived)' "$file" | tr '\n' ' ')"
  else
    echo "FAIL estimate $f $fmt $mode: $(tail -n 3 "$file.err")"
    fail=1
  fi
}

{
  nvidia-smi --query-gpu=name --format=csv,noheader
  for part in $PARTS; do
    case $part in
      1)
        echo "== searches with and without the reduction (binary64, 44 bits, GPU)"
        "$W" search -f exp2 --format binary64 --from 1 --to 1.0001 --min-bits 44 --backend cuda --quiet >/dev/null 2>&1
        compare exp2-1-8 exp2 1 8
        compare cbrt-1-64 cbrt 1 64
        compare sqrt-1-16 sqrt 1 16
        compare rsqrt-1-16 rsqrt 1 16
        ;;
      2)
        echo "== whole-function estimates"
        for f in $FUNCTIONS; do
          estimate "$f" binary64 44
          estimate "$f" binary64 44 --no-reduction
        done
        for f in $OTHERS; do estimate "$f" binary64 44; done
        for f in $FUNCTIONS80; do estimate "$f" binary80 54; done
        ;;
    esac
  done
  echo "fail=$fail"
} 2>&1 | tee "$OUT/summary.txt"
grep -q '^fail=0$' "$OUT/summary.txt"
