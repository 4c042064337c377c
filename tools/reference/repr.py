"""tests/ref/repr.json: PyTorch's print(model) text for every built-in module
and for a nested tree of user-defined modules (tests/test_module.c builds the
same tree with tg_module_new and compares tg_module_repr's text).

Each entry is {"name": case, "text": repr(module)}.
"""
import json
import os

import torch
import torch.nn as nn

from reference import book


class LayerNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))
        self.shift = nn.Parameter(torch.zeros(dim))


class GELU(nn.Module):
    pass


class TransformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.att = book.MultiHeadAttention(4, 4, 8, 0.1, 2)
        self.ff = nn.Sequential(nn.Linear(4, 16), GELU(), nn.Linear(16, 4))
        self.norm1 = LayerNorm(4)
        self.norm2 = LayerNorm(4)
        self.drop_shortcut = nn.Dropout(0.1)


class OneLine(nn.Module):
    def extra_repr(self):
        return "k=3"


class OneLineWithChild(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = OneLine()

    def extra_repr(self):
        return "k=3"


class TwoLines(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.25)

    def extra_repr(self):
        return "alpha=1\nbeta=2"


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(TransformerBlock(), TransformerBlock())
        self.heads = nn.ModuleList([nn.Linear(4, 5), nn.Linear(4, 5, bias=False)])
        self.misc = nn.ModuleList([OneLine(), OneLineWithChild(), TwoLines(), nn.Sequential(), nn.ModuleList()])
        self.out_head = nn.Linear(4, 7, bias=False)


def cases():
    return [
        ("linear", nn.Linear(3, 2)),
        ("linear_nobias", nn.Linear(3, 2, bias=False)),
        ("dropout_0", nn.Dropout(0.0)),
        ("dropout_0.1", nn.Dropout(0.1)),
        ("dropout_0.25", nn.Dropout(0.25)),
        ("dropout_1e-05", nn.Dropout(1e-5)),
        ("dropout_0.3333333333333333", nn.Dropout(1 / 3)),
        ("sa_v1", book.SelfAttention_v1(3, 2)),
        ("sa_v2", book.SelfAttention_v2(3, 2, qkv_bias=True)),
        ("causal", book.CausalAttention(3, 2, 6, 0.5)),
        ("mha_wrapper", book.MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2)),
        ("mha", book.MultiHeadAttention(3, 4, 6, 0.1, 2, qkv_bias=True)),
        ("sequential_empty", nn.Sequential()),
        ("module_list_empty", nn.ModuleList()),
        ("sequential", nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.2), nn.Linear(4, 2))),
        ("tiny_gpt", TinyGPT()),
    ]


def generate(outdir):
    torch.manual_seed(0)
    out = [{"name": name, "text": repr(m)} for name, m in cases()]
    path = os.path.join(outdir, "repr.json")
    with open(path, "w") as f:
        json.dump({"torch": torch.__version__, "cases": out}, f, indent=1)
        f.write("\n")
    print("wrote %s (%d cases)" % (path, len(out)))
