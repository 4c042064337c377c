"""References for the book's GPT (tools/reference/gpt_book.py; the C modules:
src/nn/decoder.c, generation: src/nn/generate.c).

tests/ref/gpt.json:
  "cases": small configurations built after torch.manual_seed(seed), run in
    train or eval mode on ids (B, T) with targets: "logits", "loss"
    (cross-entropy over the flattened (B*T, vocab) logits), "grads" of the
    loss for every parameter by named_parameters() name, "grad_fn" of the
    logits and the loss, "repr" (print(model)), "state_dict_keys",
    "num_parameters".
  "generate": chapter 5's generate() on a small model in eval mode, after
    torch.manual_seed(sample_seed): greedy, temperature, top-k, eos, and more
    new tokens than the context holds (cropping).
  "hf": a model of the "bias" configuration written in Hugging Face's GPT-2
    layout to tests/ref/gpt_hf.safetensors (tied out_head, Conv1D (in, out)
    weights, fused c_attn, the attn.bias buffer), its ids and eval logits.
  "ops": the GPT's ops on their own: multinomial draws (1-D over 50,257
    categories and 2-D, one and several samples) and training-mode dropout
    outputs after torch.manual_seed, var, topk and argmax values.
  "state": the "tiny" model's state_dict (PyTorch's keys) written to
    tests/ref/gpt_state.safetensors, its ids and eval logits.
tests/ref/gpt_book.json: the book's GPT_CONFIG_124M figures: parameter
  counts, print(model), the seed-123 training-mode logits as PyTorch prints
  them, a few exact logits, the seed-123 greedy and sampled continuations of
  "Hello, I am".
"""
import os

import torch
import torch.nn.functional as F

from .common import grad_fn_name, tensor_json, write_json
from .gpt_book import GPT_CONFIG_124M, GPTModel, generate as book_generate, hf_state_dict
from .safetensors_files import encode


def cfg(vocab, ctx, emb, heads, layers, drop, bias):
    return {"vocab_size": vocab, "context_length": ctx, "emb_dim": emb, "n_heads": heads,
            "n_layers": layers, "drop_rate": drop, "qkv_bias": bias}


TINY = cfg(50, 8, 12, 3, 2, 0.0, False)
TINY_DROP = cfg(50, 8, 12, 3, 2, 0.1, False)
BIAS = cfg(40, 6, 16, 4, 1, 0.0, True)


def ids_for(c, seed, B, T):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, c["vocab_size"], (B, T), generator=g)
    targets = torch.randint(0, c["vocab_size"], (B, T), generator=g)
    return ids, targets


def run_case(name, c, seed, B, T, train, data_seed):
    torch.manual_seed(seed)
    model = GPTModel(c)
    model.train(train)
    ids, targets = ids_for(c, data_seed, B, T)
    logits = model(ids)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    loss.backward()
    return {
        "name": name, "config": c, "seed": seed, "train": train,
        "ids": tensor_json(ids), "targets": tensor_json(targets),
        "logits": tensor_json(logits), "logits_grad_fn": grad_fn_name(logits),
        "loss": loss.item(), "loss_grad_fn": grad_fn_name(loss),
        "grads": {n: tensor_json(p.grad) for n, p in model.named_parameters()},
        "parameter_names": [n for n, _ in model.named_parameters()],
        "state_dict_keys": list(model.state_dict().keys()),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "repr": str(model),
    }


def gen_case(name, c, seed, prompt, max_new, sample_seed, temperature=0.0, top_k=None, eos_id=None):
    torch.manual_seed(seed)
    model = GPTModel(c)
    model.eval()
    torch.manual_seed(sample_seed)
    out = book_generate(model, torch.tensor([prompt]), max_new, c["context_length"],
                        temperature=temperature, top_k=top_k, eos_id=eos_id)
    return {"name": name, "config": c, "seed": seed, "prompt": prompt, "max_new_tokens": max_new,
            "sample_seed": sample_seed, "temperature": temperature, "top_k": top_k or 0,
            "eos_id": -1 if eos_id is None else eos_id, "ids": out[0].tolist()}


def ops():
    out = {"multinomial": [], "dropout": [], "var": [], "topk": [], "argmax": []}
    g = torch.Generator().manual_seed(1)
    big = torch.softmax(torch.randn(50257, generator=g) * 3, dim=-1)
    rows = torch.softmax(torch.randn(3, 7, generator=g), dim=-1)
    for seed in range(6):
        for probs, n in ((big, 1), (rows, 1), (rows, 4), (rows.double(), 2)):
            torch.manual_seed(seed)
            s = torch.multinomial(probs, n)
            out["multinomial"].append({"seed": seed, "probs": "big" if probs is big else "rows",
                                       "dtype": "float64" if probs.dtype == torch.float64 else "float32",
                                       "num_samples": n, "samples": tensor_json(s)})
    out["multinomial_rows"] = tensor_json(rows)
    out["multinomial_big_sum"] = big.sum().item()
    for seed, p, dtype, shape in ((0, 0.1, torch.float32, (5, 7)), (3, 0.5, torch.float32, (33,)),
                                  (5, 0.25, torch.float64, (4, 9)), (123, 0.1, torch.float32, (2, 4, 16))):
        x = torch.randn(shape, generator=g, dtype=dtype)
        torch.manual_seed(seed)
        y = F.dropout(x, p, training=True)
        out["dropout"].append({"seed": seed, "p": p, "x": tensor_json(x), "y": tensor_json(y)})
    x = torch.randn(3, 5, generator=g, dtype=torch.float64)
    for dim in (0, -1):
        for unbiased in (False, True):
            for keepdim in (False, True):
                out["var"].append({"x": tensor_json(x), "dim": dim, "unbiased": unbiased, "keepdim": keepdim,
                                   "y": tensor_json(x.var(dim=dim, unbiased=unbiased, keepdim=keepdim))})
    x = torch.randn(4, 9, generator=g)
    for dim, k, largest in ((-1, 3, True), (0, 2, False), (1, 9, True)):
        v, i = torch.topk(x, k, dim=dim, largest=largest)
        out["topk"].append({"x": tensor_json(x), "dim": dim, "k": k, "largest": largest,
                            "values": tensor_json(v), "indices": tensor_json(i)})
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [float("nan"), 1.0, float("nan"), 2.0], [-1.0, -1.0, -2.0, -5.0]])
    for dim in (0, 1):
        out["argmax"].append({"x": tensor_json(x), "dim": dim, "y": tensor_json(torch.argmax(x, dim=dim))})
    return out


def write_bytes(outdir, name, data):
    path = os.path.join(outdir, name)
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
    print("wrote %s (%d bytes)" % (path, len(data)))


def small(outdir):
    cases = [
        run_case("tiny_eval", TINY, 123, 2, 6, False, 1),
        run_case("tiny_full_context", TINY, 5, 1, 8, False, 2),
        run_case("tiny_dropout_train", TINY_DROP, 7, 2, 5, True, 3),
        run_case("bias_eval", BIAS, 42, 2, 6, False, 4),
        run_case("bias_dropout_train", dict(BIAS, drop_rate=0.25), 9, 3, 4, True, 5),
    ]
    gens = [
        gen_case("greedy", TINY, 123, [1, 2, 3], 4, 123),
        gen_case("greedy_past_context", TINY, 123, [1, 2, 3], 12, 123),
        gen_case("temperature", TINY, 123, [4, 5], 12, 11, temperature=1.4),
        gen_case("top_k", TINY, 7, [9], 10, 5, temperature=0.8, top_k=5),
        gen_case("top_k_greedy", TINY, 7, [9, 8, 7], 6, 5, top_k=3),
        gen_case("bias_sampled", BIAS, 42, [0, 39, 1], 9, 3, temperature=1.0, top_k=10),
    ]
    # eos: stop at the third id the greedy run produces
    g = gen_case("x", TINY, 123, [1, 2, 3], 12, 123)
    gens.append(gen_case("eos", TINY, 123, [1, 2, 3], 12, 123, eos_id=g["ids"][5]))

    torch.manual_seed(42)
    hf_model = GPTModel(BIAS).eval()
    with torch.no_grad():  # GPT-2 ties out_head to wte: the file has no out_head
        hf_model.out_head.weight.copy_(hf_model.tok_emb.weight)
    hf_ids, _ = ids_for(BIAS, 6, 2, 6)
    write_bytes(outdir, "gpt_hf.safetensors", encode(hf_state_dict(hf_model), {"format": "pt"}))
    hf = {"config": BIAS, "ids": tensor_json(hf_ids), "logits": tensor_json(hf_model(hf_ids))}

    torch.manual_seed(77)
    st_model = GPTModel(TINY).eval()
    st_ids, _ = ids_for(TINY, 8, 1, 7)
    sd = {k: v.detach().contiguous() for k, v in st_model.state_dict().items()}
    write_bytes(outdir, "gpt_state.safetensors", encode(sd))
    state = {"config": TINY, "seed": 77, "ids": tensor_json(st_ids), "logits": tensor_json(st_model(st_ids))}

    write_json(outdir, "gpt.json", {"torch_version": torch.__version__, "cases": cases, "generate": gens,
                                    "hf": hf, "state": state, "ops": ops()})


def book(outdir):
    c = GPT_CONFIG_124M
    torch.manual_seed(123)
    model = GPTModel(c)
    total = sum(p.numel() for p in model.parameters())
    batch = torch.tensor([[6109, 3626, 6100, 345], [6109, 1110, 6622, 257]])
    out = model(batch)  # training mode, as the book runs it
    text = str(out)
    first = out[0, 0, :8]
    last = out[1, 3, -8:]
    model.eval()
    hello = [15496, 11, 314, 716]
    torch.manual_seed(123)
    greedy = book_generate(model, torch.tensor([hello]), 10, c["context_length"])[0].tolist()
    torch.manual_seed(123)
    sampled = book_generate(model, torch.tensor([hello]), 10, c["context_length"],
                            temperature=1.0, top_k=50)[0].tolist()
    write_json(outdir, "gpt_book.json", {
        "torch_version": torch.__version__, "config": c, "seed": 123,
        "num_parameters": total,
        "num_parameters_tied": total - model.out_head.weight.numel(),
        "size_mb": "%.2f" % (total * 4 / (1024 * 1024)),
        "repr": str(model),
        "batch": batch.tolist(), "logits_print": text,
        "logits_first": tensor_json(first), "logits_last": tensor_json(last),
        "hello_ids": hello, "greedy_ids": greedy,
        "sampled": {"temperature": 1.0, "top_k": 50, "sample_seed": 123, "ids": sampled},
    })


def generate(outdir):
    small(outdir)
    book(outdir)
