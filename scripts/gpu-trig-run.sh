#!/usr/bin/env bash
# sin, cos and tan of large binary64 arguments on a GPU machine (run from the repository root
# there, with stripped workers carried in carry/):
#  1. CPU = GPU: units of 2^32 (tan: 2^30) at sin 2^1023, sin 2^100, cos 2^500, tan 2^100,
#     searched with --backend cuda and --backend cpu, the JSON compared but its timings.
#  2. Units of 2^40 (binary64's default unit) on the GPU, each launch of the walk logged (its
#     host packing and its device time apart): this build, then each build of OTHERS (stripped
#     workers of other engines, NAME=PATH) on BASE_POINTS, the same units in the same call.
#  3. BIG_POINTS: units of 2^44 (a campaign's unit at 43 bits) on the GPU, this build, then
#     OTHERS on BIG_BASE_POINTS.
# Writes $OUT/trig-run.tgz; times.txt holds one line a search, compare.txt the verdicts and
# walk.txt each search's walk (launches, pack and device seconds).
#
# Usage: W=carry/tmd-worker OTHERS="base=carry/tmd-worker-base" bash scripts/gpu-trig-run.sh
#   PARTS ("1 2 3"), POINTS (f:e pairs for 1 and 2), BASE_POINTS (sin:1023 sin:100),
#   BIG_POINTS (sin:1023), BIG_BASE_POINTS (none), LIMIT (seconds a search, 300), KEEP=1
#   (a second run in the same call: adds to the first's files, no second warm-up).
set -u
W=${W:-$PWD/carry/tmd-worker}
LIB=$(cd "$(dirname "$0")" && pwd)/lib
OTHERS=${OTHERS:-}
PARTS=${PARTS:-"1 2 3"}
POINTS=${POINTS:-"sin:1023 sin:100 cos:500 tan:100"}
BASE_POINTS=${BASE_POINTS:-"sin:1023 sin:100"}
BIG_POINTS=${BIG_POINTS:-"sin:1023"}
BIG_BASE_POINTS=${BIG_BASE_POINTS:-}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
R=/tmp/trig-run; [ -n "${KEEP:-}" ] || rm -rf $R; mkdir -p $R; cd $R
nproc > cores.txt; nvidia-smi -L > gpu.txt 2>&1

# search NAME WORKER BACKEND ARGS...: one search, its JSON, its log (the walk's launches at
# debug level, as JSON lines) and one line of times.txt.
search() {
  local n=$1 w=$2 b=$3; shift 3
  local t0=$(date +%s.%N)
  TMD_LOG=tmd_kernels::cuda::walk=debug,warn TMD_LOG_FORMAT=json \
    timeout ${LIMIT:-300} $w search "$@" --backend $b --output json --quiet > $n.$b.json 2> $n.$b.err
  local rc=$?
  echo "$n $b rc=$rc wall=$(awk "BEGIN{print $(date +%s.%N) - $t0}")" | tee -a times.txt
  python3 $LIB/gpu_runs.py walks $n.$b.err >> walk.txt
}

# unit F E BITS: --from and --to of one unit of 2^BITS arguments at the start of [2^E, 2^(E+1))
unit() { python3 -c "import sys; e, b = int(sys.argv[1]), int(sys.argv[2]); print(f'--from=0x1p+{e} --to={float.hex(1 + 2.0 ** (b - 52))[:-2]}{e:+d}')" $1 $2; }

# The modules' compiles (about 10 s on a fresh machine), each build its own.
if [ -z "${KEEP:-}" ]; then
  search warm $W cuda -f sin --format binary64 --from=0x1p+1023 --to=0x1.000001p+1023 --min-bits 43 --unit-bits 28
  for o in $OTHERS; do
    search warm-${o%%=*} ${o#*=} cuda -f sin --format binary64 --from=0x1p+1023 --to=0x1.000001p+1023 --min-bits 43 --unit-bits 28
  done
fi

# units F E BITS POINTS: one unit of 2^BITS at 2^E on the GPU, this build, then each of OTHERS
# where f:e is in POINTS.
units() {
  local f=$1 e=$2 ub=$3 o
  search u$ub-$f-e$e $W cuda -f $f --format binary64 $(unit $e $ub) --min-bits 43 --unit-bits $ub
  [[ " $4 " == *" $f:$e "* ]] || return 0
  for o in $OTHERS; do
    search u$ub-$f-e$e-${o%%=*} ${o#*=} cuda -f $f --format binary64 $(unit $e $ub) --min-bits 43 --unit-bits $ub
  done
}

for part in $PARTS; do
  case $part in
  1)
    for fe in $POINTS; do
      f=${fe%%:*}; e=${fe##*:}; ub=32; [ $f = tan ] && ub=30
      for b in cuda cpu; do
        search id-$f-e$e $W $b -f $f --format binary64 $(unit $e $ub) --min-bits 43 --unit-bits $ub
      done
    done
    python3 $LIB/gpu_runs.py compare id- > compare.txt
    cat compare.txt ;;
  2)
    for fe in $POINTS; do
      f=${fe%%:*}; e=${fe##*:}; ub=40; [ $f = tan ] && ub=36
      units $f $e $ub "$BASE_POINTS"
    done ;;
  3)
    for fe in $BIG_POINTS; do
      units ${fe%%:*} ${fe##*:} 44 "$BIG_BASE_POINTS"
    done ;;
  esac
done
cat walk.txt
tar czf $OUT/trig-run.tgz *.txt *.json *.err 2>/dev/null
