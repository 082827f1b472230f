#!/usr/bin/env bash
# On a GPU machine: the catalogue's projections (docs/catalogue.md), one whole-function
# estimate after another on one GPU, within a deadline.
#
#   W=carry/tmd-worker OUT=/some/dir DEADLINE=540 bash scripts/gpu-catalogue-run.sh
#
# First the binary80 functions with a reduction (FUNCTIONS80: cbrt sqrt rsqrt; 54 bits, units
# of 2^50, their base binades searched; empty for none), then the binary64 functions (FUNCTIONS64, 44 bits,
# the estimate's default units), each estimated whole as a campaign searches it (every binade:
# no reduction), its CostEstimate written as $OUT/F-binary64.json and its table as
# $OUT/F-binary64.txt. An estimate that would start after DEADLINE seconds is skipped, one
# that runs longer than EACH seconds is stopped; both are said. One line per estimate on
# stdout: the function, the `total:` line of its table and the estimate's wall.
set -uo pipefail
cd "$(dirname "$0")/.."
W=${W:-target/release/tmd-worker}
OUT=${OUT:-$(mktemp -d)}
DEADLINE=${DEADLINE:-540}
EACH=${EACH:-120}
SAMPLES=${SAMPLES:-3}
FUNCTIONS80=${FUNCTIONS80-"cbrt sqrt rsqrt"}
FUNCTIONS64=${FUNCTIONS64-"exp log log2 log10 exp10 expm1 log1p sinh cosh tanh asinh acosh atanh atan asin acos erf erfc sinpi cospi tanpi"}
mkdir -p "$OUT"
t_begin=$EPOCHREALTIME

elapsed() { awk -v a="$t_begin" -v z="$EPOCHREALTIME" 'BEGIN { printf "%.0f", z - a }' </dev/null; }

# estimate NAME ARGS...: one estimate, its table to $OUT/NAME.txt, its stderr to NAME.err.
estimate() {
  local name=$1 t0
  shift
  if [ "$(elapsed)" -ge "$DEADLINE" ]; then
    echo "$name: skipped (deadline of $DEADLINE s reached)"
    return
  fi
  t0=$EPOCHREALTIME
  timeout "$EACH" "$W" estimate "$@" --backend cuda --devices 0 --samples "$SAMPLES" --quiet \
    > "$OUT/$name.txt" 2> "$OUT/$name.err"
  local rc=$? took
  took=$(awk -v a="$t0" -v z="$EPOCHREALTIME" 'BEGIN { printf "%.1f", z - a }' </dev/null)
  if [ $rc = 0 ]; then
    echo "$name: $(grep -E '^total' "$OUT/$name.txt") [estimate took $took s]"
  elif [ $rc = 124 ]; then
    echo "$name: not finished in $EACH s"
  else
    echo "$name: failed ($rc): $(tail -n 2 "$OUT/$name.err" | tr '\n' ' ')"
  fi
}

nvidia-smi --query-gpu=name --format=csv,noheader
# The first search compiles the modules: not part of any estimate's time.
"$W" search -f exp --format binary64 --from 1 --to 1.0001 --min-bits 44 --backend cuda \
  --devices 0 --quiet > /dev/null 2>&1
for f in $FUNCTIONS80; do
  estimate "$f-binary80" -f "$f" --format binary80 --whole --unit-bits 50 --min-bits 54
done
for f in $FUNCTIONS64; do
  estimate "$f-binary64" -f "$f" --format binary64 --whole --min-bits 44 \
    --no-reduction --output json -o "$OUT/$f-binary64.json"
done
echo "all done after $(elapsed) s"
