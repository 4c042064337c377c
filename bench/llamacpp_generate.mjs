// The llama.cpp side of bench/compare_llamacpp.py:
//
//     node bench/llamacpp_generate.mjs MODEL.gguf N THREADS [--prompt STR]
//         [--flash-attention on|off] [--kv-type F16|BF16|Q8_0|F32] [--context N]
//
// run with the folder where node-llama-cpp@3.21.1 is installed as the working
// directory (compare_llamacpp.py installs it there). llama.cpp runs on the CPU
// only: getLlama({gpu: false, build: "never", skipDownload: true}) takes the
// package's prebuilt CPU binaries or fails (it never builds, downloads or
// looks for a GPU); the model is read into memory at load (gpuLayers 0, no
// mmap, so no page faults land in the timed part).
//
// Tokenizes the prompt ("Every effort moves you") with the GGUF's own
// tokenizer (no BOS: model.tokenize adds none, and the GGUFs tapegrad export
// writes for compare_llamacpp.py say add_bos_token false), then generates
// N ids greedily (temperature 0, end-of-generation ids kept) with the KV cache
// on one sequence: LlamaContextSequence.evaluate() decodes the prompt in one
// batch, samples, and decodes each new id. Timing as `tapegrad generate`
// does: from the prompt's decode to the N-th id, N / seconds ("tokens_per_s":
// the prompt's decode plus N - 1 one-id decodes); "decode_tokens_per_s" is
// (N - 1) / (time after the first id), the one-id steps alone. Loading the
// model and building the context are not timed ("load_s").
//
// Prints one JSON line on stdout: {"input_ids", "ids", "tokens_per_s",
// "decode_tokens_per_s", "prefill_s", "seconds", "load_s", "threads",
// "flash_attention", "kv_type", "context_size", "cpu_backend", "system_info",
// "llama_cpp_release", "node_llama_cpp"}; llama.cpp's warnings go to stderr.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";

const usage = "usage: node llamacpp_generate.mjs MODEL.gguf N THREADS [--prompt STR] " +
  "[--flash-attention on|off] [--kv-type F16|BF16|Q8_0|F32] [--context N]\n";
const argv = process.argv.slice(2);
const pos = [];
const opt = { prompt: "Every effort moves you", fa: "off", kv: "F16", context: 0 };
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (a === "--prompt") opt.prompt = argv[++i];
  else if (a === "--flash-attention") opt.fa = argv[++i];
  else if (a === "--kv-type") opt.kv = argv[++i];
  else if (a === "--context") opt.context = Number(argv[++i]);
  else if (a.startsWith("--")) { process.stderr.write(usage); process.exit(2); }
  else pos.push(a);
}
const [modelPath, nArg, threadsArg] = pos;
const n = Number(nArg), threads = Number(threadsArg);
if (pos.length !== 3 || !(n >= 1) || !(threads >= 1) || opt.prompt === undefined ||
    !["on", "off"].includes(opt.fa)) {
  process.stderr.write(usage);
  process.exit(2);
}

const require = createRequire(join(process.cwd(), "noop.js"));
const entry = require.resolve("node-llama-cpp");
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);
let pkgDir = dirname(entry);
while (!pkgDir.endsWith("node-llama-cpp")) pkgDir = dirname(pkgDir);
const version = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")).version;

const now = () => process.hrtime.bigint();
const secs = (a, b) => Number(b - a) / 1e9;

// llama.cpp's log: read for the CPU backend it loaded; warnings and errors shown
let cpuBackend = null;
const logger = (level, message) => {
  const m = /loaded CPU backend from (\S+)/.exec(message);
  if (m) cpuBackend = m[1].replace(/^.*libggml-cpu-?/, "").replace(/\.so$|\.dll$|\.dylib$/, "") || "cpu";
  if (level === LlamaLogLevel.warn || level === LlamaLogLevel.error || level === LlamaLogLevel.fatal)
    process.stderr.write("llama.cpp: " + message.trimEnd() + "\n");
};

let t0 = now();
const llama = await getLlama({
  gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
  maxThreads: threads, logLevel: LlamaLogLevel.log, logger,
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap: false });
const input = model.tokenize(opt.prompt);
const contextSize = opt.context || Math.max(256, 64 * Math.ceil((input.length + n + 1) / 64));
const context = await model.createContext({
  contextSize, sequences: 1, threads: { ideal: threads, min: threads },
  flashAttention: opt.fa === "on",
  experimentalKvCacheKeyType: opt.kv, experimentalKvCacheValueType: opt.kv,
});
const sequence = context.getSequence();
const load_s = secs(t0, now());

const ids = [];
let tFirst = null;
t0 = now();
for await (const id of sequence.evaluate(input, { temperature: 0, yieldEogToken: true })) {
  ids.push(id);
  if (tFirst === null) tFirst = now();
  if (ids.length >= n) break; // leaving the loop ends the generator: the N-th id is not decoded
}
const t1 = now();
const seconds = secs(t0, t1);
if (ids.length !== n) {
  process.stderr.write(`llamacpp_generate: ${ids.length} ids generated, ${n} asked for\n`);
  process.exit(1);
}
const out = {
  input_ids: input, ids,
  tokens_per_s: n / seconds,
  decode_tokens_per_s: n > 1 ? (n - 1) / secs(tFirst, t1) : null,
  prefill_s: secs(t0, tFirst), seconds, load_s,
  threads: context.idealThreads, flash_attention: opt.fa === "on", kv_type: opt.kv,
  context_size: context.contextSize, cpu_backend: cpuBackend, system_info: llama.systemInfo,
  llama_cpp_release: llama.llamaCppRelease, node_llama_cpp: version,
};
await context.dispose();
await model.dispose();
await llama.dispose();
process.stdout.write(JSON.stringify(out) + "\n");
