#!/usr/bin/env bash
# sinpi, cospi, tanpi on the GPU machine (run from the repository root there, with a stripped
# tmd-worker carried in carry/ or named by W, and the example progression_routes in carry/ or named by
# X): CPU = GPU on units of the periodic route and of the walk on the grid, the cost of a unit
# of 2^44 by binade, the two routes side by side on the host, and (STAGE=estimate) the whole
# function's estimate; STAGE=trig: sin, cos and tan of large arguments walked on the GPU
# against the host.
# Writes $OUT/pi.tgz (STAGE=units, about 3 minutes), $OUT/pi-estimate.tgz (STAGE=estimate) or
# $OUT/trig.tgz (STAGE=trig; ROUTES= skips the host's routes). Units of 2^40 and 2^44 with
# each launch timed: scripts/gpu-trig-run.sh.
set -u
W=${W:-$PWD/carry/tmd-worker}
X=${X:-$PWD/carry/progression_routes}
LIB=$(cd "$(dirname "$0")" && pwd)/lib
STAGE=${STAGE:-units}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
R=/tmp/pi-$STAGE; mkdir -p $R; cd $R
nproc > cores.txt; nvidia-smi -L > gpu.txt 2>&1
run() { # name backend args...
  local n=$1 b=$2; shift 2
  local t0=$(date +%s.%N)
  timeout ${LIMIT:-300} $W search "$@" --backend $b --output json --quiet > $n.$b.json 2> $n.$b.err
  local rc=$?
  local t1=$(date +%s.%N)
  echo "$n $b rc=$rc wall=$(awk "BEGIN{print $t1 - $t0}")" | tee -a times.txt
}
if [ "$STAGE" = estimate ]; then
  for f in ${FUNCTIONS:-sinpi}; do
    t0=$(date +%s.%N)
    timeout ${LIMIT:-400} $W estimate -f $f --format binary64 --whole --min-bits 44 \
      --backend cuda --devices 0 --output json > est-$f.json 2> est-$f.err
    echo "estimate $f rc=$? wall=$(awk "BEGIN{print $(date +%s.%N) - $t0}")" | tee -a times.txt
  done
  tar czf $OUT/pi-estimate.tgz *.txt *.err *.json 2>/dev/null
  exit 0
fi
if [ "$STAGE" = trig-estimate ]; then
  # the cost of a binade of sin, cos, tan at 43 bits: one unit of 2^32 sampled per binade
  for fe in ${POINTS:-sin:11 sin:20 sin:21 sin:22 sin:24 sin:100 sin:500 sin:1023 cos:100 tan:100}; do
    f=${fe%%:*}; e=${fe##*:}
    t0=$(date +%s.%N)
    timeout ${LIMIT:-120} $W estimate -f $f --format binary64 --from 0x1p+$e --to 0x1p+$((e + 1)) \
      --unit-bits 32 --min-bits 43 --samples 1 --backend cuda --devices 0 --output json \
      > est-$f-e$e.json 2> est-$f-e$e.err
    echo "estimate $f e$e rc=$? wall=$(awk "BEGIN{print $(date +%s.%N) - $t0}")" | tee -a times.txt
  done
  tar czf $OUT/trig-estimate.tgz *.txt *.err *.json 2>/dev/null
  exit 0
fi
if [ "$STAGE" = trig ]; then
  # sin, cos and tan of large arguments: units of 2^32 (2^30 for tan) generated on the host,
  # walked on the GPU against walked on the host's cores; identical JSON but the timings.
  run warm cuda -f sin --format binary64 --from 0x1p+24 --to 0x1.000001p+24 --min-bits 43 --unit-bits 28
  for fe in sin:24 sin:100 sin:1023 cos:500 tan:100; do
    f=${fe%%:*}; e=${fe##*:}; to=0x1.00001p+$e; ub=32
    [ $f = tan ] && { to=0x1.000004p+$e; ub=30; }
    for b in cuda cpu; do
      run t-$f-e$e $b -f $f --format binary64 --from 0x1p+$e --to $to --min-bits 43 --unit-bits $ub
    done
  done
  # pieces from two numbers against pieces from series, the host's cores, same process
  for fe in ${ROUTES-sin:24 sin:1000 cos:100 sinpi:22}; do
    timeout 200 $X ${fe%%:*} ${fe##*:} 30 43 nodyadic >> routes.txt 2>&1
  done
  python3 $LIB/gpu_runs.py compare t- > compare.txt
  cat compare.txt times.txt routes.txt
  tar czf $OUT/trig.tgz *.txt *.err *.json 2>/dev/null
  exit 0
fi
# warm-up: compile modules
run warm cuda -f sinpi --format binary32 --from 0x1p+4 --to 0x1.8p+4 --min-bits 16 --unit-bits 22
# CPU = GPU: binary32 [16, 32) (periodic), binary64 at 2^30 (periodic, its period walked) and a
# unit of 2^31 at 2^21 in two units (walked, smaller than the period)
for f in sinpi cospi tanpi; do
  for b in cuda cpu; do
    run b32-$f $b -f $f --format binary32 --from 0x1p+4 --to 0x1p+5 --min-bits 16 --unit-bits 22
    run b64e30-$f $b -f $f --format binary64 --from 0x1p+30 --to 0x1.00001p+30 --min-bits 44 --unit-bits 36
    run b64e21-$f $b -f $f --format binary64 --from 0x1.8p+21 --to 0x1.800008p+21 --min-bits 44 --unit-bits 30
  done
done
# one unit of 2^44 (binary64, k = 44) by binade, GPU: its binade's first period searched
for e in 40 30 26 24 22 21 20 19 18 16 13; do
  run u44-sinpi-e$e cuda -f sinpi --format binary64 --from 0x1p+$e --to 0x1.0001p+$e --min-bits 44 --unit-bits 44
done
run u44-tanpi-e20 cuda -f tanpi --format binary64 --from 0x1p+20 --to 0x1.0001p+20 --min-bits 44 --unit-bits 44
run u44-cospi-e20 cuda -f cospi --format binary64 --from 0x1p+20 --to 0x1.0001p+20 --min-bits 44 --unit-bits 44
# the walk and the dyadic route on the same unit of 2^30 (the host's cores, same process)
for e in 20 22; do timeout 200 $X sinpi $e 30 44 >> routes.txt 2>&1; done
python3 $LIB/gpu_runs.py compare b32- b64e30- b64e21- > compare.txt
cat compare.txt routes.txt
tar czf $OUT/pi.tgz *.txt *.err *.json 2>/dev/null
