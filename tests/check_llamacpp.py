#!/usr/bin/env python3
"""llama.cpp as the client of `tapegrad export --gguf`: a small random model
of one family written as a GGUF file, loaded by llama.cpp (the npm package
node-llama-cpp@3.21.1, its prebuilt CPU binaries, driven by
tests/llamacpp_run.mjs), and what llama.cpp does with it compared with what
tapegrad does with the same model.

    check_llamacpp.py TAPEGRAD FAMILY

FAMILY gpt2, qwen3, llama3 or gemma3: the family's preset with tiny sizes
and a fixed seed (FAMILIES below), exported as F32 and as Q8_0 with the
family's tokenizer (--tokenizer); then
  - a text's tokenization by the GGUF's tokenizer equals `tapegrad tokenize
    --allow-special` of it (TEXT below: spaces, tabs, digits, contractions,
    accents, an emoji, then the family's special tokens, which are their ids
    in both: llama.cpp's tokenize with special tokens reads the GGUF's
    token types);
  - llama.cpp's 30 greedy new ids from the prompt ids `tapegrad generate`
    uses equal `tapegrad generate --json --max-new-tokens 30 --temperature 0`
    of the same MODEL options (with --chat, the prompt CHAT, where the
    family has a chat format; PROMPT otherwise). Random tiny models have
    flat logits: where the ids part, tapegrad's ids are scored
    teacher-forced by llama.cpp, and the check passes, saying so, when each
    of them is llama.cpp's top-1 or within TIE_TOL of it (a near tie of the
    two largest logits decided by float rounding; the configurations below
    match exactly). llama.cpp keeps its keys and values in float32 here,
    flash attention off (llamacpp_run.mjs --f32-attention): its default F16
    cache rounds keys, values and queries to half precision, up to 4e-4 in
    these models' float32 logits, which the int8 rounding of the Q8_0
    comparison's activations (below) turns into 1e-2;
  - the same 30 greedy ids from the Q8_0 file equal `tapegrad generate
    --weights q8`'s (the same options and prompt: tapegrad quantizes the
    float32 weights to the blocks the exporter wrote, and the activations of
    each product per 32 values, as llama.cpp does), with the same
    teacher-forced rule and Q8_TIE_TOL (below);
  - (Qwen3, Llama 3, Gemma 3) the ids llama.cpp's chat session evaluates
    before its reply to one user message (the chat wrapper node-llama-cpp
    resolves from the GGUF's tokenizer.chat_template, no system prompt)
    equal tapegrad's rendering of the message with the generation prompt
    (`tapegrad generate --chat`'s prompt ids, tg_tokenizer_encode_chat as
    `tapegrad tokenize --chat --generation-prompt` calls it), but for the
    differences each family's lines in check_family name.

FAMILY qwen3-finetune: the end-to-end run. `tapegrad finetune instruct
--format chat` with LoRA memorizes one reply (a tiny Qwen3, 20 copies of one
conversation), `tapegrad export --load CK --lora-rank R --lora-alpha A
--merge --gguf` writes the merged model, and llama.cpp's chat session
answers the trained message with the trained reply: the ids and the text of
`tapegrad generate --chat --think` of the same model (the training
conversations have no think block, and node-llama-cpp's Qwen wrapper leaves
the thinking open, as Qwen3's chat template does by default).

Needs TAPEGRAD_NODE_LLAMA_CPP, the folder where tools/fetch_llamacpp.sh
installed node-llama-cpp, and node (Node.js 20 or later); Llama 3's and
Gemma 3's runs need TAPEGRAD_LLAMA3_TOKENIZER and TAPEGRAD_GEMMA3_TOKENIZER
(tools/fetch_tokenizers.sh). Without them the check says it was skipped
(exit status 77). Exit status 0: every check passed; 1: one failed (each
failure on a line starting "FAIL"); 2: bad arguments. No PyTorch needed.
"""
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RUNNER = os.path.join(HERE, "llamacpp_run.mjs")
TIMEOUT = 300
NEW = 30  # greedy new ids compared
PROMPT = "Every effort moves you"
TEXT = ("Every effort moves you. It's 2024: naïve café, 3.14159 and 1,000,000 —  "
        "spaces   and\ttabs\n\nnew lines 😀 done! ")
CHAT = "What is 2+2? Answer in one word."
# the largest logit gap (llama.cpp's top-1 logit minus that of tapegrad's id)
# accepted where the greedy ids part: a tie of the two largest logits within
# float32 rounding of two different summation orders (tapegrad's PyTorch
# order and ggml's) and of ggml's GELU, which reads a table of half-precision
# values (GGML_GELU_FP16): teacher-forced over the 30 ids, the top-2 gaps of
# the two programs differ by at most 1.2e-6 (Qwen3, Llama 3), 8e-5 (GPT-2)
# and 1.1e-4 (Gemma 3). An id not among llama.cpp's two most likely is never one.
TIE_TOL = 1e-4
# the same for the Q8_0 file and tapegrad's --weights q8. Both hold the same
# blocks, round each activation row to int8 per 32 values with the same
# half-precision scale and sum the same integer products, so where the
# float32 activations agree the logits do: the top-2 gaps differ by at most
# 8e-8 (Qwen3, Llama 3). An activation difference moves a value across an
# int8 rounding boundary now and then, and such a step is the quantization's
# own size: GPT-2's and Gemma 3's half-precision GELU (above) make their
# top-2 gaps differ by up to 1.5e-2, as much as quantizing does at all,
# and llama.cpp's default F16 cache made every family's differ by up to
# 1e-2 (hence --f32-attention). Their 30 ids still agree, as no two
# logits lie that close; a configuration where they do parts from
# llama.cpp's ids through its GELU, not through a bug. Larger models get
# there on float rounding alone: at Qwen3-0.6B's sizes (28 layers,
# head_dim 128) one ulp more in every other value of each layer's q_norm
# moves tapegrad's own q8 logits by up to 3.5e-2 (its float32 logits by
# 3e-6), and llama.cpp's Q8_0 logits differ from tapegrad's by as much.
Q8_TIE_TOL = 1e-6

# family: MODEL options (tiny sizes over the preset), the tokenizer (a path
# in the source tree, or the environment variable naming it), the
# vocabulary size (the preset's) and the chat format
FAMILIES = {
    "gpt2": {
        "args": ["--config", "gpt2-small", "--emb", "64", "--heads", "4", "--layers", "2", "--context", "256",
                 "--seed", "1"],
        "tokenizer": os.path.join(ROOT, "data", "gpt2"), "vocab": 50257, "chat": None,
        "special": "Hello<|endoftext|>world",
    },
    "qwen3": {
        "args": ["--config", "qwen3-0.6b", "--emb", "64", "--heads", "4", "--kv-groups", "2", "--head-dim", "16",
                 "--layers", "2", "--hidden", "128", "--context", "256", "--seed", "1"],
        "tokenizer": os.path.join(ROOT, "data", "qwen3", "tokenizer.json"), "vocab": 151936, "chat": "qwen",
        "special": "<|im_start|>user\nHi<|im_end|>\n<|endoftext|>",
    },
    "llama3": {
        "args": ["--config", "llama3.2-1b", "--emb", "64", "--heads", "4", "--kv-groups", "2", "--layers", "2",
                 "--hidden", "128", "--context", "256", "--seed", "1"],
        "tokenizer_env": "TAPEGRAD_LLAMA3_TOKENIZER", "vocab": 128256, "chat": "llama3",
        "special": "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    },
    # six layers: five sliding over 16 positions and a full one (the prompt
    # and the new ids are longer than the window)
    "gemma3": {
        "args": ["--config", "gemma3-270m", "--emb", "64", "--heads", "2", "--kv-groups", "1", "--head-dim", "32",
                 "--layers", "6", "--hidden", "128", "--context", "256", "--sliding-window", "16", "--seed", "1"],
        "tokenizer_env": "TAPEGRAD_GEMMA3_TOKENIZER", "vocab": 262144, "chat": "gemma3",
        "special": "<bos><start_of_turn>user\nHi<end_of_turn>\n",
    },
}

# the end-to-end run: the conversation memorized, its sizes and training
FINETUNE = {
    "args": ["--config", "qwen3-0.6b", "--emb", "64", "--heads", "4", "--kv-groups", "2", "--head-dim", "16",
             "--layers", "2", "--hidden", "128", "--context", "128", "--seed", "1"],
    "tokenizer": os.path.join(ROOT, "data", "qwen3", "tokenizer.json"),
    "question": "What is the capital of France?", "reply": "The capital of France is Paris.", "copies": 20,
    "lora": ["--lora-rank", "8", "--lora-alpha", "16"],
    "train": ["--epochs", "5", "--batch", "4", "--lr", "0.01", "--eval-freq", "100", "--eval-iter", "1",
              "--max-new-tokens", "12", "--allowed-max-length", "64", "--threads", "1"],
}


class Failed(Exception):
    pass


class Skip(Exception):
    pass


failures = []
timings = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, flush=True)


def ok(msg):
    print("ok: " + msg, flush=True)


def shown(cmd):
    return " ".join(c if re.fullmatch(r"[\w@%+=:,./-]+", c) else "'%s'" % c.replace("'", "'\\''") for c in cmd)


# One thread for every program: the models are tiny, and spinning threads
# (OpenMP's, ggml's) slow down on a machine running other tests beside
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(what, cmd, env=None):
    """Runs cmd; its last stdout line as JSON (None when it prints none).
    A failure raises Failed with the command and its stderr."""
    t0, c0 = time.monotonic(), cpu_children()
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT, env=env or ENV)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Failed("%s: %s\n  %s" % (what, e, shown(cmd)))
    timings.append((what, time.monotonic() - t0, cpu_children() - c0))
    err = p.stderr.decode("utf-8", "replace").strip()
    if p.returncode != 0:
        raise Failed("%s: exit status %d\n  %s\n%s" % (what, p.returncode, shown(cmd), err[-3000:]))
    lines = p.stdout.decode("utf-8", "replace").strip().split("\n")
    try:
        return json.loads(lines[-1])
    except ValueError:
        return None


def node_env():
    """The environment for llamacpp_run.mjs; raises Skip without
    TAPEGRAD_NODE_LLAMA_CPP or a node of version 20 or later."""
    home = os.environ.get("TAPEGRAD_NODE_LLAMA_CPP")
    if not home:
        raise Skip("TAPEGRAD_NODE_LLAMA_CPP is not set (tools/fetch_llamacpp.sh installs node-llama-cpp)")
    node = shutil.which("node")
    if node is None:
        raise Skip("node is not on PATH (Node.js 20 or later runs node-llama-cpp)")
    v = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    m = re.match(r"v(\d+)\.", v)
    if not m or int(m.group(1)) < 20:
        raise Skip("node-llama-cpp needs Node.js 20 or later; this node is %s" % (v or "of unknown version"))
    if not os.path.isdir(os.path.join(home, "node_modules", "node-llama-cpp")):
        raise Failed("TAPEGRAD_NODE_LLAMA_CPP=%s holds no node_modules/node-llama-cpp "
                     "(tools/fetch_llamacpp.sh CACHE_DIR installs it in CACHE_DIR/llamacpp)" % home)
    return node, dict(ENV, TAPEGRAD_NODE_LLAMA_CPP=os.path.abspath(home))


def llamacpp(node, env, what, gguf, *args):
    return run(what, [node, RUNNER, gguf] + [str(a) for a in args], env=env)


def ids_arg(ids):
    return ",".join(str(i) for i in ids)


def first_difference(x, y):
    for i, (p, q) in enumerate(zip(x, y)):
        if p != q:
            return i
    return None if len(x) == len(y) else min(len(x), len(y))


def compare_ids(label, tg, lc, score, ends, tol, why):
    """tapegrad's greedy ids against llama.cpp's; score: llama.cpp's
    teacher-forced [top-1, gap] of each of tapegrad's ids; ends: the ids
    that end a turn (tapegrad generate --chat stops before one); tol: the
    largest gap of a near tie, why: what decides one."""
    k = first_difference(tg, lc)
    if k is None:
        ok("%s: llama.cpp's %d greedy ids equal tapegrad generate's" % (label, len(tg)))
        return
    if k == len(tg) and lc[k] in ends:
        ok("%s: llama.cpp's greedy ids equal tapegrad generate's %d, then the end of the turn (%d), where "
           "tapegrad stops" % (label, len(tg), lc[k]))
        return
    ties = [(i, s[1]) for i, s in enumerate(score) if s[1] != 0]
    bad = [(i, g) for i, g in ties if g is None or g > tol]
    if ties and not bad and k < len(tg):
        ok("%s: the greedy ids part at new id %d (tapegrad %d, llama.cpp %d), where the two largest logits lie "
           "%.3g apart; teacher-forced, each of tapegrad's %d ids is llama.cpp's top-1 or within %g of it "
           "(near ties at %s: %s, not a difference of the models)"
           % (label, k, tg[k], lc[k], ties[0][1], len(tg), tol,
              ", ".join("id %d (%.3g)" % t for t in ties), why))
        return
    if not bad:
        fail("%s: the greedy ids part at new id %d:\n  tapegrad  %s\n  llama.cpp %s" % (label, k, tg, lc))
        return
    i, g = bad[0]
    where = ("not among llama.cpp's two most likely (its top-1: %d)" % score[i][0] if g is None
             else "%.3g below llama.cpp's top-1 %d (tolerance %g)" % (g, score[i][0], tol))
    fail("%s: the greedy ids part at new id %d:\n  tapegrad  %s\n  llama.cpp %s\n"
         "  teacher-forced, tapegrad's id %d (new id %d) is %s" % (label, k, tg, lc, tg[i], i, where))


def tokenizer_of(spec):
    if "tokenizer_env" in spec:
        path = os.environ.get(spec["tokenizer_env"])
        if not path:
            raise Skip("%s is not set (tools/fetch_tokenizers.sh fetches the tokenizer)" % spec["tokenizer_env"])
        return path
    return spec["tokenizer"]


def tokenize(tg, tok, *args):
    return run("tapegrad tokenize", [tg, "tokenize", "--tokenizer", tok, "--json"] + list(args))["ids"]


def check_family(tg, family, tmp):
    spec = FAMILIES[family]
    tok = tokenizer_of(spec)
    node, env = node_env()
    model = spec["args"] + ["--tokenizer", tok]
    files = {}
    for kind in ("f32", "q8_0"):
        files[kind] = os.path.join(tmp, "%s-%s.gguf" % (family, kind))
        run("tapegrad export --type " + kind, [tg, "export"] + model + ["--gguf", files[kind], "--type", kind])
    # the greedy ids: from the chat prompt where the family has a chat
    # format (its input_ids are tapegrad tokenize --chat
    # --generation-prompt's), else from PROMPT
    chat = spec["chat"]
    prompt = ["--chat", "--prompt", CHAT] if chat else ["--prompt", PROMPT]
    greedy = ["--max-new-tokens", str(NEW), "--temperature", "0", "--json"]
    gen = run("tapegrad generate", [tg, "generate"] + model + prompt + greedy)
    gen_q8 = run("tapegrad generate --weights q8", [tg, "generate"] + model + prompt + greedy + ["--weights", "q8"])
    text = TEXT + spec["special"]
    text_ids = tokenize(tg, tok, "--allow-special", "--text", text)

    # chat: what llama.cpp's session should evaluate before its reply
    chat_args, want = [], {}
    if chat:
        plain = ("tapegrad generate --chat's prompt (tokenize --chat --generation-prompt)", gen["input_ids"])
        chat_args = ["--chat", CHAT]
        if chat == "qwen":
            # node-llama-cpp's Qwen wrapper leaves the thinking open (Qwen3's
            # template without enable_thinking: tapegrad's --think); with
            # thoughts "discourage" it writes the empty <think></think>
            # block tapegrad writes by default
            want[None] = ("tapegrad tokenize --chat --generation-prompt --think",
                          tokenize(tg, tok, "--chat", "--generation-prompt", "--think", "--text", CHAT))
            settings = {"qwen": {"thoughts": "discourage"}}
            chat_args += ["--chat-variant", json.dumps(settings)]
            want[json.dumps(settings, sort_keys=True)] = plain
        elif chat == "llama3":
            # Meta's format (and the exported template) begins with
            # <|begin_of_text|>; tapegrad's --chat follows the book, which
            # adds none (tg_chat_options.bos)
            want[None] = ("<|begin_of_text|>, then " + plain[0], [128000] + plain[1])
        else:
            want[None] = plain

    lc = llamacpp(node, env, "llama.cpp F32 and Q8_0", files["f32"], "--special-text", text,
                  "--ids", ids_arg(gen["input_ids"]), "--new", NEW, "--score", ids_arg(gen["ids"]),
                  "--also", files["q8_0"], "--also-score", ids_arg(gen_q8["ids"]), "--f32-attention", *chat_args)

    if lc["special_ids"] == text_ids:
        ok("%s: the GGUF's tokenizer gives tapegrad tokenize --allow-special's %d ids for %r"
           % (family, len(text_ids), text))
    else:
        k = first_difference(text_ids, lc["special_ids"])
        fail("%s: tokenization of %r differs from id %d:\n  tapegrad  %s\n  llama.cpp %s"
             % (family, text, k, text_ids, lc["special_ids"]))
    for key, r in [(None, lc.get("chat"))] + [(json.dumps(v["settings"], sort_keys=True), v)
                                              for v in lc.get("chat_variants", [])]:
        if r is None:
            continue
        what, ids = want[key]
        how = "llama.cpp's chat session (%s wrapper%s)" % (r["wrapper"], "" if key is None else ", " + key)
        if r["prompt_ids"] == ids:
            ok("%s: %s renders %r as the %d ids of %s" % (family, how, CHAT, len(ids), what))
        else:
            fail("%s: %s renders %r otherwise than %s:\n  tapegrad  %s\n  llama.cpp %s"
                 % (family, how, CHAT, what, ids, r["prompt_ids"]))
    ends = {lc["eos"], lc["eot"]} - {None}
    compare_ids("%s F32" % family, gen["ids"], lc["ids"], lc["score"], ends, TIE_TOL, "float rounding")
    q8 = lc["also"][0]
    compare_ids("%s Q8_0 (tapegrad generate --weights q8)" % family, gen_q8["ids"], q8["ids"], q8["score"], ends,
                Q8_TIE_TOL, "an activation's int8 rounding")


def check_finetune(tg, tmp):
    f = FINETUNE
    node, env = node_env()
    data = os.path.join(tmp, "conversation.json")
    with open(data, "w", encoding="utf-8") as fh:
        json.dump([{"instruction": f["question"], "input": "", "output": f["reply"]}] * f["copies"], fh, indent=1)
    model = f["args"] + ["--tokenizer", f["tokenizer"]]
    ck = os.path.join(tmp, "lora.safetensors")
    res = run("tapegrad finetune instruct", [tg, "finetune", "instruct", "--data", data, "--format", "chat"] + model
              + f["lora"] + f["train"] + ["--save", ck, "--json"])
    if any(r != f["reply"] for r in res["responses"]):
        raise Failed("the fine-tune did not memorize the reply %r: its test responses are %s"
                     % (f["reply"], res["responses"]))
    ok("tapegrad finetune instruct --format chat (LoRA) answers %r with %r" % (f["question"], f["reply"]))
    gguf = os.path.join(tmp, "finetuned.gguf")
    run("tapegrad export --merge", [tg, "export"] + model + ["--load", ck] + f["lora"]
        + ["--merge", "--gguf", gguf, "--type", "f32"])
    gen = run("tapegrad generate --chat", [tg, "generate"] + model + ["--load", ck] + f["lora"]
              + ["--chat", "--think", "--prompt", f["question"], "--max-new-tokens", "20", "--temperature", "0",
                 "--json"])
    if gen["text"] != f["reply"]:
        fail("tapegrad generate --chat of the fine-tuned model: %r, not the trained reply %r"
             % (gen["text"], f["reply"]))
    lc = llamacpp(node, env, "llama.cpp chat session", gguf, "--chat", f["question"], "--chat-new", 20)["chat"]
    if lc["prompt_ids"] != gen["input_ids"] or not lc["context_ok"]:
        fail("llama.cpp's chat session (%s wrapper) renders %r otherwise than tapegrad generate --chat --think:\n"
             "  tapegrad  %s\n  llama.cpp %s%s" % (lc["wrapper"], f["question"], gen["input_ids"], lc["prompt_ids"],
                                                 "" if lc["context_ok"] else " (and its context holds other ids)"))
    elif lc["ids"] != gen["ids"] or lc["text"] != gen["text"]:
        fail("llama.cpp's chat session answers %r with %r %s, tapegrad generate --chat with %r %s"
             % (f["question"], lc["text"], lc["ids"], gen["text"], gen["ids"]))
    else:
        ok("llama.cpp's chat session (%s wrapper) on the merged GGUF answers %r with %r: the %d ids of tapegrad "
           "generate --chat --think, from the same %d prompt ids"
           % (lc["wrapper"], f["question"], lc["text"], len(lc["ids"]), len(lc["prompt_ids"])))


def main():
    argv = sys.argv[1:]
    names = sorted(FAMILIES) + ["qwen3-finetune"]
    if len(argv) != 2 or argv[1] not in names:
        print("usage: check_llamacpp.py TAPEGRAD %s" % "|".join(names), file=sys.stderr)
        return 2
    tg, family = argv
    t0 = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="check_llamacpp_") as tmp:
            if family == "qwen3-finetune":
                check_finetune(tg, tmp)
            else:
                check_family(tg, family, tmp)
    except Skip as e:
        print("skipped: %s" % e)
        return 77
    except Failed as e:
        fail(str(e))
    if timings:
        print("seconds (wall/CPU): " + ", ".join("%s %.1f/%.1f" % t for t in timings)
              + "; total %.1f/%.1f" % (time.monotonic() - t0, cpu_children()))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
