"""recur_tokenizer — ctypes binding of librecur's tokenizer (recur.h, tokenizer section).

    tok = Tokenizer.load(path)      # a tokenizer.json, an RWKV vocab file, or a model folder
    ids = tok.encode("text", add_special_tokens=False)
    text = tok.decode(ids)
    tok.vocab_size                  # highest id + 1, added tokens included
    stream = tok.stream()           # streaming decode: stream.push(id) -> str, stream.finish() -> str

The library is the one ``recur.py`` loads (``$RECUR_BUILD/librecur.so``, default
``<repo>/build/librecur.so``). Errors raise ``RecurTokenizerError`` carrying the library's message.
"""
import ctypes
import os

from recur import LIBRARY_PATH, _lib  # noqa: F401 (one home for finding and loading librecur)

__all__ = ["Tokenizer", "RecurTokenizerError", "KIND_BYTES", "KIND_HF", "KIND_RWKV"]

KIND_BYTES, KIND_HF, KIND_RWKV = 0, 1, 2

_P = ctypes.c_void_p
_I32P = ctypes.POINTER(ctypes.c_int32)
_sz = ctypes.c_size_t

for _name, _res, _args in [
    ("recur_strerror", ctypes.c_char_p, [ctypes.c_int]),
    ("recur_tokenizer_load", ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P), ctypes.c_char_p, _sz]),
    ("recur_tokenizer_bytes", ctypes.c_int, [ctypes.POINTER(_P)]),
    ("recur_tokenizer_free", None, [_P]),
    ("recur_tokenizer_kind", ctypes.c_int, [_P]),
    ("recur_tokenizer_vocab_size", ctypes.c_int32, [_P]),
    ("recur_tokenizer_added_token", ctypes.c_int, [_P, _sz, _I32P, ctypes.POINTER(ctypes.c_char_p),
                                                   ctypes.POINTER(ctypes.c_int)]),
    ("recur_tokenizer_encode", ctypes.c_int, [_P, ctypes.c_char_p, _sz, ctypes.c_int,
                                              ctypes.POINTER(_I32P), ctypes.POINTER(_sz)]),
    ("recur_tokenizer_decode", ctypes.c_int, [_P, _I32P, _sz, ctypes.POINTER(_P), ctypes.POINTER(_sz)]),
    ("recur_tokenizer_release", None, [_P]),
    ("recur_detok_new", ctypes.c_int, [_P, ctypes.POINTER(_P)]),
    ("recur_detok_push", ctypes.c_int, [_P, ctypes.c_int32, ctypes.POINTER(_P), ctypes.POINTER(_sz)]),
    ("recur_detok_finish", ctypes.c_int, [_P, ctypes.POINTER(_P), ctypes.POINTER(_sz)]),
    ("recur_detok_free", None, [_P]),
]:
    _f = getattr(_lib, _name)
    _f.restype = _res
    _f.argtypes = _args


class RecurTokenizerError(ValueError):
    def __init__(self, code, message=""):
        self.code = code
        text = _lib.recur_strerror(code).decode()
        super().__init__(f"{text}: {message}" if message else text)


def _check(rc, message=""):
    if rc < 0:
        raise RecurTokenizerError(rc, message)


class Stream:
    """Streaming decode: push ids one at a time; the text each push returns never ends inside a
    UTF-8 sequence. "".join(pushes) + finish() == Tokenizer.decode(all ids)."""

    def __init__(self, tok):
        self._tok = tok  # keeps the tokenizer alive
        self._d = _P()
        _check(_lib.recur_detok_new(tok._t, ctypes.byref(self._d)))

    def push(self, token_id):
        p, n = _P(), _sz()
        _check(_lib.recur_detok_push(self._d, int(token_id), ctypes.byref(p), ctypes.byref(n)))
        return ctypes.string_at(p, n.value).decode("utf-8")

    def finish(self):
        p, n = _P(), _sz()
        _check(_lib.recur_detok_finish(self._d, ctypes.byref(p), ctypes.byref(n)))
        return ctypes.string_at(p, n.value).decode("utf-8")

    def __del__(self):
        if getattr(self, "_d", None):
            _lib.recur_detok_free(self._d)
            self._d = None


class Tokenizer:
    def __init__(self, handle):
        self._t = handle

    @classmethod
    def load(cls, path):
        t = _P()
        err = ctypes.create_string_buffer(512)
        rc = _lib.recur_tokenizer_load(os.fsencode(path), ctypes.byref(t), err, len(err))
        _check(rc, err.value.decode("utf-8", "replace"))
        return cls(t)

    @classmethod
    def bytes(cls):
        t = _P()
        _check(_lib.recur_tokenizer_bytes(ctypes.byref(t)))
        return cls(t)

    def __del__(self):
        if getattr(self, "_t", None):
            _lib.recur_tokenizer_free(self._t)
            self._t = None

    @property
    def kind(self):
        return _lib.recur_tokenizer_kind(self._t)

    @property
    def vocab_size(self):
        return _lib.recur_tokenizer_vocab_size(self._t)

    @property
    def added_tokens(self):
        """[(id, content, special)] in file order."""
        out, i = [], 0
        while True:
            tid, content, special = ctypes.c_int32(), ctypes.c_char_p(), ctypes.c_int()
            if _lib.recur_tokenizer_added_token(self._t, i, ctypes.byref(tid), ctypes.byref(content),
                                                ctypes.byref(special)) < 0:
                return out
            out.append((tid.value, content.value.decode("utf-8"), bool(special.value)))
            i += 1

    def encode_bytes(self, data, add_special_tokens=False):
        ids, n = _I32P(), _sz()
        _check(_lib.recur_tokenizer_encode(self._t, data, len(data), int(bool(add_special_tokens)),
                                           ctypes.byref(ids), ctypes.byref(n)))
        try:
            return ids[:n.value]
        finally:
            _lib.recur_tokenizer_release(ids)

    def encode(self, text, add_special_tokens=False):
        return self.encode_bytes(text.encode("utf-8", "surrogatepass"), add_special_tokens)

    def decode_bytes(self, ids):
        ids = list(ids)
        arr = (ctypes.c_int32 * max(1, len(ids)))(*ids)
        p, n = _P(), _sz()
        _check(_lib.recur_tokenizer_decode(self._t, arr, len(ids), ctypes.byref(p), ctypes.byref(n)))
        try:
            return ctypes.string_at(p, n.value)
        finally:
            _lib.recur_tokenizer_release(p)

    def decode(self, ids):
        return self.decode_bytes(ids).decode("utf-8")

    def stream(self):
        return Stream(self)
