"""The MODEL options of a Qwen3, Llama 3 or Gemma 3 run in
tests/ref/decoder_train.json or gemma3_train.json (written by
tools/reference/decoder_train.py and gemma3_train.py), shared by
check_pretrain_output.py and check_finetune_output.py: --config with the
family's preset, the run's sizes, --tokenizer. A run without "family" is
GPT-2's (None)."""
import os

PRESETS = {"qwen3": "qwen3-0.6b", "llama3": "llama3.2-1b", "gemma3": "gemma3-270m"}


class Skip(Exception):
    """The run needs a file that is not here (Llama 3's tokenizer)."""


def tokenizer_path(run, root):
    t = run["tokenizer"]
    if t.get("env"):
        path = os.environ.get(t["env"])
        if not path:
            raise Skip("%s is not set (tools/fetch_tokenizers.sh fetches Llama 3's tokenizer)" % t["env"])
        return path
    return os.path.join(root, t["path"])


def model_args(run, root):
    """The options, or None for a GPT-2 run; raises Skip."""
    if "family" not in run:
        return None
    if "model_args" in run:  # a run that records its options (tests/ref/gemma3_train.json)
        a = list(run["model_args"])
        a[a.index("--tokenizer") + 1] = tokenizer_path(run, root)
        assert a[a.index("--config") + 1] == PRESETS[run["family"]], a
        return [str(x) for x in a]
    c = run["config"]
    a = ["--tokenizer", tokenizer_path(run, root), "--config", PRESETS[run["family"]], "--seed", run["seed"],
         "--vocab", c["vocab_size"], "--context", c["context_length"], "--emb", c["emb_dim"],
         "--heads", c["n_heads"], "--layers", c["n_layers"], "--hidden", c["hidden_dim"],
         "--kv-groups", c["n_kv_groups"], "--rope-base", repr(c["rope_base"])]
    if run["family"] == "qwen3":
        if c.get("head_dim") is not None:
            a += ["--head-dim", c["head_dim"]]
        a.append("--qk-norm" if c["qk_norm"] else "--no-qk-norm")
    return [str(x) for x in a]


def blas_kernels():
    """Which OpenBLAS kernels the checked program runs: the references'
    (OPENBLAS_CORETYPE, set by tests/meson.build for the runs compared with
    PyTorch's printed lines) or the ones OpenBLAS picks for this CPU."""
    core = os.environ.get("OPENBLAS_CORETYPE")
    return ("OpenBLAS kernels: %s (OPENBLAS_CORETYPE)" % core) if core else \
        "OpenBLAS kernels: as OpenBLAS picks them for this CPU"
