"""tests/ref/dpo.json: the book's preference tuning with DPO
(ch07/04_preference-tuning-with-dpo/dpo-from-scratch.ipynb) on small models,
the runs `tapegrad finetune dpo` must print line for line.

The notebook's code is not copied here: its code cells that define
format_input, PreferenceDataset, custom_collate_fn, compute_dpo_loss,
compute_logprobs, compute_dpo_loss_batch, compute_dpo_loss_loader,
evaluate_dpo_loss_loader and train_model_dpo_simple are read from a checkout
of the book's repository and executed (gemma3.py's notebook_definitions),
with the notebook folder's own previous_chapters.py importable while they
run (the imports it lacks here, tiktoken and matplotlib, stubbed by
decoder.py's book_code): GPTModel, generate, text_to_token_ids,
token_ids_to_text and generate_and_print_sample come from it, as the
notebook imports them. Environment, as for gemma3.py:

    LLMS_FROM_SCRATCH_DIR     the package folder (holding llms_from_scratch/;
                              the Qwen3 run's model is its qwen3.py)
    LLMS_FROM_SCRATCH_ROOT    the repository's root (holding ch07/04_...);
                              default: the parent of LLMS_FROM_SCRATCH_DIR
    LLMS_FROM_SCRATCH_COMMIT  the book's commit (else git's, else null)

    /usr/bin/python3 tools/make_reference.py dpo

Without them the generator prints why and writes nothing.

Data: data/preference/instruction-data-with-preference.json (the notebook's
file), data[:max_entries], then the notebook's split: train =
int(N * 0.85) entries, test = the next int(N * 0.1), validation = the rest.

Random draws from the default generator, in order (what `tapegrad finetune
dpo` does):
  1. the loaders (train shuffle=True, drop_last=True; validation in order,
     drop_last=False), collate = the notebook's custom_collate_fn with
     mask_prompt_tokens=True, allowed_max_length, pad = the tokenizer's
     end-of-text id (GPT-2 50256, Qwen3 <|endoftext|> 151643). No draws.
  2. manual_seed(seed); the model (GPTModel(cfg), or the book's Qwen3Model);
     a run with "pretrained": "--load" then loads the pretraining's weights.
  3. reference = copy.deepcopy(model) (a copy draws nothing), with
     "pretrained": "--reference" then given the pretraining's weights;
     eval().
  4. with LoRA: every policy parameter frozen, appendix E's
     replace_linear_with_lora(policy, rank, alpha) (finetune.py's), each
     LoRALayer drawing its A in named_children order. The reference has no
     LoRA.
  5. AdamW(policy.parameters(), lr, weight_decay).
  6. manual_seed(seed); evaluate_dpo_loss_loader over min(eval_iter, len)
     batches of each loader; printed as the notebook's cell 111 prints it
     ("Training loss:", "Validation loss:", "Train reward margin:", "Val
     reward margin:" each followed by Python's repr of a float: the loss
     and rewards are sums of float32 .item()s in Python floats divided by
     the batch count, the margins chosen - rejected in Python floats).
  7. manual_seed(seed); train_model_dpo_simple (its "Ep E (Step SSSSSS):
     Train loss L, Val loss L, Train reward margins M, Val reward margins M"
     rows, then per epoch generate_and_print_sample of the policy: eval
     mode, 50 greedy ids, "\\n" printed as " ", back to train mode). Its
     start_context is the prompt of val_data[2] (val_data[-1] when the
     validation set has fewer than 3 entries).
  8. manual_seed(seed); for each entry of val_data[:3]: the reference's
     response, then the policy's (the book's generate, max_new_tokens,
     eos_id = the end-of-text id, or <|im_end|> with --format chat), the
     policy in the mode training left it in (train mode: with dropout the
     responses are drawn through dropout masks). Printed as cell 123 prints
     them: the prompt, "", "Correct response:", ">> {output}", "",
     "Reference model response:", ">> {ref}", "", "Policy model response:",
     ">> {policy}", "", "-------------------------------------", "".
     For the Alpaca runs of seed 123 the notebook's cell 123 itself (which
     seeds 123) is run a second time and must print the same text.

--format chat (Qwen3, as decoder_train.py's chat instruct run): user =
chat_user(entry); prompt ids = qwen_chat_ids(user, generation prompt,
thinking left open); chosen ids = qwen_chat_ids(user, assistant = chosen),
rejected likewise; the prompt ids are checked to be a prefix of both. The
collate is the notebook's with mask_prompt_tokens=False, then the first
len(prompt ids) mask positions of each row set false (not + 2: the "+ 2"
is the Alpaca format's "\\n\\n"). The printed prompt is the user message; a
response is the decoded ids after the decoded prompt's bytes, "### Response:"
removed, stripped. The per-epoch sample is the chat prompt's ids plus 50
greedy ids decoded whole (the book's generate_and_print_sample reads
model.pos_emb, which Qwen3Model lacks: a stand-in with the model's context
length takes its place).

    {"torch_version", "book_commit", "notebook": {"path", "sha256", "cells"},
     "data": "data/preference/instruction-data-with-preference.json" (relative
         to the source tree),
     "runs": [{"name", "kind": "dpo", "format": "alpaca"|"chat",
               "family" (Qwen3 runs only), "tokenizer" (Qwen3: as in
                   decoder_train.json), "config" (finetune.json's GPT config or
                   the book's Qwen3 config without dtype),
               "seed", "epochs", "batch", "lr", "weight_decay", "eval_freq",
               "eval_iter", "beta", "max_entries", "allowed_max_length",
               "max_new_tokens", "lora_rank", "lora_alpha": null or numbers,
               "data", "init_pretrain_args", "init_pretrain_lines" (as in
                   finetune.json: `tapegrad pretrain` saves the file),
               "pretrained": null, or the option given the pretrained file:
                   "--load" (the policy's and the reference's start) or
                   "--reference" (the reference's weights only),
               "pad_id", "end_id", "split": [train, val, test] sizes,
               "train_batches", "val_batches", "longest_ids" (the longest
                   chosen or rejected sequence), "start_entry" (the index in
                   val_data of the sample's prompt),
               "lines": [str] (stdout of steps 6-8, split at "\\n"),
               "before": {"train_loss", "val_loss", "train_reward_margin",
                          "val_reward_margin"},
               "rows": [{"epoch" (1-based), "step", "tokens_seen",
                         "train_loss", "val_loss", "train_reward_margin",
                         "val_reward_margin", "train_chosen_reward",
                         "train_rejected_reward", "val_chosen_reward",
                         "val_rejected_reward"}],
               "responses": [{"reference", "policy"}],
               "trainable_parameters", "lora_modules" (LoRA runs: the
                   wrapped Linears in the order their A is drawn, else null),
               "rand_after": torch.rand(3) at the end}],
     "notes": [str]}   argmax ties in the Qwen3 sample, [] if none
"""
import contextlib
import copy
import importlib.util
import io
import json
import os
import sys
import time
from functools import partial

import torch
from torch.utils.data import DataLoader, Dataset

from . import decoder as dec
from . import decoder_train as dt
from . import finetune as ft
from .common import write_json
from .gemma3 import notebook_commit, notebook_definitions, notebook_root
from .pretrain import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT_NAME = "dpo.json"
NOTEBOOK_DIR = "ch07/04_preference-tuning-with-dpo"
NOTEBOOK = NOTEBOOK_DIR + "/dpo-from-scratch.ipynb"
PREVIOUS_CHAPTERS = NOTEBOOK_DIR + "/previous_chapters.py"
DATA = "data/preference/instruction-data-with-preference.json"
WANTED = ["format_input", "PreferenceDataset", "custom_collate_fn", "compute_dpo_loss", "compute_logprobs",
          "compute_dpo_loss_batch", "compute_dpo_loss_loader", "evaluate_dpo_loss_loader",
          "train_model_dpo_simple"]
SEPARATOR = "-------------------------------------"


# ------------------------------------------------------- the notebook's code

@contextlib.contextmanager
def previous_chapters(root):
    """The notebook folder's previous_chapters.py as the module
    previous_chapters while the context lasts (inside dec.book_code, whose
    stubs stand in for tiktoken and matplotlib)."""
    if "previous_chapters" in sys.modules:
        raise RuntimeError("a module previous_chapters is already imported")
    spec = importlib.util.spec_from_file_location("previous_chapters", os.path.join(root, PREVIOUS_CHAPTERS))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["previous_chapters"] = mod
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        del sys.modules["previous_chapters"]


def load_notebook(root):
    """A fresh namespace holding the notebook's WANTED definitions, and the
    source of its cell 123 (the responses of both models on val_data[:3])."""
    ns = {"__name__": "dpo_notebook"}
    cells, sha256 = notebook_definitions(root, NOTEBOOK, WANTED, ns)
    with open(os.path.join(root, NOTEBOOK), encoding="utf-8") as f:
        nb = json.load(f)
    found = [(i, "".join(c["source"])) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
             and "for entry in val_data[:3]" in "".join(c["source"])
             and "Policy model response" in "".join(c["source"])]
    if len(found) != 1:
        raise RuntimeError("%s: %d cells print val_data[:3]'s reference and policy responses" % (NOTEBOOK, len(found)))
    return ns, {"path": NOTEBOOK, "sha256": sha256, "cells": cells + [found[0][0]]}, found[0][1]


# --------------------------------------------------------------- chat format

class ChatPreferenceDataset(Dataset):
    """PreferenceDataset's items in Qwen3's chat format."""

    def __init__(self, data, tok):
        self.data = data
        self.encoded_texts = []
        for entry in data:
            user = dt.chat_user(entry)
            prompt = dt.qwen_chat_ids(tok, [("user", user)], add_generation_prompt=True, thinking=True)
            item = {"prompt": prompt}
            for key in ("chosen", "rejected"):
                ids = dt.qwen_chat_ids(tok, [("user", user), ("assistant", entry[key])])
                if ids[:len(prompt)] != prompt:
                    raise RuntimeError("the chat prompt's ids are not a prefix of the %s ids of %r"
                                       % (key, entry["instruction"]))
                item[key] = ids
            self.encoded_texts.append(item)

    def __getitem__(self, index):
        return self.encoded_texts[index]

    def __len__(self):
        return len(self.data)


def chat_collate(batch, collate):
    """The notebook's collate without its prompt mask, then the prompt's own
    positions masked (no "\\n\\n" after a chat prompt)."""
    out = collate(batch, mask_prompt_tokens=False)
    for i, item in enumerate(batch):
        for key in ("chosen_mask", "rejected_mask"):
            out[key][i, :len(item["prompt"])] = False
    return out


def qwen_sample_printer(tok, fmt, context_size, notes, name):
    """generate_and_print_sample for Qwen3Model (which has no pos_emb): the
    same steps with the model's context length; start_context is the
    printed prompt (the user message with --format chat)."""
    count = [0]

    def generate_and_print_sample(model, tokenizer, device, start_context):
        count[0] += 1
        if fmt == "chat":
            ids = dt.qwen_chat_ids(tok, [("user", start_context)], add_generation_prompt=True, thinking=True)
        else:
            ids = tok.encode(start_context)
        model.eval()
        with torch.no_grad():
            token_ids = dt.generate_text_simple_ch7(model, torch.tensor([ids]), 50, context_size, notes,
                                                    "%s sample %d" % (name, count[0]))
            decoded_text = tok.decode(token_ids.squeeze(0).tolist())
            print(decoded_text.replace("\n", " "))
        model.train()

    return generate_and_print_sample


# ---------------------------------------------------------------------- runs

# pretrained: None, or the option ("--load" or "--reference") that receives
# finetune.py's pretraining (pretrained(context)) of the same model size
GPT = dict(config=dict(vocab_size=50257, context_length=256, emb_dim=32, n_heads=2, n_layers=2, drop_rate=0.0,
                       qkv_bias=False),
           format="alpaca", seed=123, epochs=1, batch=4, lr=5e-4, weight_decay=0.01, eval_freq=2, eval_iter=1,
           beta=0.1, max_entries=24, allowed_max_length=256, max_new_tokens=8, lora_rank=None, lora_alpha=None,
           pretrained=None)

# Small enough for the test suite: every forward computes a 50,257-id head
# (151,936 for Qwen3) over each sequence.
RUNS = [
    # 14 entries: 11 for training (2 batches, 3 left over), 1 for testing, 2
    # for validation (the sample's prompt is val_data[-1]); two epochs
    dict(GPT, name="dpo", max_entries=14, epochs=2),
    # 24 entries: 20 for training (5 batches), 2 for validation; dropout and LoRA
    dict(GPT, name="dpo_lora", config=dict(GPT["config"], drop_rate=0.1), lora_rank=4, lora_alpha=8),
    dict(GPT, name="dpo_load", pretrained="--load", beta=0.5),
    # the reference is the pretraining, the policy a fresh model with dropout:
    # the losses and margins before training are not log(2) and 0; 27
    # entries: 3 for validation (the sample's prompt is val_data[2])
    dict(GPT, name="dpo_reference", config=dict(GPT["config"], drop_rate=0.1), pretrained="--reference",
         max_entries=27),
    # decoder_train.json's qwen3_instruct_chat_lora model with a context of 128
    # (its 64 is shorter than these conversations: up to 66 ids); 8 entries:
    # 6 for training (3 batches of 2), none for testing, 2 for validation
    dict(name="qwen3_dpo_chat_lora", family="qwen3", format="chat",
         model=dict(dt.INSTRUCT_BASE["model"], context_length=128), seed=7, epochs=1, batch=2, lr=5e-4,
         weight_decay=0.01, eval_freq=2, eval_iter=1, beta=0.1, max_entries=8, allowed_max_length=128,
         max_new_tokens=8, lora_rank=4, lora_alpha=8, pretrained=None),
]


def split(data):
    train_portion = int(len(data) * 0.85)
    test_portion = int(len(data) * 0.1)
    return (data[:train_portion], data[train_portion + test_portion:],
            data[train_portion:train_portion + test_portion])


def dpo_run(b, pc, root, s, entries, tok, notes):
    ns, _, cell_123 = load_notebook(root)
    fmt = s["format"]
    qwen = s.get("family") == "qwen3"
    if qwen:
        cfg = dt.book_config(b, "qwen3", s["model"])
        cfg_json = dec.config_json(cfg)
        pad_id = tok.eot
        end_id = tok.token_id("<|im_end|>") if fmt == "chat" else pad_id
    else:
        cfg = dict(s["config"])
        cfg_json = dict(cfg)
        pad_id = end_id = 50256
    ctx = cfg["context_length"]
    rec = {"name": s["name"], "kind": "dpo", "format": fmt}
    if qwen:
        rec.update(family="qwen3", tokenizer=tok.info)
    rec.update(config=cfg_json, seed=s["seed"], epochs=s["epochs"], batch=s["batch"], lr=s["lr"],
               weight_decay=s["weight_decay"], eval_freq=s["eval_freq"], eval_iter=s["eval_iter"], beta=s["beta"],
               max_entries=s["max_entries"], allowed_max_length=s["allowed_max_length"],
               max_new_tokens=s["max_new_tokens"], lora_rank=s["lora_rank"], lora_alpha=s["lora_alpha"], data=DATA,
               init_pretrain_args=None, init_pretrain_lines=None, pretrained=s["pretrained"], pad_id=pad_id,
               end_id=end_id)

    # 1. data and loaders
    train_data, val_data, test_data = split(entries[:s["max_entries"]])
    collate = partial(ns["custom_collate_fn"], pad_token_id=pad_id, allowed_max_length=s["allowed_max_length"])
    if fmt == "chat":
        dataset, collate = ChatPreferenceDataset, partial(chat_collate, collate=collate)
    else:
        dataset, collate = ns["PreferenceDataset"], partial(collate, mask_prompt_tokens=True)
    torch.manual_seed(s["seed"])
    train_dataset = dataset(train_data, tok)
    train_loader = DataLoader(train_dataset, batch_size=s["batch"], collate_fn=collate, shuffle=True,
                              drop_last=True, num_workers=0)
    val_dataset = dataset(val_data, tok)
    val_loader = DataLoader(val_dataset, batch_size=s["batch"], collate_fn=collate, shuffle=False,
                            drop_last=False, num_workers=0)
    longest = max(len(item[k]) for d in (train_dataset, val_dataset) for item in d.encoded_texts
                  for k in ("chosen", "rejected"))
    if longest >= min(s["allowed_max_length"], ctx):  # the collated length is longest + 1
        raise RuntimeError("%s: a sequence of %d ids does not fit (allowed_max_length %d, context %d)"
                           % (s["name"], longest, s["allowed_max_length"], ctx))
    start_entry = 2 if len(val_data) >= 3 else len(val_data) - 1
    rec.update(split=[len(train_data), len(val_data), len(test_data)], train_batches=len(train_loader),
               val_batches=len(val_loader), longest_ids=longest, start_entry=start_entry)

    # 2. model
    if qwen:
        policy = dec.build(b, "qwen3", cfg, s["seed"])
    else:
        torch.manual_seed(s["seed"])
        policy = pc.GPTModel(cfg)
    if s["pretrained"] is not None:
        assert not qwen, "the pretraining is GPT-2's"
        sd, args, lines = ft.pretrained(ctx, tok)
        rec["init_pretrain_args"], rec["init_pretrain_lines"] = args, lines
        if s["pretrained"] == "--load":
            policy.load_state_dict(sd)
    # 3. reference
    reference = copy.deepcopy(policy)
    if s["pretrained"] == "--reference":
        reference.load_state_dict(sd)
    reference.eval()
    # 4. LoRA
    rec["lora_modules"] = None
    if s["lora_rank"] is not None:
        for param in policy.parameters():
            param.requires_grad = False
        ft.replace_linear_with_lora(policy, rank=s["lora_rank"], alpha=s["lora_alpha"])
        rec["lora_modules"] = [n for n, m in policy.named_modules() if isinstance(m, ft.LinearWithLoRA)]
    rec["trainable_parameters"] = ft.trainable_parameters(policy)
    # 5. optimizer
    optimizer = torch.optim.AdamW(policy.parameters(), lr=s["lr"], weight_decay=s["weight_decay"])

    if fmt == "chat":
        start_context = dt.chat_user(val_data[start_entry])
    else:
        start_context = ns["format_input"](val_data[start_entry])
    ns["model"] = policy  # train_model_dpo_simple samples the global `model`
    if qwen:
        ns["generate_and_print_sample"] = qwen_sample_printer(tok, fmt, ctx, notes, s["name"])

    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        # 6. before training
        torch.manual_seed(s["seed"])
        res = ns["evaluate_dpo_loss_loader"](policy_model=policy, reference_model=reference,
                                             train_loader=train_loader, val_loader=val_loader, beta=s["beta"],
                                             eval_iter=s["eval_iter"])
        print("Training loss:", res["train_loss"])
        print("Validation loss:", res["val_loss"])
        print("Train reward margin:", res["train_chosen_reward"] - res["train_rejected_reward"])
        print("Val reward margin:", res["val_chosen_reward"] - res["val_rejected_reward"])
        rec["before"] = {"train_loss": res["train_loss"], "val_loss": res["val_loss"],
                         "train_reward_margin": res["train_chosen_reward"] - res["train_rejected_reward"],
                         "val_reward_margin": res["val_chosen_reward"] - res["val_rejected_reward"]}
        # 7. training
        torch.manual_seed(s["seed"])
        tracking = ns["train_model_dpo_simple"](
            policy_model=policy, reference_model=reference, train_loader=train_loader, val_loader=val_loader,
            optimizer=optimizer, num_epochs=s["epochs"], beta=s["beta"], eval_freq=s["eval_freq"],
            eval_iter=s["eval_iter"], start_context=start_context, tokenizer=tok)
        # 8. responses
        torch.manual_seed(s["seed"])
        rec["responses"] = responses(pc, policy, reference, val_data[:3], fmt, tok, ctx, s["max_new_tokens"],
                                     end_id, ns["format_input"])
    text = stdout.getvalue()
    assert text.endswith("\n")
    rec["lines"] = text[:-1].split("\n")
    rec["rows"] = rows(tracking, s, len(train_loader), rec["lines"])
    rec["rand_after"] = torch.rand(3).tolist()
    assert policy.training and not reference.training

    if fmt == "alpaca" and s["seed"] == 123:  # the notebook's own cell 123 (it seeds 123) prints the same
        def generate_n(**kw):  # the cell's max_new_tokens=256 becomes the run's
            return pc.generate(**dict(kw, max_new_tokens=s["max_new_tokens"]))
        cell_ns = dict(ns, torch=torch, val_data=val_data, reference_model=reference, policy_model=policy,
                       generate=generate_n, text_to_token_ids=pc.text_to_token_ids,
                       token_ids_to_text=pc.token_ids_to_text, tokenizer=tok, device="cpu",
                       BASE_CONFIG={"context_length": ctx})
        cell_out = io.StringIO()
        with contextlib.redirect_stdout(cell_out):
            exec(compile(cell_123, NOTEBOOK + "[cell 123]", "exec"), cell_ns)
        tail = cell_out.getvalue()
        if not text.endswith(tail):
            raise RuntimeError("%s: the notebook's cell 123 prints other responses" % s["name"])
    return rec


def responses(pc, policy, reference, entries, fmt, tok, ctx, max_new_tokens, end_id, format_input):
    """Cell 123's loop: the reference's response, then the policy's."""
    out = []
    for entry in entries:
        if fmt == "chat":
            input_text, ids = dt.prompt_of(entry, tok, fmt)
            cut = len(tok.decode(ids).encode("utf-8"))
        else:
            input_text = format_input(entry)
            ids = pc.text_to_token_ids(input_text, tok)[0].tolist()
        texts = []
        for model in (reference, policy):
            token_ids = pc.generate(model=model, idx=torch.tensor([ids]), max_new_tokens=max_new_tokens,
                                    context_size=ctx, eos_id=end_id)
            if fmt == "chat":  # decoder_train.py's cut: after the decoded prompt's bytes
                generated = tok.decode_bytes(token_ids.squeeze(0).tolist())[cut:].decode("utf-8", errors="replace")
            else:
                generated = pc.token_ids_to_text(token_ids, tok)[len(input_text):]
            texts.append(generated.replace("### Response:", "").strip())
        out.append({"reference": texts[0], "policy": texts[1]})
        print(input_text)
        print(f"\nCorrect response:\n>> {entry['output']}")
        print(f"\nReference model response:\n>> {texts[0].strip()}")
        print(f"\nPolicy model response:\n>> {texts[1].strip()}")
        print("\n" + SEPARATOR + "\n")
    return out


def rows(tracking, s, batches, lines):
    """The evaluations as rows; their epochs and steps are those of the
    printed "Ep" lines."""
    steps = [t for t in range(s["epochs"] * batches) if t % s["eval_freq"] == 0]
    n = len(tracking["train_losses"])
    assert len(steps) == n, (steps, n)
    out = []
    for i, step in enumerate(steps):
        r = {"epoch": step // batches + 1, "step": step, "tokens_seen": tracking["tokens_seen"][i]}
        for k, t in (("train_loss", "train_losses"), ("val_loss", "val_losses")):
            r[k] = tracking[t][i]
        r["train_reward_margin"] = tracking["train_chosen_rewards"][i] - tracking["train_rejected_rewards"][i]
        r["val_reward_margin"] = tracking["val_chosen_rewards"][i] - tracking["val_rejected_rewards"][i]
        for k in ("train_chosen", "train_rejected", "val_chosen", "val_rejected"):
            r[k + "_reward"] = tracking[k + "_rewards"][i]
        out.append(r)
        want = (f"Ep {r['epoch']} (Step {step:06d}): Train loss {r['train_loss']:.3f}, Val loss {r['val_loss']:.3f}, "
                f"Train reward margins {r['train_reward_margin']:.3f}, Val reward margins {r['val_reward_margin']:.3f}")
        assert want in lines, want
    return out


# ---------------------------------------------------------------------- main

def generate(outdir):
    book_dir, why = dec.book_location()
    if book_dir is None:
        print("%s: %s not regenerated (see tools/reference/dpo.py)" % (why, OUT_NAME))
        return
    root, why = notebook_root((NOTEBOOK, PREVIOUS_CHAPTERS))
    if root is None:
        print("%s: %s not regenerated (see tools/reference/dpo.py)" % (why, OUT_NAME))
        return
    qpath = os.path.join(REPO, dt.QWEN3_TOKENIZER)
    if not os.path.isfile(qpath):
        print("no %s: %s not regenerated" % (dt.QWEN3_TOKENIZER, OUT_NAME))
        return
    t0 = time.time()
    with open(os.path.join(REPO, DATA), encoding="utf-8") as f:
        entries = json.load(f)
    toks = {"gpt2": Tokenizer(), "qwen3": dt.HFTokenizer("qwen3", qpath, dt.QWEN3_TOKENIZER, None)}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as tools/make_reference.py: deterministic reductions
    notes = []
    try:
        with dec.book_code(book_dir) as b, previous_chapters(root) as pc:
            _, notebook, _ = load_notebook(root)
            commit = notebook_commit(root)
            print("book notebook: %s (commit %s), cells %s" % (NOTEBOOK, commit, notebook["cells"]))
            obj = {"torch_version": torch.__version__, "book_commit": commit, "notebook": notebook, "data": DATA,
                   "runs": [], "notes": notes}
            for spec in RUNS:
                t1 = time.time()
                rec = dpo_run(b, pc, root, spec, entries, toks[spec.get("family", "gpt2")], notes)
                obj["runs"].append(rec)
                print("%s: %d rows, %d/%d batches, longest %d ids, %d trainable parameters, %.1f s"
                      % (rec["name"], len(rec["rows"]), rec["train_batches"], rec["val_batches"],
                         rec["longest_ids"], rec["trainable_parameters"], time.time() - t1))
                for line in rec["lines"][:6] + ["..."] + rec["lines"][-4:]:
                    print("  " + line)
    finally:
        torch.set_num_threads(threads)
    write_json(outdir, OUT_NAME, obj)
    for n in notes:
        print("  note: " + n)
    print("dpo references: %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    generate(os.path.join(REPO, "tests", "ref"))
