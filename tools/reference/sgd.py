"""tests/ref/sgd.json: torch.optim.SGD trajectories.

Models: "linear" = nn.Linear(4, 3) built after torch.manual_seed(0), inputs X
(8, 4) and targets Y (8, 3) from torch.rand with torch.Generator seeds 1 and 2;
"mha" = the book's MultiHeadAttention(d_in 3, d_out 4, context 5, dropout 0,
2 heads, qkv_bias True) built after torch.manual_seed(3), eval mode, X
(2, 5, 3) and Y (2, 5, 4) from generator seeds 4 and 5.

Each step: optimizer.zero_grad(); loss = mse_loss(model(X), Y) (mean);
loss.backward(); optimizer.step(). Recorded per run: the options, the
parameter names (named_parameters order), the initial parameters, and for
every step the loss (before the update) and every parameter after it.

{"steps": 20, "runs": [{"name", "model", "options": {"lr", "momentum",
"dampening", "weight_decay", "nesterov"}, "X", "Y", "parameter_names",
"initial": {name: tensor}, "losses": [...], "params": [{name: tensor}, ...]}]}
"""
import torch
import torch.nn.functional as F

from .common import tensor_json, write_json
from .modules import MultiHeadAttention

STEPS = 20

OPTIONS = [
    ("plain", dict(lr=0.1)),
    ("momentum", dict(lr=0.1, momentum=0.9)),
    ("momentum_dampening", dict(lr=0.1, momentum=0.9, dampening=0.1)),
    ("weight_decay", dict(lr=0.1, weight_decay=0.01)),
    ("nesterov", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("all_nesterov", dict(lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True)),
    ("all_dampening", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
]


def model_and_data(kind):
    if kind == "linear":
        torch.manual_seed(0)
        m = torch.nn.Linear(4, 3)
        X = torch.rand((8, 4), generator=torch.Generator().manual_seed(1))
        Y = torch.rand((8, 3), generator=torch.Generator().manual_seed(2))
    else:
        torch.manual_seed(3)
        m = MultiHeadAttention(3, 4, 5, 0.0, 2, qkv_bias=True)
        m.eval()
        X = torch.rand((2, 5, 3), generator=torch.Generator().manual_seed(4))
        Y = torch.rand((2, 5, 4), generator=torch.Generator().manual_seed(5))
    return m, X, Y


def run(name, kind, opts):
    m, X, Y = model_and_data(kind)
    full = dict(lr=opts["lr"], momentum=opts.get("momentum", 0.0), dampening=opts.get("dampening", 0.0),
                weight_decay=opts.get("weight_decay", 0.0), nesterov=opts.get("nesterov", False))
    opt = torch.optim.SGD(m.parameters(), **full)
    rec = {"name": name, "model": kind, "options": full, "X": tensor_json(X), "Y": tensor_json(Y),
           "parameter_names": [n for n, _ in m.named_parameters()],
           "initial": {n: tensor_json(p) for n, p in m.named_parameters()},
           "losses": [], "params": []}
    for _ in range(STEPS):
        opt.zero_grad()
        loss = F.mse_loss(m(X), Y)
        loss.backward()
        opt.step()
        rec["losses"].append(loss.item())
        rec["params"].append({n: tensor_json(p) for n, p in m.named_parameters()})
    return rec


def generate(outdir):
    runs = []
    for kind in ("linear", "mha"):
        for name, opts in OPTIONS:
            runs.append(run("%s_%s" % (kind, name), kind, opts))
    write_json(outdir, "sgd.json", {"torch_version": torch.__version__, "steps": STEPS, "runs": runs})
    print("sgd.json: %d runs" % len(runs))
