#!/usr/bin/env bash
# The PostgreSQL twin of serve-scale.sh: builds a million-job queue with
# plain SQL (INSERT … SELECT generate_series: the same rows as the file's),
# in a schema of its own, serves it read-only and prints each page's wall
# time (and litejob's own CPU time) per request. Drops the schema at the
# end unless KEEP=1.
#   tools/serve-scale-pg.sh postgres://user:pw@host/db [LITEJOB_BINARY] [SCHEMA]
set -euo pipefail
base="${1:?usage: tools/serve-scale-pg.sh postgres://user:pw@host/db [BINARY] [SCHEMA]}"
bin="${2:-target/release/litejob}"
schema="${3:-litejob_scale}"
sep='?'; [[ "$base" == *\?* ]] && sep='&'
url="$base${sep}options=-csearch_path%3D$schema"
psql -q "$base" -c "DROP SCHEMA IF EXISTS $schema CASCADE" -c "CREATE SCHEMA $schema"
"$bin" --db "$url" init >/dev/null
psql -q -v ON_ERROR_STOP=1 "$url" <<'SQL'
SET synchronous_commit = off;
BEGIN;
INSERT INTO jobs (queue, kind, idempotency_key, payload, state, priority, run_at, attempts, max_attempts,
                  deliveries, last_error, created_at, finished_at, lease_owner, lease_expires_at)
SELECT CASE x % 3 WHEN 0 THEN 'default' WHEN 1 THEN 'mail' ELSE 'billing' END,
  CASE x % 6 WHEN 0 THEN 'payment.succeeded' WHEN 1 THEN 'send_digest' WHEN 2 THEN 'thumbnail'
             WHEN 3 THEN 'invoice.pdf' WHEN 4 THEN 'webhook.forward' ELSE 'cleanup' END,
  'evt_' || lpad(x::text, 9, '0'),
  '{"event_id":"evt_' || lpad(x::text, 9, '0') || '","cents":' || (x % 9999) || ',"customer":"cus_' || (x % 77777) || '"}',
  st, 0, t0 + x * 2500, CASE st WHEN 'dead' THEN 2 WHEN 'succeeded' THEN 1 ELSE 0 END, 2,
  1 + (x % 7 = 0)::int + (x % 13 = 0)::int,
  CASE st WHEN 'dead' THEN 'smtp 451: mailbox busy (try ' || (x % 5) || ')' END,
  t0 + x * 2500,
  CASE WHEN st IN ('succeeded', 'dead', 'cancelled') THEN t0 + x * 2500 + 40 END,
  CASE st WHEN 'running' THEN '1234/abcd' END,
  CASE st WHEN 'running' THEN t0 + x * 2500 + 30000 END
FROM (SELECT x, (extract(epoch FROM now()) * 1000)::bigint - 2600000000 AS t0,
   CASE WHEN x > 999900 THEN (CASE WHEN x % 10 = 0 THEN 'running' ELSE 'queued' END)
        WHEN x > 975000 THEN (CASE WHEN x % 4 = 0 THEN 'queued' ELSE 'succeeded' END)
        WHEN x % 50 = 7 THEN 'dead'
        WHEN x % 200 = 3 THEN 'cancelled'
        ELSE 'succeeded' END AS st FROM generate_series(1::bigint, 1000000) AS x) s
ORDER BY x;
INSERT INTO attempts (job_id, attempt, key, worker, started_at, finished_at, outcome, error)
SELECT id, 1, idempotency_key, '1234/litejob-worker-1', finished_at - 30, finished_at,
  CASE state WHEN 'dead' THEN 'failed' ELSE 'succeeded' END, last_error
FROM jobs WHERE state IN ('succeeded', 'dead') ORDER BY id;
INSERT INTO attempts (job_id, attempt, key, worker, started_at, finished_at, outcome, error)
SELECT id, 2, idempotency_key, '1234/litejob-worker-2', finished_at - 10, finished_at, 'failed', last_error
FROM jobs WHERE state = 'dead' ORDER BY id;
INSERT INTO processed_jobs (key, completed_at, job_id)
SELECT idempotency_key, finished_at, id FROM jobs WHERE state = 'succeeded';
INSERT INTO outbox (key, kind, payload, state, attempts, max_attempts, job_id, next_attempt_at, last_error, created_at, sent_at)
SELECT 'receipt:' || idempotency_key, 'send_receipt', '"' || idempotency_key || '"',
  CASE WHEN id % 997 = 5 THEN 'dead' WHEN id > 974000 AND id % 3 = 0 THEN 'pending' ELSE 'sent' END,
  1, 2, id, finished_at, CASE WHEN id % 997 = 5 THEN 'smtp 550 rejected' END, finished_at,
  CASE WHEN id % 997 = 5 OR (id > 974000 AND id % 3 = 0) THEN NULL ELSE finished_at + 5 END
FROM jobs WHERE state = 'succeeded' AND kind = 'payment.succeeded' ORDER BY id;
INSERT INTO attempts (outbox_id, attempt, key, worker, started_at, finished_at, outcome, error)
SELECT id, 1, key, '1234/litejob-effects-1', created_at, created_at + 5,
  CASE state WHEN 'sent' THEN 'succeeded' ELSE 'failed' END, last_error
FROM outbox WHERE state <> 'pending' OR id % 2 = 0 ORDER BY id;
COMMIT;
VACUUM ANALYZE jobs, attempts, outbox, processed_jobs;
SQL
out="$(mktemp)"
"$bin" --db "$url" serve --bind 127.0.0.1:0 >"$out" &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null || true
  rm -f "$out"
  [ "${KEEP:-0}" = 1 ] || psql -q "$base" -c "DROP SCHEMA IF EXISTS $schema CASCADE"
}
trap cleanup EXIT
for _ in $(seq 50); do grep -q listening "$out" 2>/dev/null && break; sleep 0.1; done
base_url=$(head -1 "$out" | sed 's/listening on //')
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
for path in metrics "" jobs "jobs?before=500000" "jobs?state=dead" "jobs?state=queued" \
            "jobs?kind=nope" failures outbox schedules "jobs/7" "keys/evt_000000007"; do
  curl -sf -o /dev/null "$base_url$path"
  c0=$(ticks); t0=$(date +%s%N)
  for _ in 1 2 3 4 5; do curl -sf -o /dev/null "$base_url$path"; done
  t1=$(date +%s%N); c1=$(ticks)
  # litejob's own CPU; the queries' is the server's (its parallel workers
  # come and go with each query: EXPLAIN ANALYZE shows them).
  printf '/%-22s litejob cpu %4d ms  wall %4d ms\n' "$path" \
    $(( (c1 - c0) * 1000 / hz / 5 )) $(( (t1 - t0) / 5000000 ))
done
