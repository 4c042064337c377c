"""tests/ref/gemma3_train.json: the book's chapter-5 pretraining and chapter-7
instruction fine-tuning with appendix E's LoRA, run on the book's Gemma 3
(rasbt/LLMs-from-scratch, ch05/12_gemma3/standalone-gemma3.ipynb: its
Gemma3Model and parts, loaded by tools/reference/gemma3.py's
load_notebook(), in float32), exactly as tools/reference/decoder_train.py
runs Qwen3 (the same loops, loaders, samples and printed lines; read its
docstring), with Qwen3's tokenizer (data/qwen3/tokenizer.json, as
decoder_train.py's Qwen3 runs: Gemma's own tokenizer files are not in the
source tree).

Needs, else it prints why and writes nothing:
  LLMS_FROM_SCRATCH_ROOT      the root of the book's repository (holding
                              ch05/12_gemma3/), or LLMS_FROM_SCRATCH_DIR (its
                              pkg folder: the root is its parent); see
                              tools/reference/gemma3.py
  LLMS_FROM_SCRATCH_COMMIT    (optional) the book's commit, else git's
  data/qwen3/tokenizer.json   (checked against hf_tokenizers.py's sha256)
  Python's regex module       (hf_tokenizers.py's encoder)

    {"torch_version", "book_commit", "notebook": {"path", "sha256", "cells"},
     "text": "data/the-verdict.txt", "pretrain": [run], "instruct": [run],
     "notes": [str]}

Each run is in decoder_train.json's schema for that table (read there),
with "family": "gemma3" and
  "config": the book's GEMMA3_CONFIG_270M keys, in its order, without
     "dtype" (float32): vocab_size, context_length, emb_dim, n_heads,
     n_layers, hidden_dim, head_dim, qk_norm, n_kv_groups, rope_local_base,
     rope_base, sliding_window, layer_types (the book's strings
     "sliding_attention" / "full_attention"), query_pre_attn_scalar;
  "model": Gemma3Model(config) after torch.manual_seed(seed), every norm
     weight zero as built (no randomised norms here);
  "model_args": the MODEL options of `tapegrad` for the run, as
     tests/decoder_run_args.py's model_args() lists Qwen3's, with the
     Gemma 3 options after them:
        --tokenizer data/qwen3/tokenizer.json --config gemma3-270m --seed S
        --vocab V --context C --emb E --heads H --layers L --hidden F
        --kv-groups G --rope-base X --head-dim D --rope-local-base X
        --sliding-window W --layer-types sliding,...,full
        --query-pre-attn-scalar Q
     (no --qk-norm: the preset has it, and the runs keep it; numbers as
     Python's repr() of the config's values);
  "args": the whole command line after the program's name, in the order
     tests/check_pretrain_output.py's and tests/check_finetune_output.py's
     cli_args() build Qwen3's:
        pretrain: ["pretrain", "--text", TEXT] + model_args + ["--batch", ...,
          "--epochs", ..., "--lr", ..., "--weight-decay", ..., "--eval-freq",
          ..., "--eval-iter", ..., "--train-ratio", ..., "--stride", ...,
          "--start", ..., "--sample-tokens", ...]
        instruct: ["finetune", "instruct", "--data", DATA, "--limit", N] +
          model_args + ["--epochs", ..., "--batch", ..., "--lr", ...,
          "--weight-decay", ..., "--eval-freq", ..., "--eval-iter", ...,
          "--allowed-max-length", ..., "--max-new-tokens", ..., "--format",
          "alpaca", "--lora-rank", R, "--lora-alpha", A]
     Paths in both are relative to the source tree (TEXT
     "data/the-verdict.txt", DATA "tests/ref/finetune/instruction-40.json",
     the tokenizer "data/qwen3/tokenizer.json"): a check replaces them by
     its own.
  pretrain runs: "lora_modules" absent; instruct runs (kind "instruct",
  format "alpaca", the book's format_input): "lora_modules" lists the
  wrapped Linears in replace_linear_with_lora's order (blocks.N.att.W_query,
  W_key, W_value, out_proj, blocks.N.ff.fc1, fc2, fc3, ..., out_head).

Random draws from the default generator, in order, as decoder_train.py's.
"""
import json
import os
import time

import torch

from . import decoder_train as dt
from . import gemma3 as g3
from . import pretrain as ch5
from .common import write_json

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT_NAME = "gemma3_train.json"
TEXT = dt.TEXT
INSTRUCTION_DATA = dt.INSTRUCTION_DATA  # relative to tests/ref
TOKENIZER = dt.QWEN3_TOKENIZER
LAYER_ARG = {g3.SLIDING: "sliding", g3.FULL: "full"}


def number(x):
    return repr(x) if isinstance(x, float) else str(x)


def model_cli_args(run):
    c = run["config"]
    a = ["--tokenizer", run["tokenizer"]["path"], "--config", g3.PRESET_NAME, "--seed", run["seed"],
         "--vocab", c["vocab_size"], "--context", c["context_length"], "--emb", c["emb_dim"],
         "--heads", c["n_heads"], "--layers", c["n_layers"], "--hidden", c["hidden_dim"],
         "--kv-groups", c["n_kv_groups"], "--rope-base", number(c["rope_base"]), "--head-dim", c["head_dim"],
         "--rope-local-base", number(c["rope_local_base"]), "--sliding-window", c["sliding_window"],
         "--layer-types", ",".join(LAYER_ARG[t] for t in c["layer_types"]),
         "--query-pre-attn-scalar", number(c["query_pre_attn_scalar"])]
    if not c["qk_norm"]:
        raise ValueError("the Gemma 3 runs keep the preset's QK-norm")
    return [str(x) for x in a]


def pretrain_cli_args(run):
    a = ["pretrain", "--text", TEXT] + run["model_args"]
    a += ["--batch", run["batch"], "--epochs", run["epochs"], "--lr", repr(run["lr"]),
          "--weight-decay", repr(run["weight_decay"]), "--eval-freq", run["eval_freq"],
          "--eval-iter", run["eval_iter"], "--train-ratio", repr(run["train_ratio"]), "--stride", run["stride"],
          "--start", run["start"], "--sample-tokens", run["sample_tokens"]]
    return [str(x) for x in a]


def instruct_cli_args(run):
    a = ["finetune", "instruct", "--data", "tests/ref/" + run["data"], "--limit", run["limit"]] + run["model_args"]
    a += ["--epochs", run["epochs"], "--batch", run["batch"], "--lr", repr(run["lr"]),
          "--weight-decay", repr(run["weight_decay"]), "--eval-freq", run["eval_freq"],
          "--eval-iter", run["eval_iter"], "--allowed-max-length", run["allowed_max_length"],
          "--max-new-tokens", run["max_new_tokens"], "--format", run["format"]]
    if run["lora_rank"] is not None:
        a += ["--lora-rank", number(run["lora_rank"]), "--lora-alpha", number(run["lora_alpha"])]
    return [str(x) for x in a]


# ------------------------------------------------------------------ pretrain

PRETRAIN_BASE = dict(dt.PRETRAIN_BASE)

PRETRAIN_RUNS = [
    # head_dim 16 != emb / heads = 8, two heads per kv group, window 8 of 32,
    # query_pre_attn_scalar 24 != head_dim; stride 64: every other window
    dict(name="gemma3_ctx32", seed=123,
         model=dict(vocab_size=151_936, context_length=32, emb_dim=32, n_heads=4, n_layers=3, hidden_dim=64,
                    head_dim=16, qk_norm=True, n_kv_groups=2, rope_local_base=10_000.0, rope_base=1_000_000.0,
                    sliding_window=8, layer_types=g3.layers("ssf"), query_pre_attn_scalar=24),
         batch=4, stride=64, epochs=2, lr=2e-3, eval_freq=5, eval_iter=3, sample_tokens=20),
    # one kv group, full attention first, window 16 of 48, scalar = head_dim
    dict(name="gemma3_mqa_s96", seed=123,
         model=dict(vocab_size=151_936, context_length=48, emb_dim=32, n_heads=2, n_layers=2, hidden_dim=64,
                    head_dim=32, qk_norm=True, n_kv_groups=1, rope_local_base=10_000.0, rope_base=1_000_000.0,
                    sliding_window=16, layer_types=g3.layers("fs"), query_pre_attn_scalar=32),
         batch=3, stride=96, epochs=1, eval_freq=4, eval_iter=2, sample_tokens=15, train_ratio=0.85),
]


def pretrain_run(nb, spec, text, tok, notes):
    """decoder_train.py's pretrain_run with the notebook's Gemma3Model."""
    s = dict(PRETRAIN_BASE)
    s.update(spec)
    cfg = g3.gemma3_config(nb, **s["model"])
    ctx = cfg["context_length"]
    split_idx = int(s["train_ratio"] * len(text))
    train_data, val_data = text[:split_idx], text[split_idx:]
    torch.manual_seed(s["seed"])
    train_loader = ch5.create_dataloader_v1(train_data, tok, s["batch"], ctx, s["stride"], shuffle=True,
                                            drop_last=True)
    val_loader = ch5.create_dataloader_v1(val_data, tok, s["batch"], ctx, s["stride"], shuffle=False,
                                          drop_last=False)
    model = g3.build(nb, cfg, s["seed"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=s["lr"], weight_decay=s["weight_decay"])
    out = {"name": s["name"], "family": "gemma3", "config": g3.config_json(cfg), "tokenizer": tok.info,
           "seed": s["seed"], "batch": s["batch"], "epochs": s["epochs"], "lr": s["lr"],
           "weight_decay": s["weight_decay"], "eval_freq": s["eval_freq"], "eval_iter": s["eval_iter"],
           "train_ratio": s["train_ratio"], "stride": s["stride"], "start": s["start"],
           "sample_tokens": s["sample_tokens"], "start_ids": tok.encode(s["start"]),
           "train_batches": len(train_loader), "val_batches": len(val_loader),
           "train_tokens": len(tok.encode(train_data)), "val_tokens": len(tok.encode(val_data))}
    out["model_args"] = model_cli_args(out)
    out["args"] = pretrain_cli_args(out)
    out.update(rows=[], samples=[], lines=[])
    steps = dt.pretrain_loop(model, train_loader, val_loader, optimizer, s["epochs"], s["eval_freq"],
                             s["eval_iter"], s["start"], tok, s["sample_tokens"], ctx, out, notes)
    out["rand_after"] = torch.rand(3).tolist()
    return out, steps


# ------------------------------------------------------------------ instruct

INSTRUCT_RUNS = [
    dict(name="gemma3_instruct_lora", family="gemma3", format="alpaca", epochs=2, batch=4, lr=5e-4,
         weight_decay=0.1, eval_freq=2, eval_iter=2, seed=123, limit=24, allowed_max_length=64, max_new_tokens=20,
         lora_rank=4, lora_alpha=8,
         model=dict(vocab_size=151_936, context_length=64, emb_dim=32, n_heads=4, n_layers=3, hidden_dim=64,
                    head_dim=16, qk_norm=True, n_kv_groups=2, rope_local_base=10_000.0, rope_base=1_000_000.0,
                    sliding_window=16, layer_types=g3.layers("sfs"), query_pre_attn_scalar=16)),
]


def instruct_run(nb, s, entries, tok, notes):
    """decoder_train.py's instruct_run (alpaca format) with the notebook's
    Gemma3Model."""
    cfg = g3.gemma3_config(nb, **s["model"])
    fmt = s["format"]
    if fmt != "alpaca":
        raise ValueError("Gemma 3's runs use the alpaca format")
    rec = {"name": s["name"], "kind": "instruct", "family": "gemma3", "format": fmt, "config": g3.config_json(cfg),
           "tokenizer": tok.info, "seed": s["seed"], "epochs": s["epochs"], "batch": s["batch"], "lr": s["lr"],
           "weight_decay": s["weight_decay"], "eval_freq": s["eval_freq"], "eval_iter": s["eval_iter"],
           "max_length": None, "lora_rank": s["lora_rank"], "lora_alpha": s["lora_alpha"], "limit": s["limit"],
           "allowed_max_length": s["allowed_max_length"], "max_new_tokens": s["max_new_tokens"],
           "init_pretrain_args": None, "init_pretrain_lines": None, "data": INSTRUCTION_DATA}
    rec["model_args"] = model_cli_args(rec)
    rec["args"] = instruct_cli_args(rec)
    rec.update(rows=[], train_accuracy=[], val_accuracy=[], test_accuracy=None, responses=None)
    return dt.instruct_train(rec, s, cfg, lambda: g3.build(nb, cfg, s["seed"]), entries, tok, notes)


# ---------------------------------------------------------------------- main

def tokenizer():
    """(Qwen3's HFTokenizer, None) or (None, why not)."""
    path = os.path.join(REPO, TOKENIZER)
    if not os.path.isfile(path):
        return None, "no %s" % TOKENIZER
    try:
        import regex  # noqa: F401  (hf_tokenizers.py's encoder needs it)
    except ImportError:
        return None, "no Python module regex (Debian's python3-regex)"
    return dt.HFTokenizer("qwen3", path, TOKENIZER, None), None


def generate(outdir):
    root, why = g3.notebook_root()
    if root is None:
        print("%s: %s not regenerated (see tools/reference/gemma3_train.py)" % (why, OUT_NAME))
        return
    tok, why = tokenizer()
    if tok is None:
        print("%s: %s not regenerated (see tools/reference/gemma3_train.py)" % (why, OUT_NAME))
        return
    g3.check_torch()
    nb = g3.load_notebook(root, "plain")
    commit = g3.notebook_commit(root)
    t0 = time.time()
    with open(os.path.join(REPO, TEXT), encoding="utf-8") as f:
        text = f.read()
    with open(os.path.join(REPO, "tests", "ref", INSTRUCTION_DATA), encoding="utf-8") as f:
        entries = json.load(f)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as tools/make_reference.py: deterministic reductions
    notes = []
    try:
        print("book notebook: %s (commit %s), cells %s" % (nb.path, commit, nb.cells))
        obj = {"torch_version": torch.__version__, "book_commit": commit,
               "notebook": {"path": nb.path, "sha256": nb.sha256, "cells": nb.cells}, "text": TEXT,
               "pretrain": [], "instruct": [], "notes": notes}
        for spec in PRETRAIN_RUNS:
            t1 = time.time()
            rec, steps = pretrain_run(nb, spec, text, tok, notes)
            obj["pretrain"].append(rec)
            print("%s: %d steps, %d/%d batches, %.1f s" % (rec["name"], steps, rec["train_batches"],
                                                            rec["val_batches"], time.time() - t1))
            print("  tapegrad " + " ".join(rec["args"]))
            for line in rec["lines"]:
                print("  " + line)
        for spec in INSTRUCT_RUNS:
            t1 = time.time()
            rec = instruct_run(nb, spec, entries, tok, notes)
            obj["instruct"].append(rec)
            print("%s: %d rows, %d trainable parameters, %.1f s" % (rec["name"], len(rec["rows"]),
                                                                    rec["trainable_parameters"], time.time() - t1))
            print("  tapegrad " + " ".join(rec["args"]))
            for line in rec["lines"][:6] + ["..."] + rec["lines"][-3:]:
                print("  " + line)
    finally:
        torch.set_num_threads(threads)
    write_json(outdir, OUT_NAME, obj)
    for n in notes:
        print("  note: " + n)
    print("gemma3 training references: %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    generate(os.path.join(REPO, "tests", "ref"))
