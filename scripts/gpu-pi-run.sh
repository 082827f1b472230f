#!/usr/bin/env bash
# sinpi, cospi, tanpi on the GPU machine (run from the repository root there, with a stripped
# tmd-worker carried in carry/ or named by W): CPU = GPU on units of the periodic route, and the
# cost of a unit by binade.
# Writes $OUT/pi.tgz; the r34 run at 2^20 takes more than 500 s (run it apart, or drop it).
set -u
W=${W:-$PWD/carry/tmd-worker}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
R=/tmp/pi; mkdir -p $R; cd $R
nproc > cores.txt; nvidia-smi -L > gpu.txt 2>&1
run() { # name backend args...
  local n=$1 b=$2; shift 2
  local t0=$(date +%s.%N)
  $W search "$@" --backend $b --output json --quiet > $n.$b.json 2> $n.$b.err
  local rc=$?
  local t1=$(date +%s.%N)
  echo "$n $b rc=$rc wall=$(awk "BEGIN{print $t1 - $t0}")" | tee -a times.txt
}
# warm-up: compile modules
run warm cuda -f sinpi --format binary32 --from 0x1p+4 --to 0x1.8p+4 --min-bits 16 --unit-bits 22
# CPU = GPU
for f in sinpi cospi tanpi; do
  run b32-$f cuda -f $f --format binary32 --from 0x1p+4 --to 0x1p+5 --min-bits 16 --unit-bits 22
  run b32-$f cpu  -f $f --format binary32 --from 0x1p+4 --to 0x1p+5 --min-bits 16 --unit-bits 22
  run b64e30-$f cuda -f $f --format binary64 --from 0x1p+30 --to 0x1.00001p+30 --min-bits 44 --unit-bits 36
  run b64e30-$f cpu  -f $f --format binary64 --from 0x1p+30 --to 0x1.00001p+30 --min-bits 44 --unit-bits 36
done
# one unit of 2^44 (binary64, k = 44) by binade, GPU
for e in 40 30 26 24 22; do
  run u44-sinpi-e$e cuda -f sinpi --format binary64 --from 0x1p+$e --to 0x1.0001p+$e --min-bits 44 --unit-bits 44
done
run u44-tanpi-e30 cuda -f tanpi --format binary64 --from 0x1p+30 --to 0x1.0001p+30 --min-bits 44 --unit-bits 44
run u44-cospi-e30 cuda -f cospi --format binary64 --from 0x1p+30 --to 0x1.0001p+30 --min-bits 44 --unit-bits 44
# 2^34 at 2^20: two periods of 2^33
run r34-sinpi-e20 cuda -f sinpi --format binary64 --from 0x1p+20 --to 0x1.0004p+20 --min-bits 44 --unit-bits 34
python3 - <<'PY' > compare.txt
import json, glob
for f in ["sinpi","cospi","tanpi"]:
    for n in ["b32","b64e30"]:
        try:
            a=json.load(open(f"{n}-{f}.cuda.json")); b=json.load(open(f"{n}-{f}.cpu.json"))
        except Exception as e:
            print(n, f, "unreadable", e); continue
        for k in ("timings",):
            a.pop(k,None); b.pop(k,None)
        for k in ("backend","elapsed_s","gpu_memory"): a.pop(k,None); b.pop(k,None)
        keys=[k for k in set(a)|set(b) if a.get(k)!=b.get(k)]
        print(n, f, "identical" if not keys else "differ: "+",".join(sorted(keys)), "hr", len(a.get("hr_cases",[])), "lattices", a.get("exact_lattices"), "stats", a.get("stats"))
PY
cat compare.txt
tar czf $OUT/pi.tgz *.txt *.err *.json 2>/dev/null
