"""docs/API.md says what a real run answers (issue 10 item 18): the examples printed by
tools/docs_examples.py (the shipped model, the documented requests in order) are the ones on the
page (logprobs to 1e-4), snapshot_bytes is the length of GET .../state, and every error code the
HTTP layer and the routes can answer is in the error table."""
import json
import math
import os
import re

import docs_examples

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
API_MD = os.path.join(ROOT, "docs", "API.md")


def api_md():
    with open(API_MD, encoding="utf-8") as f:
        return f.read()


def documented_answer(doc, cmd):
    """The "# " lines right after the line `cmd` in API.md."""
    lines = doc.split("\n")
    assert cmd in lines, "API.md lacks the example command:\n" + cmd
    i = lines.index(cmd) + 1
    out = []
    while i < len(lines) and lines[i].startswith("#"):
        out.append(lines[i][2:] if lines[i].startswith("# ") else "")
        i += 1
    return out


def same_json(a, b, path="$"):
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), (path, a, b)
        assert math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-4), (path, a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), (path, a, b)
        for k in a:
            same_json(a[k], b[k], path + "." + k)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (path, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            same_json(x, y, "%s[%d]" % (path, i))
    else:
        assert a == b, (path, a, b)


def json_part(line):
    """(prefix, JSON value) of "201 {...}", "data: {...}" or "{...}"; (line, None) otherwise."""
    m = re.match(r"^((?:\d{3} )|(?:data: ))?(\{.*\})$", line)
    if not m:
        return line, None
    return m.group(1) or "", json.loads(m.group(2))


def test_api_md_examples_are_a_real_run():
    examples, facts = docs_examples.run_examples()
    doc = api_md()
    for name, cmd, real in examples:
        shown = documented_answer(doc, cmd)
        assert len(shown) == len(real), "%s: API.md shows %d lines, a run gives %d:\n%s" % (
            name, len(shown), len(real), "\n".join(real))
        for s, r in zip(shown, real):
            sp, sj = json_part(s)
            rp, rj = json_part(r)
            assert sp == rp, (name, s, r)
            if rj is None:
                assert s == r, (name, s, r)
            else:
                same_json(sj, rj, name)
    # snapshot_bytes is what GET .../state returns (the core snapshot + the logits trailer)
    assert facts["snapshot_bytes"] == facts["state_len"], facts
    empty = facts["empty_create"]["snapshot_bytes"]
    assert '{"snapshot_bytes":%d}' % empty in doc
    assert facts["state_len"] - empty == 16 + 4 * facts["model"]["vocab_size"] + 8
    # the shipped model is recurrent-only: no context limit to report
    assert facts["model"]["max_context"] is None


SOURCES = ["server/http_conn.c", "server/http_checks.c", "server/auth.c", "server/routes.c",
           "server/ops.c"]
CODE_RE = re.compile(r'(?:cb_fail(?:_ex)?\(c|scan_fail\(err|srv_respond_error(?:_ex)?\((?:c|op->conn)'
                     r'|op_error\(op|\{)\s*,?\s*(\d{3}),\s*"([a-z0-9_]+)"|(?:e->code|e\.code|r->code)'
                     r'\s*=\s*"([a-z0-9_]+)"')


def test_every_error_code_is_in_the_error_table():
    codes = set()
    for rel in SOURCES:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            for m in CODE_RE.finditer(f.read()):
                codes.add(m.group(2) or m.group(3))
    assert {"body_too_large", "header_timeout", "obs_fold", "missing_host",
            "http_version_not_supported", "unauthorized"} <= codes, codes
    doc = api_md()
    table = doc[doc.index("## Errors"):doc.index("## `GET /healthz`")]
    missing = sorted(c for c in codes if "`%s`" % c not in table)
    assert not missing, "error codes the daemon answers that API.md's error table lacks: %s" % missing
