#!/usr/bin/env python3
"""Replays ETA rules on a finished farm run of scripts/gpu-farm-run.sh, offline.

    python3 scripts/eta-replay.py DIR UNIT_BITS [WORKERS]

DIR holds the run's results.csv (every result: binade, arguments, weight, elapsed seconds,
slots, received_at), t_start, t_end and progress.tsv (the times of the live readings). At each
live reading it recomputes, from the results received by then, what four rules would have
said, against the time truly left:

- work: the weighted work left over the rate of weighted work in the window;
- costly: the same, both counted over costly arguments (a unit counts for at most 2^UNIT_BITS
  arguments, so a collapsed block is one unit, and a binade's costly arguments weigh what all
  its arguments weigh): the coordinator's rule (server/src/domain/eta.rs);
- measured: each binade's costly arguments left times its seconds per argument (its results'
  seconds over the worker's slots, with a prior of PRIOR units at its weight scaled by the
  campaign's seconds per weighted argument, within 16 times of it), over the results' seconds
  per second in the window (the coordinator's rule until results' seconds proved to be a
  unit's share of a GPU, not its cost);
- count: the same time left over WORKERS (default 1 per daemon given).

The window is WINDOW seconds (90) back to the first snapshot in it, snapshots every 55 s from
the start (the coordinator's sweeper takes one every 50-60 s); a campaign younger than the
window is paced from its start. Errors are printed for readings from 10% of the work on with
more than 30 s left, as gpu-farm-run.sh's report counts them. PRIOR (1) and WINDOW come from
the environment.
"""
import collections
import csv
import os
import sys

WINDOW = float(os.environ.get("WINDOW", "90"))
PRIOR_UNITS = float(os.environ.get("PRIOR", "1"))
SNAP, MAX_STRAY = 55.0, 16.0


def main():
    d, unit_args = sys.argv[1], 2.0 ** int(sys.argv[2])
    workers = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    t0 = float(open(f"{d}/t_start").read())
    t1 = float(open(f"{d}/t_end").read())
    rows = []
    for r in csv.DictReader(open(f"{d}/results.csv")):
        rows.append((float(r["received_at"]), r["seq"], (r["negative"], int(r["exponent"])),
                     float(r["count"]), float(r["weight"]),
                     float(r["elapsed_seconds"]) / float(r["slots"])))
    rows.sort()
    total, costly, weight, seen = collections.Counter(), collections.Counter(), {}, set()
    for _, seq, b, n, w, _ in rows:
        weight[b] = w
        if seq not in seen:
            seen.add(seq)
            total[b] += n
            costly[b] += min(n, unit_args)
    total_work = sum(total[b] * weight[b] for b in total)
    # A binade's cost per costly argument: its weight spreads its time over all its arguments.
    cost = {b: weight[b] * total[b] / costly[b] for b in total}

    def state(t):
        done, secs, seen, work, seconds = collections.Counter(), collections.Counter(), set(), 0.0, 0.0
        cwork = 0.0
        for tr, seq, b, n, w, s in rows:
            if tr > t:
                break
            secs[b] += s
            seconds += s
            if seq not in seen:
                seen.add(seq)
                done[b] += min(n, unit_args)
                work += n * w
                cwork += min(n, unit_args) * cost[b]
        return done, secs, work, seconds, cwork

    def seconds_left(done, secs):
        measured = [b for b in total if done[b] > 0 and secs[b] > 0]
        work = sum(done[b] * cost[b] for b in measured)
        if work <= 0:
            return None
        per_work, prior, left = sum(secs[b] for b in measured) / work, PRIOR_UNITS * unit_args, 0.0
        for b in total:
            if costly[b] - done[b] <= 0:
                continue
            predicted = cost[b] * per_work
            m = (secs[b] + prior * predicted) / (done[b] + prior) if done[b] > 0 else predicted
            left += (costly[b] - done[b]) * min(max(m, predicted / MAX_STRAY), predicted * MAX_STRAY)
        return left

    snaps, t = [], t0 + SNAP
    while t < t1:
        snaps.append((t, state(t)))
        t += SNAP
    errors = collections.defaultdict(list)
    print("t_s\tdone_%\twork\tcostly\tmeasured\tcount\ttruth")
    for line in open(f"{d}/progress.tsv"):
        t = float(line.split("\t", 1)[0])
        if t >= t1 or t <= t0:
            continue
        done, secs, work, seconds, cwork = state(t)
        base = next(((bt, s) for bt, s in snaps if t - WINDOW <= bt < t), None)
        bt, (_, _, base_work, base_seconds, base_cwork) = (
            base if base else (t0, (None, None, 0.0, 0.0, 0.0)))
        span = t - bt
        rules = {"work": None, "costly": None, "measured": None, "count": None}
        if span > 0 and work > base_work:
            rules["work"] = (total_work - work) / ((work - base_work) / span)
        if span > 0 and cwork > base_cwork:
            rules["costly"] = (total_work - cwork) / ((cwork - base_cwork) / span)
        left = seconds_left(done, secs)
        if left is not None:
            if seconds > base_seconds and span > 0:
                rules["measured"] = left / ((seconds - base_seconds) / span)
            rules["count"] = left / workers
        truth, pct = t1 - t, work / total_work * 100
        if pct >= 10 and truth > 30:
            for k, e in rules.items():
                if e is not None:
                    errors[k].append((e - truth) / truth * 100)
        show = lambda e: "-" if e is None else f"{e:.0f}"
        print(f"{t - t0:.0f}\t{pct:.1f}\t{show(rules['work'])}\t{show(rules['costly'])}\t"
              f"{show(rules['measured'])}\t{show(rules['count'])}\t{truth:.0f}")
    for k in ("work", "costly", "measured", "count"):
        v = errors[k]
        if v:
            print(f"{k}: from 10% on, more than 30 s left: {min(v):+.1f}% to {max(v):+.1f}%, "
                  f"mean of the sizes {sum(map(abs, v)) / len(v):.1f}% ({len(v)} readings)")


if __name__ == "__main__":
    main()
