"""tests/ref/pretrain.json: the book's chapter-5 pretraining loop and its parts.

"runs": train_model_simple() of chapter 5 on data/the-verdict.txt with the
book's GPTModel (tools/reference/gpt_book.py), GPTDatasetV1 and
create_dataloader_v1 (real torch DataLoader objects), calc_loss_batch,
calc_loss_loader, evaluate_model, generate_text_simple (greedy) and
generate_and_print_sample; the tokenizer is GPT-2's BPE
(tools/reference/tokenizer.py, "<|endoftext|>" allowed). One run:

    split_idx = int(train_ratio * len(text))
    train_data, val_data = text[:split_idx], text[split_idx:]
    torch.manual_seed(seed)
    train_loader = create_dataloader_v1(train_data, batch, context, stride,
                                        shuffle=True, drop_last=True)
    val_loader = create_dataloader_v1(val_data, batch, context, stride,
                                      shuffle=False, drop_last=False)
    torch.manual_seed(seed); model = GPTModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr,
                                  weight_decay=weight_decay)
    train_model_simple(..., num_epochs=epochs, eval_freq, eval_iter, start)

Random draws from the default generator, in order: dropout masks in training
mode; one int64 each time iter() is called on a DataLoader (the iterator's
base seed), and for the shuffled train loader one more int64 when its first
batch is fetched (the seed of the RandomSampler's randperm generator). So
every evaluation, which iterates both loaders, moves the default generator.

    {"torch_version",
     "runs": [{"name",
               "config": {"vocab_size", "context_length", "emb_dim",
                          "n_heads", "n_layers", "drop_rate", "qkv_bias"},
               "seed", "batch", "epochs", "lr", "weight_decay", "eval_freq",
               "eval_iter", "train_ratio", "stride", "start", "sample_tokens",
               "train_batches", "val_batches",   # len(train_loader), len(val_loader)
               "train_tokens", "val_tokens",     # token count of each text part
               "rows": [{"epoch", "step", "train_loss", "val_loss",
                         "tokens_seen"}],        # one per evaluation
               "samples": [{"text", "ids"}],     # one per epoch; ids include
                                                 # the prompt, text = decode(ids)
               "lines": [str],                   # what print() prints, in order,
                                                 # without the newline
               "rand_after": [3 floats]}],       # torch.rand(3) after training
     "adam": ..., "clip_grad_norm": ..., "sampler": ..., "cross_entropy": ...,
     "dropout_forward": ..., "lr_schedule": ...}

The "Ep" lines are f"Ep {epoch+1} (Step {global_step:06d}): Train loss
{train_loss:.3f}, Val loss {val_loss:.3f}"; epoch in "rows" is 1-based as
printed, step is global_step (0-based). The sample lines are the decoded
text with "\\n" replaced by " ". Decoding maps ids to bytes through GPT-2's
byte tables and the bytes to text as UTF-8 with errors="replace".

"adam": torch.optim.AdamW / Adam (foreach=False) on two parameters of shapes
(3, 4) (randn) and (5,) (rand) from torch.Generator().manual_seed(param_seed);
step k (0-based) sets p.grad = randn(shape) * (0.1 * (k + 1)) from
torch.Generator().manual_seed(grad_seed), parameter by parameter, then calls
optimizer.step().

    {"cases": [{"name", "optimizer": "adamw"|"adam", "lr", "betas": [b1, b2],
                "eps", "weight_decay", "amsgrad", "dtype", "steps",
                "param_seed", "grad_seed",
                "params0": [tensor per param],
                "grads": [[tensor per param] per step],
                "params": [[tensor per param] after each step],
                "state": [{"step": int, "exp_avg", "exp_avg_sq",
                           "max_exp_avg_sq": tensor or null} per param]}]}

"clip_grad_norm": torch.nn.utils.clip_grad_norm_(params, max_norm,
norm_type) on leaf tensors whose .grad is set to "grads"; "total_norm" is
its return value, "clipped" the grads afterwards (multiplied by
min(max_norm / (total_norm + 1e-6), 1) in the grads' dtype).

    {"cases": [{"name", "max_norm", "norm_type": number or "inf", "dtype",
                "grads": [tensor], "total_norm": float,
                "clipped": [tensor]}]}

"sampler": dataset = list(range(n)); after torch.manual_seed(seed), train =
DataLoader(ds, batch_size=batch, shuffle=True, drop_last=True) and val =
DataLoader(ds, batch_size=batch, shuffle=False, drop_last=False). The ops
run in order; "take": null iterates the loader to its end, "take": k runs
`for i, b in enumerate(loader): if i < k: ... else: break` (fetching k + 1
batches when there are that many) and records the k taken.

    {"cases": [{"seed", "n", "batch", "train_batches", "val_batches",
                "ops": [{"loader": "train"|"val", "take": null or k,
                         "batches": [[indices], ...]}],
                "rand_after": [3 floats]}]}

"cross_entropy": torch.nn.functional.cross_entropy(logits, target,
ignore_index=..., reduction=...) on float32 logits (N 6, C 5); "grad" is
d loss.sum() / d logits.

    {"cases": [{"name", "logits", "target" (int64), "ignore_index",
                "reduction": "mean"|"sum"|"none", "loss": tensor,
                "grad": tensor}]}

"dropout_forward": the book's GPTModel(config) built after
torch.manual_seed(seed), in training mode; ids = torch.randint(0, 50, (2, 6),
generator=torch.Generator().manual_seed(5)); targets = ids.roll(-1, dims=1)
(targets[:, j] = ids[:, j + 1], wrapping); logits = model(ids) draws the
dropout masks (drop_emb, then per block: attention weights, drop_shortcut,
drop_shortcut); loss = cross_entropy(logits.flatten(0, 1),
targets.flatten()); loss.backward(); then rand_after = torch.rand(3).

    {"config", "seed", "ids", "targets", "logits", "loss": float,
     "grads": {"tok_emb.weight", "trf_blocks.0.att.W_query.weight",
               "out_head.weight"}, "rand_after": [3 floats]}

"lr_schedule": the book's appendix-D schedule in plain Python: linear warmup
lr = initial_lr + step * (peak_lr - initial_lr) / warmup_steps while step <
warmup_steps, then cosine decay min_lr + (peak_lr - min_lr) * 0.5 * (1 +
cos(pi * (step - warmup_steps) / (total_steps - warmup_steps))).

    {"cases": [{"initial_lr", "peak_lr", "min_lr", "warmup_steps",
                "total_steps", "lrs": [lr at step 0 .. total_steps - 1]}]}
"""
import math
import os

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from .common import tensor_json, write_json
from .gpt_book import GPTModel
from .tokenizer import DATA, Encoder


class Tokenizer:
    """GPT-2 BPE with encode (special token allowed) and decode."""

    def __init__(self):
        self.enc = Encoder()
        self.decoder = {v: k for k, v in self.enc.encoder.items()}
        self.byte_decoder = {v: k for k, v in self.enc.byte_encoder.items()}

    def encode(self, text, allowed_special=None):
        return self.enc.encode(text)

    def decode(self, ids):
        text = "".join(self.decoder[i] for i in ids)
        return bytes(self.byte_decoder[c] for c in text).decode("utf-8", errors="replace")


# ---- the book's chapter-5 code ---------------------------------------------

class GPTDatasetV1(Dataset):
    def __init__(self, txt, tokenizer, max_length, stride):
        token_ids = tokenizer.encode(txt, allowed_special={"<|endoftext|>"})
        self.input_ids, self.target_ids = [], []
        for i in range(0, len(token_ids) - max_length, stride):
            self.input_ids.append(torch.tensor(token_ids[i:i + max_length]))
            self.target_ids.append(torch.tensor(token_ids[i + 1: i + max_length + 1]))

    def __len__(self):
        return len(self.input_ids)

    def __getitem__(self, idx):
        return self.input_ids[idx], self.target_ids[idx]


def create_dataloader_v1(txt, tokenizer, batch_size, max_length, stride, shuffle, drop_last):
    dataset = GPTDatasetV1(txt, tokenizer, max_length, stride)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, num_workers=0)


def calc_loss_batch(input_batch, target_batch, model):
    logits = model(input_batch)
    return F.cross_entropy(logits.flatten(0, 1), target_batch.flatten())


def calc_loss_loader(data_loader, model, num_batches=None):
    total_loss = 0.
    if len(data_loader) == 0:
        return float("nan")
    elif num_batches is None:
        num_batches = len(data_loader)
    else:
        num_batches = min(num_batches, len(data_loader))
    for i, (input_batch, target_batch) in enumerate(data_loader):
        if i < num_batches:
            total_loss += calc_loss_batch(input_batch, target_batch, model).item()
        else:
            break
    return total_loss / num_batches


def evaluate_model(model, train_loader, val_loader, eval_iter):
    model.eval()
    with torch.no_grad():
        train_loss = calc_loss_loader(train_loader, model, num_batches=eval_iter)
        val_loss = calc_loss_loader(val_loader, model, num_batches=eval_iter)
    model.train()
    return train_loss, val_loss


def generate_text_simple(model, idx, max_new_tokens, context_size):
    for _ in range(max_new_tokens):
        idx_cond = idx[:, -context_size:]
        with torch.no_grad():
            logits = model(idx_cond)
        logits = logits[:, -1, :]
        idx_next = torch.argmax(torch.softmax(logits, dim=-1), dim=-1, keepdim=True)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


def generate_and_print_sample(model, tokenizer, start_context, sample_tokens, out):
    model.eval()
    context_size = model.pos_emb.weight.shape[0]
    encoded = torch.tensor(tokenizer.encode(start_context)).unsqueeze(0)
    with torch.no_grad():
        token_ids = generate_text_simple(model, encoded, sample_tokens, context_size)
    ids = token_ids.squeeze(0).tolist()
    decoded_text = tokenizer.decode(ids)
    out["samples"].append({"text": decoded_text, "ids": ids})
    out["lines"].append(decoded_text.replace("\n", " "))
    model.train()


def train_model_simple(model, train_loader, val_loader, optimizer, num_epochs, eval_freq, eval_iter,
                       start_context, tokenizer, sample_tokens, out):
    tokens_seen, global_step = 0, -1
    for epoch in range(num_epochs):
        model.train()
        for input_batch, target_batch in train_loader:
            optimizer.zero_grad()
            loss = calc_loss_batch(input_batch, target_batch, model)
            loss.backward()
            optimizer.step()
            tokens_seen += input_batch.numel()
            global_step += 1
            if global_step % eval_freq == 0:
                train_loss, val_loss = evaluate_model(model, train_loader, val_loader, eval_iter)
                out["rows"].append({"epoch": epoch + 1, "step": global_step, "train_loss": train_loss,
                                    "val_loss": val_loss, "tokens_seen": tokens_seen})
                out["lines"].append(f"Ep {epoch+1} (Step {global_step:06d}): "
                                    f"Train loss {train_loss:.3f}, Val loss {val_loss:.3f}")
        generate_and_print_sample(model, tokenizer, start_context, sample_tokens, out)
    return global_step + 1


# ---- runs ------------------------------------------------------------------

BASE = dict(vocab_size=50257, qkv_bias=False, seed=123, lr=4e-4, weight_decay=0.1,
            start="Every effort moves you", train_ratio=0.9)

RUNS = [
    dict(name="ctx64_p0", context=64, emb=32, heads=2, layers=2, drop=0.0, batch=2, stride=64,
         epochs=2, eval_freq=5, eval_iter=5, sample_tokens=20),
    dict(name="ctx64_p01", context=64, emb=32, heads=2, layers=2, drop=0.1, batch=2, stride=64,
         epochs=2, eval_freq=5, eval_iter=5, sample_tokens=20),
    dict(name="ctx32_s24", context=32, emb=48, heads=3, layers=2, drop=0.1, batch=3, stride=24,
         epochs=1, eval_freq=7, eval_iter=3, sample_tokens=15, train_ratio=0.85),
]


def setup(s, text, tokenizer):
    """The book's driver before train_model_simple: the split, the loaders
    (after manual_seed), the model (after manual_seed again) and AdamW.
    s holds vocab_size, context, emb, heads, layers, drop, qkv_bias,
    train_ratio, seed, batch, stride, lr, weight_decay."""
    cfg = {"vocab_size": s["vocab_size"], "context_length": s["context"], "emb_dim": s["emb"],
           "n_heads": s["heads"], "n_layers": s["layers"], "drop_rate": s["drop"], "qkv_bias": s["qkv_bias"]}
    split_idx = int(s["train_ratio"] * len(text))
    train_data, val_data = text[:split_idx], text[split_idx:]
    torch.manual_seed(s["seed"])
    train_loader = create_dataloader_v1(train_data, tokenizer, s["batch"], s["context"], s["stride"],
                                        shuffle=True, drop_last=True)
    val_loader = create_dataloader_v1(val_data, tokenizer, s["batch"], s["context"], s["stride"],
                                      shuffle=False, drop_last=False)
    torch.manual_seed(s["seed"])
    model = GPTModel(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=s["lr"], weight_decay=s["weight_decay"])
    return cfg, model, optimizer, train_loader, val_loader


def run(spec, text, tokenizer):
    s = dict(BASE)
    s.update(spec)
    cfg, model, optimizer, train_loader, val_loader = setup(s, text, tokenizer)
    split_idx = int(s["train_ratio"] * len(text))
    out = {"name": s["name"], "config": cfg, "seed": s["seed"], "batch": s["batch"], "epochs": s["epochs"],
           "lr": s["lr"], "weight_decay": s["weight_decay"], "eval_freq": s["eval_freq"],
           "eval_iter": s["eval_iter"], "train_ratio": s["train_ratio"], "stride": s["stride"],
           "start": s["start"], "sample_tokens": s["sample_tokens"],
           "train_batches": len(train_loader), "val_batches": len(val_loader),
           "train_tokens": len(tokenizer.encode(text[:split_idx])), "val_tokens": len(tokenizer.encode(text[split_idx:])),
           "rows": [], "samples": [], "lines": []}
    steps = train_model_simple(model, train_loader, val_loader, optimizer, s["epochs"], s["eval_freq"],
                               s["eval_iter"], s["start"], tokenizer, s["sample_tokens"], out)
    out["rand_after"] = torch.rand(3).tolist()
    return out, steps


# ---- Adam / AdamW ------------------------------------------------------------

ADAM_CASES = [
    dict(name="adamw_defaults", optimizer="adamw", lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
         weight_decay=1e-2, amsgrad=False, dtype=torch.float32),
    dict(name="adamw_book", optimizer="adamw", lr=4e-4, betas=(0.9, 0.999), eps=1e-8,
         weight_decay=0.1, amsgrad=False, dtype=torch.float32),
    dict(name="adamw_amsgrad", optimizer="adamw", lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
         weight_decay=1e-2, amsgrad=True, dtype=torch.float32),
    dict(name="adam_defaults", optimizer="adam", lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
         weight_decay=0.0, amsgrad=False, dtype=torch.float32),
    dict(name="adam_wd_amsgrad", optimizer="adam", lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
         weight_decay=0.1, amsgrad=True, dtype=torch.float32),
    dict(name="adamw_betas_eps_f64", optimizer="adamw", lr=1e-3, betas=(0.8, 0.95), eps=1e-6,
         weight_decay=1e-2, amsgrad=False, dtype=torch.float64),
]
ADAM_STEPS = 6
SHAPES = [(3, 4), (5,)]


def adam_case(k, c):
    param_seed, grad_seed = 100 + k, 200 + k
    g = torch.Generator().manual_seed(param_seed)
    params = [torch.randn(SHAPES[0], generator=g, dtype=c["dtype"]).requires_grad_(),
              torch.rand(SHAPES[1], generator=g, dtype=c["dtype"]).requires_grad_()]
    cls = torch.optim.AdamW if c["optimizer"] == "adamw" else torch.optim.Adam
    opt = cls(params, lr=c["lr"], betas=c["betas"], eps=c["eps"], weight_decay=c["weight_decay"],
              amsgrad=c["amsgrad"], foreach=False)
    rec = {"name": c["name"], "optimizer": c["optimizer"], "lr": c["lr"], "betas": list(c["betas"]),
           "eps": c["eps"], "weight_decay": c["weight_decay"], "amsgrad": c["amsgrad"],
           "dtype": "float32" if c["dtype"] == torch.float32 else "float64", "steps": ADAM_STEPS,
           "param_seed": param_seed, "grad_seed": grad_seed,
           "params0": [tensor_json(p) for p in params], "grads": [], "params": []}
    gg = torch.Generator().manual_seed(grad_seed)
    for step in range(ADAM_STEPS):
        grads = []
        for p in params:
            p.grad = torch.randn(p.shape, generator=gg, dtype=c["dtype"]) * (0.1 * (step + 1))
            grads.append(tensor_json(p.grad))
        opt.step()
        rec["grads"].append(grads)
        rec["params"].append([tensor_json(p) for p in params])
    rec["state"] = []
    for p in params:
        st = opt.state[p]
        rec["state"].append({"step": int(st["step"].item()), "exp_avg": tensor_json(st["exp_avg"]),
                             "exp_avg_sq": tensor_json(st["exp_avg_sq"]),
                             "max_exp_avg_sq": tensor_json(st.get("max_exp_avg_sq"))})
    return rec


# ---- clip_grad_norm_ ---------------------------------------------------------

CLIP_CASES = [
    dict(name="l2_clipped", max_norm=1.0, norm_type=2.0, scale=3.0, dtype=torch.float32),
    dict(name="l2_not_clipped", max_norm=100.0, norm_type=2.0, scale=1.0, dtype=torch.float32),
    dict(name="l1", max_norm=2.0, norm_type=1.0, scale=1.0, dtype=torch.float32),
    dict(name="inf", max_norm=0.5, norm_type=float("inf"), scale=2.0, dtype=torch.float32),
    dict(name="l3", max_norm=1.5, norm_type=3.0, scale=2.0, dtype=torch.float32),
    dict(name="l2_float64", max_norm=1.0, norm_type=2.0, scale=3.0, dtype=torch.float64),
]


def clip_case(k, c):
    g = torch.Generator().manual_seed(300 + k)
    params = [torch.zeros(s, dtype=c["dtype"], requires_grad=True) for s in SHAPES]
    grads = [torch.randn(s, generator=g, dtype=c["dtype"]) * c["scale"] for s in SHAPES]
    rec = {"name": c["name"], "max_norm": c["max_norm"],
           "norm_type": "inf" if math.isinf(c["norm_type"]) else c["norm_type"],
           "dtype": "float32" if c["dtype"] == torch.float32 else "float64",
           "grads": [tensor_json(t) for t in grads]}
    for p, t in zip(params, grads):
        p.grad = t.clone()
    total = torch.nn.utils.clip_grad_norm_(params, c["max_norm"], c["norm_type"])
    rec["total_norm"] = total.item()
    rec["clipped"] = [tensor_json(p.grad) for p in params]
    return rec


# ---- DataLoader sampling -----------------------------------------------------

def take_batches(loader, take):
    batches = []
    if take is None:
        for b in loader:
            batches.append(b.tolist())
    else:
        for i, b in enumerate(loader):
            if i < take:
                batches.append(b.tolist())
            else:
                break
    return batches


SAMPLER_CASES = [(123, 10, 2), (7, 17, 3), (123, 1, 2)]
SAMPLER_OPS = [("train", None), ("train", 2), ("val", None), ("train", None), ("val", 2)]


def sampler_case(seed, n, batch):
    ds = list(range(n))
    torch.manual_seed(seed)
    train = DataLoader(ds, batch_size=batch, shuffle=True, drop_last=True)
    val = DataLoader(ds, batch_size=batch, shuffle=False, drop_last=False)
    loaders = {"train": train, "val": val}
    ops = [{"loader": name, "take": take, "batches": take_batches(loaders[name], take)}
           for name, take in SAMPLER_OPS]
    return {"seed": seed, "n": n, "batch": batch, "train_batches": len(train), "val_batches": len(val),
            "ops": ops, "rand_after": torch.rand(3).tolist()}


# ---- cross_entropy -----------------------------------------------------------

def cross_entropy_cases():
    g = torch.Generator().manual_seed(400)
    logits = torch.randn((6, 5), generator=g) * 2.0
    with_ignored = torch.tensor([1, -100, 4, 0, -100, 3])
    with_twos = torch.tensor([2, 0, 2, 4, 1, 2])
    all_ignored = torch.full((6,), -100, dtype=torch.int64)
    specs = [
        ("mean_ignored", with_ignored, -100, "mean"),
        ("sum_ignored", with_ignored, -100, "sum"),
        ("none_ignored", with_ignored, -100, "none"),
        ("mean_ignore_index_2", with_twos, 2, "mean"),
        ("sum_ignore_index_2", with_twos, 2, "sum"),
        ("mean_all_ignored", all_ignored, -100, "mean"),
        ("sum_all_ignored", all_ignored, -100, "sum"),
        ("none_all_ignored", all_ignored, -100, "none"),
    ]
    cases = []
    for name, target, ignore_index, reduction in specs:
        x = logits.clone().requires_grad_()
        loss = F.cross_entropy(x, target, ignore_index=ignore_index, reduction=reduction)
        loss.sum().backward()
        cases.append({"name": name, "logits": tensor_json(logits), "target": tensor_json(target),
                      "ignore_index": ignore_index, "reduction": reduction,
                      "loss": tensor_json(loss), "grad": tensor_json(x.grad)})
    return cases


# ---- dropout in the model's forward -------------------------------------------

def dropout_forward():
    cfg = {"vocab_size": 50, "context_length": 8, "emb_dim": 8, "n_heads": 2, "n_layers": 2,
           "drop_rate": 0.3, "qkv_bias": False}
    torch.manual_seed(123)
    model = GPTModel(cfg)
    model.train()
    ids = torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(5))
    targets = ids.roll(-1, dims=1)
    logits = model(ids)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    loss.backward()
    params = dict(model.named_parameters())
    names = ["tok_emb.weight", "trf_blocks.0.att.W_query.weight", "out_head.weight"]
    return {"config": cfg, "seed": 123, "ids": tensor_json(ids), "targets": tensor_json(targets),
            "logits": tensor_json(logits), "loss": loss.item(),
            "grads": {n: tensor_json(params[n].grad) for n in names},
            "rand_after": torch.rand(3).tolist()}


# ---- learning-rate schedule ----------------------------------------------------

def lr_schedule(initial_lr, peak_lr, min_lr, warmup_steps, total_steps):
    lrs = []
    for step in range(total_steps):
        if step < warmup_steps:
            lr = initial_lr + step * (peak_lr - initial_lr) / warmup_steps
        else:
            progress = (step - warmup_steps) / (total_steps - warmup_steps)
            lr = min_lr + (peak_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))
        lrs.append(lr)
    return {"initial_lr": initial_lr, "peak_lr": peak_lr, "min_lr": min_lr, "warmup_steps": warmup_steps,
            "total_steps": total_steps, "lrs": lrs}


def generate(outdir):
    with open(os.path.join(DATA, "the-verdict.txt"), encoding="utf-8") as f:
        text = f.read()
    tokenizer = Tokenizer()
    runs = []
    for spec in RUNS:
        rec, steps = run(spec, text, tokenizer)
        runs.append(rec)
        print("%s: %d steps, %d/%d batches" % (rec["name"], steps, rec["train_batches"], rec["val_batches"]))
        for line in rec["lines"]:
            print("  " + line)
    obj = {
        "torch_version": torch.__version__,
        "runs": runs,
        "adam": {"cases": [adam_case(k, c) for k, c in enumerate(ADAM_CASES)]},
        "clip_grad_norm": {"cases": [clip_case(k, c) for k, c in enumerate(CLIP_CASES)]},
        "sampler": {"cases": [sampler_case(*c) for c in SAMPLER_CASES]},
        "cross_entropy": {"cases": cross_entropy_cases()},
        "dropout_forward": dropout_forward(),
        "lr_schedule": {"cases": [lr_schedule(1e-4, 1e-3, 1e-5, 4, 20), lr_schedule(0.0, 5e-4, 5e-5, 10, 37)]},
    }
    write_json(outdir, "pretrain.json", obj)
