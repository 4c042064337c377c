// llama.cpp as a client of the GGUF files `tapegrad export --gguf` writes
// (tests/check_llamacpp.py):
//
//     node tests/llamacpp_run.mjs MODEL.gguf [--text STR] [--special-text STR]
//         [--ids ID,ID,...] [--new N] [--score ID,ID,...] [--also OTHER.gguf ...]
//         [--also-score ID,ID,...] [--chat MESSAGE] [--chat-new N]
//         [--chat-settings JSON] [--chat-variant JSON ...] [--threads N]
//         [--f32-attention]
//
// node-llama-cpp@3.21.1 is taken from the folder $TAPEGRAD_NODE_LLAMA_CPP
// (where tools/fetch_llamacpp.sh installs it: it holds node_modules/), so
// the script runs from any working directory. llama.cpp runs on the CPU
// only: getLlama({gpu: false, build: "never", skipDownload: true}) takes the
// package's prebuilt CPU binaries or fails (it never builds, downloads or
// looks for a GPU); the model is loaded with gpuLayers 0. --threads: llama.cpp's
// threads (1 by default: the tests' models are tiny, and ggml's threads spin
// at barriers, slow on a machine that runs other tests beside).
// --f32-attention: every context keeps its keys and values in float32 with
// flash attention off (experimentalKvCacheKeyType/ValueType "F32",
// flashAttention false). llama.cpp's default cache is F16: keys and values
// stored in half precision, the queries rounded to half for their products
// (ggml's F16 dot products), a 1e-4 difference in the logits of the tests'
// models that Q8_0's int8 rounding of the activations after it turns into
// differences as large as the quantization's own.
//
// Prints one JSON object on stdout:
//   "bos", "eos", "eot"  the GGUF's special ids as llama.cpp reads them
//                   (null when it has none);
//   "text_ids"      (--text) model.tokenize(STR): the GGUF's tokenizer, the
//                   text as plain text (special tokens' spellings are not
//                   their ids) and no BOS added;
//   "special_ids"   (--special-text) model.tokenize(STR, true): the same with
//                   the special tokens' spellings their ids;
//   "ids"           (--new N) N ids greedily from the prompt --ids (default
//                   the text's ids): temperature 0, no repeat penalty, the KV
//                   cache, end-of-generation ids kept (LlamaContextSequence's
//                   evaluate());
//   "also"          (--also OTHER.gguf, repeatable) [{"model", "ids"}]: the
//                   same N ids from each other GGUF file, loaded after
//                   MODEL.gguf is released (one process: node-llama-cpp and
//                   llama.cpp's binaries loaded once); with --also-score
//                   IDS, its "score" of IDS too (as "score" below);
//   "chat"          (--chat) the chat session's rendering of one user message:
//     "wrapper"       the chat wrapper node-llama-cpp resolves from the GGUF
//                     (resolveChatWrapper: a specialized wrapper when the
//                     GGUF's tokenizer.chat_template renders as one does, else
//                     the template itself, JinjaTemplateChatWrapper);
//     "prompt_ids"    the ids the session evaluates before the reply: the
//                     wrapper's generateContextState for the history
//                     [user MESSAGE, model (empty)] tokenized with the model's
//                     tokenizer (LlamaChat does exactly this), with no system
//                     prompt (LlamaChatSession would add node-llama-cpp's
//                     default one where the wrapper takes system messages:
//                     the session's history is cleared first);
//     "ids", "text"   (--chat-new N) the session's reply to MESSAGE:
//                     LlamaChatSession.prompt with temperature 0, no repeat
//                     penalty, at most N ids, stopping where the wrapper says
//                     a turn ends; "ids" the ids it generated (onToken),
//                     "text" its response text;
//     "context_ok"    (--chat-new) the session's context sequence started
//                     with "prompt_ids" (what it evaluated is that rendering).
//   "chat_variants" (--chat-variant JSON, repeatable) the same rendering
//                   ("settings", "wrapper", "prompt_ids") with each JSON as
//                   the settings;
//   "score"         (--score ID,ID,...) the given continuation of the prompt
//                   teacher-forced through llama.cpp (one batch): per step
//                   [top-1 id, gap], gap = log p(top-1) - log p(given id) of
//                   the softmax at temperature 1 over the two most likely ids,
//                   the gap between their logits (0 where the given id is the
//                   top-1, null where it is not among the two).
// --chat-settings JSON: resolveChatWrapper's customWrapperSettings for
// "chat", the wrapper's options by its type name ('{"qwen": {"thoughts":
// "discourage"}}': Qwen's empty <think></think> block after the generation
// prompt). llama.cpp's warnings and errors go to stderr; exit status 2 for
// bad arguments, 1 when node-llama-cpp cannot be loaded or the model fails.
import { createRequire } from "node:module";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const usage = "usage: node tests/llamacpp_run.mjs MODEL.gguf [--text STR] [--special-text STR] " +
  "[--ids ID,ID,...] [--new N] [--score ID,ID,...] [--also OTHER.gguf ...] [--also-score ID,ID,...] " +
  "[--chat MESSAGE] [--chat-new N] [--chat-settings JSON] [--chat-variant JSON ...] [--threads N] " +
  "[--f32-attention]\n";
const fail = (code, msg) => {
  process.stderr.write("llamacpp_run: " + msg + "\n");
  process.exit(code);
};
const argv = process.argv.slice(2);
const pos = [];
const opt = {
  text: null, special: null, ids: null, n: 0, score: null, also: [], alsoScore: null, chat: null, chatNew: 0,
  chatSettings: null, variants: [], threads: 1, f32Attention: false,
};
const count = (name, v) => {
  const n = Number(v);
  if (v === "" || !Number.isInteger(n) || n < 0) fail(2, `${name}: '${v}' is not a count\n${usage}`);
  return n;
};
const idList = (name, v) => v.split(/[\s,]+/).filter((x) => x !== "").map((x) => count(name, x));
const json = (name, v) => {
  try {
    return JSON.parse(v);
  } catch (e) {
    return fail(2, `${name}: not JSON (${e.message})`);
  }
};
for (let i = 0; i < argv.length; i++) {
  const a = argv[i], v = argv[i + 1];
  if (a === "--f32-attention") {
    opt.f32Attention = true;
    continue;
  }
  if (a.startsWith("--") && v === undefined) fail(2, `${a} needs a value\n${usage}`);
  if (a === "--text") opt.text = argv[++i];
  else if (a === "--special-text") opt.special = argv[++i];
  else if (a === "--also") opt.also.push(argv[++i]);
  else if (a === "--ids") opt.ids = idList(a, argv[++i]);
  else if (a === "--new") opt.n = count(a, argv[++i]);
  else if (a === "--score") opt.score = idList(a, argv[++i]);
  else if (a === "--also-score") opt.alsoScore = idList(a, argv[++i]);
  else if (a === "--chat") opt.chat = argv[++i];
  else if (a === "--chat-new") opt.chatNew = count(a, argv[++i]);
  else if (a === "--chat-settings") opt.chatSettings = json(a, argv[++i]);
  else if (a === "--chat-variant") opt.variants.push(json(a, argv[++i]));
  else if (a === "--threads") opt.threads = count(a, argv[++i]);
  else if (a.startsWith("--")) fail(2, `unknown option ${a}\n${usage}`);
  else pos.push(a);
}
if (pos.length !== 1 || opt.threads < 1) fail(2, usage.trimEnd());
if ((opt.n > 0 || opt.score) && opt.ids === null && opt.text === null)
  fail(2, "--new and --score need --ids or --text (the prompt)");
if (opt.also.length && !(opt.n > 0)) fail(2, "--also needs --new");
if (opt.alsoScore && !opt.also.length) fail(2, "--also-score needs --also");
if ((opt.chatNew > 0 || opt.variants.length) && opt.chat === null) fail(2, "--chat-new and --chat-variant need --chat");
const modelPath = pos[0];
for (const f of [modelPath, ...opt.also]) if (!existsSync(f)) fail(2, `${f}: no such file`);

const home = process.env.TAPEGRAD_NODE_LLAMA_CPP;
if (!home) fail(1, "TAPEGRAD_NODE_LLAMA_CPP is not set (tools/fetch_llamacpp.sh installs node-llama-cpp)");
let lib;
try {
  const entry = createRequire(join(home, "noop.js")).resolve("node-llama-cpp");
  lib = await import(pathToFileURL(entry).href);
} catch (e) {
  fail(1, `cannot load node-llama-cpp from ${home}: ${e.message.split("\n")[0]}`);
}
const { getLlama, LlamaLogLevel, LlamaChatSession, resolveChatWrapper } = lib;

const logger = (level, message) => {
  if (level === LlamaLogLevel.warn || level === LlamaLogLevel.error || level === LlamaLogLevel.fatal)
    process.stderr.write("llama.cpp: " + message.trimEnd() + "\n");
};
const llama = await getLlama({
  gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
  maxThreads: opt.threads, logLevel: LlamaLogLevel.warn, logger,
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const special = (t) => (t === null || t === undefined ? null : Number(t));
const out = { bos: special(model.tokens.bos), eos: special(model.tokens.eos), eot: special(model.tokens.eot) };

const prompt = opt.ids ?? (opt.text !== null ? Array.from(model.tokenize(opt.text)) : null);
if (opt.text !== null) out.text_ids = Array.from(model.tokenize(opt.text)).map(Number);
if (opt.special !== null) out.special_ids = Array.from(model.tokenize(opt.special, true)).map(Number);

// What LlamaChat evaluates before the reply to one user message: the
// wrapper's context state for [user, empty model response], tokenized
const render = (settings) => {
  const wrapper = resolveChatWrapper(model, settings ? { customWrapperSettings: settings } : {});
  const history = [{ type: "user", text: opt.chat }, { type: "model", response: [] }];
  const { contextText } = wrapper.generateContextState({ chatHistory: history });
  return { wrapper, ids: Array.from(contextText.tokenize(model.tokenizer)).map(Number) };
};
let chatWrapper = null, chatPrompt = null;
if (opt.chat !== null) {
  ({ wrapper: chatWrapper, ids: chatPrompt } = render(opt.chatSettings));
  out.chat = { wrapper: chatWrapper.wrapperName, prompt_ids: chatPrompt };
  out.chat_variants = opt.variants.map((settings) => {
    const r = render(settings);
    return { settings, wrapper: r.wrapper.wrapperName, prompt_ids: r.ids };
  });
}

// opt.n ids greedily from the prompt, on a sequence of context
const greedy = async (context) => {
  const sequence = context.getSequence();
  const ids = [];
  for await (const id of sequence.evaluate(prompt, { temperature: 0, yieldEogToken: true })) {
    ids.push(Number(id));
    if (ids.length >= opt.n) break; // leaving the loop ends the generator
  }
  if (ids.length !== opt.n) fail(1, `${ids.length} ids generated, ${opt.n} asked for`);
  sequence.dispose();
  return ids;
};
const contextSize = (n) => Math.max(256, 64 * Math.ceil((n + 1) / 64));
const contextOptions = (n, sequences) => ({
  contextSize: contextSize(n), sequences, threads: { ideal: opt.threads, min: 1 },
  ...(opt.f32Attention
    ? { flashAttention: false, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32" } : {}),
});

// the continuation ids teacher-forced after the prompt (one batch): the
// prompt and ids but the last, the distribution of the next id asked after
// the prompt and each given id
const scoreOf = async (context, ids) => {
  const sequence = context.getSequence();
  const all = prompt.concat(ids.slice(0, -1));
  const next = { probabilities: true, options: { temperature: 1, topK: 2, topP: 1, minP: 0 } };
  const input = all.map((t, i) => (i >= prompt.length - 1 ? [t, { generateNext: next }] : t));
  const res = await sequence.controlledEvaluate(input);
  const score = ids.map((id, k) => {
    const p = res[prompt.length - 1 + k]?.next?.probabilities;
    if (!p) fail(1, `--score: no probabilities at step ${k}`);
    const [top, ptop] = p.entries().next().value;
    const pid = p.get(id) ?? 0;
    return [Number(top), pid > 0 ? Math.log(ptop) - Math.log(pid) : null];
  });
  sequence.dispose();
  return score;
};

const longest = Math.max(opt.n > 0 ? prompt.length + opt.n : 0, opt.chatNew > 0 ? chatPrompt.length + opt.chatNew : 0,
  opt.score ? prompt.length + opt.score.length : 0);
if (longest > 0) {
  const context = await model.createContext(contextOptions(longest, 2));
  if (opt.n > 0) out.ids = await greedy(context);
  if (opt.score && opt.score.length > 0) out.score = await scoreOf(context, opt.score);
  if (opt.chatNew > 0) {
    const sequence = context.getSequence();
    const session = new LlamaChatSession({ contextSequence: sequence, chatWrapper });
    session.setChatHistory([]); // no system prompt: the history is the user's message alone
    const ids = [];
    const text = await session.prompt(opt.chat, {
      maxTokens: opt.chatNew, temperature: 0, repeatPenalty: false,
      onToken: (tokens) => { for (const t of tokens) ids.push(Number(t)); },
    });
    const ctx = Array.from(sequence.contextTokens).map(Number);
    out.chat.ids = ids;
    out.chat.text = text;
    out.chat.context_ok = chatPrompt.every((t, i) => ctx[i] === t);
    session.dispose();
  }
  await context.dispose();
}
await model.dispose();
if (opt.also.length) {
  out.also = [];
  for (const path of opt.also) {
    const other = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
    const scored = opt.alsoScore && opt.alsoScore.length > 0;
    const context = await other.createContext(
      contextOptions(prompt.length + Math.max(opt.n, scored ? opt.alsoScore.length : 0), scored ? 2 : 1));
    const r = { model: path, ids: await greedy(context) };
    if (scored) r.score = await scoreOf(context, opt.alsoScore);
    out.also.push(r);
    await context.dispose();
    await other.dispose();
  }
}
await llama.dispose();
process.stdout.write(JSON.stringify(out) + "\n");
