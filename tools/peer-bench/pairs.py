#!/usr/bin/env python3
"""Paired rounds: litejob bench, then each peer harness right after (order reversed
every other round). usage: pairs.py ROUNDS [name=cmd ...]
Writes every raw JSON line to results.jsonl and prints medians, ranges and
per-round ratios litejob / peer."""
import json, shlex, statistics, subprocess, sys, time, os

LITEJOB = os.environ.get("LITEJOB", "litejob")
T = "/tmp/peer-bench-target/release"
rounds = int(sys.argv[1])
peers = [a.split("=", 1) for a in sys.argv[2:]] or [
    ["effectum", f"{T}/effectum-bench --jobs 20000 --workers 4 --batch 100"],
    ["apalis", f"{T}/apalis-bench --jobs 20000 --workers 4 --batch 100 --sync default"],
]
out = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.jsonl"), "a")


def run(name, cmd):
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd="/tmp", timeout=900)
    if p.returncode != 0:
        print(f"  {name} FAILED rc={p.returncode}: {p.stderr[-500:]}", file=sys.stderr)
        return None
    j = json.loads(p.stdout.strip().splitlines()[-1])
    j["_name"] = name
    j["_started"] = time.strftime("%H:%M:%S", time.gmtime(t))
    j["_wall_s"] = round(time.time() - t, 1)
    return j


units = [["litejob", [LITEJOB, "bench", "--jobs", "20000", "--workers", "4", "--json"]]] + \
        [[n, shlex.split(c)] for n, c in peers]
res = {n: [] for n, _ in units}
for i in range(rounds):
    order = units if i % 2 == 0 else list(reversed(units))
    for name, cmd in order:
        j = run(name, cmd)
        res[name].append(j)
        if j:
            j["_round"] = i + 1
            out.write(json.dumps(j) + "\n"); out.flush()
            print(f"round {i+1} {name:10s} enq1 {j['enqueue_per_sec']:9.0f}  batch "
                  f"{(j.get('enqueue_batch_per_sec') or 0):9.0f}  proc {j['process_per_sec']:9.0f}  "
                  f"({j['_wall_s']} s)", flush=True)

fields = [("enqueue_per_sec", "enqueue, 1 per call"), ("enqueue_batch_per_sec", "enqueue, batches of 100"),
          ("process_per_sec", "process, 4 workers")]
print()
for f, label in fields:
    print(f"## {label}")
    for name, _ in units:
        v = [j[f] for j in res[name] if j and j.get(f)]
        if v:
            print(f"  {name:10s} median {statistics.median(v):9.0f}  range {min(v):.0f}-{max(v):.0f}  n={len(v)}")
    for name, _ in units[1:]:
        r = [a[f] / b[f] for a, b in zip(res["litejob"], res[name]) if a and b and b.get(f)]
        if r:
            print(f"  litejob/{name}: median {statistics.median(r):.2f}x  range {min(r):.2f}-{max(r):.2f}  "
                  f"per round {', '.join(f'{x:.2f}' for x in r)}")
