"""The book's chapter-4 GPT in PyTorch, as the book's code defines it (the C
modules that match it: src/nn/decoder.c), and chapter 5's generate().

Shared by the reference generator (tools/reference/gpt.py) and the
benchmarks. No generate(outdir): the reference driver does not run this
module by itself.
"""
import torch
import torch.nn as nn

from .book import MultiHeadAttention

GPT_CONFIG_124M = {
    "vocab_size": 50257,
    "context_length": 1024,
    "emb_dim": 768,
    "n_heads": 12,
    "n_layers": 12,
    "drop_rate": 0.1,
    "qkv_bias": False,
}


class LayerNorm(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.eps = 1e-5
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        norm_x = (x - mean) / torch.sqrt(var + self.eps)
        return self.scale * norm_x + self.shift


class GELU(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(
            torch.sqrt(torch.tensor(2.0 / torch.pi)) *
            (x + 0.044715 * torch.pow(x, 3))
        ))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"]),
            GELU(),
            nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"]),
        )

    def forward(self, x):
        return self.layers(x)


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.att = MultiHeadAttention(
            d_in=cfg["emb_dim"],
            d_out=cfg["emb_dim"],
            context_length=cfg["context_length"],
            num_heads=cfg["n_heads"],
            dropout=cfg["drop_rate"],
            qkv_bias=cfg["qkv_bias"])
        self.ff = FeedForward(cfg)
        self.norm1 = LayerNorm(cfg["emb_dim"])
        self.norm2 = LayerNorm(cfg["emb_dim"])
        self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

    def forward(self, x):
        shortcut = x
        x = self.norm1(x)
        x = self.att(x)
        x = self.drop_shortcut(x)
        x = x + shortcut

        shortcut = x
        x = self.norm2(x)
        x = self.ff(x)
        x = self.drop_shortcut(x)
        x = x + shortcut
        return x


class GPTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.drop_emb = nn.Dropout(cfg["drop_rate"])
        self.trf_blocks = nn.Sequential(
            *[TransformerBlock(cfg) for _ in range(cfg["n_layers"])])
        self.final_norm = LayerNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, in_idx):
        batch_size, seq_len = in_idx.shape
        tok_embeds = self.tok_emb(in_idx)
        pos_embeds = self.pos_emb(torch.arange(seq_len, device=in_idx.device))
        x = tok_embeds + pos_embeds
        x = self.drop_emb(x)
        x = self.trf_blocks(x)
        x = self.final_norm(x)
        logits = self.out_head(x)
        return logits


def generate(model, idx, max_new_tokens, context_size, temperature=0.0, top_k=None, eos_id=None):
    """Chapter 5's generate(): context cropping, top-k, temperature, eos."""
    for _ in range(max_new_tokens):
        idx_cond = idx[:, -context_size:]
        with torch.no_grad():
            logits = model(idx_cond)
        logits = logits[:, -1, :]
        if top_k is not None:
            top_logits, _ = torch.topk(logits, top_k)
            min_val = top_logits[:, -1]
            logits = torch.where(logits < min_val, torch.tensor(float("-inf")).to(logits.device), logits)
        if temperature > 0.0:
            logits = logits / temperature
            probs = torch.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
        else:
            idx_next = torch.argmax(logits, dim=-1, keepdim=True)
        if idx_next == eos_id:
            break
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


def hf_state_dict(model):
    """The model's weights in Hugging Face's GPT-2 layout (model.safetensors):
    Conv1D weights stored (in, out), q/k/v fused in c_attn, no out_head (tied
    to wte), and the attn.bias mask buffer some files carry. The inverse of
    the book's load_weights_into_gpt (chapter 5)."""
    sd = {}
    sd["wte.weight"] = model.tok_emb.weight
    sd["wpe.weight"] = model.pos_emb.weight
    for i, b in enumerate(model.trf_blocks):
        p = "h.%d." % i
        att = b.att
        sd[p + "ln_1.weight"] = b.norm1.scale
        sd[p + "ln_1.bias"] = b.norm1.shift
        sd[p + "attn.c_attn.weight"] = torch.cat(
            (att.W_query.weight.T, att.W_key.weight.T, att.W_value.weight.T), dim=1)
        sd[p + "attn.c_attn.bias"] = torch.cat((att.W_query.bias, att.W_key.bias, att.W_value.bias))
        sd[p + "attn.c_proj.weight"] = att.out_proj.weight.T
        sd[p + "attn.c_proj.bias"] = att.out_proj.bias
        n = att.mask.shape[0]
        sd[p + "attn.bias"] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
        sd[p + "ln_2.weight"] = b.norm2.scale
        sd[p + "ln_2.bias"] = b.norm2.shift
        sd[p + "mlp.c_fc.weight"] = b.ff.layers[0].weight.T
        sd[p + "mlp.c_fc.bias"] = b.ff.layers[0].bias
        sd[p + "mlp.c_proj.weight"] = b.ff.layers[2].weight.T
        sd[p + "mlp.c_proj.bias"] = b.ff.layers[2].bias
    sd["ln_f.weight"] = model.final_norm.scale
    sd["ln_f.bias"] = model.final_norm.shift
    return {k: v.detach().contiguous().clone() for k, v in sd.items()}
