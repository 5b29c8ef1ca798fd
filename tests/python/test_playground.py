"""The playground page at GET / (docs/API.md "Playground") in a real browser: Debian's chromium
driven by playwright-core (pinned in tests/js_playground/) against a recurd serving models/default.
tests/js_playground/drive.js sends a message, takes a checkpoint, sends another, rolls back, forks
and sends on the fork; it reports what the page showed and, fetched directly from the server (the
independent side), each session's tokens_seen. A screenshot goes to build/playground.png."""
import json
import os
import subprocess

import pytest
import requests

from daemon import BUILD, Daemon, ROOT

JS_DIR = os.path.join(ROOT, "tests", "js_playground")
NODE = "/usr/bin/node"
CHROMIUM = "/usr/bin/chromium"
DEFAULT_MODEL = os.path.join(ROOT, "models", "default")
SHOT = os.path.join(BUILD, "playground.png")


@pytest.fixture(scope="module")
def d():
    with Daemon("--model", DEFAULT_MODEL, model_config=None) as dm:
        yield dm


def test_page_served_with_csp_head_and_without_key():
    with Daemon("--model", DEFAULT_MODEL, "--api-key", "sekrit", model_config=None) as dm:
        r = requests.get(dm.url("/"), timeout=10)
        assert r.status_code == 200
        assert r.headers["Content-Type"] == "text/html; charset=utf-8"
        csp = r.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "connect-src 'self'" in csp
        assert "frame-ancestors 'none'" in csp
        assert r.text.startswith("<!doctype html>")
        with open(os.path.join(ROOT, "server", "playground.html"), "rb") as f:
            assert r.content == f.read()  # the embedded bytes are the file's
        # nothing loaded from elsewhere: no http(s) URL in a src/href
        assert "src=\"http" not in r.text and "href=\"http" not in r.text
        h = requests.head(dm.url("/"), timeout=10)
        assert h.status_code == 200 and h.content == b""
        assert int(h.headers["Content-Length"]) == len(r.content)
        # the key still guards /v1/
        assert requests.get(dm.url("/v1/model"), timeout=10).status_code == 401


def test_chat_stream_checkpoint_rollback_fork_and_plot_in_chromium(d):
    assert os.access(CHROMIUM, os.X_OK), "chromium missing: make deps installs it"
    os.makedirs(BUILD, exist_ok=True)
    if os.path.exists(SHOT):
        os.remove(SHOT)
    p = subprocess.run([NODE, os.path.join(JS_DIR, "drive.js"), d.url(""), SHOT],
                       capture_output=True, timeout=300, cwd=JS_DIR)
    assert p.returncode == 0, p.stderr.decode()
    out = json.loads(p.stdout)
    assert out["status"] == 200 and out["content_type"] == "text/html; charset=utf-8"
    assert out["console_errors"] == [], out["console_errors"]  # incl. CSP violations
    model = requests.get(d.url("/v1/model"), timeout=10).json()

    # the reply streamed: the bubble showed growing text in more than one DOM update
    ups = out["updates"]
    assert len(ups) >= 2, ups
    assert all(ups[i + 1].startswith(ups[i]) and len(ups[i + 1]) > len(ups[i]) for i in range(len(ups) - 1))
    assert ups[-1] == out["reply"] and out["reply"]
    # the server folded the message's bytes (byte tokenizer of models/default) and the generated
    after = out["server_after_send"]
    assert after["tokens_seen"] == out["message_bytes"] + out["first_max_tokens"]
    assert "%d tokens" % after["tokens_seen"] in out["status_after_send"]

    # checkpoint at that point; a second message moved on; rollback returned to the checkpoint
    ck = out["checkpoints"]["checkpoints"]
    assert len(ck) == 1 and ck[0]["tokens_seen"] == after["tokens_seen"]
    assert out["server_before_rollback"]["tokens_seen"] == after["tokens_seen"] + len(" and then") + 40
    assert out["server_after_rollback"]["tokens_seen"] == ck[0]["tokens_seen"]
    assert out["page_tokens_after_rollback"] == ck[0]["tokens_seen"]

    # fork: a second session on the server, the page on it; the original untouched by the fork's message
    assert out["fork_session"] != out["first_session"] and out["session_options"] == 2
    assert out["server_fork"]["status"] == 200 and out["server_original"]["status"] == 200
    assert out["server_fork"]["body"]["tokens_seen"] == ck[0]["tokens_seen"]
    assert out["server_fork_after"]["tokens_seen"] == ck[0]["tokens_seen"] + len(" Another line") + 40
    assert out["server_original_after"]["tokens_seen"] == ck[0]["tokens_seen"]

    # the plot: state bytes flat at the model's state_bytes while tokens grow; the KV line grows
    kv_per_token = model["n_layers"] * model["n_heads"] * (model["head_k"] + model["head_v"]) * 4
    plot = out["plot"]
    assert plot["kv_per_token"] == kv_per_token
    tokens = [t for t, _ in plot["state"]]
    assert tokens == sorted(tokens) and len(set(tokens)) >= 4 and tokens[-1] == out["server_before_rollback"]["tokens_seen"]
    assert all(b == model["state_bytes"] for _, b in plot["state"]), plot["state"]
    assert [t for t, _ in plot["kv"]] == tokens
    assert all(b == t * kv_per_token for t, b in plot["kv"])
    assert all(a[1] < b[1] for a, b in zip(plot["kv"], plot["kv"][1:]))
    assert "2 × n_layers × n_heads × head_dim × 4" in plot["formula"]
    assert os.path.getsize(SHOT) > 10000
