#!/usr/bin/python3
"""Generation speed of tapegrad and PyTorch on this CPU: the book's GPT-2 124M
(seed 123, eval mode), greedy from "Hello, I am".

PyTorch runs the book's own code: chapter 4's GPTModel with chapter 5's
generate() (the whole window recomputed for every new id), and the same model
with a KV cache as the book's KV-cache bonus material writes it (keys and
values concatenated per step, one position per new id). tapegrad runs
`tapegrad generate --json` with and without --no-kv-cache. Each run is a
fresh process; the four alternate, and the table gives the median tokens/s
over --runs runs (time of the generation loop only, model construction
excluded) and checks that all four produce the same ids.

    /usr/bin/python3 bench/compare_generate.py [--tapegrad build/tools/tapegrad]
        [--runs 3] [--tokens 50] [--threads 2] [--markdown]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HELLO = [15496, 11, 314, 716]


def torch_worker(tokens, threads, cache):
    import torch
    import torch.nn as nn

    sys.path.insert(0, os.path.join(HERE, "..", "tools"))
    from reference.gpt_book import GPT_CONFIG_124M, GPTModel

    torch.set_num_threads(threads)
    torch.manual_seed(123)
    model = GPTModel(GPT_CONFIG_124M).eval()
    ctx = GPT_CONFIG_124M["context_length"]
    idx = torch.tensor([HELLO])
    if not cache:
        t0 = time.perf_counter()
        for _ in range(tokens):  # chapter 5's generate(), greedy
            with torch.no_grad():
                logits = model(idx[:, -ctx:])[:, -1, :]
            idx = torch.cat((idx, torch.argmax(logits, dim=-1, keepdim=True)), dim=1)
        sec = time.perf_counter() - t0
    else:
        # The KV-cache variant of the book's MultiHeadAttention / GPTModel
        # forward: new keys and values are appended to the cache, the queries
        # of the new positions attend to every cached position.
        def att_forward(att, x, state):
            b, n, _ = x.shape
            def heads(t):
                return t.view(b, n, att.num_heads, att.head_dim).transpose(1, 2)
            k, v, q = heads(att.W_key(x)), heads(att.W_value(x)), heads(att.W_query(x))
            if state.get("k") is None:
                state["k"], state["v"] = k, v
            else:
                state["k"] = torch.cat([state["k"], k], dim=2)
                state["v"] = torch.cat([state["v"], v], dim=2)
            k, v = state["k"], state["v"]
            scores = q @ k.transpose(2, 3)
            pos = state.get("pos", 0)
            mask = att.mask.bool()[pos:pos + n, :k.shape[2]]
            state["pos"] = pos + n
            scores.masked_fill_(mask, -torch.inf)
            w = torch.softmax(scores / k.shape[-1] ** 0.5, dim=-1)
            out = (w @ v).transpose(1, 2).contiguous().view(b, n, att.d_out)
            return att.out_proj(out)

        def forward(ids, states, pos):
            x = model.tok_emb(ids) + model.pos_emb(torch.arange(pos, pos + ids.shape[1]))
            for blk, st in zip(model.trf_blocks, states):
                x = att_forward(blk.att, blk.norm1(x), st) + x
                x = blk.ff(blk.norm2(x)) + x
            return model.out_head(model.final_norm(x))

        t0 = time.perf_counter()
        states = [{} for _ in model.trf_blocks]
        with torch.no_grad():
            logits = forward(idx, states, 0)[:, -1]
            for i in range(tokens):
                nxt = torch.argmax(logits, dim=-1, keepdim=True)
                idx = torch.cat((idx, nxt), dim=1)
                if i + 1 < tokens:
                    logits = forward(nxt, states, idx.shape[1] - 1)[:, -1]
        sec = time.perf_counter() - t0
    print(json.dumps({"ids": idx[0, len(HELLO):].tolist(), "tokens_per_s": tokens / sec}))


def run_torch(tokens, threads, cache):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", "cache" if cache else "nocache",
                          "--tokens", str(tokens), "--threads", str(threads)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_tapegrad(exe, tokens, threads, cache, precision="exact"):
    cmd = [exe, "generate", "--seed", "123", "--prompt", "Hello, I am", "--max-new-tokens", str(tokens), "--json",
           "--precision", precision]
    if not cache:
        cmd.append("--no-kv-cache")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tapegrad", default=os.path.join(HERE, "..", "build", "tools", "tapegrad"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--bf16", action="store_true",
                    help="also tapegrad's KV-cache generation under --precision fast and bf16 (bf16 weights)")
    ap.add_argument("--worker", choices=["cache", "nocache"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        torch_worker(a.tokens, a.threads, a.worker == "cache")
        return
    rows = [("PyTorch, no cache", lambda: run_torch(a.tokens, a.threads, False)),
            ("tapegrad, no cache", lambda: run_tapegrad(a.tapegrad, a.tokens, a.threads, False)),
            ("PyTorch, KV cache", lambda: run_torch(a.tokens, a.threads, True)),
            ("tapegrad, KV cache", lambda: run_tapegrad(a.tapegrad, a.tokens, a.threads, True))]
    if a.bf16:
        rows += [("tapegrad fast, KV cache", lambda: run_tapegrad(a.tapegrad, a.tokens, a.threads, True, "fast")),
                 ("tapegrad bf16, KV cache", lambda: run_tapegrad(a.tapegrad, a.tokens, a.threads, True, "bf16"))]
    rates = {name: [] for name, _ in rows}
    ids = {}
    for r in range(a.runs):
        for name, fn in rows:
            res = fn()
            rates[name].append(res["tokens_per_s"])
            ids[name] = res["ids"]
            print("run %d  %-20s %7.2f tokens/s" % (r + 1, name, res["tokens_per_s"]), file=sys.stderr)
    # bf16 products are other numbers: its ids may part from float32's late
    same = len({tuple(v) for k, v in ids.items() if "bf16" not in k}) == 1
    med = {k: statistics.median(v) for k, v in rates.items()}
    print("GPT-2 124M greedy generation, %d new ids, %d threads, median of %d runs%s"
          % (a.tokens, a.threads, a.runs, "" if same else " -- IDS DIFFER"))
    fmt = "| %s | %.2f | %.2fx |" if a.markdown else "%-22s %8.2f tokens/s  %5.2fx PyTorch"
    if a.markdown:
        print("| run | tokens/s | vs PyTorch (same cache mode) |\n|---|---|---|")
    for name, _ in rows:
        base = med["PyTorch, KV cache" if "KV" in name else "PyTorch, no cache"]
        print(fmt % (name, med[name], med[name] / base))
    if a.bf16:
        b = med["tapegrad bf16, KV cache"]
        print("tapegrad bf16 KV-cache generation: %.2fx float32 exact, %.2fx float32 fast" %
              (b / med["tapegrad, KV cache"], b / med["tapegrad fast, KV cache"]))
    if not same:
        for k, v in ids.items():
            print(k, v, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
