"""tokenizer_corpus — the deterministic multilingual corpus the tokenizer tests and the bench use.

corpus(specials, seed, min_bytes) -> list[str]: items (each encoded on its own; an item may hold
newlines) covering Latin with diacritics, Cyrillic, Greek, Arabic, Hebrew, Devanagari, Thai, CJK,
Hangul, emoji (ZWJ sequences, skin tones, flags, keycaps), source code, long whitespace and digit
runs, every special/added token given (inside text), text that NFC/NFKC change, the whitespace
characters where JavaScript and Unicode disagree (U+0085, U+FEFF), apostrophe contractions in
any case (and U+017F, which Unicode folds to "s"), CRLF, control characters.
Only characters assigned since Unicode 13 or earlier are used, so that PCRE2, utf8proc and the
reference's ICU classify them alike.
"""
import random

WORDS_LATIN = [
    "naïve", "café", "résumé", "façade", "Ångström", "Straße", "Øresund", "Łódź", "Dvořák", "Čapek",
    "Mañana", "coração", "garçon", "über", "Ærø", "İstanbul", "ğüşöç", "Þingvellir", "Ðorđe", "œuvre",
    "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "HTTP", "JSON", "tokenizer",
    "it's", "we're", "they've", "I'm", "you'll", "he'd", "IT'S", "WE'RE", "Don't", "O'Neil", "rock'n'roll",
]
RANGES = {
    "cyrillic": [(0x0410, 0x044F), (0x0401, 0x0401), (0x0451, 0x0451)],
    "greek": [(0x0391, 0x03A1), (0x03A3, 0x03A9), (0x03B1, 0x03C9), (0x0386, 0x0386), (0x03AC, 0x03AF)],
    "arabic": [(0x0621, 0x063A), (0x0641, 0x064A), (0x064B, 0x0652), (0x0660, 0x0669)],
    "hebrew": [(0x05D0, 0x05EA), (0x05B0, 0x05B9)],
    "devanagari": [(0x0905, 0x0939), (0x093E, 0x094D), (0x0966, 0x096F)],
    "thai": [(0x0E01, 0x0E3A), (0x0E40, 0x0E4E), (0x0E50, 0x0E59)],
    "han": [(0x4E00, 0x9FA5)],
    "kana": [(0x3041, 0x3096), (0x30A1, 0x30FA), (0x30FC, 0x30FC)],
    "hangul": [(0xAC00, 0xD7A3)],
}
EMOJI = [
    "👍", "👍🏻", "👍🏽", "👍🏿", "👋🏼", "🧑‍💻", "👨‍👩‍👧‍👦", "👩‍❤️‍👨", "🏳️‍🌈", "🇫🇷", "🇯🇵", "🇺🇸",
    "1️⃣", "#️⃣", "❤️", "✨", "🔥", "😀", "🤖", "🦀", "🐍", "☕", "🎉", "👩🏾‍🚀", "🧔🏻‍♂️",
]
CODE = [
    "int main(int argc, char **argv) {\n    return argc > 1 ? 0 : 1;\n}\n",
    "def f(x):\n\tif x is None:\n\t\treturn {'a': [1, 2, 3]}\n    return x ** 2  # comment\n",
    "const re = /^[a-z_$][\\w$]*$/i; let s = `${a}+${b}`; console.log(s === '42');",
    "for (size_t i = 0; i < n; i++) { a[i] += b[i] * 0.5f; }",
    "<html><body class=\"x\">&amp; &lt;tag&gt;</body></html>",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "fn main() { let v: Vec<u8> = vec![0xFF; 16]; println!(\"{:?}\", v); }",
    "    if (x != NULL && *x == '\\0') goto out;\r\n",
    "$ curl -s http://127.0.0.1:8080/v1/tokenize -d '{\"text\": \"hi\"}' | jq .tokens",
]
NORMALIZE = [
    "e\u0301", "A\u030a", "\u212b", "\u2126", "ﬁ", "ﬂ", "Ａｂｃ１２３", "²³¹", "ℌℍ", "Ⅻ", "㎏", "①②",
    "\u1100\u1161\u11a8", "가\u11a8", "n\u0303", "\u00c5", "\u0344", "ǅ", "…", "\u00a0", "\u2002", "ｶﾞ",
    "o\u0308\u0301", "\u0958", "\u2fc0", "\uf900", "ſ", "'ſ", "'S", "'LL", "'Ve", "'D", "ﬀ",
]
ODD_SPACE = ["\u0085", "\ufeff", "\u3000", "\u2028", "\u2029", "\u200b", "\u00a0", "\u1680", "\u202f", "\u205f"]
PUNCT = [",", ".", "!", "?", ";", ":", "-", "—", "–", "«", "»", "“", "”", "'", "\"", "(", ")", "[", "]",
         "{", "}", "/", "\\", "@", "#", "%", "&", "*", "+", "=", "<", ">", "|", "~", "^", "`", "$", "€", "£", "¥"]


def _chars(rng, script, n):
    ranges = RANGES[script]
    out = []
    for _ in range(n):
        lo, hi = rng.choice(ranges)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def _word(rng):
    r = rng.random()
    if r < 0.35:
        return rng.choice(WORDS_LATIN)
    if r < 0.85:
        script = rng.choice(list(RANGES))
        return _chars(rng, script, rng.randint(1, 8) if script not in ("han", "kana") else rng.randint(1, 4))
    if r < 0.93:
        return rng.choice(EMOJI) * rng.randint(1, 2)
    return rng.choice(NORMALIZE)


def _space(rng):
    r = rng.random()
    if r < 0.80:
        return " "
    if r < 0.86:
        return " " * rng.randint(2, 40)
    if r < 0.90:
        return rng.choice(["\n", "\n\n", "\r\n", "\t", " \n ", "\t\t", "  \n", "\n   "])
    if r < 0.95:
        return rng.choice(ODD_SPACE)
    return ""


def _item(rng, specials):
    kind = rng.random()
    parts = []
    if kind < 0.08:
        parts.append(rng.choice(CODE))
    elif kind < 0.12:
        parts.append(str(rng.randint(0, 10 ** rng.randint(1, 40))) + rng.choice(["", ".", " ", ",", "e-7"]))
        parts.append("".join(rng.choice("0123456789") for _ in range(rng.randint(20, 200))))
    elif kind < 0.15:
        parts.append(rng.choice([" ", "\t", "\n", "  \t"]) * rng.randint(10, 300))
        parts.append(_word(rng))
    elif kind < 0.17:
        parts.append("".join(chr(rng.randint(1, 31)) for _ in range(rng.randint(1, 8))))
    for _ in range(rng.randint(1, 60)):
        if rng.random() < 0.05 and specials:
            parts.append(rng.choice(specials))
        elif rng.random() < 0.06:
            parts.append(rng.choice(PUNCT) * rng.randint(1, 3))
        elif rng.random() < 0.03:
            parts.append(str(rng.randint(0, 10 ** 12)))
        parts.append(_word(rng))
        parts.append(_space(rng))
    if rng.random() < 0.3:
        parts.insert(0, rng.choice([" ", "  ", "\n", ""]))
    return "".join(parts)


def corpus(specials=(), seed=12, min_bytes=1 << 20):
    rng = random.Random(seed)
    specials = sorted(set(specials))
    items = []
    # every special token alone, at the start, the end, glued to words and doubled
    for s in specials:
        items += [s, "x" + s + "y", " " + s + " ", s + s, "hello " + s + " world"]
    items += NORMALIZE + ODD_SPACE + EMOJI + CODE
    size = sum(len(x.encode()) for x in items)
    while size < min_bytes:
        it = _item(rng, specials)
        items.append(it)
        size += len(it.encode())
    return items
