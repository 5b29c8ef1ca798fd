"""GET /metrics as Prometheus tools read it (issue 15; docs/OPERATIONS.md "Health and
metrics"): `promtool check metrics` (Debian's prometheus package) accepts the page without a
word, with and without --state-dir, after folds, generations, an OpenAI completion and errors;
and the latency histograms move exactly as the traffic says (one time-to-first-token per
generation, tokens - 1 inter-token gaps, one request duration per HTTP request, one queue wait
per session operation, one prompt length per fold/create/OpenAI prompt)."""
import json
import re
import shutil
import subprocess
import time

import pytest
import requests

from daemon import Daemon

PROMTOOL = shutil.which("promtool")

HISTOGRAMS = ["recurd_time_to_first_token_seconds", "recurd_inter_token_latency_seconds",
              "recurd_request_duration_seconds", "recurd_request_queue_seconds",
              "recurd_prompt_tokens"]

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def scrape(d):
    r = requests.get(d.url("/metrics"), timeout=10)
    assert r.status_code == 200
    return r.text


def parse(text):
    """{(name, labels): value} of every sample line."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, "not a sample line: %r" % line
        out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def hist(samples, name):
    """(cumulative buckets [(le, count)], sum, count) of histogram `name`."""
    buckets = []
    for (n, labels), v in samples.items():
        if n == name + "_bucket":
            le = re.match(r'\{le="([^"]+)"\}', labels).group(1)
            buckets.append((float("inf") if le == "+Inf" else float(le), v))
    buckets.sort()
    return buckets, samples[(name + "_sum", "")], samples[(name + "_count", "")]


def check_histogram_shape(samples, name):
    buckets, s, c = hist(samples, name)
    assert len(buckets) >= 2 and buckets[-1][0] == float("inf"), name
    counts = [v for _, v in buckets]
    assert counts == sorted(counts), "%s buckets are not cumulative: %s" % (name, counts)
    assert buckets[-1][1] == c, "%s: +Inf bucket %s != _count %s" % (name, buckets[-1][1], c)
    assert s >= 0


def promtool_check(text):
    assert PROMTOOL, "promtool missing: `make deps` installs Debian's prometheus package"
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    return p.returncode, p.stdout.decode()


def traffic(d):
    """Varied requests; returns what the histograms must show for them."""
    n_http = 0
    r = requests.post(d.url("/v1/sessions"), json={"tokens": [1, 2, 3, 4, 5]}, timeout=10)
    assert r.status_code == 201
    n_http += 1
    sid = r.json()["id"]
    r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": [6, 7, 8]}, timeout=10)
    assert r.status_code == 200
    n_http += 1
    r = requests.post(d.url("/v1/sessions/%s/generate" % sid),
                      json={"max_tokens": 6, "temperature": 0.8, "seed": 3}, timeout=30)
    assert r.status_code == 200
    n_http += 1
    lines = [json.loads(l) for l in r.text.splitlines() if l.strip()]
    gen_tokens = sum(1 for l in lines if "token" in l)
    assert lines[-1].get("reason") == "length" and gen_tokens == 6
    name = requests.get(d.url("/v1/models"), timeout=10).json()["data"][0]["id"]
    n_http += 1
    r = requests.post(d.url("/v1/completions"),
                      json={"model": name, "prompt": "Hello", "max_tokens": 4, "temperature": 0},
                      timeout=30)
    n_http += 1
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert usage["completion_tokens"] == 4
    # errors: an unknown session, a body that is not JSON, an unknown route
    r = requests.post(d.url("/v1/sessions/%s/generate" % ("0" * 32)), json={"max_tokens": 1},
                      timeout=10)
    assert r.status_code == 404
    n_http += 1
    r = requests.post(d.url("/v1/sessions"), data=b"{not json",
                      headers={"Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 400
    n_http += 1
    r = requests.get(d.url("/no/such/route"), timeout=10)
    assert r.status_code == 404
    n_http += 1
    return {
        "recurd_time_to_first_token_seconds": (2, None),        # the generate, the completion
        "recurd_inter_token_latency_seconds": ((gen_tokens - 1) + (4 - 1), None),
        "recurd_request_duration_seconds": (n_http + 1, None),  # + the scrape before the traffic
        "recurd_request_queue_seconds": (5, None),  # create, fold, generate, OpenAI create + generate
        "recurd_prompt_tokens": (3, 5 + 3 + usage["prompt_tokens"]),
    }


def run_case(d):
    before_text = scrape(d)
    rc, out = promtool_check(before_text)
    assert rc == 0 and out == "", "promtool on a fresh daemon's /metrics:\n" + out
    before = parse(before_text)
    want = traffic(d)
    time.sleep(0.2)  # the last stream's end is written before its response is complete
    after_text = scrape(d)
    rc, out = promtool_check(after_text)
    assert rc == 0 and out == "", "promtool after traffic:\n" + out
    after = parse(after_text)
    for name in HISTOGRAMS:
        check_histogram_shape(after, name)
        _, s0, c0 = hist(before, name)
        _, s1, c1 = hist(after, name)
        count, total = want[name]
        assert c1 - c0 == count, "%s: _count moved by %d, expected %d" % (name, c1 - c0, count)
        if total is not None:
            assert s1 - s0 == total, "%s: _sum moved by %s, expected %s" % (name, s1 - s0, total)
        elif count:
            assert s1 - s0 > 0, name
    # the time to first token of a generation never exceeds the whole requests' durations
    assert hist(after, "recurd_time_to_first_token_seconds")[1] <= \
        hist(after, "recurd_request_duration_seconds")[1]
    # process figures and build info
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                 "process_open_fds", "process_start_time_seconds"):
        assert after[(name, "")] > 0, name
    assert abs(after[("process_start_time_seconds", "")] - time.time()) < 600
    assert after[("process_cpu_seconds_total", "")] >= before[("process_cpu_seconds_total", "")]
    info = [k for k in after if k[0] == "recurd_build_info"]
    assert len(info) == 1 and after[info[0]] == 1
    assert re.fullmatch(r'\{version="[0-9][^"]*",isa="[a-z0-9_]+"\}', info[0][1]), info[0][1]
    # no name carries a non-base unit any more
    assert not [k for k in after if re.search(r"_(us|microseconds|ms|milliseconds)(_|$)", k[0])]
    return after


def test_promtool_accepts_metrics_and_histograms_follow_traffic():
    with Daemon() as d:
        run_case(d)


def test_promtool_accepts_metrics_with_state_dir(tmp_path):
    with Daemon("--state-dir", str(tmp_path / "state"), "--snapshot-interval-ms", "100") as d:
        after = run_case(d)
        assert ("recurd_snapshot_capture_seconds_total", "") in after
        assert ("recurd_eviction_sync_write_seconds_max", "") in after


def test_promtool_flags_a_bad_page():
    """The check can fail: a sample with a unit suffix promtool lints is reported."""
    rc, out = promtool_check("# HELP x_us_total t\n# TYPE x_us_total counter\nx_us_total 1\n")
    assert out != ""


def test_build_info_names_the_kernel_path_that_runs(monkeypatch):
    """build_info's isa is the path chosen at start (RECUR_ISA here), not the one the binary
    was compiled for: a native build forced to the portable path says portable."""
    monkeypatch.setenv("RECUR_ISA", "portable")
    with Daemon() as d:
        assert requests.get(d.url("/v1/model"), timeout=30).json()["isa"] == "portable"
        body = requests.get(d.url("/metrics"), timeout=30).text
        assert re.search(r'^recurd_build_info\{version="[^"]+",isa="portable"\} 1$', body, re.M), body
