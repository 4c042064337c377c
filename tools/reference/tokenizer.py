"""References for GPT-2's tokenizer (the C tokenizer: src/data/tokenizer.c).

tests/ref/tokenizer.json: {"cases": [{"name", "text", "ids"}, ...]} for a
corpus of tricky texts and the book's the-verdict.txt (its "text" is the
file name under data/, the C test reads the file).

The ids come from an implementation written here after GPT-2's published
encoder (bytes_to_unicode, the pre-tokenizer pattern, BPE by lowest merge
rank) running under the `regex` module (Debian's python3-regex), with
"<|endoftext|>" allowed as tiktoken's allowed_special="all" does. One detail
follows tiktoken's Rust regex rather than Python's: `\\s` is Unicode's
White_Space property (Python's str.isspace also counts U+001C..U+001F).

When the npm `tiktoken` package (the Rust tiktoken as WASM) is installed in
the directory named by $TIKTOKEN_DIR, every case is also checked against its
"gpt2" encoding (tools/reference/tiktoken_ids.mjs) and a difference is an
error.
"""
import json
import os
import subprocess

import regex

from .common import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "data")
EOT = "<|endoftext|>"
PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+"""
    r"""|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+""")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class Encoder:
    def __init__(self):
        with open(os.path.join(DATA, "gpt2", "encoder.json"), encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(os.path.join(DATA, "gpt2", "vocab.bpe"), encoding="utf-8") as f:
            lines = f.read().split("\n")[1:]
        merges = [tuple(l.split()) for l in lines if l]
        self.ranks = dict(zip(merges, range(len(merges))))
        self.byte_encoder = bytes_to_unicode()
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = list(token)
        while len(word) > 1:
            pairs = [(self.ranks.get((word[i], word[i + 1]), float("inf")), i) for i in range(len(word) - 1)]
            rank, i = min(pairs)
            if rank == float("inf"):
                break
            word[i:i + 2] = [word[i] + word[i + 1]]
        self.cache[token] = word
        return word

    def encode_ordinary(self, text):
        ids = []
        for piece in PATTERN.findall(text):
            token = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(token))
        return ids

    def encode(self, text):
        ids = []
        parts = text.split(EOT)
        for k, part in enumerate(parts):
            if k:
                ids.append(self.encoder[EOT])
            ids.extend(self.encode_ordinary(part))
        return ids


def corpus():
    with open(os.path.join(DATA, "the-verdict.txt"), encoding="utf-8") as f:
        verdict = f.read()
    cases = [
        ("empty", ""),
        ("hello", "Hello, world! How are you?"),
        ("contractions", "I'm sure it's fine; we'll see. They've, you'd, she's... DON'T 'S 're 'Ve it''s"),
        ("whitespace_runs", "a  b   c\t\td\n\n\ne    \n  f   \n\n   leading and trailing   "),
        ("crlf", "line one\r\nline two\r\n\r\n  \r\nend\r"),
        ("digits", "123 4567 3.14159 1,000,000 2026-11-23 0x1F 1e-9 007 12345678901234567890"),
        ("accents", "café naïve résumé Ångström Zürich façade e\u0301 n\u0303 ÉCOLE"),
        ("cjk", "日本語のテキスト、中文文本。한국어 텍스트 漢字かなカナ"),
        ("emoji_zwj", "👨\u200d👩\u200d👧\u200d👦 family 🏳️\u200d🌈 flag 👍🏽 ok ❤️ 🇫🇷"),
        ("rtl", "العربية لغة جميلة שלום עולם فارسی"),
        ("scripts", "Привет мир Ελληνικά हिन्दी ไทย ქართული Ⲁⲛⲟⲕ"),
        ("code", "def f(x):\n    return x**2  # square\n\tif (a && b) { c->d[i] = 0; }\n\n"
                 "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }\n"),
        ("unicode_space", "a\u00a0b\u2003c\u3000d\u1680e\u2028f\u2029g\u200bh\ufeffi\u0085j \u00a0 \u3000\u3000k"),
        ("separators", "a\x1cb\x1dc\x1ed\x1fe \x1c\x1d f"),
        ("controls", "\x01\x02\x7f\x08 bell\x07 esc\x1b[0m"),
        ("numbers_letters", "abc123def ½ ² Ⅻ ٣٤ 3rd 4th x²+y² Ⅷ"),
        ("symbols", "∑∫√∞ ≠ ≤ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 $$$ ... --- *** <<>> ''' \"\" ~~~"),
        ("endoftext", "Hello<|endoftext|>World<|endoftext|><|endoftext|> <|endoftext| <|endoftext|>x"),
        ("endoftext_only", EOT),
        ("long_letters", "a" * 3000),
        ("long_pairs", "ab" * 1500),
        ("long_spaces", " " * 3000 + "x"),
        ("long_digits", "1" * 3000),
        ("long_punct", "!" * 3000),
        ("long_word_mix", "supercalifragilisticexpialidocious" * 40),
        ("the_verdict", verdict),
    ]
    return cases


def tiktoken_check(cases):
    d = os.environ.get("TIKTOKEN_DIR")
    if not d:
        print("TIKTOKEN_DIR unset: not checked against npm tiktoken")
        return
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiktoken_ids.mjs")
    texts = json.dumps([t for _, t, _ in cases])
    out = subprocess.run(["node", script], input=texts.encode(), capture_output=True, check=True,
                         env=dict(os.environ, NODE_PATH=os.path.join(d, "node_modules")), cwd=d)
    theirs = json.loads(out.stdout)
    for (name, _, ids), t in zip(cases, theirs):
        if ids != t:
            raise RuntimeError("tokenizer case %s: differs from npm tiktoken" % name)
    print("all %d tokenizer cases equal npm tiktoken's gpt2 encoding" % len(cases))


def generate(outdir):
    enc = Encoder()
    cases = [(name, text, enc.encode(text)) for name, text in corpus()]
    tiktoken_check(cases)
    out = []
    for name, text, ids in cases:
        if name == "the_verdict":
            if len(ids) != 5145:
                raise RuntimeError("the-verdict.txt gives %d ids, the book says 5,145" % len(ids))
            text = {"file": "the-verdict.txt"}
        out.append({"name": name, "text": text, "ids": ids})
    write_json(outdir, "tokenizer.json", {"cases": out})
