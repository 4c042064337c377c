"""tests/ref/dpo_ops.json: the ops of the book's DPO notebook
(ch07/04_preference-tuning-with-dpo), against PyTorch 1.13 (see
tests/test_dpo_ops.c):

  logsigmoid: F.logsigmoid forward and x's gradient for a random
    grad_output, float32 and float64, sizes 1 to 100 (PyTorch's vector loop
    and its tail), arguments from 1e-30 to 1e4 of both signs, 0, -0, +-30,
    +-100, +-inf, nan, and a transposed (non-contiguous) x
    ({"dtype", "x", "transpose", "output", "grad_output", "grad_x", "grad_fn"});
  logprobs: the notebook's compute_logprobs(logits, labels, selection_mask)
    with a mask (prompt tokens at the start, padding at the end false) and
    without, its value and d/dlogits for a random grad_output
    ({"dtype", "logits", "labels", "mask" | null, "output", "grad_output",
    "grad_logits", "grad_fn"});
  dpo_loss: the notebook's compute_dpo_loss on four (B) log-probabilities,
    its loss, rewards and the four inputs' gradients
    ({"dtype", "beta", "policy_chosen", "policy_rejected", "reference_chosen",
    "reference_rejected", "loss", "chosen_reward", "rejected_reward",
    "grad_policy_chosen", ..., "grad_fn"});
  batch: both put together as the notebook's compute_dpo_loss_batch does
    (the policy's logits require grad, the reference's are computed under
    no_grad): the loss and the gradients of the policy's two logits.
"""
import os

import torch
import torch.nn.functional as F

from .common import tensor_json, write_json


# The notebook's two functions, as its cells have them.
def compute_logprobs(logits, labels, selection_mask=None):
    labels = labels[:, 1:].clone()
    logits = logits[:, :-1, :]
    log_probs = F.log_softmax(logits, dim=-1)
    selected_log_probs = torch.gather(input=log_probs, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
    if selection_mask is not None:
        mask = selection_mask[:, 1:].clone()
        selected_log_probs = selected_log_probs * mask
        return selected_log_probs.sum(-1) / mask.sum(-1)
    return selected_log_probs.mean(-1)


def compute_dpo_loss(model_chosen_logprobs, model_rejected_logprobs, reference_chosen_logprobs,
                     reference_rejected_logprobs, beta=0.1):
    model_logratios = model_chosen_logprobs - model_rejected_logprobs
    reference_logratios = reference_chosen_logprobs - reference_rejected_logprobs
    logits = model_logratios - reference_logratios
    losses = -F.logsigmoid(beta * logits)
    chosen_rewards = (model_chosen_logprobs - reference_chosen_logprobs).detach()
    rejected_rewards = (model_rejected_logprobs - reference_rejected_logprobs).detach()
    return losses.mean(), chosen_rewards.mean(), rejected_rewards.mean()


def gen(seed):
    return torch.Generator().manual_seed(seed)


def dtype_name(dtype):
    return "float32" if dtype == torch.float32 else "float64"


def randn(g, shape, dtype):
    return torch.randn(tuple(shape), generator=g, dtype=torch.float64).to(dtype)


SPECIAL = [0.0, -0.0, 30.0, -30.0, 100.0, -100.0, float("inf"), float("-inf"), float("nan"),
           1e-30, -1e-30, 88.5, -88.5, 17.0, -17.0, 1e4, -1e4]


def logsigmoid_x(g, n, dtype):
    """n arguments: the special values first (as many as fit), then values
    m * 2^e with m uniform in [-1, 1) and e in [-24, 7)."""
    e = torch.randint(-24, 7, (n,), generator=g).to(torch.float64)
    m = torch.rand((n,), generator=g, dtype=torch.float64) * 2 - 1
    x = m * torch.pow(2.0, e)
    k = min(n, len(SPECIAL))
    x[:k] = torch.tensor(SPECIAL[:k], dtype=torch.float64)
    # the specials spread over the vector body and the tail
    return x[torch.randperm(n, generator=g)].to(dtype)


def logsigmoid_case(g, x, transpose):
    xl = x.clone().requires_grad_(True)
    xv = xl.transpose(0, 1) if transpose else xl
    y = F.logsigmoid(xv)
    go = randn(g, y.shape, x.dtype)
    y.backward(go)
    return {"dtype": dtype_name(x.dtype), "x": tensor_json(x), "transpose": transpose, "output": tensor_json(y),
            "grad_output": tensor_json(go), "grad_x": tensor_json(xl.grad), "grad_fn": type(y.grad_fn).__name__}


def logsigmoid_cases():
    g = gen(53)
    cases = []
    for dtype in (torch.float32, torch.float64):
        for n in (1, 7, 8, 9, 16, 17, 33, 100):
            cases.append(logsigmoid_case(g, logsigmoid_x(g, n, dtype), False))
        cases.append(logsigmoid_case(g, logsigmoid_x(g, 24, dtype).reshape(4, 6), True))
    return cases


def prompt_pad_mask(lengths, prompts, t):
    """True from the prompt's end to the sequence's length (the collate's mask)."""
    m = torch.zeros((len(lengths), t), dtype=torch.bool)
    for i, (n, p) in enumerate(zip(lengths, prompts)):
        m[i, p:n] = True
    return m


def logprobs_case(g, dtype, logits, labels, mask):
    lg = logits.to(dtype).clone().requires_grad_(True)  # a leaf of its own (to() may return logits)
    out = compute_logprobs(lg, labels, mask)
    go = randn(g, out.shape, dtype)
    out.backward(go)
    return {"dtype": dtype_name(dtype), "logits": tensor_json(lg), "labels": tensor_json(labels),
            "mask": tensor_json(mask), "output": tensor_json(out), "grad_output": tensor_json(go),
            "grad_logits": tensor_json(lg.grad), "grad_fn": type(out.grad_fn).__name__}


def logprobs_cases():
    g = gen(54)
    cases = []
    b, t, v = 3, 7, 11
    logits = randn(g, (b, t, v), torch.float64) * 3
    labels = torch.randint(0, v, (b, t), generator=g)
    mask = prompt_pad_mask([6, 7, 5], [2, 3, 1], t)
    for dtype in (torch.float32, torch.float64):
        cases.append(logprobs_case(g, dtype, logits, labels, mask))
        cases.append(logprobs_case(g, dtype, logits, labels, None))
    # a vocabulary over PyTorch's vector widths, logits multiples of 1/16
    b, t, v = 2, 6, 200
    logits = torch.randint(-96, 96, (b, t, v), generator=g).to(torch.float64) / 16
    labels = torch.randint(0, v, (b, t), generator=g)
    cases.append(logprobs_case(g, torch.float32, logits, labels, prompt_pad_mask([6, 4], [2, 1], t)))
    return cases


def dpo_loss_case(dtype, beta, pc, pr, rc, rr):
    ins = [x.to(dtype).clone().requires_grad_(True) for x in (pc, pr, rc, rr)]
    loss, cr, rj = compute_dpo_loss(*ins, beta=beta)
    loss.backward()
    names = ("policy_chosen", "policy_rejected", "reference_chosen", "reference_rejected")
    case = {"dtype": dtype_name(dtype), "beta": beta}
    for name, x in zip(names, ins):
        case[name] = tensor_json(x)
    case.update({"loss": tensor_json(loss), "chosen_reward": tensor_json(cr), "rejected_reward": tensor_json(rj),
                 "grad_fn": type(loss.grad_fn).__name__})
    for name, x in zip(names, ins):
        case["grad_" + name] = tensor_json(x.grad)
    return case


def dpo_loss_cases():
    g = gen(55)
    cases = []
    b = 4
    lp = [-torch.rand((b,), generator=g, dtype=torch.float64) * 3 for _ in range(4)]
    for beta in (0.1, 0.5):
        cases.append(dpo_loss_case(torch.float32, beta, *lp))
    cases.append(dpo_loss_case(torch.float64, 0.1, *lp))
    # margins far out on both sides: logsigmoid at +-100 and beyond
    big = [torch.tensor([-1.0, -300.0, -2.0, -0.5], dtype=torch.float64),
           torch.tensor([-250.0, -1.0, -3.0, -0.5], dtype=torch.float64),
           torch.tensor([-1.5, -2.0, -2.0, -0.5], dtype=torch.float64),
           torch.tensor([-2.0, -1.5, -1.0, -0.5], dtype=torch.float64)]
    cases.append(dpo_loss_case(torch.float32, 0.5, *big))
    return cases


def batch_case():
    """compute_dpo_loss_batch with the models' logits given."""
    g = gen(56)
    b, t, v = 2, 6, 11
    chosen = torch.randint(0, v, (b, t), generator=g)
    rejected = torch.randint(0, v, (b, t), generator=g)
    chosen_mask = prompt_pad_mask([6, 5], [2, 2], t)
    rejected_mask = prompt_pad_mask([4, 6], [2, 2], t)
    logits = [randn(g, (b, t, v), torch.float32) for _ in range(4)]
    pol_c = logits[0].clone().requires_grad_(True)
    pol_r = logits[1].clone().requires_grad_(True)
    pc = compute_logprobs(pol_c, chosen, chosen_mask)
    pr = compute_logprobs(pol_r, rejected, rejected_mask)
    with torch.no_grad():
        rc = compute_logprobs(logits[2], chosen, chosen_mask)
        rr = compute_logprobs(logits[3], rejected, rejected_mask)
    loss, cr, rj = compute_dpo_loss(pc, pr, rc, rr, beta=0.1)
    loss.backward()
    return {"beta": 0.1, "chosen": tensor_json(chosen), "rejected": tensor_json(rejected),
            "chosen_mask": tensor_json(chosen_mask), "rejected_mask": tensor_json(rejected_mask),
            "policy_chosen_logits": tensor_json(logits[0]), "policy_rejected_logits": tensor_json(logits[1]),
            "reference_chosen_logits": tensor_json(logits[2]), "reference_rejected_logits": tensor_json(logits[3]),
            "loss": tensor_json(loss), "chosen_reward": tensor_json(cr), "rejected_reward": tensor_json(rj),
            "grad_policy_chosen_logits": tensor_json(pol_c.grad),
            "grad_policy_rejected_logits": tensor_json(pol_r.grad)}


def generate(outdir):
    torch.set_default_dtype(torch.float32)
    path = write_json(outdir, "dpo_ops.json", {
        "generator": "tools/reference/dpo_ops.py",
        "torch": torch.__version__,
        "logsigmoid": logsigmoid_cases(),
        "logprobs": logprobs_cases(),
        "dpo_loss": dpo_loss_cases(),
        "batch": batch_case(),
    })
    size = os.path.getsize(path)
    if size > 200 * 1024:
        raise RuntimeError("%s is %d bytes (> 200 KB)" % (path, size))
