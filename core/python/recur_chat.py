"""recur_chat — ctypes binding of librecur's chat templates (recur.h, chat-template section).

    tpl = ChatTemplate.parse(jinja_source, bos_token="<s>", eos_token="</s>")
    tpl = ChatTemplate.builtin("chatml")          # chatml, llama2, llama3, rwkv, plain
    tpl = ChatTemplate.load_dir(model_folder)     # tokenizer_config.json's chat_template
    text = tpl.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)

Errors raise ``RecurChatError`` (a ValueError) carrying the library's code and message: a
template that uses an unsupported construct fails in parse / load_dir, a template that calls
raise_exception fails in render with its message.
"""
import ctypes

from recur import _lib

__all__ = ["ChatTemplate", "RecurChatError", "BUILTINS"]

BUILTINS = ("chatml", "llama2", "llama3", "rwkv", "plain")

_P = ctypes.c_void_p
_sz = ctypes.c_size_t


class _Message(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("role_len", _sz), ("content", ctypes.c_char_p), ("content_len", _sz)]


for _name, _res, _args in [
    ("recur_strerror", ctypes.c_char_p, [ctypes.c_int]),
    ("recur_chat_template_parse", ctypes.c_int, [ctypes.c_char_p, _sz, ctypes.c_char_p, ctypes.c_char_p,
                                                 ctypes.POINTER(_P), ctypes.c_char_p, _sz]),
    ("recur_chat_template_builtin", ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P), ctypes.c_char_p, _sz]),
    ("recur_chat_template_load_dir", ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P), ctypes.c_char_p, _sz]),
    ("recur_chat_render", ctypes.c_int, [_P, ctypes.POINTER(_Message), _sz, ctypes.c_int, ctypes.POINTER(_P),
                                         ctypes.POINTER(_sz), ctypes.c_char_p, _sz]),
    ("recur_chat_template_builtin_source", ctypes.c_char_p, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p),
                                                             ctypes.POINTER(ctypes.c_char_p)]),
    ("recur_chat_release", None, [_P]),
    ("recur_chat_template_free", None, [_P]),
]:
    _f = getattr(_lib, _name)
    _f.restype = _res
    _f.argtypes = _args

RECUR_EINVAL, RECUR_ESHAPE, RECUR_EFORMAT, RECUR_ENOENT = -1, -2, -7, -13


class RecurChatError(ValueError):
    def __init__(self, code, message=""):
        self.code = code
        self.message = message
        text = _lib.recur_strerror(code).decode()
        super().__init__(f"{text}: {message}" if message else text)


def _errbuf():
    return ctypes.create_string_buffer(1024)


def _b(s):
    return s.encode("utf-8") if isinstance(s, str) else s


class ChatTemplate:
    def __init__(self, handle):
        self._t = handle

    @classmethod
    def _make(cls, fn, *args):
        t, err = _P(), _errbuf()
        rc = fn(*args, ctypes.byref(t), err, len(err))
        if rc < 0:
            raise RecurChatError(rc, err.value.decode("utf-8", "replace"))
        return cls(t)

    @classmethod
    def parse(cls, source, bos_token=None, eos_token=None):
        src = _b(source)
        return cls._make(_lib.recur_chat_template_parse, src, len(src), _b(bos_token), _b(eos_token))

    @classmethod
    def builtin(cls, name):
        return cls._make(_lib.recur_chat_template_builtin, _b(name))

    @staticmethod
    def builtin_source(name):
        """(jinja source, bos_token, eos_token) of a built-in, as str"""
        bos, eos = ctypes.c_char_p(), ctypes.c_char_p()
        src = _lib.recur_chat_template_builtin_source(_b(name), ctypes.byref(bos), ctypes.byref(eos))
        if src is None:
            raise KeyError(name)
        return src.decode(), bos.value.decode(), eos.value.decode()

    @classmethod
    def load_dir(cls, path):
        return cls._make(_lib.recur_chat_template_load_dir, _b(str(path)))

    def render_bytes(self, messages, add_generation_prompt=False):
        """messages: [{"role": str|bytes, "content": str|bytes}] -> the prompt as bytes"""
        keep = []
        arr = (_Message * max(1, len(messages)))()
        for i, m in enumerate(messages):
            role, content = _b(m["role"]), _b(m["content"])
            keep += [role, content]
            arr[i] = _Message(role, len(role), content, len(content))
        text, n, err = _P(), _sz(), _errbuf()
        rc = _lib.recur_chat_render(self._t, arr, len(messages), 1 if add_generation_prompt else 0,
                                    ctypes.byref(text), ctypes.byref(n), err, len(err))
        if rc < 0:
            raise RecurChatError(rc, err.value.decode("utf-8", "replace"))
        try:
            return ctypes.string_at(text, n.value)
        finally:
            _lib.recur_chat_release(text)

    def render(self, messages, add_generation_prompt=False):
        return self.render_bytes(messages, add_generation_prompt).decode("utf-8")

    def __del__(self):
        if getattr(self, "_t", None):
            _lib.recur_chat_template_free(self._t)
            self._t = None
