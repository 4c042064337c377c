// Reads a JSON array of strings on stdin and prints the JSON array of their
// ids under the npm `tiktoken` package's "gpt2" encoding, "<|endoftext|>"
// allowed (tools/reference/tokenizer.py). Run from a directory where
// `npm install tiktoken` was done.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const require = createRequire(join(process.cwd(), "noop.js"));
const { get_encoding } = require("tiktoken");
const enc = get_encoding("gpt2");
const texts = JSON.parse(readFileSync(0, "utf8"));
const out = texts.map((t) => Array.from(enc.encode(t, "all")));
enc.free();
process.stdout.write(JSON.stringify(out) + "\n");
