// The npm `tiktoken` side of bench/compare_tiktoken.py: reads the file named
// by argv[2], encodes it with the "gpt2" encoding ("<|endoftext|>" allowed),
// writes the ids space-separated on one line, as `tapegrad tokenize` does,
// and {"tokens", "seconds"} (encoding only) on stderr.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const require = createRequire(join(process.cwd(), "noop.js"));
const { get_encoding } = require("tiktoken");
const text = readFileSync(process.argv[2], "utf8");
const enc = get_encoding("gpt2");
const t0 = process.hrtime.bigint();
const ids = enc.encode(text, "all");
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
enc.free();
process.stdout.write(ids.join(" ") + "\n");
process.stderr.write(JSON.stringify({ tokens: ids.length, seconds }) + "\n");
