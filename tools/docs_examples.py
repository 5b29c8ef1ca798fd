#!/usr/bin/env python3
"""docs_examples.py — the examples of docs/API.md, from a real run.

Starts build/recurd (or $RECUR_BUILD/recurd) with the shipped model (models/default) on a free
loopback port, plays the documented requests in order, and prints each as it appears in API.md:
the curl line, then "# " + every answer line. Session ids are printed as $ID / $OTHER / <new id>,
as the docs write them.

    python3 tools/docs_examples.py            # print every example
    python3 tools/docs_examples.py model      # only some (by name)

tests/python/test_docs_examples.py runs the same scenario and checks that API.md shows exactly
these answers (logprobs to 1e-4), so the examples stay true when the model or the daemon changes.
"""
import json
import os
import re
import subprocess
import sys
import threading
import urllib.request

from bench.benchutil import stop_process

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.environ.get("RECUR_BUILD", os.path.join(ROOT, "build"))
MODEL = os.path.join(ROOT, "models", "default")


class Recurd:
    """build/recurd with the default model on 127.0.0.1, port 0 (read from the listening line)."""

    def __init__(self, *args):
        cmd = [os.path.join(BUILD, "recurd"), "--config", "", "--host", "127.0.0.1", "--port", "0",
               "--model", MODEL] + list(args)
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.port = None
        got = threading.Event()

        def read():
            for raw in self.proc.stderr:
                try:
                    obj = json.loads(raw)
                except ValueError:
                    continue
                if obj.get("event") == "listening" and self.port is None:
                    self.port = obj["port"]
                    got.set()
            got.set()

        threading.Thread(target=read, daemon=True).start()
        if not got.wait(30) or self.port is None:
            self.stop()
            raise RuntimeError("recurd did not start")

    def request(self, method, path, body=None, headers=None, raw=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=data,
                                     method=method, headers=headers or {})
        if body is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def stop(self):
        stop_process(self.proc, 30)


def compact(obj):
    return json.dumps(obj, separators=(",", ":"))


def run_examples():
    """[(name, curl line, [answer lines])] in the order of API.md, and facts the tests check."""
    d = Recurd()
    out, facts = [], {}
    try:
        def ids_out(text, names):
            for real, shown in names.items():
                text = text.replace(real, shown)
            return text

        st, body = d.request("GET", "/healthz")
        out.append(("healthz", "curl -s $B/healthz", [body.decode().strip()]))

        st, body = d.request("GET", "/v1/model")
        facts["model"] = json.loads(body)
        out.append(("model", "curl -s $B/v1/model", [body.decode().strip()]))

        st, body = d.request("POST", "/v1/sessions", {"text": "Hello"})
        created = json.loads(body)
        sid = created["id"]
        names = {sid: "$ID"}
        out.append(("create", "curl -s -XPOST $B/v1/sessions -d '{\"text\":\"Hello\"}'",
                    ["%d %s" % (st, ids_out(body.decode().strip(), names))]))

        st, body = d.request("POST", "/v1/sessions/%s/tokens" % sid, {"text": " world", "top_k": 2})
        out.append(("tokens", "curl -sN -XPOST $B/v1/sessions/$ID/tokens -d '{\"text\":\" world\",\"top_k\":2}'",
                    body.decode().strip().split("\n")))

        st, body = d.request("GET", "/v1/sessions/%s" % sid)
        facts["get"] = json.loads(body)
        out.append(("get", "curl -s $B/v1/sessions/$ID", ["%d %s" % (st, ids_out(body.decode().strip(), names))]))

        st, body = d.request("POST", "/v1/sessions/%s/generate" % sid,
                             {"max_tokens": 5, "temperature": 0})
        out.append(("generate", "curl -sN -XPOST $B/v1/sessions/$ID/generate -d '{\"max_tokens\":5,\"temperature\":0}'",
                    body.decode().strip().split("\n")))

        st, body = d.request("POST", "/v1/sessions/%s/generate" % sid,
                             {"max_tokens": 2, "temperature": 0},
                             headers={"Accept": "text/event-stream"})
        out.append(("generate_sse", "curl -sN -XPOST $B/v1/sessions/$ID/generate -H 'Accept: text/event-stream' "
                                    "-d '{\"max_tokens\":2,\"temperature\":0}'",
                    body.decode().rstrip("\n").split("\n")))

        st, blob = d.request("GET", "/v1/sessions/%s/state" % sid)
        st2, body = d.request("GET", "/v1/sessions/%s" % sid)
        facts["state_len"] = len(blob)
        facts["snapshot_bytes"] = json.loads(body)["snapshot_bytes"]
        out.append(("state_len", "curl -s $B/v1/sessions/$ID/state | wc -c", [str(len(blob))]))

        st, body = d.request("POST", "/v1/sessions/%s/fork" % sid)
        fork_id = json.loads(body)["id"]
        out.append(("fork", "curl -s -XPOST $B/v1/sessions/$ID/fork",
                    ["%d %s" % (st, ids_out(body.decode().strip(), dict(names, **{fork_id: "<new id>"})))]))

        st, body = d.request("POST", "/v1/sessions")
        other = json.loads(body)
        facts["empty_create"] = other
        st, body = d.request("PUT", "/v1/sessions/%s/state" % other["id"], raw=blob,
                             headers={"Content-Type": "application/octet-stream"})
        out.append(("put_state", "curl -s -XPUT $B/v1/sessions/$OTHER/state -H 'Content-Type: "
                                 "application/octet-stream' --data-binary @s.bin",
                    ["%d %s" % (st, ids_out(body.decode().strip(), {other["id"]: "$OTHER"}))]))

        oai_examples(d, out)
    finally:
        d.stop()
    return out, facts


def oai_stable(text):
    """An OpenAI answer with what differs per run replaced: "id" and "created"."""
    text = re.sub(r'"id":"(cmpl|chatcmpl)-[0-9a-f]+"', r'"id":"\1-<random>"', text)
    return re.sub(r'"created":\d+', '"created":"<unix time>"', text)


def oai_examples(d, out):
    """The OpenAI routes' examples (API.md "OpenAI API")."""
    model = json.loads(d.request("GET", "/v1/models")[1])["data"][0]["id"]
    st, body = d.request("GET", "/v1/models")
    out.append(("oai_models", "curl -s $B/v1/models", [oai_stable(body.decode().strip())]))
    st, body = d.request("GET", "/v1/models/" + model)
    out.append(("oai_model", "curl -s $B/v1/models/" + model, [oai_stable(body.decode().strip())]))
    req = {"model": model, "prompt": "Hello", "max_tokens": 5, "temperature": 0}
    st, body = d.request("POST", "/v1/completions", req)
    out.append(("oai_completion", "curl -s $B/v1/completions -d '%s'" % compact(req),
                [oai_stable(body.decode().strip())]))
    req = {"model": model, "prompt": "Hello", "max_tokens": 2, "temperature": 0, "stream": True,
           "stream_options": {"include_usage": True}}
    st, body = d.request("POST", "/v1/completions", req)
    out.append(("oai_completion_stream", "curl -sN $B/v1/completions -d '%s'" % compact(req),
                oai_stable(body.decode()).rstrip("\n").split("\n")))
    req = {"model": model, "messages": [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": "Hello"}],
           "max_tokens": 8, "temperature": 0}
    st, body = d.request("POST", "/v1/chat/completions", req)
    out.append(("oai_chat", "curl -s $B/v1/chat/completions -d '%s'" % compact(req),
                [oai_stable(body.decode().strip())]))
    req = dict(req, max_tokens=2, stream=True)
    st, body = d.request("POST", "/v1/chat/completions", req)
    out.append(("oai_chat_stream", "curl -sN $B/v1/chat/completions -d '%s'" % compact(req),
                oai_stable(body.decode()).rstrip("\n").split("\n")))
    req = {"model": model, "prompt": "Hello", "suffix": "!"}
    st, body = d.request("POST", "/v1/completions", req)
    out.append(("oai_refused", "curl -s $B/v1/completions -d '%s'" % compact(req),
                ["%d %s" % (st, body.decode().strip())]))


def main(argv):
    examples, _ = run_examples()
    for name, cmd, lines in examples:
        if argv and name not in argv:
            continue
        print("## " + name)
        print(cmd)
        for l in lines:
            print("# " + l if l else "#")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
