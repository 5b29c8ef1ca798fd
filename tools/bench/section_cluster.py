"""recur-load through nginx (deploy/nginx/recurd.conf) against three recurd nodes, beside direct
access to one node: wrong answers (recur-load checks every one) and the latency the proxy hop
adds per request (p50/p99), for single-token folds and for generate streams.

Runs, alternated and repeated (median of REPEATS), all with models/default:
  direct   recur-load -> node 1, on node 1's sessions
  hop      recur-load -> nginx -> node 1 (the same sessions: the ring routes them to node 1), so
           the difference to `direct` is the proxy hop alone
  cluster  recur-load -> nginx -> nodes 1..3, three times the sessions (each node's own)
Without a shared store a session is found only on the node that made it, so the sessions are
made on each node and kept when nginx's ring routes their id back to it (tests/python/cluster.py
routed_to_creator); recur-load drives them with --session.
For tools/bench/run_all.py: TITLE, ORDER, run(ctx). Run alone:
  /usr/bin/python3 tools/bench/section_cluster.py [--quick] > /tmp/cluster.md
  /usr/bin/python3 tools/bench/section_cluster.py --resume-only [--quick]   # the resume-from-Redis
                                                    table alone (needs redis-server, not nginx)
"""
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import requests

import benchutil
import section_load
from section_load import Budget, default_model_args, fmt, load, recurd, require_ok

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from cluster import NGINX, Nginx, routed_to_creator  # noqa: E402
from redis_server import RedisServer  # noqa: E402

TITLE = "Cluster: recur-load through nginx vs direct (issue 16)"
ORDER = 55

REPEATS = 3
SECONDS = 4
SESSIONS_PER_NODE = 8
GEN_TOKENS = 32


def drive(port, sids, mode, budget, name, seed):
    args = ["--mode", mode, "--duration", SECONDS, "--connections", len(sids),
            "--metrics-interval", 0, "--seed", seed]
    if mode == "generate":
        args += ["--max-tokens", GEN_TOKENS, "--temperature", 0.8]
    for s in sids:
        args += ["--session", s]
    return require_ok(load(port, args, budget, name))


def row(label, reps, base=None):
    """One table row from repeated reports: medians of the per-run figures; with base (the
    direct row's figures) also the difference to it, in µs."""
    med = lambda f: statistics.median(f(r) for r in reps)  # noqa: E731
    figs = [med(lambda r: r["latency_ms"]["p50"]), med(lambda r: r["latency_ms"]["p99"]),
            med(lambda r: r["ttfc_ms"]["p50"]), med(lambda r: r["ttfc_ms"]["p99"])]
    wrong = sum(r["requests_failed"] for r in reps)
    requests_ = sum(r["requests"] for r in reps)
    added = (["–"] * 4 if base is None else
             [f"{(a - b) * 1000:+,.0f}" for a, b in zip(figs, base)])
    cells = ([label, f"{requests_:,}", f"**{wrong}**", fmt(med(lambda r: r["tokens_per_s"]), 0)]
             + [fmt(x, 3) for x in figs] + added)
    return "| " + " | ".join(cells) + " |", figs


def section(quick=False):
    global REPEATS, SECONDS
    if quick:
        REPEATS, SECONDS = 1, 2
    out = ["All figures from build/recur-load, which checks every answer (status, chunked framing, "
           "token echo, positions, logprobs across requests, `tokens_seen` advancing by exactly "
           "the tokens folded); a run with a failed check raises instead of giving a figure. "
           "Everything — three nodes, nginx (one worker), recur-load — shares the machine's 2 cores, "
           "so the hop's added latency includes nginx's share of the CPU. Load average at the "
           "section's start: " + " / ".join(open("/proc/loadavg").read().split()[:3])
           + " (1/5/15 min).", ""]
    if not os.path.exists(NGINX):
        return "\n".join(out + ["**Not run**: nginx is not installed (`make deps`)."])
    budget = Budget(900 if not quick else 300)
    section_load.OUT = os.path.join(section_load.BUILD, "bench", "cluster")
    os.makedirs(section_load.OUT, exist_ok=True)
    margs, mname = default_model_args()
    work = tempfile.mkdtemp(prefix="recur-cluster-bench-")
    nodes, ngx = [], None
    try:
        nodes = [recurd(margs).__enter__() for _ in range(3)]
        ngx = Nginx([n.port for n in nodes], os.path.join(work, "nginx")).start()
        owned = routed_to_creator(ngx, nodes, per_node=SESSIONS_PER_NODE)
        for i, sids in owned.items():  # one folded token each: generate needs a prediction
            for s in sids:
                r = requests.post(f"http://127.0.0.1:{nodes[i].port}/v1/sessions/{s}/tokens",
                                  json={"tokens": [65]}, timeout=30)
                r.raise_for_status()
        all_sids = [s for i in range(3) for s in owned[i]]
        tables = []
        for mode in ("tokens", "generate"):
            runs = {"direct": [], "hop": [], "cluster": []}
            for rep in range(REPEATS):  # alternated so that drifts of the machine hit all three
                runs["direct"].append(drive(nodes[0].port, owned[0], mode, budget,
                                            f"{mode}_direct_{rep}", 100 + rep))
                runs["hop"].append(drive(ngx.port, owned[0], mode, budget,
                                         f"{mode}_hop_{rep}", 200 + rep))
                runs["cluster"].append(drive(ngx.port, all_sids, mode, budget,
                                             f"{mode}_cluster_{rep}", 300 + rep))
            what = ("single-token `/tokens` requests" if mode == "tokens" else
                    f"`/generate` streams of {GEN_TOKENS} tokens (latency = whole stream)")
            lines = [f"**{what}**, {SESSIONS_PER_NODE} sessions per node, one connection per "
                     f"session, {SECONDS} s per run, median of {REPEATS} alternated runs:", "",
                     "| path | requests (all runs) | wrong answers | tokens/s | latency p50 ms | "
                     "p99 ms | first line p50 ms | p99 ms | added: latency p50 µs | p99 µs | "
                     "first line p50 µs | p99 µs |",
                     "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
            direct_row, base = row(f"direct → node 1 ({len(owned[0])} sessions)", runs["direct"])
            lines.append(direct_row)
            lines.append(row("nginx → node 1 (same sessions)", runs["hop"], base)[0])
            lines.append(row(f"nginx → 3 nodes ({len(all_sids)} sessions, 3× the load)",
                             runs["cluster"])[0])
            cmd = runs["hop"][0]["_cmd"]
            lines += ["", f"Example command: `{cmd}` (PORT = nginx's or node 1's, one "
                      "`--session` per session)."]
            tables.append("\n".join(lines))
        statuses = {}
        for l in ngx.access_lines():
            statuses[l["status"]] = statuses.get(l["status"], 0) + 1
        out += [f"Model: {mname}; nodes: `build/recurd --model models/default` × 3 on loopback; "
                f"nginx {nginx_version()} with deploy/nginx/recurd.conf (ports rewritten).", ""]
        try:
            tables.append(redis_table(margs, budget, work))
        except Exception as e:  # noqa: BLE001 - reported in the section, the rest stands
            tables.append(f"**With the Redis tier: failed**: {type(e).__name__}: {e}")
        try:
            tables.append(resume_table(margs, budget, work, quick))
        except Exception as e:  # noqa: BLE001 - reported in the section, the rest stands
            tables.append(f"**Resume from Redis: failed**: {type(e).__name__}: {e}")
        out += ["\n\n".join(tables), "",
                f"nginx access log over the whole section: statuses {dict(sorted(statuses.items()))} "
                "(the probe GETs that found a session on another node answer 404 by design). "
                "Added = the `nginx → node 1` row minus the `direct` row (medians of the "
                "per-run percentiles): the proxy hop alone, same sessions, same node. The 3-node "
                "row carries three times the load on the same 2 cores: its figures are the "
                "aggregate, not the hop."]
    finally:
        if ngx:
            ngx.stop()
        for n in nodes:
            n.stop()
        shutil.rmtree(work, ignore_errors=True)
    return "\n".join(out)


def redis_table(margs, budget, work):
    """recur-load creating its sessions through nginx with the Redis tier on (every node
    --redis, --redis-sync true: each answer waits for its commit of the whole session to Redis,
    AOF with fsync always), beside the same load direct to one node of that cluster."""
    redis, nodes, ngx = None, [], None
    try:
        redis = RedisServer().start()
        extra = ["--redis", redis.url, "--redis-sync", "true"]
        nodes = [recurd(margs, extra).__enter__() for _ in range(3)]
        ngx = Nginx([n.port for n in nodes], os.path.join(work, "nginx-redis")).start()
        wait_reachable(nodes)  # a node is degraded until its first PING to Redis is answered
        n = 3 * SESSIONS_PER_NODE
        runs = {"direct": [], "cluster": []}
        for rep in range(REPEATS):
            for name, port in (("direct", nodes[0].port), ("cluster", ngx.port)):
                runs[name].append(require_ok(load(port, [
                    "--sessions", n, "--connections", n, "--mode", "tokens", "--duration", SECONDS,
                    "--metrics-interval", 0, "--seed", 400 + rep], budget, f"redis_{name}_{rep}")))
        lines = [f"**With the Redis tier** (`--redis URL --redis-sync true` on every node; "
                 f"redis-server {redis_version()} with AOF, `appendfsync always`): recur-load "
                 f"creates {n} sessions itself (through nginx: on any node, then served by their "
                 "ring owner, which loads them from Redis), single-token `/tokens` requests, each "
                 "answered only after its commit of the whole session state to Redis:", "",
                 "| path | requests (all runs) | wrong answers | tokens/s | latency p50 ms | "
                 "p99 ms | first line p50 ms | p99 ms | added: latency p50 µs | p99 µs | "
                 "first line p50 µs | p99 µs |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        direct_row, _ = row(f"direct → node 1 ({n} sessions)", runs["direct"])
        lines.append(direct_row)
        lines.append(row(f"nginx → 3 nodes ({n} sessions)", runs["cluster"])[0])
        lines += ["", "Both rows carry the same load; the 3-node row spreads it over three "
                  "processes on the same 2 cores. `redis_sync` puts one Redis round trip with "
                  "a ~200 KB write and an fsync in every answer."]
        return "\n".join(lines)
    finally:
        if ngx:
            ngx.stop()
        for nd in nodes:
            nd.stop()
        if redis:
            redis.stop()


def wait_reachable(nodes, timeout=60):
    """Until every node's /healthz says ok (Redis answered its PING)."""
    deadline = time.time() + timeout
    while not all(requests.get(f"http://127.0.0.1:{nd.port}/healthz", timeout=30)
                  .json()["status"] == "ok" for nd in nodes):
        if time.time() > deadline:
            raise RuntimeError("a node never reached Redis")
        time.sleep(0.05)


RESUME_SESSIONS = 300
RESUME_PROMPT = [5, 17, 3, 99, 42, 7, 7, 120]


cpu_s, minflt = benchutil.proc_cpu_s, benchutil.proc_minflt  # (pid[, tid]): seconds, faults


def redis_info(redis, section):
    """INFO section as a dict (values as text)."""
    out = {}
    for line in redis.command("INFO", section).decode().splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v
    return out


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q * len(xs))) - 1))]


RESUME_VARIANTS = (  # (label, appendfsync, extra recurd args): alternated in one run
    ("AOF `appendfsync always`, f32 state (the default)", "always", []),
    ("AOF `appendfsync everysec`, f32 state", "everysec", []),
    ("AOF `appendfsync always`, `--state-dtype bf16`", "always", ["--state-dtype", "bf16"]),
)
RESUME_RATE = 50.0
RESUME_CLIENTS = (  # (label, client, rate): each resumes its own sessions, then GETs them again
    ("C client, closed loop", "c", 0.0),
    (f"C client, paced {RESUME_RATE:.0f}/s", "c", RESUME_RATE),
    ("Python `requests`, closed loop", "py", 0.0),
)


def timed_gets(client, rate, port, sids):
    """One GET /v1/sessions/{id} per sid, in order, over one keep-alive connection: ms each."""
    if client == "c":
        return benchutil.resume_client(ROOT, section_load.BUILD, port,
                                       [("GET", f"/v1/sessions/{sid}", None) for sid in sids], rate)
    s, out = requests.Session(), []
    s.get(f"http://127.0.0.1:{port}/healthz", timeout=30)  # the connection, made before timing
    for sid in sids:
        t0 = time.perf_counter()
        r = s.get(f"http://127.0.0.1:{port}/v1/sessions/{sid}", timeout=30)
        out.append((time.perf_counter() - t0) * 1e3)
        if r.status_code != 200:
            raise RuntimeError(f"GET on node B: {r.status_code} {r.text[:200]}")
    return out


def resume_once(margs, extra, fsync, n, log):
    """One variant: Redis (appendfsync fsync), node A creates n sessions per client of
    RESUME_CLIENTS, node B resumes each (its first request for it) and then GETs it again
    (resident), client after client. Returns the figures: {client label: {phase: ...}}, plus the
    Redis and node figures of the variant."""
    redis, a, b = None, None, None
    try:
        redis = RedisServer(appendfsync=fsync).start()
        a = recurd(margs, extra + ["--redis", redis.url, "--node-name", "resume-a"]).__enter__()
        b = recurd(margs, extra + ["--redis", redis.url, "--node-name", "resume-b",
                                   "--access-log", log]).__enter__()
        sa = requests.Session()
        wait_reachable([a, b])
        sids = {}
        for label, _, _ in RESUME_CLIENTS:
            sids[label] = []
            for _ in range(n):
                r = sa.post(f"http://127.0.0.1:{a.port}/v1/sessions",
                            json={"tokens": RESUME_PROMPT}, timeout=30)
                r.raise_for_status()
                sids[label].append(r.json()["id"])
        aof = lambda: int(redis_info(redis, "persistence").get("aof_current_size", "0"))  # noqa: E731
        rewriting = lambda: any(redis_info(redis, "persistence").get(k) == "1" for k in  # noqa: E731
                                ("aof_rewrite_in_progress", "aof_rewrite_scheduled"))
        aof0, deadline = aof(), time.time() + 60
        # A's creates are committed asynchronously: let them land, and the AOF rewrite they set
        # off (~180 MB of states) finish: its fork and its child are no part of a resume
        while time.time() < deadline:
            time.sleep(0.3)
            if aof() == aof0 and not rewriting():
                break
            aof0 = aof()
        redis.command("CONFIG", "RESETSTAT")  # expired_keys from here
        redis.command("CONFIG", "SET", "latency-monitor-threshold", "1")  # events of >= 1 ms
        redis.command("LATENCY", "RESET")
        figs = {}
        for label, client, rate in RESUME_CLIENTS:
            figs[label] = {}
            for phase in ("resume", "resident"):
                c_b, c_loop, c_r = cpu_s(b.pid), cpu_s(b.pid, b.pid), cpu_s(redis.proc.pid)
                f_loop = minflt(b.pid, b.pid)
                wall = timed_gets(client, rate, b.port, sids[label])
                figs[label][phase] = {"wall": wall, "cpu_b": (cpu_s(b.pid) - c_b) / n,
                                      "cpu_loop": (cpu_s(b.pid, b.pid) - c_loop) / n,
                                      "cpu_redis": (cpu_s(redis.proc.pid) - c_r) / n,
                                      "faults_loop": (minflt(b.pid, b.pid) - f_loop) / n}
        aof1 = aof()
        stats = redis_info(redis, "commandstats")
        evalstat = dict(kv.split("=") for kv in stats.get("cmdstat_eval", "").split(",") if "=" in kv)
        key = [k for k in redis.command("KEYS", "recurd:*:state")][0]
        figs["strlen"] = redis.command("STRLEN", key)
        figs["usage"] = redis.command("MEMORY", "USAGE", key)
        figs["hits"] = b.metrics().get("recurd_redis_hits_total", 0)
        figs["eval_us"] = evalstat.get("usec_per_call", "?")
        figs["aof_total"] = aof1 - aof0
        figs["expired"] = int(redis_info(redis, "stats").get("expired_keys", "0"))
        # Redis's main thread stalled on an AOF fsync (>= 1 ms): one entry per second with one
        figs["fsyncs"] = [int(ms) for _, ms in redis.command("LATENCY", "HISTORY", "aof-fsync-always")]
        want = 2 * n * len(RESUME_CLIENTS)
        deadline = time.time() + 10
        while True:  # the access log is written in batches
            gets = []
            if os.path.exists(log):
                with open(log) as f:
                    gets = [json.loads(l)["duration_s"] * 1e3 for l in f
                            if '"route":"/v1/sessions/{id}"' in l and '"status":200' in l]
            if len(gets) >= want or time.time() > deadline:
                break
            time.sleep(0.1)
        if len(gets) >= want:  # in request order: per client, n resumes then n resident GETs
            for i, (label, _, _) in enumerate(RESUME_CLIENTS):
                figs[label]["resume"]["own"] = gets[2 * i * n:(2 * i + 1) * n]
                figs[label]["resident"]["own"] = gets[(2 * i + 1) * n:(2 * i + 2) * n]
        return figs
    finally:
        for nd in (a, b):
            if nd:
                nd.stop()
        if redis:
            redis.stop()


def resume_table(margs, budget, work, quick=False):
    """Resume of a session that is only in Redis (issue 16: p99 <= 3 ms on loopback): node A
    creates the sessions (a create commits without taking the lease), node B gets one GET per
    session — its first request for it: the lease and the state in one round trip, then the
    state restored with every snapshot check — and then the same GET again, resident (the
    control: what the machine shows for a request without a resume). Three clients, each on its
    own sessions (RESUME_CLIENTS): tools/bench/resume_client.c timing in C (closed loop, and
    paced at RESUME_RATE: each request after an idle gap, as a user's), and Python `requests`
    (the figures of earlier runs). Wall time per request at the client and in B's access log
    (first byte to last byte), B's and Redis's CPU time and B's loop-thread page faults per
    request (load-independent where wall time is the scheduler's). Three variants, each twice,
    alternated: Redis's fsync policy (the acquire script writes with REPL_NONE and no lease
    expires, so neither policy should fsync during the resumes: the AOF growth, the keys expired
    and Redis's latency monitor over the measured requests say whether it did) and the state
    dtype (bytes per session)."""
    n = 50 if quick else RESUME_SESSIONS
    load0 = open("/proc/loadavg").read().split()[0]
    runs = {v[0]: [] for v in RESUME_VARIANTS}
    for rep in range(1 if quick else 2):
        for label, fsync, extra in RESUME_VARIANTS:
            log = os.path.join(work, f"resume-access-{len(runs[label])}-{fsync}-{len(extra)}.log")
            runs[label].append(resume_once(margs, extra, fsync, n, log))
    load1 = open("/proc/loadavg").read().split()[0]
    lines = [f"**Resume from Redis** (`models/default` as above; redis-server {redis_version()} with "
             f"AOF; node A creates {n} sessions per client, then one `GET /v1/sessions/{{id}}` each "
             "on node B — its first request for the session: lease and state in one round trip "
             "(`MULTI`, the acquire script, `GET` of the state, `EXEC`), restored with every "
             "snapshot check — then the same GET again, resident (the control: the same request "
             "with no resume, the floor of what this machine shows); one keep-alive client "
             "connection per client: `tools/bench/resume_client.c` (each request timed in C, "
             f"CLOCK_MONOTONIC) in a closed loop and paced at {RESUME_RATE:.0f}/s, and Python "
             "`requests` in a closed loop; each variant run "
             f"{len(next(iter(runs.values())))} times, alternated, percentiles over all its "
             f"requests; load average {load0} at the start, {load1} at the end):", "",
             "| variant | client | request on node B | wall p50 ms (client) | p99 ms | wall p50 ms "
             "(B's access log) | p99 ms | B's loop thread CPU per request ms | its page faults "
             "per request | B's CPU (all threads) ms | Redis CPU per request ms |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    notes = []
    for label, fsync, extra in RESUME_VARIANTS:
        rs = runs[label]
        for ci, (client, _, _) in enumerate(RESUME_CLIENTS):
            for phase, what in (("resume", "first: resumed from Redis"),
                                ("resident", "second: resident (control)")):
                wall = [x for r in rs for x in r[client][phase]["wall"]]
                own = [x for r in rs for x in r[client][phase].get("own", [])]
                mean = lambda k: statistics.mean(r[client][phase][k] for r in rs)  # noqa: E731
                first = phase == "resume"
                cells = [label if first and ci == 0 else "", client if first else "", what,
                         fmt(pct(wall, 0.5), 2), fmt(pct(wall, 0.99), 2)]
                cells += ([fmt(pct(own, 0.5), 2), fmt(pct(own, 0.99), 2)] if own else ["–", "–"])
                cells += [fmt(mean("cpu_loop") * 1e3, 3), fmt(mean("faults_loop"), 1),
                          fmt(mean("cpu_b") * 1e3, 3), fmt(mean("cpu_redis") * 1e3, 3)]
                lines.append("| " + " | ".join(cells) + " |")
        r0 = rs[0]
        evals = " / ".join(str(r["eval_us"]) for r in rs)
        aoft = " / ".join(f"{r['aof_total']:,}" for r in rs)
        expired = " / ".join(str(r["expired"]) for r in rs)
        fsyncs = " / ".join(f"{len(r['fsyncs'])}" + (f" (longest {max(r['fsyncs'])} ms)" if r["fsyncs"]
                                                      else "") for r in rs)
        notes.append(f"{label}: Redis bytes per session `STRLEN` {r0['strlen']:,} (`MEMORY USAGE` "
                     f"{r0['usage']:,}); loads counted by node B {sum(int(r['hits']) for r in rs)}; "
                     f"Redis's own time per EVAL (`INFO commandstats`) {evals} µs; over the "
                     f"measured requests: AOF growth {aoft} bytes, keys Redis expired {expired}, "
                     f"seconds in which its main thread waited >= 1 ms on an AOF fsync "
                     f"(`LATENCY HISTORY aof-fsync-always`) {fsyncs}.")
    lines += ["", *[f"- {x}" for x in notes], "",
              "The CPU columns are each process's (or B's loop thread's) CPU time over the phase "
              "divided by the requests (schedstat): load-independent where the wall time is the "
              "scheduler's; page faults from /proc (minflt). A resume's "
              "own path is B's loop thread plus Redis plus two loopback hops; B's other threads "
              "make the next sessions' states ahead (their page faults off the request's path; "
              "when a burst outruns them the loop makes one itself: its page faults column). "
              "The paced rows pay a wake-up of every process on the path per request (client, B, "
              "Redis: this VM charges an idle vCPU's wake-up, docs/BENCHMARKS.md capacity); the "
              "resident rows of the same client are that floor without a resume. The acquire "
              "script writes (lease, TTLs) with `redis.set_repl(REPL_NONE)` and no key it takes "
              "expires before the session (the lease is a deadline against Redis's clock, not a "
              "TTL: an expiry is a `DEL` in the AOF, fsynced before Redis answers on): nothing "
              "of a resume goes to the AOF (its growth above), so `appendfsync` does not touch "
              "the resume path — `always` stays the setting for the commits (no acknowledged "
              "fold lost, docs/SCALING.md)."]
    return "\n".join(lines)


def redis_version():
    import subprocess
    p = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, timeout=10)
    return p.stdout.split("v=")[1].split()[0] if "v=" in p.stdout else "?"


def nginx_version():
    import subprocess
    p = subprocess.run([NGINX, "-v"], capture_output=True, text=True, timeout=10)
    return (p.stderr or p.stdout).strip().split("/")[-1]


def run(ctx):
    section_load.BUILD = ctx.build
    section_load.RECURD = os.path.join(ctx.build, "recurd")
    section_load.LOAD = os.path.join(ctx.build, "recur-load")
    return section(quick=ctx.quick)


def resume_only(quick=False):
    """The resume-from-Redis table alone (--resume-only)."""
    margs, _ = default_model_args()
    work = tempfile.mkdtemp(prefix="recur-cluster-resume-")
    try:
        return resume_table(margs, None, work, quick)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    start = time.monotonic()
    if "--resume-only" in sys.argv:
        print(resume_only(quick="--quick" in sys.argv))
    else:
        print(section(quick="--quick" in sys.argv))
    print(f"\n_({time.monotonic() - start:.0f} s)_")
