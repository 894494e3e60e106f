#!/usr/bin/env python3
"""`litejob bench --db postgres://…` against the raw PostgreSQL loop, in pairs.

Each round runs the raw loop (tools/pg-limit, modes a1, a8 and c100 with
synchronous_commit=on, one run) and then `litejob bench --db URL --json`
right after it, and takes the ratios per pair: the machine's speed drifts,
a ratio taken in the same minute much less.

    python3 tools/pg-bench-pairs.py 5 target/release/litejob \
        postgres://bench:bench@127.0.0.1:5432/bench_limit \
        postgres://litejob:litejob@127.0.0.1:5432/litejob_bench

The two URLs must name different databases: pg-limit drops and recreates
its own `jobs` table. litejob's runs each get a fresh schema (`lj_bench`,
dropped and created with `psql` before each run), as pg-limit's get a fresh
table. pg-limit connects without TLS; litejob's URL gets `sslmode=disable`
unless it names an sslmode (litejob's default, `prefer`, would encrypt its
side of the pair only, on a server with TLS on). Ratios: enq1 against a1's one-insert commits from one
client, enq8 against a8's from eight, batch against c100's batched
inserts, proc against c100's processing (claim 100 per transaction and
complete 100 per transaction, no ledger and no attempt rows).

The raw loop is $PG_LIMIT, else /tmp/pg-limit-target/release/pg-limit, built
from tools/pg-limit the first time.
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


if len(sys.argv) != 5 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
    sys.exit("usage: pg-bench-pairs.py ROUNDS LITEJOB RAW_URL LITEJOB_URL")
PL = raw_loop("PG_LIMIT", "pg-limit", "/tmp/pg-limit-target")
rounds, litejob, raw_url, lj_url = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]


def raw():
    out = subprocess.run([PL, "--url", raw_url, "--jobs", "20000", "--runs", "1",
                          "--modes", "a1,a8,c100", "--sync", "on"],
                         capture_output=True, text=True, check=True).stdout
    r = {}
    for line in out.splitlines():
        m = re.match(r"\| (\w+): .*\| on \|\s+(\d+) .*\|\s+(\d+) .*\|\s+(\d+) ", line)
        if m:
            r[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return r


def lj():
    subprocess.run(["psql", "-q", lj_url, "-c",
                    "DROP SCHEMA IF EXISTS lj_bench CASCADE; CREATE SCHEMA lj_bench; CHECKPOINT"],
                   capture_output=True, check=True)
    sep = "&" if "?" in lj_url else "?"
    url = f"{lj_url}{sep}options=-csearch_path%3Dlj_bench"
    if "sslmode=" not in lj_url:
        url += "&sslmode=disable"
    out = subprocess.run([litejob, "bench", "--db", url, "--jobs", "20000", "--json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


rows = []
for i in range(rounds):
    r, j = raw(), lj()
    ratio = {
        "enq1": j["enqueue_per_sec"] / r["a1"][0],
        "enq8": j["enqueue_concurrent_per_sec"] / r["a8"][0],
        "batch": j["enqueue_batch_per_sec"] / r["c100"][0],
        "proc": j["process_per_sec"] / r["c100"][1],
        "p50": j["latency_p50_us"], "p99": j["latency_p99_us"],
        "lj_enq1": j["enqueue_per_sec"], "lj_enq8": j["enqueue_concurrent_per_sec"],
        "lj_async": j["enqueue_async_per_sec"], "lj_batch": j["enqueue_batch_per_sec"],
        "lj_proc": j["process_per_sec"],
        "raw_a1": r["a1"][0], "raw_a8": r["a8"][0], "raw_c100_enq": r["c100"][0],
        "raw_c100_proc": r["c100"][1],
    }
    rows.append(ratio)
    print(i, {k: round(v, 3) for k, v in ratio.items()}, flush=True)

print("\nmedians (min-max):")
out = []
for k in rows[0]:
    vs = [r[k] for r in rows]
    out.append(f"{k}={statistics.median(vs):.3f} ({min(vs):.2f}-{max(vs):.2f})")
print(" ".join(out))
