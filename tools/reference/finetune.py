"""tests/ref/finetune.json: the book's fine-tuning runs (chapter 6's spam
classifier, chapter 7's instruction follower, appendix E's LoRA), and the
fixtures they read.

Fixtures, written here too (tests/ref/finetune/):
  train.csv, val.csv, test.csv   a small synthetic ham/spam set ("Label,Text",
      labels 0/1), drawn from a seeded random.Random: commas, doubled quotes and
      a newline inside quoted fields (RFC 4180), UTF-8 (café, naïve, €, an
      emoji); one validation and one test text are longer than the longest
      training text, so the training set's padded length truncates them.
  instruction-40.json   the first 40 entries of the book's instruction data
      (../shared/data/instruction-data.json next to the source tree; when that
      file is missing the committed tests/ref/finetune/instruction-40.json is
      read instead and not rewritten).

The runs use the book's code: SpamDataset, calc_accuracy_loader,
calc_loss_batch / calc_loss_loader / evaluate_model (last-token versions) and
train_classifier_simple of chapter 6; InstructionDataset, custom_collate_fn
(allowed_max_length), format_input, the 85/10/5 split, train_model_simple,
generate_and_print_sample (argmax over the logits, 50 new tokens) and
generate(eos_id=50256) of chapter 7; LoRALayer (output scaled by
alpha / rank, A = kaiming_uniform_(a=sqrt(5)), B zeros), LinearWithLoRA and
replace_linear_with_lora of appendix E. Real torch DataLoaders
(num_workers=0); the tokenizer is GPT-2's BPE (tools/reference/pretrain.py's
Tokenizer). The CSV files are read by pandas.read_csv as the book does when
pandas is installed, by the csv module otherwise (the generator checks that
both agree when it can).

Random draws from the default generator, in order:
  classify: manual_seed(s); GPTModel(cfg) (with an init: then
    load_state_dict(init)); freeze all; manual_seed(s);
    out_head = Linear(emb, 2); with LoRA freeze all and replace every Linear
    (named_children order, recursively, out_head included), each LoRALayer
    drawing A; without LoRA unfreeze trf_blocks[-1] and final_norm (out_head
    is new, so trainable); manual_seed(s); AdamW(model.parameters());
    train_classifier_simple; then calc_accuracy_loader over the whole train,
    validation and test loaders, in that order.
  instruct: manual_seed(s); GPTModel(cfg) (init as above); with LoRA freeze
    all and replace every Linear; AdamW(model.parameters()); manual_seed(s);
    train_model_simple; then, for each test entry, a greedy generate() of
    max_new_tokens with eos_id 50256.
Each iter() of a DataLoader draws its base seed; the shuffled train loader
draws its sampler's seed at its first batch; dropout draws in training mode
(not at p = 0). Chapter 7's code generates the test responses in whatever
mode training left the model: training mode (generate_and_print_sample ends
with model.train()). The book runs it with dropout 0, where the two modes
agree; with dropout the responses are drawn through dropout masks, as the
book's code draws them, and so are tapegrad's.

The pretraining that *_init runs start from is chapter 5's, run as
tools/reference/pretrain.py runs it (its setup() and train_model_simple()),
for `tapegrad pretrain` with the arguments recorded in "init_pretrain_args"
(the --text path relative to the source tree's root); its model's
state_dict is the init.

    {"torch_version",
     "runs": [{"name", "kind": "classify"|"instruct",
               "config": {"vocab_size", "context_length", "emb_dim", "n_heads",
                          "n_layers", "drop_rate", "qkv_bias"},
               "seed", "epochs", "batch", "lr", "weight_decay", "eval_freq",
               "eval_iter",
               "max_length": null or int,          # classify's --max-length
               "lora_rank", "lora_alpha": null or numbers,
               "limit", "allowed_max_length", "max_new_tokens": (instruct; null
                                                   for classify)
               "train", "val", "test" (classify) / "data" (instruct): fixture
                   paths relative to the folder of finetune.json,
               "init_pretrain_args": null or [str] (after `tapegrad pretrain`),
               "init_pretrain_lines": null or the pretraining's printed lines,
               "padded_length" (classify: the training set's max_length),
               "split": [train, val, test] sizes,
               "train_batches", "val_batches", "test_batches",
               "lines": [str],        # stdout, split at "\\n"
               "rows": [{"epoch" (1-based), "step", "train_loss", "val_loss",
                         "examples_seen" | "tokens_seen"}],
               "train_accuracy", "val_accuracy": [per epoch] (classify; [] for
                   instruct),
               "test_accuracy": float (classify) or null,
               "final_accuracy": {"train", "val", "test"} (classify),
               "responses": [str] (instruct; one per test entry),
               "trainable_parameters": int,
               "rand_after": [3 floats]}]}   # torch.rand(3) at the end

"lines" is everything the book's code prints, captured and split at "\\n"
(not str.splitlines: a decoded sample may hold "\\r" or U+2028):
  classify: "Ep {e} (Step {step:06d}): Train loss {:.3f}, Val loss {:.3f}" per
    evaluation, "Training accuracy: {:.2f}% | Validation accuracy: {:.2f}%"
    per epoch, then "Training accuracy: {:.2f}%", "Validation accuracy:
    {:.2f}%", "Test accuracy: {:.2f}%" over the whole loaders.
  instruct: the Ep lines, one sample line per epoch (decoded text, "\\n"
    replaced by " "), then per test entry as the chapter's notebook prints
    it: format_input(entry), "", "Correct response:", ">> {output}", "",
    "Model response:", ">> {response}", "-------------------------------------".
"""
import contextlib
import csv
import io
import json
import math
import os
import random
from functools import partial

import torch
from torch.utils.data import DataLoader, Dataset

from . import pretrain as ch5
from .common import write_json
from . import gpt_book
from .gpt_book import GPTModel
from .pretrain import Tokenizer
from .tokenizer import ROOT

FIXTURES = "finetune"
INSTRUCTION_DATA = os.path.join(ROOT, "..", "shared", "data", "instruction-data.json")
INSTRUCTION_LIMIT = 40


# ---- the classifier's data set ------------------------------------------------

HAM_WORDS = ("hey are we still on for lunch tomorrow can you pick up the kids after school thanks "
             "dinner last night see at café around six I'll call mum later running late sorry did "
             "get my email about meeting naïve question but where is key ok sounds good love home "
             "soon bring an umbrella it's raining happy birthday train was delayed again garden "
             "book club Sunday").split()
SPAM_WORDS = ("WINNER you have won a £1000 prize claim now call 0800 free entry txt WIN to 80086 "
              "urgent your account cash reward guaranteed click here limited offer ringtone mobile "
              "update bonus €500 voucher today only STOP reply YES exclusive deal").split()

SPECIAL_ROWS = {
    "train": [
        (0, 'She said "see you at the café" and left'),
        (1, 'Congratulations! Reply "YES" to claim your free prize,\nthen call 0800 123 456 today'),
        (0, "A naïve plan, but it might work"),
        (0, "Meeting moved to 3pm\nbring the résumé drafts"),
        (1, "FREE \U0001F389 entry: text WIN to 80086, T&Cs apply"),
        (0, "ok see you"),
        (1, '""Exclusive"" deal: cash reward, guaranteed!'),
    ],
    "val": [
        (0, '"Quoted" start, then more text here'),
        (1, "You won a €500 voucher, call now"),
    ],
    "test": [
        (0, "Crème brûlée at the café, 7pm?"),
        (1, 'URGENT: your account is locked, "verify" now\nor lose access'),
    ],
}
# Longer than any training text: truncated to the training set's length.
LONG_ROWS = {
    "val": (1, "WINNER WINNER!!! You have been selected for an exclusive £1000 cash reward, guaranteed, "
               "claim now by calling 0800-555-0199 or txt WIN to 80086; limited offer, T&Cs apply, "
               "reply STOP to unsubscribe from these amazing bonus voucher messages today only please"),
    "test": (0, "Hey, are we still on for the book club on Sunday afternoon? I'll bring the naïve "
                "little cake from the café around the corner, and mum says she might come too if "
                "the train isn't delayed again like last weekend"),
}
SPLIT_SIZES = {"train": 50, "val": 15, "test": 13}


def _random_text(rng, label, max_words):
    words = HAM_WORDS if label == 0 else SPAM_WORDS
    n = rng.randint(3, max_words)
    out = []
    for i in range(n):
        w = rng.choice(words)
        if i == 0:
            w = w[:1].upper() + w[1:]
        if i < n - 1 and rng.random() < 0.12:
            w += rng.choice([",", ",", "!", "."])
        out.append(w)
    end = rng.choice(["", ".", "!", "?"]) if label == 0 else rng.choice(["", "!", "!!"])
    return " ".join(out) + end


def make_classifier_data(seed=2024):
    """{"train"|"val"|"test": [(label, text)]}, deterministic."""
    rng = random.Random(seed)
    sets = {}
    for part in ("train", "val", "test"):
        rows = list(SPECIAL_ROWS[part])
        if part in LONG_ROWS:
            rows.append(LONG_ROWS[part])
        while len(rows) < SPLIT_SIZES[part]:
            label = rng.randint(0, 1)
            rows.append((label, _random_text(rng, label, 24)))
        rng.shuffle(rows)
        sets[part] = rows
    return sets


def write_csv(path, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
        w.writerow(["Label", "Text"])
        for label, text in rows:
            w.writerow([label, text])


def read_csv_rows(path):
    """(labels, texts) with the csv module: what pd.read_csv gives for these files."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["Label", "Text"], path
    return [int(r[0]) for r in rows[1:]], [r[1] for r in rows[1:]]


class _Frame:
    """The two columns of the book's DataFrame, for when pandas is missing."""

    def __init__(self, path):
        self.labels, self.texts = read_csv_rows(path)

    def __getitem__(self, col):
        return {"Label": self.labels, "Text": self.texts}[col]

    def __len__(self):
        return len(self.texts)


def read_csv(path):
    try:
        import pandas as pd
    except ImportError:
        return _Frame(path)
    return pd.read_csv(path)


def label_at(data, index):
    if isinstance(data, _Frame):
        return data.labels[index]
    return data.iloc[index]["Label"]


# ---- the book's chapter-6 code -------------------------------------------------

class SpamDataset(Dataset):
    def __init__(self, csv_file, tokenizer, max_length=None, pad_token_id=50256):
        self.data = read_csv(csv_file)
        self.encoded_texts = [tokenizer.encode(text) for text in self.data["Text"]]
        if max_length is None:
            self.max_length = self._longest_encoded_length()
        else:
            self.max_length = max_length
            self.encoded_texts = [encoded_text[:self.max_length] for encoded_text in self.encoded_texts]
        self.encoded_texts = [encoded_text + [pad_token_id] * (self.max_length - len(encoded_text))
                              for encoded_text in self.encoded_texts]

    def __getitem__(self, index):
        encoded = self.encoded_texts[index]
        label = label_at(self.data, index)
        return torch.tensor(encoded, dtype=torch.long), torch.tensor(label, dtype=torch.long)

    def __len__(self):
        return len(self.data)

    def _longest_encoded_length(self):
        max_length = 0
        for encoded_text in self.encoded_texts:
            if len(encoded_text) > max_length:
                max_length = len(encoded_text)
        return max_length


def calc_accuracy_loader(data_loader, model, num_batches=None):
    model.eval()
    correct_predictions, num_examples = 0, 0
    if num_batches is None:
        num_batches = len(data_loader)
    else:
        num_batches = min(num_batches, len(data_loader))
    for i, (input_batch, target_batch) in enumerate(data_loader):
        if i < num_batches:
            with torch.no_grad():
                logits = model(input_batch)[:, -1, :]
            predicted_labels = torch.argmax(logits, dim=-1)
            num_examples += predicted_labels.shape[0]
            correct_predictions += (predicted_labels == target_batch).sum().item()
        else:
            break
    return correct_predictions / num_examples


def calc_loss_batch_cls(input_batch, target_batch, model):
    logits = model(input_batch)[:, -1, :]
    return torch.nn.functional.cross_entropy(logits, target_batch)


def calc_loss_loader_cls(data_loader, model, num_batches=None):
    total_loss = 0.
    if len(data_loader) == 0:
        return float("nan")
    elif num_batches is None:
        num_batches = len(data_loader)
    else:
        num_batches = min(num_batches, len(data_loader))
    for i, (input_batch, target_batch) in enumerate(data_loader):
        if i < num_batches:
            total_loss += calc_loss_batch_cls(input_batch, target_batch, model).item()
        else:
            break
    return total_loss / num_batches


def evaluate_model_cls(model, train_loader, val_loader, eval_iter):
    model.eval()
    with torch.no_grad():
        train_loss = calc_loss_loader_cls(train_loader, model, num_batches=eval_iter)
        val_loss = calc_loss_loader_cls(val_loader, model, num_batches=eval_iter)
    model.train()
    return train_loss, val_loss


def train_classifier_simple(model, train_loader, val_loader, optimizer, num_epochs, eval_freq, eval_iter, out):
    examples_seen, global_step = 0, -1
    for epoch in range(num_epochs):
        model.train()
        for input_batch, target_batch in train_loader:
            optimizer.zero_grad()
            loss = calc_loss_batch_cls(input_batch, target_batch, model)
            loss.backward()
            optimizer.step()
            examples_seen += input_batch.shape[0]
            global_step += 1
            if global_step % eval_freq == 0:
                train_loss, val_loss = evaluate_model_cls(model, train_loader, val_loader, eval_iter)
                out["rows"].append({"epoch": epoch + 1, "step": global_step, "train_loss": train_loss,
                                    "val_loss": val_loss, "examples_seen": examples_seen})
                print(f"Ep {epoch+1} (Step {global_step:06d}): "
                      f"Train loss {train_loss:.3f}, Val loss {val_loss:.3f}")
        train_accuracy = calc_accuracy_loader(train_loader, model, num_batches=eval_iter)
        val_accuracy = calc_accuracy_loader(val_loader, model, num_batches=eval_iter)
        print(f"Training accuracy: {train_accuracy*100:.2f}% | ", end="")
        print(f"Validation accuracy: {val_accuracy*100:.2f}%")
        out["train_accuracy"].append(train_accuracy)
        out["val_accuracy"].append(val_accuracy)
    return examples_seen


# ---- the book's chapter-7 code -------------------------------------------------

def format_input(entry):
    instruction_text = (
        f"Below is an instruction that describes a task. "
        f"Write a response that appropriately completes the request."
        f"\n\n### Instruction:\n{entry['instruction']}"
    )
    input_text = f"\n\n### Input:\n{entry['input']}" if entry["input"] else ""
    return instruction_text + input_text


class InstructionDataset(Dataset):
    def __init__(self, data, tokenizer):
        self.data = data
        self.encoded_texts = []
        for entry in data:
            instruction_plus_input = format_input(entry)
            response_text = f"\n\n### Response:\n{entry['output']}"
            self.encoded_texts.append(tokenizer.encode(instruction_plus_input + response_text))

    def __getitem__(self, index):
        return self.encoded_texts[index]

    def __len__(self):
        return len(self.data)


def custom_collate_fn(batch, pad_token_id=50256, ignore_index=-100, allowed_max_length=None):
    batch_max_length = max(len(item) + 1 for item in batch)
    inputs_lst, targets_lst = [], []
    for item in batch:
        new_item = item.copy()
        new_item += [pad_token_id]
        padded = new_item + [pad_token_id] * (batch_max_length - len(new_item))
        inputs = torch.tensor(padded[:-1])
        targets = torch.tensor(padded[1:])
        mask = targets == pad_token_id
        indices = torch.nonzero(mask).squeeze()
        if indices.numel() > 1:
            targets[indices[1:]] = ignore_index
        if allowed_max_length is not None:
            inputs = inputs[:allowed_max_length]
            targets = targets[:allowed_max_length]
        inputs_lst.append(inputs)
        targets_lst.append(targets)
    return torch.stack(inputs_lst), torch.stack(targets_lst)


def text_to_token_ids(text, tokenizer):
    return torch.tensor(tokenizer.encode(text, allowed_special={"<|endoftext|>"})).unsqueeze(0)


def token_ids_to_text(token_ids, tokenizer):
    return tokenizer.decode(token_ids.squeeze(0).tolist())


def generate_text_simple(model, idx, max_new_tokens, context_size):
    for _ in range(max_new_tokens):
        idx_cond = idx[:, -context_size:]
        with torch.no_grad():
            logits = model(idx_cond)
        logits = logits[:, -1, :]
        idx_next = torch.argmax(logits, dim=-1, keepdim=True)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


def generate_and_print_sample(model, tokenizer, start_context):
    model.eval()
    context_size = model.pos_emb.weight.shape[0]
    encoded = text_to_token_ids(start_context, tokenizer)
    with torch.no_grad():
        token_ids = generate_text_simple(model=model, idx=encoded, max_new_tokens=50, context_size=context_size)
        decoded_text = token_ids_to_text(token_ids, tokenizer)
        print(decoded_text.replace("\n", " "))
    model.train()


def train_model_simple(model, train_loader, val_loader, optimizer, num_epochs, eval_freq, eval_iter,
                       start_context, tokenizer, out):
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
        generate_and_print_sample(model, tokenizer, start_context)
    return tokens_seen


# ---- appendix E's LoRA ----------------------------------------------------------

class LoRALayer(torch.nn.Module):
    def __init__(self, in_dim, out_dim, rank, alpha):
        super().__init__()
        self.A = torch.nn.Parameter(torch.empty(in_dim, rank))
        torch.nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))
        self.B = torch.nn.Parameter(torch.zeros(rank, out_dim))
        self.alpha = alpha
        self.rank = rank

    def forward(self, x):
        return (self.alpha / self.rank) * (x @ self.A @ self.B)


class LinearWithLoRA(torch.nn.Module):
    def __init__(self, linear, rank, alpha):
        super().__init__()
        self.linear = linear
        self.lora = LoRALayer(linear.in_features, linear.out_features, rank, alpha)

    def forward(self, x):
        return self.linear(x) + self.lora(x)


def replace_linear_with_lora(model, rank, alpha):
    for name, module in model.named_children():
        if isinstance(module, torch.nn.Linear):
            setattr(model, name, LinearWithLoRA(module, rank, alpha))
        else:
            replace_linear_with_lora(module, rank, alpha)


def trainable_parameters(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# ---- chapter 5's pretraining for the *_init runs ---------------------------------

PRETRAIN_TEXT = "data/the-verdict.txt"


def pretrain_spec(context):
    """The pretraining settings: the CLI's defaults but for the model's size,
    one epoch and stride = context."""
    return dict(vocab_size=50257, context=context, emb=32, heads=2, layers=2, drop=0.0, qkv_bias=False,
                seed=123, batch=2, epochs=1, lr=4e-4, weight_decay=0.1, eval_freq=5, eval_iter=5,
                train_ratio=0.9, stride=context, start="Every effort moves you", sample_tokens=50)


def pretrain_args(s):
    """`tapegrad pretrain` arguments for s (as tests/check_pretrain_output.py writes them)."""
    a = ["--text", PRETRAIN_TEXT, "--seed", s["seed"], "--vocab", s["vocab_size"], "--context", s["context"],
         "--emb", s["emb"], "--heads", s["heads"], "--layers", s["layers"], "--dropout", repr(s["drop"]),
         "--batch", s["batch"], "--epochs", s["epochs"], "--lr", repr(s["lr"]),
         "--weight-decay", repr(s["weight_decay"]), "--eval-freq", s["eval_freq"], "--eval-iter", s["eval_iter"],
         "--train-ratio", repr(s["train_ratio"]), "--stride", s["stride"], "--start", s["start"],
         "--sample-tokens", s["sample_tokens"]]
    if s["qkv_bias"]:
        a.append("--qkv-bias")
    return [str(x) for x in a]


def pretrained(context, tokenizer, cache={}):
    """(state_dict, args, lines) of the pretraining run for this context."""
    if context not in cache:
        with open(os.path.join(ROOT, PRETRAIN_TEXT), encoding="utf-8") as f:
            text = f.read()
        s = pretrain_spec(context)
        _, model, optimizer, train_loader, val_loader = ch5.setup(s, text, tokenizer)
        out = {"rows": [], "samples": [], "lines": []}
        ch5.train_model_simple(model, train_loader, val_loader, optimizer, s["epochs"], s["eval_freq"],
                               s["eval_iter"], s["start"], tokenizer, s["sample_tokens"], out)
        sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
        cache[context] = (sd, pretrain_args(s), out["lines"])
    return cache[context]


# ---- runs ----------------------------------------------------------------------

MODEL = dict(vocab_size=50257, emb=32, heads=2, layers=2, qkv_bias=False)
CLASSIFY = dict(kind="classify", context=128, drop=0.0, epochs=3, batch=8, lr=5e-4, weight_decay=0.1,
                eval_freq=2, eval_iter=2, seed=123, max_length=None, lora_rank=None, lora_alpha=None,
                init=False)
INSTRUCT = dict(kind="instruct", context=256, drop=0.0, epochs=2, batch=8, lr=5e-4, weight_decay=0.1,
                eval_freq=2, eval_iter=2, seed=123, limit=INSTRUCTION_LIMIT, allowed_max_length=256,
                max_new_tokens=20, lora_rank=None, lora_alpha=None, init=False)

RUNS = [
    dict(CLASSIFY, name="classify"),
    dict(CLASSIFY, name="classify_lora_dropout", drop=0.1, lora_rank=4, lora_alpha=8),
    dict(CLASSIFY, name="classify_maxlen", max_length=16, drop=0.1, seed=7, qkv_bias=True),
    dict(CLASSIFY, name="classify_init", init=True),
    dict(INSTRUCT, name="instruct"),
    dict(INSTRUCT, name="instruct_lora_dropout", drop=0.1, lora_rank=4, lora_alpha=8),
    dict(INSTRUCT, name="instruct_init", drop=0.1, init=True),
]


def model_config(s):
    return {"vocab_size": s["vocab_size"], "context_length": s["context"], "emb_dim": s["emb"],
            "n_heads": s["heads"], "n_layers": s["layers"], "drop_rate": s["drop"], "qkv_bias": s["qkv_bias"]}


def new_record(s, cfg):
    return {"name": s["name"], "kind": s["kind"], "config": cfg, "seed": s["seed"], "epochs": s["epochs"],
            "batch": s["batch"], "lr": s["lr"], "weight_decay": s["weight_decay"], "eval_freq": s["eval_freq"],
            "eval_iter": s["eval_iter"], "max_length": s.get("max_length"), "lora_rank": s["lora_rank"],
            "lora_alpha": s["lora_alpha"], "limit": s.get("limit"),
            "allowed_max_length": s.get("allowed_max_length"), "max_new_tokens": s.get("max_new_tokens"),
            "init_pretrain_args": None, "init_pretrain_lines": None,
            "rows": [], "train_accuracy": [], "val_accuracy": [], "test_accuracy": None, "responses": None}


def new_model(s, cfg, rec, tokenizer):
    """manual_seed(s); GPTModel(cfg); then s["init_state"] (a state_dict) or, for an
    init run, the pretraining's weights."""
    torch.manual_seed(s["seed"])
    model = GPTModel(cfg)
    if s.get("init_state") is not None:
        model.load_state_dict(s["init_state"])
    elif s["init"]:
        sd, args, lines = pretrained(cfg["context_length"], tokenizer)
        model.load_state_dict(sd)
        rec["init_pretrain_args"], rec["init_pretrain_lines"] = args, lines
    return model


def classify_run(s, paths, tokenizer):
    """paths: {"train", "val", "test"}: the CSV files."""
    cfg = model_config(s)
    rec = new_record(s, cfg)
    for p in paths:
        rec[p] = FIXTURES + "/" + p + ".csv"
    train_dataset = SpamDataset(paths["train"], tokenizer, max_length=s["max_length"])
    val_dataset = SpamDataset(paths["val"], tokenizer, max_length=train_dataset.max_length)
    test_dataset = SpamDataset(paths["test"], tokenizer, max_length=train_dataset.max_length)
    assert train_dataset.max_length <= cfg["context_length"]
    torch.manual_seed(s["seed"])
    train_loader = DataLoader(dataset=train_dataset, batch_size=s["batch"], shuffle=True, num_workers=0,
                              drop_last=True)
    val_loader = DataLoader(dataset=val_dataset, batch_size=s["batch"], num_workers=0, drop_last=False)
    test_loader = DataLoader(dataset=test_dataset, batch_size=s["batch"], num_workers=0, drop_last=False)
    rec.update(padded_length=train_dataset.max_length,
               split=[len(train_dataset), len(val_dataset), len(test_dataset)],
               train_batches=len(train_loader), val_batches=len(val_loader), test_batches=len(test_loader))

    model = new_model(s, cfg, rec, tokenizer)
    for param in model.parameters():
        param.requires_grad = False
    torch.manual_seed(s["seed"])
    model.out_head = torch.nn.Linear(in_features=cfg["emb_dim"], out_features=2)
    if s["lora_rank"] is not None:
        for param in model.parameters():
            param.requires_grad = False
        replace_linear_with_lora(model, rank=s["lora_rank"], alpha=s["lora_alpha"])
    else:
        for param in model.trf_blocks[-1].parameters():
            param.requires_grad = True
        for param in model.final_norm.parameters():
            param.requires_grad = True
    rec["trainable_parameters"] = trainable_parameters(model)

    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        torch.manual_seed(s["seed"])
        optimizer = torch.optim.AdamW(model.parameters(), lr=s["lr"], weight_decay=s["weight_decay"])
        train_classifier_simple(model, train_loader, val_loader, optimizer, s["epochs"], s["eval_freq"],
                                s["eval_iter"], rec)
        train_accuracy = calc_accuracy_loader(train_loader, model)
        val_accuracy = calc_accuracy_loader(val_loader, model)
        test_accuracy = calc_accuracy_loader(test_loader, model)
        print(f"Training accuracy: {train_accuracy*100:.2f}%")
        print(f"Validation accuracy: {val_accuracy*100:.2f}%")
        print(f"Test accuracy: {test_accuracy*100:.2f}%")
    rec["test_accuracy"] = test_accuracy
    rec["final_accuracy"] = {"train": train_accuracy, "val": val_accuracy, "test": test_accuracy}
    return rec, model, stdout.getvalue()


def instruct_run(s, entries, tokenizer):
    cfg = model_config(s)
    rec = new_record(s, cfg)
    rec["data"] = FIXTURES + "/instruction-%d.json" % INSTRUCTION_LIMIT
    data = entries[:s["limit"]]
    train_portion = int(len(data) * 0.85)
    test_portion = int(len(data) * 0.1)
    train_data = data[:train_portion]
    test_data = data[train_portion:train_portion + test_portion]
    val_data = data[train_portion + test_portion:]
    collate = partial(custom_collate_fn, allowed_max_length=s["allowed_max_length"])
    torch.manual_seed(s["seed"])
    train_dataset = InstructionDataset(train_data, tokenizer)
    train_loader = DataLoader(train_dataset, batch_size=s["batch"], collate_fn=collate, shuffle=True,
                              drop_last=True, num_workers=0)
    val_dataset = InstructionDataset(val_data, tokenizer)
    val_loader = DataLoader(val_dataset, batch_size=s["batch"], collate_fn=collate, shuffle=False,
                            drop_last=False, num_workers=0)
    rec.update(split=[len(train_data), len(val_data), len(test_data)], train_batches=len(train_loader),
               val_batches=len(val_loader), test_batches=None)

    model = new_model(s, cfg, rec, tokenizer)
    if s["lora_rank"] is not None:
        for param in model.parameters():
            param.requires_grad = False
        replace_linear_with_lora(model, rank=s["lora_rank"], alpha=s["lora_alpha"])
    rec["trainable_parameters"] = trainable_parameters(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=s["lr"], weight_decay=s["weight_decay"])

    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        torch.manual_seed(s["seed"])
        train_model_simple(model, train_loader, val_loader, optimizer, s["epochs"], s["eval_freq"],
                           s["eval_iter"], format_input(val_data[0]), tokenizer, rec)
        rec["responses"] = []
        for entry in test_data:
            input_text = format_input(entry)
            token_ids = gpt_book.generate(model=model, idx=text_to_token_ids(input_text, tokenizer),
                                          max_new_tokens=s["max_new_tokens"], context_size=cfg["context_length"],
                                          eos_id=50256)
            generated_text = token_ids_to_text(token_ids, tokenizer)
            response_text = generated_text[len(input_text):].replace("### Response:", "").strip()
            rec["responses"].append(response_text)
            print(input_text)
            print(f"\nCorrect response:\n>> {entry['output']}")
            print(f"\nModel response:\n>> {response_text.strip()}")
            print("-------------------------------------")
    return rec, model, stdout.getvalue()


def run(spec, fixtures, entries, tokenizer):
    s = dict(MODEL)
    s.update(spec)
    if s["kind"] == "classify":
        paths = {p: os.path.join(fixtures, p + ".csv") for p in ("train", "val", "test")}
        rec, model, text = classify_run(s, paths, tokenizer)
    else:
        rec, model, text = instruct_run(s, entries, tokenizer)
    assert text.endswith("\n")
    rec["lines"] = text[:-1].split("\n")
    rec["rand_after"] = torch.rand(3).tolist()
    if s["lora_rank"] is not None:
        ab = sum(p.numel() for n, p in model.named_parameters() if n.endswith(".lora.A") or n.endswith(".lora.B"))
        assert rec["trainable_parameters"] == ab, (rec["trainable_parameters"], ab)
    return rec


# ---- fixtures --------------------------------------------------------------------

def write_fixtures(fixtures, tokenizer):
    os.makedirs(fixtures, exist_ok=True)
    sets = make_classifier_data()
    for part, rows in sets.items():
        path = os.path.join(fixtures, part + ".csv")
        write_csv(path, rows)
        labels, texts = read_csv_rows(path)
        assert list(zip(labels, texts)) == rows, path
        try:
            import pandas as pd
        except ImportError:
            pd = None
        if pd is not None:
            df = pd.read_csv(path)
            assert [int(x) for x in df["Label"]] == labels and list(df["Text"]) == texts, path
        assert all(3 <= len(t.split()) <= 40 and "<|endoftext|>" not in t for t in texts), path
    lengths = {p: [len(tokenizer.encode(t)) for _, t in rows] for p, rows in sets.items()}
    longest = max(lengths["train"])
    assert longest < 100, longest
    assert max(lengths["val"]) > longest and max(lengths["test"]) > longest, lengths

    path = os.path.join(fixtures, "instruction-%d.json" % INSTRUCTION_LIMIT)
    if os.path.exists(INSTRUCTION_DATA):
        with open(INSTRUCTION_DATA, encoding="utf-8") as f:
            entries = json.load(f)[:INSTRUCTION_LIMIT]
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(entries, indent=4, ensure_ascii=False) + "\n")
    else:
        path = os.path.join(ROOT, "tests", "ref", FIXTURES, os.path.basename(path))
    with open(path, encoding="utf-8") as f:
        entries = json.load(f)
    assert len(entries) == INSTRUCTION_LIMIT
    print("wrote %s/{train,val,test}.csv (%d/%d/%d rows, longest training text %d ids), %s"
          % (fixtures, len(sets["train"]), len(sets["val"]), len(sets["test"]), longest, os.path.basename(path)))
    return entries


def generate(outdir):
    tokenizer = Tokenizer()
    fixtures = os.path.join(outdir, FIXTURES)
    entries = write_fixtures(fixtures, tokenizer)
    runs = []
    for spec in RUNS:
        rec = run(spec, fixtures, entries, tokenizer)
        runs.append(rec)
        print("%s: %d rows, %d trainable parameters" % (rec["name"], len(rec["rows"]), rec["trainable_parameters"]))
        for line in rec["lines"][:2] + ["..."] + rec["lines"][-2:]:
            print("  " + line)
    write_json(outdir, "finetune.json", {"torch_version": torch.__version__, "runs": runs})
