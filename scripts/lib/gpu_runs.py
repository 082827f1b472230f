"""What the GPU scripts (gpu-pi-run.sh, gpu-trig-run.sh) read off their searches.

  python3 gpu_runs.py compare PREFIX...  each PREFIX*.cuda.json against its .cpu.json twin:
                                         identical but for timings and back end, or which keys
                                         differ; its HR-cases, statistics and both timings
  python3 gpu_runs.py walks LOG...       each search log's dense-walk launches (TMD_LOG=
                                         tmd_kernels::cuda::walk=debug, TMD_LOG_FORMAT=json):
                                         their count, host packing and device seconds
"""
import glob
import json
import sys


def compare(prefixes):
    for prefix in prefixes:
        for a_path in sorted(glob.glob(prefix + "*.cuda.json")):
            n = a_path[: -len(".cuda.json")]
            try:
                a = json.load(open(a_path))
                b = json.load(open(n + ".cpu.json"))
            except Exception as e:
                print(n, "unreadable", e)
                continue
            ta, tb = a.get("timings"), b.get("timings")
            for k in ("timings", "backend", "elapsed_s", "gpu_memory"):
                a.pop(k, None)
                b.pop(k, None)
            keys = [k for k in set(a) | set(b) if a.get(k) != b.get(k)]
            print(n, "identical" if not keys else "DIFFER: " + ",".join(sorted(keys)),
                  "hr", len(a.get("hr_cases", [])), "stats", a.get("stats"),
                  "cuda", ta, "cpu", tb)


def walks(logs):
    for log in logs:
        n = pk = la = th = 0
        for line in open(log):
            try:
                f = json.loads(line).get("fields", {})
            except ValueError:
                continue
            if f.get("message") == "dense walk":
                n += 1
                pk += f["pack_s"]
                la += f["launch_s"]
                th += f["threads"]
        print(f"{log}: {n} launches, pack {pk:.2f} s, device {la:.2f} s, {th} threads, "
              f"{1e3 * pk / max(n, 1):.2f} + {1e3 * la / max(n, 1):.2f} ms a launch")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("compare", "walks"):
        sys.exit(__doc__)
    (compare if sys.argv[1] == "compare" else walks)(sys.argv[2:])
