"""recur_model — ctypes binding of librecur's model API (core/recur.h, model and sampling sections).

    m = Model.load(dir)                         # or Model.load_files(cfg, weights)
    m = Model.init_seed(config_json_text, seed)
    m = Model.load(dir, weights_dtype="q8_0")   # matrices quantized at load: "q8_0", "q4_0" (None: as the file)
    m = Model.load(dir, weights_dtype="q8_0", weights_cache="/var/cache/recur")  # the quantized matrices
                                                # read from / written to a file there (m.weights_cache: what happened)
    m = Model.load(dir, state_dtype="bf16")     # session states stored as "f32" (default), "bf16" or "f16"
    m = Model.load(dir, prefill_dtype="bf16")   # prefill's GEMMs on bf16 inputs (avx512_bf16 CPUs only)
    m.info                                      # dict: name, vocab_size, ..., state_bytes, fingerprint
    s = m.state()                               # zeroed session state
    logits = m.step(s, token)                   # [vocab] float32
    logits = m.prefill(s, tokens)               # [n, vocab] (want_logits=False: None)
    logits = m.step_batch([s1, s2], [t1, t2])   # [B, vocab]
    blob = s.snapshot(); s.restore(blob)        # bytes (docs/DESIGN.md §6)
    s2 = s.copy(); s.reset(); s.tokens_seen
    token = sample(logits, temperature=.., top_k=.., top_p=.., rng=[seed])

Errors raise ValueError carrying recur_strerror's message; ``err.code`` is the RECUR_E* code.
The library is $RECUR_LIB, else $RECUR_BUILD/librecur.so (default <repo>/build/librecur.so).
"""
import ctypes
import os

import numpy as np

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LIBRARY_PATH = os.environ.get("RECUR_LIB") or os.path.join(
    os.environ.get("RECUR_BUILD") or os.path.join(_ROOT, "build"), "librecur.so")
_lib = ctypes.CDLL(LIBRARY_PATH)

MIXERS = ["linear", "retention", "gla", "deltanet", "gated_deltanet", "softmax", "mamba2", "rwkv7"]
MAX_LAYERS = 64

# error codes (recur.h)
EINVAL, ESHAPE, ENOMEM, ENONFINITE, ERANGE, EIO, EFORMAT, EMISMATCH, ECHECKSUM, ETRUNCATED, \
    ETOKEN, ECONTEXT = range(-1, -13, -1)


class RecurError(ValueError):
    def __init__(self, code, what):
        self.code = code
        super().__init__("%s: %s (%d)" % (what, strerror(code), code))


class _Info(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 64),
                ("vocab_size", ctypes.c_int), ("d_model", ctypes.c_int), ("n_layers", ctypes.c_int),
                ("n_heads", ctypes.c_int), ("head_k", ctypes.c_int), ("head_v", ctypes.c_int),
                ("d_ff", ctypes.c_int), ("tied_embeddings", ctypes.c_int),
                ("max_context", ctypes.c_int64), ("mixers", ctypes.c_int * MAX_LAYERS),
                ("n_params", ctypes.c_int64), ("state_bytes", ctypes.c_size_t),
                ("fingerprint", ctypes.c_uint64), ("weight_bytes", ctypes.c_size_t),
                ("weights_dtype", ctypes.c_char * 8), ("softmax_layers", ctypes.c_int),
                ("state_dtype", ctypes.c_char * 8), ("weights_origin", ctypes.c_char * 12),
                ("prefill_dtype", ctypes.c_char * 8), ("prefill_bytes", ctypes.c_size_t)]


class _WCacheReport(ctypes.Structure):
    _fields_ = [("outcome", ctypes.c_int), ("path", ctypes.c_char * 1024), ("rule", ctypes.c_char * 40),
                ("detail", ctypes.c_char * 256)]


WCACHE_OUTCOMES = ["off", "hit", "written", "replaced", "not_written"]


class _Sampler(ctypes.Structure):
    _fields_ = [("temperature", ctypes.c_float), ("top_k", ctypes.c_int), ("top_p", ctypes.c_float),
                ("vocab_limit", ctypes.c_int)]


_P = ctypes.c_void_p
_F = ctypes.POINTER(ctypes.c_float)
_I32 = ctypes.POINTER(ctypes.c_int32)
_U8 = ctypes.POINTER(ctypes.c_uint8)
_U64 = ctypes.POINTER(ctypes.c_uint64)

for _name, _res, _args in [
    ("recur_strerror", ctypes.c_char_p, [ctypes.c_int]),
    ("recur_model_load", ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P)]),
    ("recur_model_load_ex", ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P), ctypes.c_char_p, ctypes.c_size_t]),
    ("recur_model_load_files", ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_P)]),
    ("recur_model_init_seed", ctypes.c_int, [ctypes.c_char_p, ctypes.c_uint64, ctypes.POINTER(_P)]),
    ("recur_model_free", None, [_P]),
    ("recur_model_quantize", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.POINTER(_P), ctypes.c_char_p, ctypes.c_size_t]),
    ("recur_model_quantize_cached", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64,
                                                   ctypes.POINTER(_P), ctypes.POINTER(_WCacheReport),
                                                   ctypes.c_char_p, ctypes.c_size_t]),
    ("recur_model_get_info", ctypes.POINTER(_Info), [_P]),
    ("recur_model_set_state_dtype", ctypes.c_int, [_P, ctypes.c_int]),
    ("recur_model_set_prefill_dtype", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
    ("recur_state_dtype_parse", ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]),
    ("recur_workspace_create", ctypes.c_int, [_P, ctypes.c_int, ctypes.POINTER(_P)]),
    ("recur_workspace_free", None, [_P]),
    ("recur_state_create", ctypes.c_int, [_P, ctypes.POINTER(_P)]),
    ("recur_state_destroy", None, [_P]),
    ("recur_state_reset", None, [_P]),
    ("recur_state_copy", ctypes.c_int, [_P, _P]),
    ("recur_state_tokens_seen", ctypes.c_uint64, [_P]),
    ("recur_state_bytes_used", ctypes.c_size_t, [_P]),
    ("recur_model_step", ctypes.c_int, [_P, _P, _P, ctypes.c_int32, _F]),
    ("recur_model_prefill", ctypes.c_int, [_P, _P, _P, _I32, ctypes.c_int64, _F]),
    ("recur_model_step_batch", ctypes.c_int, [_P, _P, ctypes.POINTER(_P), _I32, ctypes.c_int, _F]),
    ("recur_snapshot_size", ctypes.c_size_t, [_P]),
    ("recur_snapshot_write", ctypes.c_int, [_P, _U8, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    ("recur_snapshot_read", ctypes.c_int, [_P, _U8, ctypes.c_size_t]),
    ("recur_sample", ctypes.c_int, [_F, ctypes.c_int, ctypes.POINTER(_Sampler), _U64, _F]),
    ("recur_log_softmax", None, [_F, ctypes.c_int, _F]),
]:
    _fn = getattr(_lib, _name)
    _fn.restype, _fn.argtypes = _res, _args


def strerror(code):
    return _lib.recur_strerror(code).decode()


def _check(rc, what):
    if rc < 0:
        raise RecurError(rc, what)
    return rc


def _fptr(a):
    return a.ctypes.data_as(_F)


class Model:
    """A loaded model with its own workspace (one thread at a time)."""

    def __init__(self, handle, max_batch=64, state_dtype=None, prefill_dtype=None):
        self._h = _P(handle)
        self._live_states = 0   # the C model is freed only once no State needs it
        self._closed = False
        if state_dtype is not None:  # before the workspace and any state
            t = ctypes.c_int()
            if _lib.recur_state_dtype_parse(state_dtype.encode(), ctypes.byref(t)) < 0:
                self._closed = True
                self._release()
                raise RecurError(EINVAL, "state_dtype %r (f32, bf16 or f16)" % state_dtype)
            _check(_lib.recur_model_set_state_dtype(self._h, t.value), "state_dtype")
        if prefill_dtype is not None:
            err = ctypes.create_string_buffer(512)
            rc = _lib.recur_model_set_prefill_dtype(self._h, prefill_dtype.encode(), err, len(err))
            if rc < 0:
                self._closed = True
                self._release()
                raise RecurError(rc, "prefill_dtype %r: %s" % (prefill_dtype, err.value.decode("utf-8", "replace")))
        ws = _P()
        _check(_lib.recur_workspace_create(self._h, max_batch, ctypes.byref(ws)), "workspace")
        self._ws = ws
        i = _lib.recur_model_get_info(self._h).contents
        self.info = {
            "name": i.name.decode(), "vocab_size": i.vocab_size, "d_model": i.d_model,
            "n_layers": i.n_layers, "n_heads": i.n_heads, "head_k": i.head_k, "head_v": i.head_v,
            "d_ff": i.d_ff, "tied_embeddings": bool(i.tied_embeddings), "max_context": i.max_context,
            "mixers": [MIXERS[i.mixers[l]] for l in range(i.n_layers)], "n_params": i.n_params,
            "state_bytes": i.state_bytes, "fingerprint": i.fingerprint,
            "weight_bytes": i.weight_bytes, "weights_dtype": i.weights_dtype.decode(),
            "state_dtype": i.state_dtype.decode(), "weights_origin": i.weights_origin.decode(),
            "prefill_dtype": i.prefill_dtype.decode(), "prefill_bytes": i.prefill_bytes,
        }
        self.weights_cache = None  # the quantized-weights cache's report (_quantized), when one was used
        self.vocab = i.vocab_size
        self.max_batch = max_batch

    @staticmethod
    def _quantized(h, weights_dtype, weights_cache=None, weights_cache_max_bytes=0):
        """(h itself for weights_dtype None / "auto", else its quantized copy (h is freed), the
        cache report as a dict or None). weights_cache: a directory (recur_model_quantize_cached)."""
        if weights_dtype is None or weights_dtype.lower() == "auto":
            return h, None
        q = _P()
        err = ctypes.create_string_buffer(512)
        rep = _WCacheReport()
        rc = _lib.recur_model_quantize_cached(h, weights_dtype.encode(),
                                              os.fsencode(weights_cache) if weights_cache else None,
                                              weights_cache_max_bytes or 0, ctypes.byref(q), ctypes.byref(rep),
                                              err, len(err))
        _lib.recur_model_free(h)
        _check(rc, "quantize to %s: %s" % (weights_dtype, err.value.decode("utf-8", "replace")))
        report = None
        if weights_cache:
            report = {"outcome": WCACHE_OUTCOMES[rep.outcome], "path": os.fsdecode(rep.path),
                      "rule": rep.rule.decode(), "detail": rep.detail.decode("utf-8", "replace")}
        return q, report

    @classmethod
    def _make(cls, h, max_batch, weights_dtype, state_dtype, weights_cache, weights_cache_max_bytes,
              prefill_dtype=None):
        q, report = cls._quantized(h, weights_dtype, weights_cache, weights_cache_max_bytes)
        m = cls(q.value, max_batch, state_dtype, prefill_dtype)
        m.weights_cache = report
        return m

    @classmethod
    def load(cls, path, max_batch=64, weights_dtype=None, state_dtype=None, weights_cache=None,
             weights_cache_max_bytes=0, prefill_dtype=None):
        """weights_dtype: None / "auto" (as the file), "q8_0" or "q4_0" (quantized at load).
        state_dtype: None / "f32", "bf16" or "f16" (how this model's session states are stored).
        weights_cache: None, or a directory for the quantized matrices' file (read when valid, else
        written; weights_cache_max_bytes bounds it, 0: 16 GiB); self.weights_cache reports.
        prefill_dtype: None / "f32" or "bf16" (prefill's GEMMs on bf16 inputs, vdpbf16ps; refused
        where the CPU lacks avx512_bf16)."""
        h = _P()
        err = ctypes.create_string_buffer(1024)
        rc = _lib.recur_model_load_ex(os.fsencode(path), ctypes.byref(h), err, len(err))
        _check(rc, "load %s: %s" % (path, err.value.decode("utf-8", "replace")))
        return cls._make(h, max_batch, weights_dtype, state_dtype, weights_cache, weights_cache_max_bytes,
                         prefill_dtype)

    @classmethod
    def load_files(cls, config_path, weights_path, max_batch=64, weights_dtype=None, state_dtype=None,
                   weights_cache=None, weights_cache_max_bytes=0, prefill_dtype=None):
        h = _P()
        _check(_lib.recur_model_load_files(os.fsencode(config_path), os.fsencode(weights_path),
                                           ctypes.byref(h)), "load %s" % weights_path)
        return cls._make(h, max_batch, weights_dtype, state_dtype, weights_cache, weights_cache_max_bytes,
                         prefill_dtype)

    @classmethod
    def init_seed(cls, config_json, seed, max_batch=64, weights_dtype=None, state_dtype=None, weights_cache=None,
                  weights_cache_max_bytes=0, prefill_dtype=None):
        if not isinstance(config_json, (str, bytes)):
            import json
            config_json = json.dumps(config_json)
        if isinstance(config_json, str):
            config_json = config_json.encode()
        h = _P()
        _check(_lib.recur_model_init_seed(config_json, seed, ctypes.byref(h)), "init_seed")
        return cls._make(h, max_batch, weights_dtype, state_dtype, weights_cache, weights_cache_max_bytes,
                         prefill_dtype)

    def __del__(self):
        # The cyclic GC may finalise a Model before the States that reference it: then the
        # last State frees the C model (see State.__del__).
        if getattr(self, "_ws", None):
            _lib.recur_workspace_free(self._ws)
            self._ws = None
        self._closed = True
        self._release()

    def _release(self):
        if self._closed and self._live_states == 0 and getattr(self, "_h", None):
            _lib.recur_model_free(self._h)
            self._h = None

    def state(self):
        return State(self)

    def step(self, state, token):
        out = np.empty(self.vocab, np.float32)
        _check(_lib.recur_model_step(self._h, self._ws, state._h, int(token), _fptr(out)), "step")
        return out

    def prefill(self, state, tokens, want_logits=True):
        t = np.ascontiguousarray(tokens, dtype=np.int32)
        out = np.empty((len(t), self.vocab), np.float32) if want_logits else None
        _check(_lib.recur_model_prefill(self._h, self._ws, state._h, t.ctypes.data_as(_I32), len(t),
                                        _fptr(out) if want_logits else None), "prefill")
        return out

    def step_batch(self, states, tokens):
        B = len(states)
        arr = (_P * B)(*[s._h.value for s in states])
        t = np.ascontiguousarray(tokens, dtype=np.int32)
        out = np.empty((B, self.vocab), np.float32)
        _check(_lib.recur_model_step_batch(self._h, self._ws, arr, t.ctypes.data_as(_I32), B,
                                           _fptr(out)), "step_batch")
        return out


class State:
    """One session's state; keeps its model alive."""

    def __init__(self, model):
        self.model = model
        h = _P()
        _check(_lib.recur_state_create(model._h, ctypes.byref(h)), "state_create")
        self._h = h
        model._live_states += 1

    def __del__(self):
        if getattr(self, "_h", None):
            _lib.recur_state_destroy(self._h)
            self._h = None
            self.model._live_states -= 1
            self.model._release()

    @property
    def tokens_seen(self):
        return _lib.recur_state_tokens_seen(self._h)

    @property
    def bytes_used(self):
        return _lib.recur_state_bytes_used(self._h)

    def reset(self):
        _lib.recur_state_reset(self._h)

    def copy(self):
        s = State(self.model)
        _check(_lib.recur_state_copy(s._h, self._h), "state_copy")
        return s

    def copy_from(self, other):
        _check(_lib.recur_state_copy(self._h, other._h), "state_copy")

    def snapshot(self):
        n = _lib.recur_snapshot_size(self._h)
        buf = (ctypes.c_uint8 * n)()
        written = ctypes.c_size_t()
        _check(_lib.recur_snapshot_write(self._h, buf, n, ctypes.byref(written)), "snapshot_write")
        return bytes(buf[:written.value])

    def restore(self, blob):
        blob = bytes(blob)
        buf = (ctypes.c_uint8 * max(len(blob), 1)).from_buffer_copy(blob or b"\0")
        _check(_lib.recur_snapshot_read(self._h, buf, len(blob)), "snapshot_read")


def sample(logits, temperature=0.0, top_k=0, top_p=1.0, rng=None, vocab_limit=0):
    """Draw a token. rng: a one-element list holding the uint64 state, advanced in place.
    vocab_limit > 0: only ids below it may be drawn."""
    x = np.ascontiguousarray(logits, dtype=np.float32)
    p = _Sampler(temperature, top_k, top_p, vocab_limit)
    r = ctypes.c_uint64(0 if rng is None else rng[0])
    scratch = np.empty(2 * len(x), np.float32)
    tok = _check(_lib.recur_sample(_fptr(x), len(x), ctypes.byref(p), ctypes.byref(r), _fptr(scratch)),
                 "sample")
    if rng is not None:
        rng[0] = r.value
    return tok


def log_softmax(logits):
    x = np.ascontiguousarray(logits, dtype=np.float32)
    out = np.empty_like(x)
    _lib.recur_log_softmax(_fptr(x), len(x), _fptr(out))
    return out
