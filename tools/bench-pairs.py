#!/usr/bin/env python3
"""`litejob bench` against the raw SQLite loop, in pairs.

Each round runs, for every litejob binary named on the command line (in
alternating order from round to round), the raw loop (tools/sqlite-limit,
one run) and then `litejob bench --jobs 20000 --workers 4 --json` right
after it, and takes the ratios per pair: the machine's speed drifts by up to
40 % within minutes, a ratio taken in the same minute much less.

    python3 tools/bench-pairs.py 5 litejob=$(command -v litejob)
    python3 tools/bench-pairs.py 5 before=/path/to/old/litejob after=target/release/litejob

Ratios: enq1 and enq8 against mode a's one-insert commits, batch against
mode c's batched inserts, proc_c and proc_d against modes c and d's batched
processing (d also writes an attempt row per job, as litejob does).

The raw loop is $SQLITE_LIMIT, else /tmp/sqlite-limit-target/release/sqlite-limit,
built from tools/sqlite-limit the first time.
"""
import json, os, re, statistics, subprocess, sys


def raw_loop(env, crate, target):
    """The raw loop's binary: ${env} when set, else tools/{crate} built with
    cargo into {target}, the first time (a minute or two)."""
    path = os.environ.get(env)
    if path:
        if not os.access(path, os.X_OK):
            sys.exit(f"{env}={path}: no such executable")
        return path
    path = os.path.join(target, "release", crate)
    if not os.access(path, os.X_OK):
        here = os.path.dirname(os.path.abspath(__file__))
        print(f"building tools/{crate} into {target} ...", file=sys.stderr, flush=True)
        built = subprocess.run(["cargo", "build", "--release"], cwd=os.path.join(here, crate),
                               env=dict(os.environ, CARGO_TARGET_DIR=target))
        if built.returncode != 0 or not os.access(path, os.X_OK):
            sys.exit(f"building tools/{crate} failed; by hand: (cd tools/{crate} && "
                     f"CARGO_TARGET_DIR={target} cargo build --release)")
    return path


if len(sys.argv) < 3 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
    sys.exit("usage: bench-pairs.py ROUNDS NAME=LITEJOB [NAME=LITEJOB …]")
SL = raw_loop("SQLITE_LIMIT", "sqlite-limit", "/tmp/sqlite-limit-target")
rounds = int(sys.argv[1])
bins = [a.split("=", 1) for a in sys.argv[2:]]


def raw():
    out = subprocess.run([SL, "--jobs", "20000", "--runs", "1", "--dir", "/tmp"],
                         capture_output=True, text=True, check=True).stdout
    r = {}
    for line in out.splitlines():
        m = re.match(r"\| (\w): .*\| FULL \|\s+(\d+) .*\|\s+(\d+) .*\|\s+(\d+) ", line)
        if m:
            r[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return {"enq1": r["a"][0], "batch": r["c"][0], "proc_c": r["c"][1], "proc_d": r["d"][1]}


def lj(path):
    out = subprocess.run([path, "bench", "--jobs", "20000", "--workers", "4", "--json"],
                         capture_output=True, text=True, check=True, cwd="/tmp").stdout
    j = json.loads(out)
    return j


rows = {n: [] for n, _ in bins}
for i in range(rounds):
    order = bins if i % 2 == 0 else list(reversed(bins))
    for name, path in order:
        r = raw()
        j = lj(path)
        ratio = {
            "enq1": j["enqueue_per_sec"] / r["enq1"],
            "enq8": j["enqueue_concurrent_per_sec"] / r["enq1"],
            "batch": j["enqueue_batch_per_sec"] / r["batch"],
            "proc_c": j["process_per_sec"] / r["proc_c"],
            "proc_d": j["process_per_sec"] / r["proc_d"],
            "p50": j["latency_p50_us"], "p99": j["latency_p99_us"],
            "lj_enq1": j["enqueue_per_sec"], "lj_enq8": j["enqueue_concurrent_per_sec"],
            "lj_batch": j["enqueue_batch_per_sec"], "lj_proc": j["process_per_sec"],
            "raw_enq1": r["enq1"], "raw_batch": r["batch"],
            "raw_proc_c": r["proc_c"], "raw_proc_d": r["proc_d"],
        }
        rows[name].append(ratio)
        print(i, name, {k: round(v, 3) for k, v in ratio.items()}, flush=True)

print("\nmedians (min-max):")
for name, rs in rows.items():
    out = []
    for k in rs[0]:
        vs = [r[k] for r in rs]
        out.append(f"{k}={statistics.median(vs):.3f} ({min(vs):.2f}-{max(vs):.2f})")
    print(name, " ".join(out))
