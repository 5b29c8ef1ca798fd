"""Session states under attack (issue 10 items 4-7, 12, 13): uploads the model cannot run are
refused with a code naming the check, a computation that turns non-finite fails cleanly and
leaves the session as it was, restored sessions continue bit for bit, and corrupt or foreign
snapshot files are quarantined with the documented reason (docs/API.md, docs/MODEL.md
"Snapshot", docs/OPERATIONS.md)."""
import json
import math
import os
import struct
import time

import pytest
import requests

from daemon import Daemon, ROOT, TINY_MODEL
from checksums import snapshot_sum, trailer_sum

OCTET = {"Content-Type": "application/octet-stream"}
DEFAULT = ("--model", os.path.join(ROOT, "models", "default"))


# ---------------------------------------------------------------------------- helpers

def create(d, text=None):
    r = requests.post(d.url("/v1/sessions"), json={"text": text} if text else None, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def lines_of(r):
    return [json.loads(x) for x in r.text.split("\n") if x]


def fold(d, sid, text, top_k=None):
    body = {"text": text}
    if top_k:
        body["top_k"] = top_k
    r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), json=body, timeout=60)
    assert r.status_code == 200, r.text
    return lines_of(r)


def generate(d, sid, **params):
    r = requests.post(d.url("/v1/sessions/%s/generate" % sid), json=params, timeout=60)
    assert r.status_code == 200, r.text
    return lines_of(r)


def get_state(d, sid):
    r = requests.get(d.url("/v1/sessions/%s/state" % sid), timeout=30)
    assert r.status_code == 200, r.text
    return r.content


def put_state(d, sid, blob):
    return requests.put(d.url("/v1/sessions/%s/state" % sid), data=blob, headers=OCTET, timeout=30)


BOUND = 2.0 ** 40  # RECUR_STATE_MAX_ABS, docs/MODEL.md "State values"
MAX_TOKENS = (1 << 53) - 1  # RECUR_MAX_TOKENS_SEEN


def split(blob):
    """header (40 bytes), payload floats (tuple), trailer logits (tuple or None)."""
    P = struct.unpack_from("<Q", blob, 32)[0]
    payload = struct.unpack_from("<%df" % (P // 4), blob, 40)
    rest = blob[48 + P:]
    if not rest:
        return blob[:40], payload, None
    V = struct.unpack_from("<I", rest, 8)[0]
    return blob[:40], payload, struct.unpack_from("<%df" % V, rest, 16)


def assemble(header, payload, logits=None, tokens_seen=None):
    """A snapshot body with valid checksums (docs/MODEL.md "Snapshot", docs/API.md trailer)."""
    header = bytearray(header)
    if tokens_seen is not None:
        struct.pack_into("<Q", header, 24, tokens_seen)
    core = bytes(header) + struct.pack("<%df" % len(payload), *payload)
    core += struct.pack("<Q", snapshot_sum(core))
    if logits is None:
        return core
    t = b"RECURLG1" + struct.pack("<II", len(logits), 0) + struct.pack("<%df" % len(logits), *logits)
    return core + t + struct.pack("<Q", trailer_sum(core, t))


def error_code(r, status=400):
    assert r.status_code == status, (r.status_code, r.text)
    return r.json()["error"]["code"]


def stream_error(lines):
    return [l for l in lines if "error" in l]


def quarantined(state_dir):
    q = os.path.join(str(state_dir), "quarantine")
    return sorted(os.listdir(q)) if os.path.isdir(q) else []


# ---------------------------------------------------------------------------- item 5: uploads

@pytest.mark.parametrize("value,code", [
    (3e38, "snapshot_range"),          # the poisoned state
    (BOUND * 2, "snapshot_range"),     # just past the documented bound
    (float("nan"), "snapshot_nonfinite"),
    (float("inf"), "snapshot_nonfinite"),
])
def test_state_the_model_cannot_run_is_refused(value, code):
    with Daemon() as d:
        sid = create(d, "some context")
        header, payload, logits = split(get_state(d, sid))
        target = create(d, "target")
        before = get_state(d, target)
        bad = assemble(header, [value] * len(payload), logits)
        assert error_code(put_state(d, target, bad)) == code
        one = list(payload)
        one[len(one) // 2] = value  # a single value is enough
        assert error_code(put_state(d, target, assemble(header, one, logits))) == code
        assert get_state(d, target) == before  # unchanged
        # the same rule for the trailer's logits
        lg = list(logits)
        lg[3] = value
        assert error_code(put_state(d, target, assemble(header, payload, lg))) == code
        assert get_state(d, target) == before
        assert fold(d, target, "x")[-1]["done"] is True  # and it still works


def test_state_at_the_bound_runs_and_its_own_snapshot_loads(tmp_path):
    """Every value at +-2^40 is accepted; whatever the model then computes, the session either
    folds and generates normally or answers a named error and stays as it was, and its own
    GET /state is accepted by PUT, also after an eviction to disk (items 4, 5)."""
    with Daemon("--state-dir", str(tmp_path / "sd"), "--max-resident-sessions", "2") as d:
        sid = create(d, "some context")
        header, payload, logits = split(get_state(d, sid))
        edge = [BOUND if i % 2 else -BOUND for i in range(len(payload))]
        target = create(d)
        r = put_state(d, target, assemble(header, edge, logits))
        assert r.status_code == 200, r.text
        accepted = get_state(d, target)
        lines = fold(d, target, "abc", top_k=2)
        err = stream_error(lines)
        if err:
            assert err[0]["error"]["code"] in ("non_finite", "state_range"), err
            assert get_state(d, target) == accepted  # put back as it was
        else:
            for l in lines[:-1]:
                assert l["logprob"] is None or math.isfinite(l["logprob"])
                assert len(l["top"]) == 2
        gen = generate(d, target, max_tokens=2, temperature=0)
        assert not stream_error(gen) or stream_error(gen)[0]["error"]["code"] in ("non_finite", "state_range")
        mine = get_state(d, target)
        for _ in range(3):  # evict it (max 2 resident), then load it back from its file
            create(d, "pressure")
        assert requests.get(d.url("/v1/sessions/%s" % target), timeout=10).status_code == 200
        assert get_state(d, target) == mine
        assert quarantined(tmp_path / "sd") == []
        again = create(d)
        assert put_state(d, again, mine).status_code == 200


def test_poisoned_upload_cannot_vanish_after_eviction(tmp_path):
    """Item 4: an upload the daemon accepted (200) was written to disk with non-finite logits
    once evicted, quarantined as "trailer" and answered 404. Now it is refused at upload, and
    every accepted one survives the eviction."""
    with Daemon("--state-dir", str(tmp_path / "sd"), "--max-resident-sessions", "2") as d:
        sid = create(d, "some context")
        header, payload, logits = split(get_state(d, sid))
        for values in ([3e38] * len(payload), list(payload)):
            target = create(d)
            r = put_state(d, target, assemble(header, values, logits))
            if r.status_code != 200:
                assert error_code(r) == "snapshot_range"
                continue
            fold(d, target, "x")
            for _ in range(3):
                create(d, "pressure")
            assert requests.get(d.url("/v1/sessions/%s" % target), timeout=10).status_code == 200
        assert quarantined(tmp_path / "sd") == []


# ---------------------------------------------------------------------------- item 6

def test_tokens_seen_is_range_checked():
    """A recurrent-only model's session may see up to 2^53 - 1 tokens (exact as a JSON number);
    an upload beyond is refused, and a session at the limit cannot fold more (the position used
    to wrap to 0 from 2^64 - 1)."""
    with Daemon() as d:
        sid = create(d, "ctx")
        header, payload, logits = split(get_state(d, sid))
        target = create(d)
        for n in ((1 << 64) - 1, 1 << 53):
            r = put_state(d, target, assemble(header, payload, logits, tokens_seen=n))
            assert error_code(r) == "snapshot_tokens_seen"
        r = put_state(d, target, assemble(header, payload, logits, tokens_seen=MAX_TOKENS - 1))
        assert r.status_code == 200 and r.json()["tokens_seen"] == MAX_TOKENS - 1
        lines = fold(d, target, "a")
        assert lines[0]["pos"] == MAX_TOKENS - 1 and lines[-1]["tokens_seen"] == MAX_TOKENS
        r = requests.post(d.url("/v1/sessions/%s/tokens" % target), json={"text": "b"}, timeout=30)
        assert error_code(r, 422) == "max_context"
        gen = generate(d, target, max_tokens=5, temperature=0)
        assert gen[-1]["reason"] == "length" and gen[-1]["tokens_seen"] == MAX_TOKENS
        # and its own snapshot at the limit loads
        assert put_state(d, create(d), get_state(d, target)).status_code == 200


# ---------------------------------------------------------------------------- item 12

def test_flipped_bit_is_the_checksum(tmp_path):
    """A flipped bit anywhere past the framing is snapshot_checksum on PUT and "checksum" on
    disk (was invalid_snapshot / "trailer": the trailer's checksum, which covers the core, was
    checked first)."""
    sd = tmp_path / "sd"
    with Daemon("--state-dir", str(sd)) as d:
        sid = create(d, "some context")
        blob = get_state(d, sid)
        P = struct.unpack_from("<Q", blob, 32)[0]
        target = create(d)
        for at in (12, 16, 24, 40, 40 + P // 2, 40 + P, 48 + P + 20, len(blob) - 1):
            bad = bytearray(blob)
            bad[at] ^= 0x04
            assert error_code(put_state(d, target, bytes(bad))) == "snapshot_checksum", at
        ids = [create(d, "file %d" % i) for i in range(3)]
        assert d.terminate() == 0
    flips = {ids[0]: 40 + P // 2, ids[1]: 16, ids[2]: len(blob) - 20}  # payload, fingerprint, logits
    for i, at in flips.items():
        path = sd / (i + ".snap")
        data = bytearray(path.read_bytes())
        data[at] ^= 0x04
        path.write_bytes(bytes(data))
    with Daemon("--state-dir", str(sd)) as d:
        for i in flips:
            assert requests.get(d.url("/v1/sessions/%s" % i), timeout=10).status_code == 404
        reasons = {f.split(".")[0]: f.split(".")[2] for f in quarantined(sd)}
        assert reasons == {i: "checksum" for i in flips}, reasons


# ---------------------------------------------------------------------------- item 13

def test_another_smaller_model_is_othermodel(tmp_path):
    """Restarting over a state_dir with another, smaller model quarantines its sessions as
    "othermodel" (was "toolarge": the size limit of the new model came before the fingerprint)."""
    sd = tmp_path / "sd"
    with Daemon("--state-dir", str(sd)) as d:
        ids = [create(d, "hello %d" % i) for i in range(2)]
        assert d.terminate() == 0
    small = dict(json.load(open(TINY_MODEL)), d_model=32, n_layers=1, n_heads=1, head_k=16,
                 head_v=16, d_ff=64, mixers=["gated_deltanet"])
    cfg = tmp_path / "small.json"
    cfg.write_text(json.dumps(small))
    with Daemon("--state-dir", str(sd), model_config=str(cfg)) as d:
        for i in ids:
            assert requests.get(d.url("/v1/sessions/%s" % i), timeout=10).status_code == 404
        reasons = sorted(f.split(".")[2] for f in quarantined(sd))
        assert reasons == ["othermodel"] * 2, reasons


# ---------------------------------------------------------------------------- item 7

def test_restored_session_continues_bit_for_bit():
    """The issue's recipe: after a one-token fold the original, a fork and a session restored
    from GET /state give the very same logprob (was -0.849001527 vs -0.849001467 on
    models/default: the restored session's log-softmax took another code path)."""
    with Daemon(*DEFAULT, model_config=None) as d:
        sid = create(d, "persist me")
        fold(d, sid, "!", top_k=1)
        blob = get_state(d, sid)
        fork = requests.post(d.url("/v1/sessions/%s/fork" % sid), timeout=30).json()["id"]
        new = create(d)
        assert put_state(d, new, blob).status_code == 200
        got = [generate(d, s, max_tokens=3, temperature=0)[:3] for s in (sid, fork, new)]
        assert got[0] == got[1] == got[2], got
        # and the same after a restart from the snapshot (another daemon, same model)
    with Daemon(*DEFAULT, model_config=None) as d2:
        again = create(d2)
        assert put_state(d2, again, blob).status_code == 200
        assert generate(d2, again, max_tokens=3, temperature=0)[:3] == got[0]



# ---------------------------------------------------------------------------- item 5: computation

POISON = 15  # the token of write_overflow_model whose step overflows


def write_overflow_model(path, state_range=False):
    """A one-layer gated DeltaNet model (F32 safetensors) that is sound for tokens 0..14 and whose
    step overflows for token 15: its embedding turns the output gate silu(g) on (g = 100 h_0),
    and o_proj (1e37) then pushes the residual stream to infinity; the logits become NaN. Every
    weight is finite, so the model loads; only a computation turns non-finite.
    state_range: token 15 instead leaves the state outside the value bound with finite logits:
    its embedding opens the write gate beta = sigmoid(100 h_0) of a value v = 1e14 h_0 (S grows
    to ~1e14 > 2^40; for the other tokens beta ~ e^-100), and the mixer's output is dropped
    (o_proj 0)."""
    import random
    rnd = random.Random(5)
    V, d, H, K, ff = 16, 8, 1, 8, 8
    cfg = {"name": "overflow", "vocab_size": V, "d_model": d, "n_layers": 1, "n_heads": H,
           "head_k": K, "head_v": K, "d_ff": ff, "mixers": ["gated_deltanet"],
           "tied_embeddings": True, "norm_eps": 1e-5}
    def mat(r, c, scale=0.5):
        return [[rnd.uniform(-scale, scale) for _ in range(c)] for _ in range(r)]
    embed = mat(V, d)
    for t in range(V):
        embed[t][0] = 1.0 if t == POISON else -1.0
    t = {"embed.weight": embed, "norm_f.weight": [[1.0] * d]}
    p = "layers.0."
    t[p + "attn_norm.weight"] = [[1.0] * d]
    t[p + "mlp_norm.weight"] = [[1.0] * d]
    for n in ("q_proj", "k_proj", "v_proj"):
        t[p + "mixer.%s.weight" % n] = mat(H * K, d)
    t[p + "mixer.b_proj.weight"] = mat(H, d)
    t[p + "mixer.a_proj.weight"] = mat(H, d)
    t[p + "mixer.A_log"] = [[0.0] * H]
    t[p + "mixer.dt_bias"] = [[0.0] * H]
    t[p + "mixer.g_proj.weight"] = [[100.0] + [0.0] * (d - 1) for _ in range(H * K)]
    t[p + "mixer.o_norm.weight"] = [[1.0] * K]
    t[p + "mixer.o_proj.weight"] = [[1e37] * (H * K) for _ in range(d)]
    t[p + "mlp.gate_proj.weight"] = mat(ff, d)
    t[p + "mlp.up_proj.weight"] = mat(ff, d)
    t[p + "mlp.down_proj.weight"] = mat(d, ff)
    if state_range:
        t[p + "mixer.v_proj.weight"] = [[1e14] + [0.0] * (d - 1) for _ in range(H * K)]
        t[p + "mixer.b_proj.weight"] = [[100.0] + [0.0] * (d - 1) for _ in range(H)]
        t[p + "mixer.g_proj.weight"] = [[0.0] * d for _ in range(H * K)]
        t[p + "mixer.o_proj.weight"] = [[0.0] * (H * K) for _ in range(d)]
    header, blobs, off = {}, [], 0
    for name, rows in t.items():
        flat = [x for r in rows for x in r]
        shape = [len(rows), len(rows[0])] if len(rows) > 1 or name.endswith("proj.weight") or name == "embed.weight" else [len(flat)]
        raw = struct.pack("<%df" % len(flat), *flat)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    return path


def poisoned_folds_are_undone(d, code):
    """A session of tokens 1 2 3 into which a prefill and a decode step with POISON fail with code
    and leave it exactly as it was; returns its id."""
    sid = create_tokens(d, [1, 2, 3])
    before = get_state(d, sid)
    for toks in ([1, POISON, 2], [POISON]):  # prefill, one decode step
        lines = fold_tokens(d, sid, toks)
        err = stream_error(lines)
        assert err and err[0]["error"]["code"] == code, lines
        assert not any("done" in l for l in lines)
        assert get_state(d, sid) == before
        assert requests.get(d.url("/v1/sessions/%s" % sid), timeout=10).json()["tokens_seen"] == 3
    return sid


def fold_tokens(d, sid, tokens, top_k=2):
    r = requests.post(d.url("/v1/sessions/%s/tokens" % sid), json={"tokens": tokens, "top_k": top_k},
                      timeout=60)
    assert r.status_code == 200, r.text
    return lines_of(r)


def test_a_step_that_turns_non_finite_is_undone(tmp_path):
    """Item 5, second half: a fold whose computation turns non-finite answers non_finite and
    leaves the session exactly as it was (state, tokens_seen, logits), through the prefill and
    through a batched decode step; other sessions stepping in the same batches get the results
    they get alone; the session's snapshot still loads, also after a restart from state_dir."""
    import threading
    model = write_overflow_model(str(tmp_path / "model"))
    sd = tmp_path / "sd"
    with Daemon("--model", model, "--state-dir", str(sd), model_config=None) as d:
        sid = poisoned_folds_are_undone(d, "non_finite")
        # the session goes on as if nothing happened: same lines as a fresh twin of it
        twin = create_tokens(d, [1, 2, 3])
        assert fold_tokens(d, sid, [4, 5]) == fold_tokens(d, twin, [4, 5])
        # neighbours in the same decode batches: bit-identical to the same steps alone
        ref = create_tokens(d, [7])
        alone = [fold_tokens(d, ref, [8])[0] for _ in range(12)]
        nb = create_tokens(d, [7])
        got, bad = [], []
        def neighbour():
            for _ in range(12):
                got.append(fold_tokens(d, nb, [8])[0])
        def poisoner():
            for _ in range(12):
                bad.append(stream_error(fold_tokens(d, sid, [POISON])))
        ts = [threading.Thread(target=neighbour), threading.Thread(target=poisoner)]
        for th in ts:
            th.start()
        for th in ts:
            th.join(60)
        assert got == alone
        assert all(b and b[0]["error"]["code"] == "non_finite" for b in bad)
        mine = get_state(d, sid)
        assert put_state(d, create(d), mine).status_code == 200
        # a create whose prefill overflows makes no session
        r = requests.post(d.url("/v1/sessions"), json={"tokens": [1, POISON]}, timeout=30)
        assert error_code(r, 500) == "non_finite"
        assert d.terminate() == 0
    with Daemon("--model", model, "--state-dir", str(sd), model_config=None) as d:
        assert get_state(d, sid) == mine
        assert quarantined(sd) == []


def test_a_fold_that_leaves_the_state_out_of_range_is_undone(tmp_path):
    """A fold whose logits are finite but whose state ends outside the value bound answers
    state_range and leaves the session exactly as it was, through the prefill and a decode step
    (the check runs on the worker after the fold's last item, ops.c); a create that would leave
    such a state makes no session."""
    model = write_overflow_model(str(tmp_path / "model"), state_range=True)
    with Daemon("--model", model, model_config=None) as d:
        sid = poisoned_folds_are_undone(d, "state_range")
        twin = create_tokens(d, [1, 2, 3])
        assert fold_tokens(d, sid, [4, 5]) == fold_tokens(d, twin, [4, 5])
        r = requests.post(d.url("/v1/sessions"), json={"tokens": [1, POISON]}, timeout=30)
        assert error_code(r, 500) == "state_range"


def create_tokens(d, tokens):
    r = requests.post(d.url("/v1/sessions"), json={"tokens": tokens}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_a_generation_that_turns_non_finite_is_undone(tmp_path):
    """A generation that samples the overflowing token ends with non_finite, and the whole
    generation is undone: the session is as it was before the request."""
    model = write_overflow_model(str(tmp_path / "model"))
    with Daemon("--model", model, model_config=None) as d:
        sid = create_tokens(d, [1, 2, 3])
        before = get_state(d, sid)
        lines = generate(d, sid, max_tokens=200, temperature=2.0, seed=3)
        err = stream_error(lines)
        assert err and err[0]["error"]["code"] == "non_finite", lines[-3:]
        assert all(l.get("token") != POISON for l in lines)  # its step failed: never streamed
        assert get_state(d, sid) == before
        assert requests.get(d.url("/v1/sessions/%s" % sid), timeout=10).json()["tokens_seen"] == 3
        # and a generation that does not meet it completes normally from there
        ok = generate(d, sid, max_tokens=3, temperature=0)
        assert ok[-1].get("done") is True or stream_error(ok)[0]["error"]["code"] == "non_finite"
