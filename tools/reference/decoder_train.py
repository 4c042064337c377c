"""tests/ref/decoder_train.json: the book's chapter-5 pretraining and chapter-7
instruction fine-tuning (with appendix E's LoRA) run on the book's bonus
decoders, Qwen3 and Llama 3.2 (rasbt/LLMs-from-scratch, llms_from_scratch
qwen3.py / llama3.py, imported by tools/reference/decoder.py's book_code(), in
float32), with their own tokenizers.

Needs, else it prints why and writes nothing:
  LLMS_FROM_SCRATCH_DIR       the folder holding llms_from_scratch/ (see decoder.py)
  TAPEGRAD_LLAMA3_TOKENIZER   Llama 3's tokenizer.json (tools/fetch_tokenizers.sh)
  data/qwen3/tokenizer.json   Qwen3's (in the source tree)
Both tokenizer files are checked against hf_tokenizers.py's sha256 sums.

Tokenizer: hf_tokenizers.py's independent byte-level BPE encoder (ByteBPE,
checked there against transformers.js), in the mode `tapegrad ... --tokenizer
FILE` encodes text (tg_tokenizer_encode): special added tokens are plain text,
the non-special ones (Qwen3's <think>, ...) still match, Qwen3's NFC, no BOS.
Decoding is the C side's tg_tokenizer_decode_text: each id's bytes (the
byte-level alphabet undone; an added token's content as is, special or not),
joined, then UTF-8 with errors="replace". An id outside the tokenizer is an
error here as it is there.

    {"torch_version", "book_commit", "text": "data/the-verdict.txt",
     "pretrain": [run], "instruct": [run], "notes": [str]}

"pretrain": runs in tests/ref/pretrain.json's run schema, made as
tools/reference/pretrain.py makes its runs (the same functions: its
create_dataloader_v1 / GPTDatasetV1, calc_loss_batch, evaluate_model and
generate_text_simple, i.e. softmax then argmax), with these differences:
the model is build(b, family, cfg, seed) of decoder.py (manual_seed(seed);
Qwen3Model / Llama3Model(cfg)); the sample's context size is
cfg["context_length"] (the book's generate_and_print_sample reads
model.pos_emb, which these models lack); the tokenizer is the family's.
    {"name", "family": "qwen3"|"llama3",
     "config": the book's config dict without "dtype" (float32):
        qwen3: vocab_size, context_length, emb_dim, n_heads, n_layers,
               hidden_dim, head_dim, qk_norm, n_kv_groups, rope_base
        llama3: vocab_size, context_length, emb_dim, n_heads, n_layers,
               hidden_dim, n_kv_groups, rope_base, rope_freq {factor,
               low_freq_factor, high_freq_factor, original_context_length}
        (no drop_rate, no qkv_bias: the models have neither)
     "tokenizer": {"name", "path" (relative to the source tree, or null),
                   "env" (the variable naming it, or null), "sha256",
                   "vocab_size" (the tokenizer's: largest id + 1), "eot"},
     "seed", "batch", "epochs", "lr", "weight_decay", "eval_freq",
     "eval_iter", "train_ratio", "stride", "start", "sample_tokens",
     "start_ids", "train_batches", "val_batches", "train_tokens",
     "val_tokens", "rows", "samples", "lines", "rand_after"}
  as in pretrain.json (rows' epoch 1-based, "lines" what print() prints).

"instruct": runs in tests/ref/finetune.json's run schema (kind "instruct"),
made as tools/reference/finetune.py's instruct_run makes them (its
InstructionDataset / format_input, custom_collate_fn, LoRALayer,
LinearWithLoRA, replace_linear_with_lora; chapter 7's train_model_simple,
generate_and_print_sample with argmax over the logits and 50 new ids, and
generate() of gpt_book.py for the test responses), on Qwen3Model, with:
  pad_token_id = the tokenizer's <|endoftext|> (Qwen3: 151643);
  "format": "alpaca": the book's format_input(entry) + "\\n\\n### Response:\\n"
    + output, encoded as text; the sample's prompt format_input(val[0]); the
    responses' prompt format_input(entry), eos_id = pad id;
  "format": "chat": what `tapegrad finetune instruct --format chat` builds
    (src/data/finetune.c, src/data/chat.c): user = instruction, plus
    "\\n\\n" + input when the input is not empty (tg_format_chat_user); the
    training ids are, per message (user, then assistant = output),
    [<|im_start|>] + encode(role + "\\n" + content) + [<|im_end|>] +
    encode("\\n"), so an entry ends "<|im_end|>", "\\n" and is then padded
    with <|endoftext|> (the first pad target kept, the rest -100 as
    custom_collate_fn does); the sample's and responses' prompt is the user
    message followed by [<|im_start|>] + encode("assistant\\n") (a
    generation prompt, thinking left open); responses stop at eos_id =
    <|im_end|> (151645); the printed prompt is the user message.
  A response is the decoded ids cut after the decoded prompt's length,
  "### Response:" removed, stripped (as finetune_task.c's response_text).
  Generation crops to the last context_length ids as the book's loop does
  (the alpaca run's sample, 38 prompt ids + 50, passes its context of 64);
  allowed_max_length 64 cuts the alpaca run's longest entry (71 ids).
  Extra keys: "family", "format", "tokenizer" (as above), "pad_id",
  "end_id", "longest_ids" (the longest training or validation entry),
  "lora_modules" (the wrapped Linears in replace_linear_with_lora's
  order: the order LoRALayer draws its A), "data" relative to the folder of
  decoder_train.json (finetune/instruction-40.json, finetune.py's fixture).

Random draws from the default generator, in order: pretrain as pretrain.py
(loaders after manual_seed(seed), then manual_seed(seed) and the model, whose
nn.Linear / nn.Embedding initialisations draw in module order); instruct as
finetune.py (manual_seed(s); the loaders; manual_seed(s); the model; LoRA's A
matrices; AdamW; manual_seed(s); training). No dropout anywhere.

"notes": anything the C side may need to know (argmax ties, ...), [] if none.
"""
import contextlib
import copy
import hashlib
import importlib.util
import io
import json
import os
import time
from functools import partial

import torch
from torch.utils.data import DataLoader, Dataset

from . import decoder as dec
from . import finetune as ft
from . import gpt_book
from . import pretrain as ch5
from .common import write_json
from .hf_tokenizers import TOKENIZER_SHA256, ByteBPE, bytes_to_unicode, format_qwen_chat

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT_NAME = "decoder_train.json"
QWEN3_TOKENIZER = "data/qwen3/tokenizer.json"
LLAMA3_ENV = "TAPEGRAD_LLAMA3_TOKENIZER"
TEXT = "data/the-verdict.txt"
INSTRUCTION_DATA = "finetune/instruction-40.json"  # finetune.py's fixture, relative to tests/ref
PRESETS = {"qwen3": "qwen3-0.6b", "llama3": "llama3.2-1b"}  # tapegrad's --config names


# ------------------------------------------------------------------ tokenizer

class HFTokenizer:
    """A tokenizer.json as `tapegrad --tokenizer FILE` reads it: plain-text
    encode (special added tokens not recognised), byte decode."""

    def __init__(self, name, path, rel_path, env):
        self.name = name
        with open(path, "rb") as f:
            raw = f.read()
        self.sha256 = hashlib.sha256(raw).hexdigest()
        if self.sha256 != TOKENIZER_SHA256[name]:
            raise RuntimeError("%s: sha256 %s, expected %s" % (path, self.sha256, TOKENIZER_SHA256[name]))
        j = json.loads(raw.decode("utf-8"))
        self.bpe = ByteBPE.from_tokenizer_json(path, False)
        self.bpe_allowed = ByteBPE.from_tokenizer_json(path, True)
        byte_decoder = {c: b for b, c in bytes_to_unicode().items()}
        self.id_bytes = {i: bytes(byte_decoder[c] for c in tok) for tok, i in j["model"]["vocab"].items()}
        self.added = {t["content"]: t["id"] for t in j["added_tokens"]}
        for content, i in self.added.items():
            self.id_bytes[i] = content.encode("utf-8")
        self.vocab_size = max(self.id_bytes) + 1
        self.eot = self.token_id("<|endoftext|>")
        if self.eot < 0:
            self.eot = self.token_id("<|end_of_text|>")
        self.info = {"name": name, "path": rel_path, "env": env, "sha256": self.sha256,
                     "vocab_size": self.vocab_size, "eot": self.eot}

    def token_id(self, token):
        if token in self.added:
            return self.added[token]
        return self.bpe.vocab.get(token, -1)

    def encode(self, text, allowed_special=None):  # the C side allows no special token
        return self.bpe.encode(text)

    def decode_bytes(self, ids):
        for k, i in enumerate(ids):
            if i not in self.id_bytes:
                raise RuntimeError("%s: id %d at position %d is not in the tokenizer (%d ids): the C side "
                                   "cannot decode it" % (self.name, i, k, self.vocab_size))
        return b"".join(self.id_bytes[i] for i in ids)

    def decode(self, ids):
        return self.decode_bytes(ids).decode("utf-8", errors="replace")


def qwen_chat_ids(tok, messages, add_generation_prompt=False, thinking=False):
    """src/data/chat.c's qwen(): the format's tokens by id, the text between
    them encoded as plain text."""
    start, end = tok.token_id("<|im_start|>"), tok.token_id("<|im_end|>")
    ids = []
    for role, content in messages:
        ids += [start] + tok.encode(role + "\n" + content) + [end] + tok.encode("\n")
    if add_generation_prompt:
        ids += [start] + tok.encode("assistant\n" if thinking else "assistant\n<think>\n\n</think>\n\n")
    # the same as the book's format_qwen_chat string encoded with its specials
    whole = tok.bpe_allowed.encode(format_qwen_chat(messages, add_generation_prompt, thinking))
    if whole != ids:
        raise RuntimeError("the chat ids differ from the whole string's for %r" % (messages,))
    return ids


def chat_user(entry):
    """tg_format_chat_user: the instruction, "\\n\\n" and the input if any."""
    return entry["instruction"] + ("\n\n" + entry["input"] if entry["input"] else "")


# --------------------------------------------------------------- generation

def argmax_checked(scores, notes, where):
    """torch.argmax(scores, -1, keepdim=True) for one row; a tie for the
    maximum goes into notes (argmax takes the first)."""
    idx = torch.argmax(scores, dim=-1, keepdim=True)
    top = torch.topk(scores[0], 2).values
    if top[0] == top[1]:
        notes.append("%s: a tie for the maximum (%r) at id %d" % (where, top[0].item(), idx.item()))
    return idx


def generate_text_simple_ch5(model, idx, max_new_tokens, context_size, notes, where):
    """pretrain.py's (chapter 5's) generate_text_simple: argmax of the softmax."""
    for _ in range(max_new_tokens):
        idx_cond = idx[:, -context_size:]
        with torch.no_grad():
            logits = model(idx_cond)
        logits = logits[:, -1, :]
        probas = torch.softmax(logits, dim=-1)
        idx_next = argmax_checked(probas, notes, where + " (softmax)")
        if torch.argmax(logits, dim=-1).item() != idx_next.item():
            notes.append("%s: argmax of the softmax %d, of the logits %d"
                         % (where, idx_next.item(), torch.argmax(logits, dim=-1).item()))
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


def generate_text_simple_ch7(model, idx, max_new_tokens, context_size, notes, where):
    """finetune.py's (chapter 7's) generate_text_simple: argmax of the logits."""
    for _ in range(max_new_tokens):
        idx_cond = idx[:, -context_size:]
        with torch.no_grad():
            logits = model(idx_cond)
        logits = logits[:, -1, :]
        idx_next = argmax_checked(logits, notes, where)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


# ------------------------------------------------------------------ pretrain

def pretrain_sample(model, tok, start_context, sample_tokens, context_size, out, notes):
    """pretrain.py's generate_and_print_sample with the model's context size."""
    model.eval()
    encoded = torch.tensor(tok.encode(start_context)).unsqueeze(0)
    with torch.no_grad():
        token_ids = generate_text_simple_ch5(model, encoded, sample_tokens, context_size, notes,
                                             "%s sample %d" % (out["name"], len(out["samples"]) + 1))
    ids = token_ids.squeeze(0).tolist()
    decoded_text = tok.decode(ids)
    out["samples"].append({"text": decoded_text, "ids": ids})
    out["lines"].append(decoded_text.replace("\n", " "))
    model.train()


def pretrain_loop(model, train_loader, val_loader, optimizer, num_epochs, eval_freq, eval_iter,
                  start_context, tok, sample_tokens, context_size, out, notes):
    """pretrain.py's train_model_simple (chapter 5's)."""
    tokens_seen, global_step = 0, -1
    for epoch in range(num_epochs):
        model.train()
        for input_batch, target_batch in train_loader:
            optimizer.zero_grad()
            loss = ch5.calc_loss_batch(input_batch, target_batch, model)
            loss.backward()
            optimizer.step()
            tokens_seen += input_batch.numel()
            global_step += 1
            if global_step % eval_freq == 0:
                train_loss, val_loss = ch5.evaluate_model(model, train_loader, val_loader, eval_iter)
                out["rows"].append({"epoch": epoch + 1, "step": global_step, "train_loss": train_loss,
                                    "val_loss": val_loss, "tokens_seen": tokens_seen})
                out["lines"].append(f"Ep {epoch+1} (Step {global_step:06d}): "
                                    f"Train loss {train_loss:.3f}, Val loss {val_loss:.3f}")
        pretrain_sample(model, tok, start_context, sample_tokens, context_size, out, notes)
    return global_step + 1


PRETRAIN_BASE = dict(seed=123, lr=4e-4, weight_decay=0.1, start="Every effort moves you", train_ratio=0.9)

PRETRAIN_RUNS = [
    dict(name="qwen3_ctx32", family="qwen3",
         model=dict(vocab_size=151_936, context_length=32, emb_dim=32, n_heads=4, n_layers=2, hidden_dim=64,
                    head_dim=32, qk_norm=True, n_kv_groups=2, rope_base=1_000_000.0),
         batch=4, stride=32, epochs=2, lr=2e-3, eval_freq=5, eval_iter=3, sample_tokens=20),
    dict(name="qwen3_noqk_s40", family="qwen3",
         model=dict(vocab_size=151_936, context_length=48, emb_dim=32, n_heads=2, n_layers=1, hidden_dim=64,
                    head_dim=32, qk_norm=False, n_kv_groups=1, rope_base=1_000_000.0),
         batch=3, stride=40, epochs=1, eval_freq=7, eval_iter=2, sample_tokens=15, train_ratio=0.85),
    dict(name="llama3_ctx32", family="llama3",
         model=dict(vocab_size=128_256, context_length=32, emb_dim=64, n_heads=2, n_layers=2, hidden_dim=96,
                    n_kv_groups=1, rope_base=500_000.0),
         batch=4, stride=32, epochs=2, lr=1e-3, eval_freq=5, eval_iter=3, sample_tokens=20),
]


def book_config(b, family, model):
    if family == "qwen3":
        return dec.qwen3_config(b, **model)
    kw = dict(model)
    kw.setdefault("rope_freq", copy.deepcopy(b.llama3.LLAMA32_CONFIG_1B["rope_freq"]))
    return dec.llama3_config(b, **kw)


def pretrain_run(b, spec, text, tok, notes):
    s = dict(PRETRAIN_BASE)
    s.update(spec)
    family = s["family"]
    cfg = book_config(b, family, s["model"])
    ctx = cfg["context_length"]
    split_idx = int(s["train_ratio"] * len(text))
    train_data, val_data = text[:split_idx], text[split_idx:]
    torch.manual_seed(s["seed"])
    train_loader = ch5.create_dataloader_v1(train_data, tok, s["batch"], ctx, s["stride"], shuffle=True,
                                            drop_last=True)
    val_loader = ch5.create_dataloader_v1(val_data, tok, s["batch"], ctx, s["stride"], shuffle=False,
                                          drop_last=False)
    model = dec.build(b, family, cfg, s["seed"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=s["lr"], weight_decay=s["weight_decay"])
    out = {"name": s["name"], "family": family, "config": dec.config_json(cfg), "tokenizer": tok.info,
           "seed": s["seed"], "batch": s["batch"], "epochs": s["epochs"], "lr": s["lr"],
           "weight_decay": s["weight_decay"], "eval_freq": s["eval_freq"], "eval_iter": s["eval_iter"],
           "train_ratio": s["train_ratio"], "stride": s["stride"], "start": s["start"],
           "sample_tokens": s["sample_tokens"], "start_ids": tok.encode(s["start"]),
           "train_batches": len(train_loader), "val_batches": len(val_loader),
           "train_tokens": len(tok.encode(train_data)), "val_tokens": len(tok.encode(val_data)),
           "rows": [], "samples": [], "lines": []}
    steps = pretrain_loop(model, train_loader, val_loader, optimizer, s["epochs"], s["eval_freq"], s["eval_iter"],
                          s["start"], tok, s["sample_tokens"], ctx, out, notes)
    out["rand_after"] = torch.rand(3).tolist()
    return out, steps


def model_cli_args(run):
    """The MODEL options for a run's config (tools/tapegrad/model_args.c)."""
    c = run["config"]
    a = ["--config", PRESETS[run["family"]], "--seed", run["seed"], "--vocab", c["vocab_size"],
         "--context", c["context_length"], "--emb", c["emb_dim"], "--heads", c["n_heads"],
         "--layers", c["n_layers"], "--hidden", c["hidden_dim"]]
    if run["family"] == "qwen3":
        if c["head_dim"] is not None:
            a += ["--head-dim", c["head_dim"]]
        a += ["--kv-groups", c["n_kv_groups"], "--rope-base", repr(c["rope_base"]),
              "--qk-norm" if c["qk_norm"] else "--no-qk-norm"]
    else:  # rope_freq: the preset's (Llama 3.2's), which the runs keep
        a += ["--kv-groups", c["n_kv_groups"], "--rope-base", repr(c["rope_base"])]
    return a


def pretrain_cli_args(run, text, tokenizer):
    """`tapegrad pretrain` arguments for a run (as check_pretrain_output.py
    would build them); text and tokenizer are paths."""
    a = ["pretrain", "--text", text, "--tokenizer", tokenizer] + model_cli_args(run)
    a += ["--batch", run["batch"], "--epochs", run["epochs"], "--lr", repr(run["lr"]),
          "--weight-decay", repr(run["weight_decay"]), "--eval-freq", run["eval_freq"],
          "--eval-iter", run["eval_iter"], "--train-ratio", repr(run["train_ratio"]), "--stride", run["stride"],
          "--start", run["start"], "--sample-tokens", run["sample_tokens"]]
    return [str(x) for x in a]


# ------------------------------------------------------------------ instruct

class ChatInstructionDataset(Dataset):
    """InstructionDataset for --format chat: each entry a user/assistant
    conversation in Qwen3's chat format (tg_instruction_dataset_new_format
    with TG_INSTRUCTION_CHAT)."""

    def __init__(self, data, tok):
        self.data = data
        self.encoded_texts = [qwen_chat_ids(tok, [("user", chat_user(e)), ("assistant", e["output"])])
                              for e in data]

    def __getitem__(self, index):
        return self.encoded_texts[index]

    def __len__(self):
        return len(self.data)


def prompt_of(entry, tok, fmt):
    """(printed prompt text, prompt ids) as finetune_task.c's continue_prompt."""
    if fmt == "chat":
        user = chat_user(entry)
        return user, qwen_chat_ids(tok, [("user", user)], add_generation_prompt=True, thinking=True)
    text = ft.format_input(entry)
    ids = tok.encode(text)
    if tok.decode(ids) != text:  # the book cuts at len(input_text), tapegrad at the decoded prompt's
        raise RuntimeError("the prompt does not decode to itself: %r" % text)
    return text, ids


def instruct_sample(model, tok, entry, fmt, context_size, notes, where):
    """chapter 7's generate_and_print_sample: eval mode, 50 greedy ids."""
    model.eval()
    _, ids = prompt_of(entry, tok, fmt)
    with torch.no_grad():
        token_ids = generate_text_simple_ch7(model, torch.tensor([ids]), 50, context_size, notes, where)
        decoded_text = tok.decode(token_ids.squeeze(0).tolist())
        print(decoded_text.replace("\n", " "))
    model.train()


def instruct_loop(model, train_loader, val_loader, optimizer, num_epochs, eval_freq, eval_iter, sample_entry,
                  fmt, tok, context_size, out, notes):
    """finetune.py's (chapter 7's) train_model_simple."""
    tokens_seen, global_step = 0, -1
    for epoch in range(num_epochs):
        model.train()
        for input_batch, target_batch in train_loader:
            optimizer.zero_grad()
            loss = ch5.calc_loss_batch(input_batch, target_batch, model)
            loss.backward()
            optimizer.step()
            tokens_seen += input_batch.numel()
            global_step += 1
            if global_step % eval_freq == 0:
                train_loss, val_loss = ch5.evaluate_model(model, train_loader, val_loader, eval_iter)
                out["rows"].append({"epoch": epoch + 1, "step": global_step, "train_loss": train_loss,
                                    "val_loss": val_loss, "tokens_seen": tokens_seen})
                print(f"Ep {epoch+1} (Step {global_step:06d}): "
                      f"Train loss {train_loss:.3f}, Val loss {val_loss:.3f}")
        instruct_sample(model, tok, sample_entry, fmt, context_size, notes,
                        "%s sample %d" % (out["name"], epoch + 1))
    return tokens_seen


INSTRUCT_BASE = dict(family="qwen3", epochs=2, batch=4, lr=5e-4, weight_decay=0.1, eval_freq=2, eval_iter=2,
                     seed=123, limit=24, allowed_max_length=64, max_new_tokens=20, lora_rank=4, lora_alpha=8,
                     model=dict(vocab_size=151_936, context_length=64, emb_dim=32, n_heads=4, n_layers=2,
                                hidden_dim=64, head_dim=32, qk_norm=True, n_kv_groups=2, rope_base=1_000_000.0))

INSTRUCT_RUNS = [
    dict(INSTRUCT_BASE, name="qwen3_instruct_lora", format="alpaca"),
    # seed 7: with 123 the chat run's first sample has an id past the tokenizer's
    # (151913: the model's vocabulary is padded to 151,936, the tokenizer has 151,669)
    dict(INSTRUCT_BASE, name="qwen3_instruct_chat_lora", format="chat", seed=7),
]


def instruct_run(b, s, entries, tok, notes):
    cfg = book_config(b, s["family"], s["model"])
    fmt = s["format"]
    rec = {"name": s["name"], "kind": "instruct", "family": s["family"], "format": fmt, "config": dec.config_json(cfg),
           "tokenizer": tok.info, "seed": s["seed"], "epochs": s["epochs"], "batch": s["batch"], "lr": s["lr"],
           "weight_decay": s["weight_decay"], "eval_freq": s["eval_freq"], "eval_iter": s["eval_iter"],
           "max_length": None, "lora_rank": s["lora_rank"], "lora_alpha": s["lora_alpha"], "limit": s["limit"],
           "allowed_max_length": s["allowed_max_length"], "max_new_tokens": s["max_new_tokens"],
           "init_pretrain_args": None, "init_pretrain_lines": None, "data": INSTRUCTION_DATA,
           "rows": [], "train_accuracy": [], "val_accuracy": [], "test_accuracy": None, "responses": None}
    return instruct_train(rec, s, cfg, lambda: dec.build(b, s["family"], cfg, s["seed"]), entries, tok, notes)


def instruct_train(rec, s, cfg, build, entries, tok, notes):
    """An instruct run's data, model (build(): the book's, built after
    manual_seed), LoRA, training and responses, into rec; shared with
    gemma3_train.py."""
    fmt = s["format"]
    pad_id = tok.eot
    end_id = tok.token_id("<|im_end|>") if fmt == "chat" else pad_id
    rec["pad_id"], rec["end_id"] = pad_id, end_id
    data = entries[:s["limit"]]
    train_portion = int(len(data) * 0.85)
    test_portion = int(len(data) * 0.1)
    train_data = data[:train_portion]
    test_data = data[train_portion:train_portion + test_portion]
    val_data = data[train_portion + test_portion:]
    dataset = ChatInstructionDataset if fmt == "chat" else ft.InstructionDataset
    collate = partial(ft.custom_collate_fn, pad_token_id=pad_id, allowed_max_length=s["allowed_max_length"])
    torch.manual_seed(s["seed"])
    train_dataset = dataset(train_data, tok)
    train_loader = DataLoader(train_dataset, batch_size=s["batch"], collate_fn=collate, shuffle=True,
                              drop_last=True, num_workers=0)
    val_dataset = dataset(val_data, tok)
    val_loader = DataLoader(val_dataset, batch_size=s["batch"], collate_fn=collate, shuffle=False,
                            drop_last=False, num_workers=0)
    longest = max(len(x) for x in list(train_dataset.encoded_texts) + list(val_dataset.encoded_texts))
    if min(longest, s["allowed_max_length"] - 1) > cfg["context_length"]:
        raise RuntimeError("%s: a sequence of %d ids does not fit the context" % (s["name"], longest))
    rec.update(split=[len(train_data), len(val_data), len(test_data)], train_batches=len(train_loader),
               val_batches=len(val_loader), test_batches=None, longest_ids=longest)

    model = build()
    for param in model.parameters():
        param.requires_grad = False
    before = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    ft.replace_linear_with_lora(model, rank=s["lora_rank"], alpha=s["lora_alpha"])
    rec["lora_modules"] = [n for n, m in model.named_modules() if isinstance(m, ft.LinearWithLoRA)]
    assert set(rec["lora_modules"]) == before, (rec["lora_modules"], before)
    rec["trainable_parameters"] = ft.trainable_parameters(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=s["lr"], weight_decay=s["weight_decay"])

    ctx = cfg["context_length"]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        torch.manual_seed(s["seed"])
        instruct_loop(model, train_loader, val_loader, optimizer, s["epochs"], s["eval_freq"], s["eval_iter"],
                      val_data[0], fmt, tok, ctx, rec, notes)
        rec["responses"] = []
        for k, entry in enumerate(test_data):
            input_text, ids = prompt_of(entry, tok, fmt)
            token_ids = gpt_book.generate(model=model, idx=torch.tensor([ids]), max_new_tokens=s["max_new_tokens"],
                                          context_size=ctx, eos_id=end_id)
            generated = tok.decode_bytes(token_ids.squeeze(0).tolist())
            cut = len(tok.decode(ids).encode("utf-8"))  # finetune_task.c's response_text
            response_text = generated[cut:].decode("utf-8", errors="replace").replace("### Response:", "").strip()
            if fmt == "alpaca":  # the book's own cut, the same here
                book = tok.decode(token_ids.squeeze(0).tolist())[len(input_text):]
                assert book.replace("### Response:", "").strip() == response_text
            rec["responses"].append(response_text)
            print(input_text)
            print(f"\nCorrect response:\n>> {entry['output']}")
            print(f"\nModel response:\n>> {response_text.strip()}")
            print("-------------------------------------")
    text = stdout.getvalue()
    assert text.endswith("\n")
    rec["lines"] = text[:-1].split("\n")
    rec["rand_after"] = torch.rand(3).tolist()
    ab = sum(p.numel() for n, p in model.named_parameters() if n.endswith(".lora.A") or n.endswith(".lora.B"))
    assert rec["trainable_parameters"] == ab, (rec["trainable_parameters"], ab)
    return rec


def number(x):
    return repr(x) if isinstance(x, float) else str(x)


def instruct_cli_args(run, base, tokenizer):
    """`tapegrad finetune instruct` arguments for a run; base: the folder of
    decoder_train.json; tokenizer: a path."""
    a = ["finetune", "instruct", "--data", os.path.join(base, run["data"]), "--limit", run["limit"],
         "--tokenizer", tokenizer] + model_cli_args(run)
    a += ["--epochs", run["epochs"], "--batch", run["batch"], "--lr", repr(run["lr"]),
          "--weight-decay", repr(run["weight_decay"]), "--eval-freq", run["eval_freq"],
          "--eval-iter", run["eval_iter"], "--allowed-max-length", run["allowed_max_length"],
          "--max-new-tokens", run["max_new_tokens"]]
    if run["format"] != "alpaca":
        a += ["--format", run["format"]]
    if run["lora_rank"] is not None:
        a += ["--lora-rank", number(run["lora_rank"]), "--lora-alpha", number(run["lora_alpha"])]
    return [str(x) for x in a]


# ---------------------------------------------------------------------- main

def tokenizers():
    """({"qwen3", "llama3"}: HFTokenizer) or (None, why not)."""
    qpath = os.path.join(REPO, QWEN3_TOKENIZER)
    if not os.path.isfile(qpath):
        return None, "no %s" % QWEN3_TOKENIZER
    lpath = os.environ.get(LLAMA3_ENV)
    if not lpath:
        return None, "%s unset (Llama 3's tokenizer.json; tools/fetch_tokenizers.sh fetches it)" % LLAMA3_ENV
    if not os.path.isfile(lpath):
        return None, "%s=%s is not a file" % (LLAMA3_ENV, lpath)
    if importlib.util.find_spec("regex") is None:  # hf_tokenizers.py's encoder needs it
        return None, "no Python module regex (Debian's python3-regex)"
    return {"qwen3": HFTokenizer("qwen3", qpath, QWEN3_TOKENIZER, None),
            "llama3": HFTokenizer("llama3", lpath, None, LLAMA3_ENV)}, None


def generate(outdir):
    book_dir, why = dec.book_location()
    if book_dir is None:
        print("%s: %s not regenerated (see tools/reference/decoder_train.py)" % (why, OUT_NAME))
        return
    toks, why = tokenizers()
    if toks is None:
        print("%s: %s not regenerated (see tools/reference/decoder_train.py)" % (why, OUT_NAME))
        return
    t0 = time.time()
    with open(os.path.join(REPO, TEXT), encoding="utf-8") as f:
        text = f.read()
    with open(os.path.join(REPO, "tests", "ref", INSTRUCTION_DATA), encoding="utf-8") as f:
        entries = json.load(f)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as tools/make_reference.py: deterministic reductions
    notes = []
    try:
        with dec.book_code(book_dir) as b:
            commit = dec.book_commit(book_dir)
            print("book code: %s (commit %s); stubbed: %s; nn.RMSNorm stand-in: %s"
                  % (book_dir, commit, ", ".join(b.stubbed) or "none", b.rmsnorm_stand_in))
            obj = {"torch_version": torch.__version__, "book_commit": commit, "text": TEXT,
                   "pretrain": [], "instruct": [], "notes": notes}
            for spec in PRETRAIN_RUNS:
                t1 = time.time()
                rec, steps = pretrain_run(b, spec, text, toks[spec["family"]], notes)
                obj["pretrain"].append(rec)
                print("%s: %d steps, %d/%d batches, %.1f s" % (rec["name"], steps, rec["train_batches"],
                                                                rec["val_batches"], time.time() - t1))
                for line in rec["lines"]:
                    print("  " + line)
            for spec in INSTRUCT_RUNS:
                t1 = time.time()
                rec = instruct_run(b, spec, entries, toks[spec["family"]], notes)
                obj["instruct"].append(rec)
                print("%s: %d rows, %d trainable parameters, %.1f s" % (rec["name"], len(rec["rows"]),
                                                                        rec["trainable_parameters"], time.time() - t1))
                for line in rec["lines"][:6] + ["..."] + rec["lines"][-3:]:
                    print("  " + line)
    finally:
        torch.set_num_threads(threads)
    write_json(outdir, OUT_NAME, obj)
    for n in notes:
        print("  note: " + n)
    print("decoder training references: %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    generate(os.path.join(REPO, "tests", "ref"))
