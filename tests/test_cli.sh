#!/bin/sh
# End-to-end checks of the tapegrad command line (README.md, "The command
# line"): the book's figures (as in tools/reference/modules.py, FIGURES),
# --json, --gradcheck, --save/--load, train, bench, and a table of bad
# arguments that must each give exit status 2 and exactly one line on stderr.
#
#   tests/test_cli.sh [--quick] build/tools/tapegrad
#
# --quick (the instrumented build's quick form, tests/meson.build): without
# the random GPT-2 124M's summary and four generations (the book's chapter-4
# figures; examples/gpt_generate.c runs that model's generation there, with
# and without the KV cache), without the Qwen3 folder's generations with
# widened weights (test_decoder_hf loads them there), without six of the
# eleven runs of Qwen3's tokenizer (test_tokenizer checks its ids, special
# tokens and chat formats there), and without pretraining and chat
# fine-tuning with Qwen3's tokenizer (the pretrain_qwen3_* and
# finetune_qwen3_* checks run them there).
set -u
QUICK=0
if [ "${1:-}" = --quick ]; then QUICK=1; shift; fi
TG=${1:?usage: test_cli.sh [--quick] path/to/tapegrad}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tapegrad-cli.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM
PY=${PYTHON:-python3}
pass=0
fail=0

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# expect_contains "description" "needle" command...
expect_contains() {
    desc=$1 needle=$2
    shift 2
    if out=$("$@" 2>"$TMP/err"); then
        case $out in
        *"$needle"*) ok ;;
        *) bad "$desc: output lacks '$needle'"; printf '%s\n' "$out" | head -5 ;;
        esac
    else
        bad "$desc: exit status $? ($(head -1 "$TMP/err"))"
    fi
}

# expect_all "description" N needle1 ... needleN command...: one run of the
# command, every needle in its output
expect_all() {
    desc=$1 n=$2
    shift 2
    needles=""
    i=0
    while [ "$i" -lt "$n" ]; do
        needles="$needles$1
"
        shift
        i=$((i + 1))
    done
    if out=$("$@" 2>"$TMP/err"); then
        printf '%s' "$needles" | {
            missing=0
            while IFS= read -r needle; do
                case $out in
                *"$needle"*) ;;
                *) echo "FAIL: $desc: output lacks '$needle'"; missing=$((missing + 1)) ;;
                esac
            done
            exit "$missing"
        }
        m=$?
        pass=$((pass + n - m))
        fail=$((fail + m))
        if [ "$m" -gt 0 ]; then printf '%s\n' "$out" | head -5; fi
    else
        bad "$desc: exit status $? ($(head -1 "$TMP/err"))"
    fi
}

# ---- the book's figures ------------------------------------------------------
expect_contains "sa-v1 seed 123" "tensor([[0.2996, 0.8053]," "$TG" attention --module sa-v1
expect_contains "sa-v1 row 2" "[0.3061, 0.8210]," "$TG" attention --module sa-v1
expect_contains "sa-v2 seed 123" "tensor([[-0.5337, -0.1051]," "$TG" attention --module sa-v2
expect_contains "sa-v2 row 2" "[-0.5323, -0.1080]," "$TG" attention --module sa-v2
expect_contains "causal seed 42" "tensor([[[0.4429, 0.1077]," "$TG" attention --module causal --seed 42
expect_contains "causal row 2" "[0.4656, 0.2597]," "$TG" attention --module causal --seed 42
expect_contains "mha seed 42" "tensor([[[-0.4140,  0.3158]," "$TG" attention --module mha --seed 42
expect_contains "mha row 2" "[-0.3942,  0.2961]," "$TG" attention --module mha --seed 42
expect_contains "mha-wrapper seed 42" "tensor([[[0.4429, 0.1077, 0.5473, 0.3307]," "$TG" attention --module mha-wrapper --seed 42
expect_contains "shape line" "torch.Size([2, 6, 2])" "$TG" attention --module causal
expect_contains "grad_fn printed" "grad_fn=<" "$TG" attention --module sa-v1
expect_contains "--grads names" "heads.1.W_key.bias:" "$TG" attention --module mha-wrapper --qkv-bias --grads
expect_contains "--grads input" "input:" "$TG" attention --module mha --grads
expect_contains "--grads out_proj" "out_proj.bias:" "$TG" attention --module mha --grads
expect_contains "rand input 2-D" "torch.Size([5, 2])" "$TG" attention --module sa-v2 --input rand:7:5
expect_contains "rand input batched" "torch.Size([3, 4, 2])" "$TG" attention --module mha --input rand:7:3:4
expect_contains "--eval with dropout" "torch.Size([2, 6, 2])" "$TG" attention --module causal --dropout 0.5 --eval
expect_contains "seed 2^64-1 as torch.manual_seed" "tensor([[1.0934, 0.4304]," "$TG" attention --module sa-v1 --seed 18446744073709551615
expect_contains "--context > tokens" "torch.Size([2, 6, 2])" "$TG" attention --module mha --context 10

# ---- GPT: summary and generate (the book's chapter 4 figures) --------------------
if [ "$QUICK" = 0 ]; then
expect_all "summary (GPT-2 124M)" 4 "(out_head): Linear(in_features=768, out_features=50257, bias=False)" \
    "Total number of parameters: 163,009,536" "Number of trainable parameters considering weight tying: 124,412,160" \
    "Total size of the model: 621.83 MB" "$TG" summary
fi
expect_contains "summary small" "(trf_blocks): Sequential(" "$TG" summary --vocab 100 --context 16 --emb 32 --heads 4 --layers 2
# Qwen3 and Llama 3.2: the book's classes and its notebooks' figures (a
# smaller vocabulary and one layer keep the build quick)
QW="--config qwen3-0.6b --vocab 1000 --layers 1"
expect_all "summary qwen3" 6 "Qwen3Model(" "(q_norm): RMSNorm()" "Total number of parameters: 17,779,968" \
    "Total number of unique parameters: 16,755,968" "float32 (PyTorch default): 0.17 GB" "bfloat16: 0.09 GB" \
    "$TG" summary $QW
LL="--config llama3.2-1b --vocab 1000 --layers 1 --emb 64 --heads 4 --hidden 128 --kv-groups 2"
expect_all "summary llama3" 3 "Llama3Model(" "(norm1): RMSNorm((64,), eps=1e-05, elementwise_affine=True)" \
    "(W_key): Linear(in_features=64, out_features=32, bias=False)" "$TG" summary $LL
# Gemma 3 270M as the notebook prints it (a smaller vocabulary keeps the
# build quick): four norms per block, the separate head, 4 RoPE buffers
GM="--config gemma3-270m --vocab 1000"
expect_all "summary gemma3" 5 "Gemma3Model(" "(post_feedforward_layernorm): RMSNorm()" \
    "Total number of parameters: 101,606,016" "Total number of unique parameters: 100,966,016" \
    "float32 (PyTorch default): 0.88 GB" "$TG" summary $GM
# features mixed across families, from the command line (tests/test_decoder.c,
# test_mixing, checks what they compute): RoPE with a qkv bias, QK-norm on a
# Llama-shaped block, GeGLU in a Qwen3-shaped one, GPT-2 with RMSNorm
expect_all "summary qwen3 --qkv-bias" 1 "(W_query): Linear(in_features=1024, out_features=2048, bias=True)" \
    "$TG" summary $QW --qkv-bias
expect_all "summary llama3 --qk-norm" 1 "(k_norm): RMSNorm((16,), eps=1e-05, elementwise_affine=True)" \
    "$TG" summary $LL --qk-norm
expect_all "summary gpt2 --norm rms --mlp swiglu" 2 "(norm1): RMSNorm()" \
    "(fc3): Linear(in_features=128, out_features=32, bias=False)" \
    "$TG" summary --vocab 100 --context 16 --emb 32 --heads 4 --layers 1 --hidden 128 --norm rms --mlp swiglu
# a small Gemma 3 (sliding layers of window 4 around a full one) generates
# past its window with Qwen3's tokenizer: the KV cache gives the same ids;
# and its training step runs under bench
GS="--config gemma3-270m --tokenizer $(dirname "$0")/../data/qwen3/tokenizer.json --vocab 151936 --emb 32 --heads 2 --head-dim 16 --layers 3 --hidden 64 --sliding-window 4 --layer-types sliding,full,sliding"
if "$TG" generate $GS --max-new-tokens 8 --json >"$TMP/g1.json" 2>"$TMP/err" &&
    "$TG" generate $GS --max-new-tokens 8 --json --no-kv-cache >"$TMP/g2.json" 2>>"$TMP/err" &&
    $PY -c '
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["ids"] == b["ids"] and len(a["ids"]) == 8, (a["ids"], b["ids"])
' "$TMP/g1.json" "$TMP/g2.json"; then ok; else bad "generate gemma3 (cache = no cache): $(head -1 "$TMP/err")"; fi
# with Gemma 3's own tokenizer (fetched at test time, tools/fetch_tokenizers.sh;
# skipped without it): a prompt starts with <bos> as its post-processor puts
# it, --chat's prompt is tokenize --chat's and stops at <end_of_turn>
if [ -n "${TAPEGRAD_GEMMA3_TOKENIZER:-}" ]; then
GG="--config gemma3-270m --tokenizer $TAPEGRAD_GEMMA3_TOKENIZER --emb 32 --heads 2 --head-dim 16 --layers 2 --hidden 64"
if "$TG" generate $GG --chat --prompt "Hi" --max-new-tokens 2 --json >"$TMP/gg1.json" 2>"$TMP/err" &&
    "$TG" tokenize --tokenizer "$TAPEGRAD_GEMMA3_TOKENIZER" --chat --generation-prompt --text "Hi" --json >"$TMP/gg2.json" 2>>"$TMP/err" &&
    "$TG" generate $GG --prompt "Hello world" --max-new-tokens 1 --json >"$TMP/gg3.json" 2>>"$TMP/err" &&
    $PY -c '
import json, sys
g, t, p = (json.load(open(f)) for f in sys.argv[1:4])
assert g["input_ids"] == t["ids"] == [2, 105, 2364, 107, 10979, 106, 107, 105, 4368, 107], (g["input_ids"], t["ids"])
assert p["input_ids"] == [2, 9259, 1902], p["input_ids"]
' "$TMP/gg1.json" "$TMP/gg2.json" "$TMP/gg3.json"; then ok; else bad "generate gemma3 with its tokenizer: $(head -1 "$TMP/err")"; fi
else
echo "SKIP: generate gemma3 with its tokenizer (TAPEGRAD_GEMMA3_TOKENIZER is not set; tools/fetch_tokenizers.sh fetches it)"
fi
expect_contains "bench gemma3" '"step_ms":' "$TG" bench --model gpt --config gemma3-270m --vocab 500 --emb 32 --heads 2 \
    --head-dim 16 --layers 2 --hidden 64 --tokens 16 --batch 1 --steps 1 --sliding-window 4 --json
# a small Qwen3 with Qwen3's own tokenizer (the default for the family):
# the KV cache gives the same ids, and a chat prompt stops at the end of a turn
QS="--config qwen3-0.6b --emb 32 --heads 4 --head-dim 32 --kv-groups 2 --layers 1 --hidden 64"
if "$TG" generate $QS --max-new-tokens 6 --json >"$TMP/q1.json" 2>"$TMP/err" &&
    "$TG" generate $QS --max-new-tokens 6 --json --no-kv-cache >"$TMP/q2.json" 2>>"$TMP/err" &&
    $PY -c '
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["input_ids"] == [9707, 11, 358, 1079], a["input_ids"]
assert a["ids"] == b["ids"] and len(a["ids"]) == 6, (a["ids"], b["ids"])
' "$TMP/q1.json" "$TMP/q2.json"; then ok; else bad "generate qwen3 (cache = no cache): $(head -1 "$TMP/err")"; fi
if "$TG" generate $QS --chat --prompt "Hi" --max-new-tokens 2 --json >"$TMP/q3.json" 2>"$TMP/err" &&
    "$TG" tokenize --tokenizer "$(dirname "$0")/../data/qwen3/tokenizer.json" --chat --generation-prompt --text "Hi" --json >"$TMP/q4.json" 2>>"$TMP/err" &&
    $PY -c '
import json, sys
g, t = (json.load(open(f)) for f in sys.argv[1:3])
assert g["input_ids"] == t["ids"], (g["input_ids"], t["ids"])
assert "<|im_start|>" not in g["text"] and len(g["ids"]) <= 2, g
' "$TMP/q3.json" "$TMP/q4.json"; then ok; else bad "generate qwen3 --chat: $(head -1 "$TMP/err")"; fi
# a Hugging Face Qwen3 folder written by tools/reference/decoder.py (BF16
# shards, a tied head, its tokenizer.json): the book's ids for its weights
HFQ="$(dirname "$0")/ref/hf_qwen3_tiny"
# (its BF16 weights kept in bf16 by default, or widened: the same ids)
for weights in default $([ "$QUICK" = 0 ] && echo f32); do
wopt=""
[ "$weights" = f32 ] && wopt="--weights f32"
for mode in greedy greedy_cache sampled sampled_cache; do
    case $mode in
    greedy) extra="--no-kv-cache" ;; greedy_cache) extra="" ;;
    sampled) extra="--no-kv-cache --temperature 1 --top-k 50 --sample-seed 123" ;;
    sampled_cache) extra="--temperature 1 --top-k 50 --sample-seed 123" ;;
    esac
    if "$TG" generate --hf "$HFQ" --prompt "Every effort moves you" --max-new-tokens 8 $extra $wopt --json >"$TMP/hf.json" 2>"$TMP/err" &&
        $PY -c '
import json, sys
got, ref = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))["hf"]
assert got["input_ids"] + got["ids"] == ref[sys.argv[3]], (got, ref[sys.argv[3]])
' "$TMP/hf.json" "$(dirname "$0")/ref/decoder.json" $mode; then ok; else bad "generate --hf folder ($mode, weights $weights): $(head -1 "$TMP/err")"; fi
done
done

if [ "$QUICK" = 0 ]; then
HELLO="Hello, I am Featureiman Byeswickattribute argue logger Normandy Compton analogous"
expect_contains "generate greedy (KV cache)" "$HELLO" "$TG" generate --config gpt2-small --seed 123 --prompt "Hello, I am" --max-new-tokens 10
expect_contains "generate greedy (no cache)" "$HELLO" "$TG" generate --config gpt2-small --seed 123 --prompt "Hello, I am" --max-new-tokens 10 --no-kv-cache
# FAST numerics: float32 to rounding, so the same greedy ids here
expect_contains "generate greedy (fast)" "$HELLO" "$TG" generate --config gpt2-small --seed 123 --prompt "Hello, I am" --max-new-tokens 10 --precision fast
fi
# q8 weights: a LoRA step over an int8 base reports them; generation's
# int8 products are the same arithmetic under every policy (the same ids
# under exact, fast and bf16)
if "$TG" bench --model gpt --config qwen3-0.6b --layers 1 --emb 32 --heads 2 --kv-groups 1 --head-dim 16 --hidden 32 --vocab 50 --tokens 8 --steps 1 --lora-rank 2 --weights q8 --json >"$TMP/bq.json" 2>"$TMP/err" &&
    $PY -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["weights"] == "q8_0", d' "$TMP/bq.json"; then ok; else bad "bench --weights q8: $(head -1 "$TMP/err")"; fi
Q8M="--config qwen3-0.6b --layers 2 --emb 64 --heads 2 --kv-groups 1 --head-dim 32 --hidden 96 --prompt Hello --max-new-tokens 8 --json --weights q8"
q8e=$("$TG" generate $Q8M --precision exact 2>"$TMP/err" | sed -n 's/.*"ids":\(\[[0-9,]*\]\).*/\1/p')
q8f=$("$TG" generate $Q8M --precision fast 2>>"$TMP/err" | sed -n 's/.*"ids":\(\[[0-9,]*\]\).*/\1/p')
q8b=$("$TG" generate $Q8M --precision bf16 2>>"$TMP/err" | sed -n 's/.*"ids":\(\[[0-9,]*\]\).*/\1/p')
if [ -n "$q8e" ] && [ "$q8e" = "$q8f" ] && [ "$q8e" = "$q8b" ]; then ok; else bad "generate --weights q8 across policies: '$q8e' '$q8f' '$q8b' $(head -1 "$TMP/err")"; fi
# bench --model gpt reports the policy it ran, and the weights' dtype
if "$TG" bench --model gpt --config qwen3-0.6b --layers 1 --emb 16 --heads 2 --kv-groups 1 --head-dim 8 --hidden 32 --vocab 50 --tokens 8 --steps 1 --lora-rank 2 --weights bf16 --json >"$TMP/bw.json" 2>"$TMP/err" &&
    $PY -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["weights"] == "bfloat16", d' "$TMP/bw.json"; then ok; else bad "bench --weights bf16: $(head -1 "$TMP/err")"; fi
for p in exact fast bf16; do
    if "$TG" bench --model gpt --layers 1 --emb 16 --heads 2 --vocab 50 --tokens 8 --steps 1 --precision $p --json >"$TMP/bg.json" 2>"$TMP/err" &&
        $PY -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["precision"] == sys.argv[2], d; assert ("bf16" in d) == (sys.argv[2] == "bf16")' "$TMP/bg.json" $p; then ok; else bad "bench --model gpt --precision $p: $(head -1 "$TMP/err")"; fi
done
# bench --model dpo: the DPO notebook's step (a policy of 9,880 parameters, a
# frozen reference of the same weights): its keys, the notebook's model
# settings, the FLOP count (16 * 1,168 Linear weights * B * T + 32 * L * B *
# T^2 * emb) and the warm-up step's loss ln 2 (policy = reference)
if "$TG" bench --model dpo --layers 1 --emb 8 --heads 2 --vocab 50 --tokens 8 --batch 2 --steps 1 --json >"$TMP/bd.json" 2>"$TMP/err" &&
    $PY -c '
import json, math, sys
d = json.load(open(sys.argv[1]))
for k in ("fwd_ms", "bwd_ms", "opt_ms", "step_ms", "tokens_per_s", "gflops", "peak_rss_mib", "step_tape_mib"):
    assert isinstance(d[k], (int, float)) and d[k] > 0, k
assert (d["model"], d["batch"], d["tokens"], d["beta"], d["dropout"], d["qkv_bias"], d["context"]) == ("dpo", 2, 8, 0.1, 0.0, True, 1024), d
assert d["trainable_parameters"] == 9880 and abs(d["gflop"] - 331776e-9) < 1e-12, d
assert abs(d["tokens_per_s"] - 16e3 / d["step_ms"]) < 1e-6 * d["tokens_per_s"], d
assert abs(d["first_loss"] - math.log(2)) < 1e-6, d["first_loss"]
' "$TMP/bd.json"; then ok; else bad "bench --model dpo --json: $(head -1 "$TMP/err")"; fi
if [ "$QUICK" = 0 ]; then
if "$TG" generate --max-new-tokens 3 --temperature 1 --top-k 50 --json >"$TMP/gen.json" 2>"$TMP/err" &&
    $PY -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert set(d) == {"input_ids", "ids", "text", "tokens_per_s"}, sorted(d)
assert d["input_ids"] == [15496, 11, 314, 716], d["input_ids"]
assert d["ids"] == [49223, 49856, 45229], d["ids"]
assert d["text"].startswith("Hello, I am"), d["text"]
assert d["tokens_per_s"] > 0
' "$TMP/gen.json"; then ok; else bad "generate --json: $(head -1 "$TMP/err")"; fi
fi

# ---- tokenize (GPT-2's tokenizer; the ids are tiktoken's, tests/ref/tokenizer.json) ----
DATA=$(cd "$(dirname "$0")/../data" && pwd)
expect_contains "tokenize ids" "15496 11 995 0 632 338" "$TG" tokenize --text "Hello, world! It's"
expect_contains "tokenize endoftext" "15496 50256 10603" "$TG" tokenize --text "Hello<|endoftext|>World"
expect_contains "tokenize --decode" "Hello, world! It's" "$TG" tokenize --decode "15496 11 995 0 632 338"
expect_contains "tokenize --decode commas" "Hello<|endoftext|>World" "$TG" tokenize --decode "15496,50256,10603"
if out=$(printf 'Hello' | "$TG" tokenize --file - 2>"$TMP/err") && [ "$out" = 15496 ] &&
    grep -Eq '^1 tokens from 5 bytes in [0-9.]+ ms \([0-9.]+ MB/s\)$' "$TMP/err"; then ok; else
    bad "tokenize stdin: '$out' $(head -1 "$TMP/err")"
fi
if "$TG" tokenize --file "$DATA/the-verdict.txt" --json >"$TMP/tok.json" 2>"$TMP/err" &&
    $PY -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert set(d) == {"ids", "tokens", "bytes", "seconds", "mb_per_s"}, sorted(d)
assert d["tokens"] == 5145 == len(d["ids"]), d["tokens"]
assert d["bytes"] == 20479, d["bytes"]
assert d["ids"][:4] == [40, 367, 2885, 1464], d["ids"][:4]
assert d["mb_per_s"] > 0
' "$TMP/tok.json"; then ok; else bad "tokenize the-verdict --json: $(head -1 "$TMP/err")"; fi
# --json streams the ids as the plain line writes them: the same ids
if "$TG" tokenize --file "$DATA/the-verdict.txt" >"$TMP/tok.txt" 2>"$TMP/err" &&
    $PY -c '
import json, sys
plain = [int(t) for t in open(sys.argv[2]).read().split()]
assert json.load(open(sys.argv[1]))["ids"] == plain, "ids differ"
' "$TMP/tok.json" "$TMP/tok.txt"; then ok; else bad "tokenize --json ids = plain ids: $(head -1 "$TMP/err")"; fi
if "$TG" tokenize --decode "40 367 2885 1464" --json >"$TMP/dec.json" 2>"$TMP/err" &&
    $PY -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d == {"ids": [40, 367, 2885, 1464], "text": "I HAD always"}, d
' "$TMP/dec.json"; then ok; else bad "tokenize --decode --json: $(head -1 "$TMP/err")"; fi
# ids that end inside a character (0xE6 0x97 of U+65E5): the text is JSON null, never a missing key
expect_contains "tokenize --decode --json partial character" '{"ids":[162,245],"text":null}' "$TG" tokenize --decode "162 245" --json
# the vocabulary from $TAPEGRAD_DATA (an installed tree), or a clear error
expect_contains "TAPEGRAD_DATA" "15496" env TAPEGRAD_DATA="$DATA" "$TG" tokenize --text Hello
if TAPEGRAD_DATA="$TMP/none" "$TG" tokenize --text Hello >/dev/null 2>"$TMP/err"; then bad "TAPEGRAD_DATA missing: exit 0"
elif [ $? -eq 2 ] && grep -q "TAPEGRAD_DATA=.*has no gpt2/encoder.json" "$TMP/err"; then ok
else bad "TAPEGRAD_DATA missing: $(head -1 "$TMP/err")"; fi

# ---- other tokenizers: Qwen3's tokenizer.json (ids: tests/ref/tokenizers.json) and its chat format ----
QWEN=$DATA/qwen3/tokenizer.json
expect_contains "tokenize qwen3" "9707 1879" "$TG" tokenize --tokenizer "$QWEN" --text "Hello world"
if [ "$QUICK" = 0 ]; then
expect_contains "tokenize qwen3 folder" "9707 1879" "$TG" tokenize --tokenizer "$DATA/qwen3" --text "Hello world"
expect_contains "tokenize qwen3 digits" "16 17 18 19 20 21 22 23 24 15" "$TG" tokenize --tokenizer "$QWEN" --text 1234567890
expect_contains "tokenize --allow-special" "151644 872 198 13048 151645" "$TG" tokenize --tokenizer "$QWEN" --allow-special --text "<|im_start|>user
Hi<|im_end|>"
expect_contains "tokenize special as text" "27 91 318 4906 91 29" "$TG" tokenize --tokenizer "$QWEN" --text "<|im_start|>"
expect_contains "tokenize <think> always" "151667" "$TG" tokenize --tokenizer "$QWEN" --text "<think>"
fi
expect_contains "tokenize --chat (the book's generation prompt, thinking off)" \
    "151644 872 198 35127 752 264 2805 16800 311 3460 4128 4119 13 151645 198 151644 77091 198 151667 271 151668 271" \
    "$TG" tokenize --tokenizer "$QWEN" --chat --generation-prompt --text "Give me a short introduction to large language models."
if [ "$QUICK" = 0 ]; then
expect_contains "tokenize --chat --think" "151645 198 151644 77091 198" \
    "$TG" tokenize --tokenizer "$QWEN" --chat --generation-prompt --think --text "Hi"
fi
printf '[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]' >"$TMP/chat.json"
expect_contains "tokenize --messages" "151644 872 198 13048 151645 198 151644 77091 198 9707 0 151645 198" \
    "$TG" tokenize --tokenizer "$QWEN" --messages "$TMP/chat.json"
expect_contains "tokenize qwen3 --decode" "<|im_start|>user" "$TG" tokenize --tokenizer "$QWEN" --decode "151644 872"
# --chat --file: the message is the file's 57 bytes, no more (the ids of
# --text), from a file and from standard input. MALLOC_PERTURB_ makes glibc
# fill every new heap block with 0xbe (the sanitizers' allocator does so
# by itself), so a buffer handed on without a NUL after the content fails
# on every run ("invalid UTF-8 at byte 57 of its content") instead of
# taking in whatever the heap held after it.
printf 'Give me a brief introduction to the large language models' >"$TMP/msg57.txt"
if want=$("$TG" tokenize --tokenizer "$QWEN" --chat --text "$(cat "$TMP/msg57.txt")" 2>"$TMP/err") &&
    got=$(MALLOC_PERTURB_=65 "$TG" tokenize --tokenizer "$QWEN" --chat --file "$TMP/msg57.txt" 2>"$TMP/err") &&
    [ "$got" = "$want" ] && grep -q ' tokens from 57 bytes ' "$TMP/err"; then ok; else
    bad "tokenize --chat --file (57 bytes): '${got:-}' != '${want:-}' $(head -1 "$TMP/err")"
fi
if got=$(MALLOC_PERTURB_=65 "$TG" tokenize --tokenizer "$QWEN" --chat --file - <"$TMP/msg57.txt" 2>"$TMP/err") &&
    [ "$got" = "$want" ]; then ok; else
    bad "tokenize --chat --file - (57 bytes): '${got:-}' != '${want:-}' $(head -1 "$TMP/err")"
fi
# a NUL byte in a --chat message or a --messages file: one line naming the
# file and the byte's offset, never the text cut at the NUL
printf 'Hi\000there' >"$TMP/nul.txt"
printf '[{"role": "user", "content": "Hi\000"}]' >"$TMP/nul.json"
if "$TG" tokenize --tokenizer "$QWEN" --chat --file "$TMP/nul.txt" >/dev/null 2>"$TMP/err"; then bad "tokenize --chat --file with a NUL byte: exit 0"
elif [ $? -eq 2 ] && [ "$(cat "$TMP/err")" = "tapegrad tokenize: --file $TMP/nul.txt: NUL byte at offset 2 (--chat takes text without NUL bytes)" ]; then ok
else bad "tokenize --chat --file with a NUL byte: $(head -2 "$TMP/err" | tr '\n' '|')"; fi
if "$TG" tokenize --tokenizer "$QWEN" --messages "$TMP/nul.json" >/dev/null 2>"$TMP/err"; then bad "tokenize --messages with a NUL byte: exit 0"
elif [ $? -eq 2 ] && [ "$(cat "$TMP/err")" = "tapegrad tokenize: --messages $TMP/nul.json: NUL byte at offset 32 (JSON text holds no NUL byte)" ]; then ok
else bad "tokenize --messages with a NUL byte: $(head -2 "$TMP/err" | tr '\n' '|')"; fi
expect_contains "generate --chat qwen3" '"input_ids":[151644,872,198,13048,151645,198,151644,77091,198,' "$TG" generate \
    --tokenizer "$QWEN" --chat --prompt Hi --vocab 151669 --context 64 --emb 16 --heads 2 --layers 1 --max-new-tokens 2 --json
if [ "$QUICK" = 0 ]; then
expect_contains "finetune instruct --format chat" "Model response:" "$TG" finetune instruct --tokenizer "$QWEN" \
    --format chat --data "$(dirname "$0")/ref/finetune/instruction-40.json" --vocab 151669 --context 128 --emb 8 \
    --heads 2 --layers 1 --threads 1 --epochs 1 --max-new-tokens 2 --batch 4
expect_contains "pretrain --tokenizer qwen3" "Ep 1 (Step 000000)" "$TG" pretrain --tokenizer "$QWEN" \
    --text "$DATA/the-verdict.txt" --context 32 --emb 16 --heads 2 --layers 1 --train-ratio 0.2 --epochs 1 \
    --eval-freq 5 --eval-iter 1 --sample-tokens 2 --threads 1
fi

# ---- --json ---------------------------------------------------------------------
for m in sa-v1 sa-v2 causal mha-wrapper mha; do
    if "$TG" attention --module "$m" --json >"$TMP/$m.json" 2>"$TMP/err" &&
        $PY -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert set(d) == {"module", "output", "grad_fn", "grads"}, sorted(d)
assert d["module"] == sys.argv[2]
o = d["output"]
n = 1
for s in o["shape"]:
    n *= s
assert len(o["data"]) == n and n > 0
assert d["grad_fn"].endswith("Backward0"), d["grad_fn"]
assert "input" in d["grads"] and len(d["grads"]) >= 4
for k, g in d["grads"].items():
    assert set(g) == {"shape", "data"}, k
' "$TMP/$m.json" "$m"; then ok; else bad "--json for $m"; fi
done
if $PY -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert abs(d["output"]["data"][0] - 0.2996) < 1e-4 and abs(d["output"]["data"][1] - 0.8053) < 1e-4
assert list(d["grads"]) == ["W_query", "W_key", "W_value", "input"], list(d["grads"])
' "$TMP/sa-v1.json"; then ok; else bad "--json sa-v1 values and key order"; fi

# ---- --gradcheck --------------------------------------------------------------------
for m in sa-v1 sa-v2 causal mha-wrapper mha; do
    for bias in "" --qkv-bias; do
        expect_contains "gradcheck $m $bias" "gradcheck: PASS" "$TG" attention --module "$m" --gradcheck $bias
    done
done
expect_contains "gradcheck mha 4 heads rand" "gradcheck: PASS" "$TG" attention --module mha --d-in 4 --d-out 8 --heads 4 --input rand:3:2:5 --gradcheck
expect_contains "gradcheck wrapper 9 heads (chunked)" "gradcheck: PASS" "$TG" attention --module mha-wrapper --heads 9 --qkv-bias --gradcheck

# ---- --save / --load round trip -----------------------------------------------------
for m in sa-v1 sa-v2 causal mha-wrapper mha; do
    "$TG" attention --module "$m" --qkv-bias --seed 5 --save "$TMP/$m.safetensors" >"$TMP/a.txt" 2>"$TMP/err"
    s1=$?
    "$TG" attention --module "$m" --qkv-bias --seed 77 --load "$TMP/$m.safetensors" >"$TMP/b.txt" 2>>"$TMP/err"
    s2=$?
    "$TG" attention --module "$m" --qkv-bias --seed 77 >"$TMP/c.txt" 2>>"$TMP/err"
    if [ $s1 -eq 0 ] && [ $s2 -eq 0 ] && cmp -s "$TMP/a.txt" "$TMP/b.txt" && ! cmp -s "$TMP/a.txt" "$TMP/c.txt"; then
        ok
    else
        bad "save/load round trip for $m ($(head -1 "$TMP/err"))"
    fi
done

# ---- train ------------------------------------------------------------------------------
for m in mha mha-wrapper; do
    if "$TG" train --module "$m" --json --plot "$TMP/loss.svg" >"$TMP/train.txt" 2>"$TMP/err" &&
        tail -n 1 "$TMP/train.txt" | $PY -c '
import json, sys
d = json.loads(sys.stdin.read())
assert set(d) == {"steps", "first_loss", "final_loss", "seconds"}, d
assert d["final_loss"] < 0.01 * d["first_loss"], d
' && grep -q "</svg>" "$TMP/loss.svg"; then ok; else bad "train --module $m --json (final < 1% of first, plot)"; fi
done
"$TG" train --lr 100 --steps 50 >/dev/null 2>"$TMP/err"
st=$?
if [ $st -eq 1 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "diverged" "$TMP/err"; then ok; else bad "train divergence: exit $st"; fi
# a bad --module is reported before --plot creates its file
"$TG" train --module gpt9 --plot "$TMP/never.svg" >/dev/null 2>"$TMP/err"
st=$?
if [ $st -eq 2 ] && [ ! -e "$TMP/never.svg" ] && grep -q "module" "$TMP/err"; then ok; else bad "train --module gpt9 --plot: exit $st or file created"; fi

# ---- bench --------------------------------------------------------------------------------
check_bench() {
    if "$TG" bench --batch 2 --tokens 6 --d-in 3 --d-out 2 --heads 2 --steps 3 --json "$@" >"$TMP/bench.json" 2>"$TMP/err" &&
        $PY -c '
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("fwd_ms", "bwd_ms", "step_ms", "gflops", "peak_rss_mib"):
    assert isinstance(d[k], (int, float)) and d[k] >= 0, k
# the BLAS and its threading (tg_blas_info), as tools/check_install.sh reads it
assert d["blas"].endswith(" build)") or d["blas"].startswith("a CBLAS"), d["blas"]
assert d["precision"] in ("exact", "fast", "bf16"), d
' "$TMP/bench.json"; then ok; else bad "bench --json $* ($(head -1 "$TMP/err"))"; fi
}
check_bench
check_bench --composed
check_bench --module mha-wrapper
check_bench --precision exact
check_bench --precision bf16 --module mha-wrapper
check_bench --module mha-wrapper --composed
check_bench --threads 1 --dropout 0
check_bench --torch-dropout
expect_contains "bench table" "GFLOP/s" "$TG" bench --batch 2 --tokens 6 --d-in 3 --d-out 2 --heads 2
expect_contains "bench larger, fused" "(fused)" "$TG" bench --batch 2 --tokens 64 --d 32 --heads 4 --steps 2

# ---- pretrain: resume equals an uninterrupted run; failed writes keep the checkpoint --------
VERDICT=$(dirname "$0")/../data/the-verdict.txt
# the tiny runs train on the text's first 82 lines (11 kB, about half): 8
# steps an epoch, which every check of theirs needs (a row at steps 0 and 5
# of each epoch), in half the time
head -n 82 "$VERDICT" >"$TMP/verdict-82.txt"
TINY="--text $TMP/verdict-82.txt --context 32 --emb 16 --heads 2 --layers 1 --train-ratio 0.2 --eval-freq 5 --eval-iter 2 --sample-tokens 5 --threads 1"
# shellcheck disable=SC2086
if "$TG" pretrain $TINY --epochs 2 >"$TMP/full.txt" 2>"$TMP/err"; then ok; else bad "pretrain tiny: $(head -1 "$TMP/err")"; fi
if [ "$(grep -c '^Ep ' "$TMP/full.txt")" -ge 4 ] && [ "$(grep -c '^Every effort moves you' "$TMP/full.txt")" -eq 2 ]; then ok; else
    bad "pretrain tiny: expected the table and two samples"; head -3 "$TMP/full.txt"; fi
# OMP_THREAD_LIMIT below --threads (and below the cores, the default): one
# thread, the same table. OpenBLAS alone would wait forever for the threads
# it asked for (tg__blas_threads, src/tensor/gemm.c).
for n in 2 0; do
    # shellcheck disable=SC2086
    if OMP_THREAD_LIMIT=1 timeout 120 "$TG" pretrain ${TINY% --threads 1} --epochs 2 $([ $n -gt 0 ] && echo --threads $n) \
        >"$TMP/limit.txt" 2>"$TMP/err" && cmp -s "$TMP/full.txt" "$TMP/limit.txt"; then ok; else
        bad "pretrain under OMP_THREAD_LIMIT=1 (--threads $n): exit or table differs ($(head -1 "$TMP/err"))"; fi
done
# shellcheck disable=SC2086
if "$TG" pretrain $TINY --epochs 1 --checkpoint "$TMP/ck1" >/dev/null 2>"$TMP/err" &&
    "$TG" pretrain $TINY --epochs 2 --resume "$TMP/ck1" --checkpoint "$TMP/ck2" >"$TMP/resumed.txt" 2>"$TMP/err" &&
    cmp -s "$TMP/full.txt" "$TMP/resumed.txt"; then ok; else
    bad "pretrain --resume: output differs from the uninterrupted run ($(head -1 "$TMP/err"))"; diff "$TMP/full.txt" "$TMP/resumed.txt" | head -5; fi
# a checkpoint already at --epochs: nothing to train, the same table, exit 0
# shellcheck disable=SC2086
if "$TG" pretrain $TINY --epochs 2 --resume "$TMP/ck2" >"$TMP/again.txt" 2>"$TMP/err" && cmp -s "$TMP/full.txt" "$TMP/again.txt"; then ok; else
    bad "pretrain --resume at the last epoch ($(head -1 "$TMP/err"))"; fi
# --json: the rows, the samples, the time
# shellcheck disable=SC2086
if "$TG" pretrain $TINY --epochs 1 --json --plot "$TMP/loss.svg" >"$TMP/pt.json" 2>"$TMP/err" &&
    tail -1 "$TMP/pt.json" | "$PY" -c '
import json, sys
o = json.loads(sys.stdin.read())
assert set(o) == {"rows", "samples", "seconds", "precision", "tokens_per_s"} and o["precision"] == "exact", o.keys()
r = o["rows"][0]
assert set(r) == {"epoch", "step", "train_loss", "val_loss", "tokens_seen"} and r["step"] == 0 and r["tokens_seen"] == 64, r
assert len(o["samples"]) == 1 and o["samples"][0].startswith("Every effort moves you"), o["samples"]
assert o["seconds"] > 0 and o["tokens_per_s"] > 0
' && grep -q "Tokens seen" "$TMP/loss.svg" && grep -q "Validation loss" "$TMP/loss.svg"; then ok; else
    bad "pretrain --json/--plot: $(head -1 "$TMP/err")"; fi
# a write that fails (file size limit: EFBIG) is one line, exit 2, and the
# previous checkpoint stays loadable
cp "$TMP/ck1" "$TMP/ck1.orig"
# shellcheck disable=SC2086
(ulimit -f 64; trap '' XFSZ; "$TG" pretrain $TINY --epochs 2 --resume "$TMP/ck1" --checkpoint "$TMP/ck1" >/dev/null 2>"$TMP/err")
st=$?
if [ $st -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && cmp -s "$TMP/ck1" "$TMP/ck1.orig" && [ -z "$(ls "$TMP" | grep '^ck1\..*tmp')" ]; then ok; else
    bad "pretrain: a failed checkpoint write: exit $st, $(head -2 "$TMP/err" | tr '\n' '|')"; ls "$TMP"; fi
# --recompute: each block's activations recomputed in backward, with the same
# dropout masks: the same lines under every policy
# shellcheck disable=SC2086
for p in exact fast bf16; do
    if "$TG" pretrain $TINY --layers 2 --dropout 0.1 --epochs 1 --precision $p >"$TMP/plain.txt" 2>"$TMP/err" &&
        "$TG" pretrain $TINY --layers 2 --dropout 0.1 --epochs 1 --precision $p --recompute >"$TMP/re.txt" 2>"$TMP/err" &&
        cmp -s "$TMP/plain.txt" "$TMP/re.txt"; then ok; else
        bad "pretrain --recompute --precision $p: output differs ($(head -1 "$TMP/err"))"; diff "$TMP/plain.txt" "$TMP/re.txt" | head -5; fi
done
# a checkpoint of another model, and a truncated one
# shellcheck disable=SC2086
head -c 100000 "$TMP/ck1" >"$TMP/ck_trunc"
printf 'x' >"$TMP/verdict_small.txt"
{ head -c 3000 "$VERDICT"; printf 'caf\303 au lait'; } >"$TMP/bad_utf8.txt"

# fine-tuning fixtures: the committed CSV and instruction sets, and broken ones
FT=$(dirname "$0")/ref/finetune
FTTINY="--context 128 --emb 8 --heads 2 --layers 1 --threads 1"
printf 'Label,Text\n0,fine\nspam,"bad label"\n' >"$TMP/badlabel.csv"
printf 'Label,Text\n0,"never closed\n' >"$TMP/unterminated.csv"
printf '[{"instruction": "a", "input": "", "output": 3}]' >"$TMP/badentry.json"
printf '[{"instruction": "a",' >"$TMP/truncated.json"

# an output path that exists and is not a regular file (a FIFO, a directory,
# a device) is refused before training, and left as it was: a save renames
# over its path and a plot would block on a FIFO (hence the timeout). Never
# --save /dev/full: before the check, the rename replaced the device.
TO=$(command -v timeout >/dev/null && echo "timeout 120")
expect_not_regular() {
    desc=$1 needle=$2
    shift 2
    for f in fifo acc-accuracy.svg; do [ -p "$TMP/$f" ] || { rm -rf "${TMP:?}/$f" && mkfifo "$TMP/$f"; }; done
    [ -d "$TMP/outdir" ] || { rm -f "${TMP:?}/outdir" && mkdir "$TMP/outdir"; }
    $TO "$@" >"$TMP/out" 2>"$TMP/err"
    st=$?
    if [ $st -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -qF -- "$needle, not a regular file" "$TMP/err" &&
        [ ! -s "$TMP/out" ] && [ -p "$TMP/fifo" ] && [ -p "$TMP/acc-accuracy.svg" ] && [ -d "$TMP/outdir" ]; then ok; else
        bad "$desc: exit $st, $(head -2 "$TMP/err" | tr '\n' '|'), $(wc -c <"$TMP/out") bytes on stdout"; fi
}
# shellcheck disable=SC2086
for opt in --save --checkpoint --plot; do
    expect_not_regular "pretrain $opt FIFO" "$opt: '$TMP/fifo' exists and is a FIFO" "$TG" pretrain $TINY --epochs 1 $opt "$TMP/fifo"
    expect_not_regular "pretrain $opt directory" "$opt: '$TMP/outdir' exists and is a directory" \
        "$TG" pretrain $TINY --epochs 1 $opt "$TMP/outdir"
done
if [ -c /dev/full ]; then
    # shellcheck disable=SC2086
    expect_not_regular "pretrain --plot /dev/full" "--plot: '/dev/full' exists and is a character device" \
        "$TG" pretrain $TINY --epochs 1 --plot /dev/full
    expect_not_regular "train --plot /dev/full" "--plot: '/dev/full' exists and is a character device" "$TG" train --plot /dev/full
fi
# shellcheck disable=SC2086
expect_not_regular "finetune classify --save FIFO" "--save: '$TMP/fifo' exists and is a FIFO" \
    "$TG" finetune classify --train "$FT/train.csv" --val "$FT/val.csv" $FTTINY --epochs 1 --save "$TMP/fifo"
# shellcheck disable=SC2086
expect_not_regular "finetune classify --plot, accuracy plot a FIFO" "--plot: '$TMP/acc-accuracy.svg' exists and is a FIFO" \
    "$TG" finetune classify --train "$FT/train.csv" --val "$FT/val.csv" $FTTINY --epochs 1 --plot "$TMP/acc.svg"
expect_not_regular "train --plot FIFO" "--plot: '$TMP/fifo' exists and is a FIFO" "$TG" train --plot "$TMP/fifo"

# output that cannot be written (a full disk) fails any command with exactly
# one line and exit 2: no second line from the command that met the failed
# write, no speed report of a run whose output was lost. "nospc": the line
# names the reason (a run's table written by the library's trainer: the
# reason is lost with its flushes).
if [ -c /dev/full ] && [ -w /dev/full ]; then
    while IFS= read -r line; do
        eval "set -- $line"
        reason=$1
        shift
        "$TG" "$@" >/dev/full 2>"$TMP/err"
        st=$?
        want="^tapegrad: writing standard output: "
        [ "$reason" = nospc ] && want="${want}No space left on device\$"
        if [ $st -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "$want" "$TMP/err"; then ok; else
            bad "tapegrad $line >/dev/full: exit $st, $(head -3 "$TMP/err" | tr '\n' '|')"; fi
    done <<EOF_FULL
nospc --help
nospc --version
nospc attention --help
nospc finetune classify --help
nospc summary
nospc summary --vocab 100 --context 16 --emb 32 --heads 4 --layers 2
nospc attention --module mha --input rand:1:2:40 --d-in 64 --d-out 64 --heads 4 --grads
nospc attention --module mha --json
nospc attention --module sa-v1 --gradcheck
nospc tokenize --file $DATA/the-verdict.txt
nospc tokenize --file $DATA/the-verdict.txt --json
nospc tokenize --decode "40 367 2885 1464"
nospc generate --context 256 --emb 8 --heads 2 --layers 1 --max-new-tokens 3
nospc train --steps 5
nospc train --steps 5 --json
nospc bench --batch 2 --tokens 8 --d 8 --heads 2 --steps 1
nospc pretrain $TINY --epochs 1 --json
any pretrain $TINY --epochs 1
nospc finetune classify --train $FT/train.csv --val $FT/val.csv $FTTINY --epochs 1 --json
any finetune classify --train $FT/train.csv --val $FT/val.csv $FTTINY --epochs 1
EOF_FULL
fi

# ---- finetune: --save of a LoRA model loads in generate; --json; --plot writes both plots ----
if "$TG" finetune instruct --data "$FT/instruction-40.json" --limit 20 --context 256 --emb 8 --heads 2 --layers 1 \
        --threads 1 --epochs 1 --max-new-tokens 3 --lora-rank 2 --lora-alpha 4 --save "$TMP/ft.safetensors" --json \
        >"$TMP/ft.json" 2>"$TMP/err" && tail -1 "$TMP/ft.json" | grep -q '"trainable_parameters":100818' &&
    "$TG" generate --load "$TMP/ft.safetensors" --lora-rank 2 --lora-alpha 4 --context 256 --emb 8 --heads 2 \
        --layers 1 --max-new-tokens 3 >/dev/null 2>>"$TMP/err"; then ok; else
    bad "finetune instruct --lora-rank --save, then generate --load --lora-rank: $(head -2 "$TMP/err" | tr '\n' '|')"; fi
# a LoRA file loaded without --lora-rank (or with another rank), a plain one with it: the error says so
GENTINY="--context 256 --emb 8 --heads 2 --layers 1 --max-new-tokens 3"
expect_load_hint() {
    desc=$1 needle=$2
    shift 2
    "$TG" generate $GENTINY "$@" >/dev/null 2>"$TMP/err"
    st=$?
    if [ $st -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q -- "$needle" "$TMP/err"; then ok; else
        bad "$desc: exit $st, $(head -2 "$TMP/err" | tr '\n' '|')"; fi
}
expect_load_hint "generate --load LoRA file without --lora-rank" "pass --lora-rank 2 and the --lora-alpha" \
    --load "$TMP/ft.safetensors"
expect_load_hint "generate --load LoRA file, other rank" "have rank 2, not --lora-rank 3" \
    --load "$TMP/ft.safetensors" --lora-rank 3
if "$TG" finetune instruct --data "$FT/instruction-40.json" --limit 20 --context 256 --emb 8 --heads 2 --layers 1 \
        --threads 1 --epochs 1 --max-new-tokens 1 --save "$TMP/ftplain.safetensors" >/dev/null 2>"$TMP/err"; then
    expect_load_hint "generate --load plain file with --lora-rank" "holds no LoRA adapters" \
        --load "$TMP/ftplain.safetensors" --lora-rank 2
else bad "finetune instruct --save: $(head -1 "$TMP/err")"; fi
# finetune dpo's bad input: exit status 2 and one line naming the problem
PREF=$(dirname "$0")/../data/preference/instruction-data-with-preference.json
DPOTINY="--data $PREF --max-entries 14 --batch 2 --context 192 --emb 8 --heads 2 --layers 1 --threads 1"
printf '[{"instruction": "a", "input": "", "rejected": "b"}]' >"$TMP/nochosen.json"
printf '[{"instruction": "a", "input": "", "chosen": "b"}]' >"$TMP/norejected.json"
printf '[{"instruction": "a", "input": "", "chosen": "b", "rejected": 3}]' >"$TMP/badrejected.json"
expect_dpo_error() { # NEEDLE ARGS...
    needle=$1
    shift
    "$TG" finetune dpo "$@" >/dev/null 2>"$TMP/err"
    st=$?
    if [ $st -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -qF -- "$needle" "$TMP/err"; then ok; else
        bad "finetune dpo $*: exit $st, expected one line with '$needle': $(head -2 "$TMP/err" | tr '\n' '|')"
    fi
}
# shellcheck disable=SC2086
{
    expect_dpo_error "--beta: must be a finite number above 0, got 0" $DPOTINY --beta 0
    expect_dpo_error "--beta: must be a finite number above 0, got -0.5" $DPOTINY --beta -0.5
    expect_dpo_error "--beta" $DPOTINY --beta nan
    expect_dpo_error "entry 0: \"chosen\" is missing" --data "$TMP/nochosen.json"
    expect_dpo_error "entry 0: \"rejected\" is missing" --data "$TMP/norejected.json"
    expect_dpo_error "entry 0: \"rejected\" is not a string" --data "$TMP/badrejected.json"
    expect_dpo_error "entry 0's chosen answer has 74 ids, more than --allowed-max-length 64" $DPOTINY \
        --allowed-max-length 64
    expect_dpo_error "more than the model's context length 64 (give a larger --context)" $DPOTINY --context 64
    expect_dpo_error "--reference" $DPOTINY --reference "$TMP/mha.safetensors"
    expect_dpo_error "--reference" $DPOTINY --reference "$TMP/ftplain.safetensors"
    expect_dpo_error "--reference" $DPOTINY --reference "$TMP/no/such/file.safetensors"
    expect_dpo_error "--format chat" $DPOTINY --format chat
    expect_dpo_error "training needs --batch 2" $DPOTINY --max-entries 2
    expect_dpo_error "--data FILE.json is required" --beta 0.1
}
# finetune dpo: --json's rows and values, both plots, --save; a --reference
# equal to the starting weights changes no line
# shellcheck disable=SC2086
if "$TG" finetune dpo $DPOTINY --epochs 1 --eval-freq 2 --eval-iter 1 --max-new-tokens 2 --json \
    --plot "$TMP/dpo.svg" --save "$TMP/dpo1.safetensors" >"$TMP/dpo.txt" 2>"$TMP/err"; then
    for k in '"train_reward_margin"' '"val_rejected_reward"' '"before"' '"responses"' '"reference"' '"policy"'; do
        if tail -1 "$TMP/dpo.txt" | grep -qF "$k"; then ok; else bad "finetune dpo --json lacks $k"; fi
    done
    if [ -s "$TMP/dpo.svg" ] && [ -s "$TMP/dpo-reward-margins.svg" ]; then ok; else bad "finetune dpo --plot: no plots"; fi
    if [ "$QUICK" -eq 0 ]; then # two more runs: not in the quick form
        "$TG" finetune dpo $DPOTINY --epochs 1 --max-new-tokens 2 --load "$TMP/dpo1.safetensors" >"$TMP/dpo2.txt" 2>"$TMP/err"
        "$TG" finetune dpo $DPOTINY --epochs 1 --max-new-tokens 2 --load "$TMP/dpo1.safetensors" \
            --reference "$TMP/dpo1.safetensors" >"$TMP/dpo3.txt" 2>>"$TMP/err"
        if [ -s "$TMP/dpo2.txt" ] && cmp -s "$TMP/dpo2.txt" "$TMP/dpo3.txt"; then ok; else
            bad "finetune dpo --reference equal to --load: other lines ($(head -1 "$TMP/err"))"; fi
    fi
else bad "finetune dpo --json --plot --save: $(head -1 "$TMP/err")"; fi
# finetune with --recompute: the same lines (LoRA inside the blocks, dropout)
# shellcheck disable=SC2086
for extra in "--dropout 0.1" "--lora-rank 2 --lora-alpha 4 --dropout 0.1"; do
    if "$TG" finetune classify --train "$FT/train.csv" --val "$FT/val.csv" $FTTINY --layers 2 --epochs 1 $extra \
        >"$TMP/plain.txt" 2>"$TMP/err" &&
        "$TG" finetune classify --train "$FT/train.csv" --val "$FT/val.csv" $FTTINY --layers 2 --epochs 1 $extra \
        --recompute >"$TMP/re.txt" 2>"$TMP/err" && cmp -s "$TMP/plain.txt" "$TMP/re.txt"; then ok; else
        bad "finetune classify $extra --recompute: output differs ($(head -1 "$TMP/err"))"; diff "$TMP/plain.txt" "$TMP/re.txt" | head -5; fi
done
if "$TG" finetune classify --train "$FT/train.csv" --val "$FT/val.csv" $FTTINY --epochs 2 --eval-freq 3 \
        --plot "$TMP/ft.svg" >/dev/null 2>"$TMP/err" && grep -q "Validation loss" "$TMP/ft.svg" &&
    grep -q "Examples seen" "$TMP/ft.svg" && grep -q "Validation accuracy" "$TMP/ft-accuracy.svg"; then ok; else
    bad "finetune classify --plot: $(head -1 "$TMP/err")"; fi
# a label is a class index below 2^20: one that an int or the class count
# would wrap (2^32 + 1, 2^31 - 1, 2^63 - 2) is refused with its file, row and
# the limit, before any model is built
for label in 4294967297 2147483647 9223372036854775806 1048576 -1; do
    printf 'Label,Text\n0,fine\n%s,"big label"\n' "$label" >"$TMP/label.csv"
    # shellcheck disable=SC2086
    "$TG" finetune classify --train "$FT/train.csv" --val "$TMP/label.csv" $FTTINY >/dev/null 2>"$TMP/err"
    st=$?
    case $label in
    -1) want="label.csv: row 2: label -1 is negative" ;;
    *) want="label.csv: row 2: label $label is too large (class indices go up to 1048575: at most 1048576 classes)" ;;
    esac
    if [ $st -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -qF -- "--val: $TMP/$want" "$TMP/err"; then ok; else
        bad "finetune classify, label $label: exit $st, $(head -2 "$TMP/err" | tr '\n' '|')"; fi
done

# ---- export: what it writes reads back (generate --hf: the same ids); LoRA merged or as PEFT's files ----
# ids of `generate ARGS...` (--json), or "" on failure
gen_ids() { "$TG" generate --max-new-tokens 6 --json "$@" 2>>"$TMP/err" | tr -d '\n' | sed -n 's/.*"ids":\[\([0-9,]*\)\].*/\1/p'; }
expect_round_trip() { # DESC FOLDER-ARGS... -- MODEL-ARGS...: export --hf, then the folder's ids are the model's
    desc=$1
    shift
    : >"$TMP/err"
    rm -rf "$TMP/exp"
    exp_args=""
    while [ "$1" != -- ]; do exp_args="$exp_args $1"; shift; done
    shift
    # shellcheck disable=SC2086
    if "$TG" export "$@" $exp_args --hf "$TMP/exp" 2>>"$TMP/err" && a=$(gen_ids --hf "$TMP/exp") && [ -n "$a" ] &&
        b=$(gen_ids "$@") && [ "$a" = "$b" ]; then ok; else
        bad "export --hf then generate --hf ($desc): '${a:-}' vs '${b:-}': $(head -2 "$TMP/err" | tr '\n' '|')"; fi
}
EXQ="--config qwen3-0.6b --layers 2 --emb 32 --heads 2 --head-dim 16 --kv-groups 1 --hidden 64 --seed 5"
# shellcheck disable=SC2086
expect_round_trip "GPT-2, its separate head" -- --layers 2 --emb 32 --heads 2 --seed 5
# (--quick: Qwen3's vocabulary and the full disks are test_export's there)
if [ "$QUICK" = 0 ]; then
# shellcheck disable=SC2086
expect_round_trip "Qwen3, shards of 1MB" --max-shard-size 1MB -- $EXQ
if [ -f "$TMP/exp/model.safetensors.index.json" ] && [ ! -e "$TMP/exp/model.safetensors" ] &&
    [ "$(ls "$TMP/exp" | grep -c '^model-0000[0-9]-of-0000[2-9]\.safetensors$')" -ge 2 ]; then ok; else
    bad "export --max-shard-size 1MB: no index and shards ($(ls "$TMP/exp" | tr '\n' ' '))"; fi
fi
# a LoRA model (finetune --save above), merged: its folder generates the LoRA model's ids
LORA="--load $TMP/ft.safetensors --lora-rank 2 --lora-alpha 4 --context 256 --emb 8 --heads 2 --layers 1"
rm -rf "$TMP/exp"
# shellcheck disable=SC2086
if "$TG" export $LORA --hf "$TMP/exp" 2>"$TMP/err" && a=$(gen_ids --hf "$TMP/exp") && b=$(gen_ids $LORA) &&
    [ -n "$a" ] && [ "$a" = "$b" ]; then ok; else bad "export LoRA merged: '${a:-}' vs '${b:-}': $(head -2 "$TMP/err" | tr '\n' '|')"; fi
rm -rf "$TMP/exp"
# shellcheck disable=SC2086
if "$TG" export $LORA --adapter --hf "$TMP/exp" 2>"$TMP/err" && [ -f "$TMP/exp/adapter_config.json" ] &&
    grep -q '"peft_type": *"LORA"' "$TMP/exp/adapter_config.json" &&
    grep -q 'base_model.model.transformer.h.0.attn.c_attn.lora_A.weight' "$TMP/exp/adapter_model.safetensors"; then ok
else bad "export --adapter: $(head -2 "$TMP/err" | tr '\n' '|') ($(ls "$TMP/exp" 2>&1 | tr '\n' ' '))"; fi
# a trainer checkpoint as --load (pretrain --checkpoint above)
rm -rf "$TMP/exp"
if "$TG" export --context 32 --emb 16 --heads 2 --layers 1 --load "$TMP/ck1" --hf "$TMP/exp" 2>"$TMP/err" &&
    a=$(gen_ids --hf "$TMP/exp") && b=$(gen_ids --context 32 --emb 16 --heads 2 --layers 1 --load "$TMP/ck1") &&
    [ -n "$a" ] && [ "$a" = "$b" ]; then ok; else bad "export --load CHECKPOINT: '${a:-}' vs '${b:-}': $(head -2 "$TMP/err" | tr '\n' '|')"; fi
# a GGUF file: the magic, version 3
if [ "$QUICK" = 0 ]; then
rm -f "$TMP/exp.gguf"
# shellcheck disable=SC2086
if "$TG" export $EXQ --gguf "$TMP/exp.gguf" --type q8_0 2>"$TMP/err" &&
    [ "$(head -c 4 "$TMP/exp.gguf")" = GGUF ] && [ "$(od -An -tu4 -j4 -N4 "$TMP/exp.gguf" | tr -d ' ')" = 3 ]; then ok
else bad "export --gguf --type q8_0: $(head -2 "$TMP/err" | tr '\n' '|')"; fi
# a full disk while the file is written: one line, exit 2, nothing left behind (the old file kept)
cp "$TMP/exp.gguf" "$TMP/exp.gguf.orig"
ls -A "$TMP" >"$TMP/before.ls"
# shellcheck disable=SC2086
(ulimit -f 64; trap '' XFSZ; "$TG" export $EXQ --gguf "$TMP/exp.gguf" --type f32 >/dev/null 2>"$TMP/err")
st=$?
if [ $st -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && cmp -s "$TMP/exp.gguf" "$TMP/exp.gguf.orig" &&
    ls -A "$TMP" | cmp -s - "$TMP/before.ls"; then ok; else
    bad "export --gguf on a full disk: exit $st, $(head -2 "$TMP/err" | tr '\n' '|') ($(ls -A "$TMP" | grep exp | tr '\n' ' '))"; fi
rm -rf "$TMP/exp"
ls -A "$TMP" >"$TMP/before.ls"
# shellcheck disable=SC2086
(ulimit -f 64; trap '' XFSZ; "$TG" export $EXQ --hf "$TMP/exp" >/dev/null 2>"$TMP/err")
st=$?
if [ $st -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && [ ! -e "$TMP/exp" ] && ls -A "$TMP" | cmp -s - "$TMP/before.ls"; then ok; else
    bad "export --hf on a full disk: exit $st, $(head -2 "$TMP/err" | tr '\n' '|') ($(ls -A "$TMP" | grep exp | tr '\n' ' '))"; fi
fi

# ---- help ---------------------------------------------------------------------------------
for c in "" attention train bench tokenize summary generate pretrain "finetune classify" "finetune instruct" export; do
    if "$TG" $c --help >"$TMP/help" 2>&1 && grep -q "usage: tapegrad" "$TMP/help"; then ok; else bad "tapegrad $c --help"; fi
done

# ---- bad arguments: exit 2 and exactly one line on stderr -------------------------------
touch "$TMP/empty.safetensors"
printf 'not a safetensors file' >"$TMP/junk.safetensors"
mkdir -p "$TMP/dir"
# a Q8_0 entry whose first block's scale is NaN (half 0x7e00), and one cut short
$PY - "$TMP" <<'EOF_Q8'
import json, struct, sys
for name, scale, cut in (("nan_q8", 0x7e00, 0), ("short_q8", 0x3c00, 10)):
    data = struct.pack("<H", scale) + bytes(32)
    h = json.dumps({"tok_emb.weight": {"dtype": "Q8_0", "shape": [1, 32], "data_offsets": [0, 34]}}).encode()
    h += b" " * (-len(h) % 8)
    open("%s/%s.safetensors" % (sys.argv[1], name), "wb").write(struct.pack("<Q", len(h)) + h + data[:len(data) - cut])
EOF_Q8
while IFS= read -r line; do
    [ -z "$line" ] && continue
    # shellcheck disable=SC2086
    eval "set -- $line"
    "$TG" "$@" >/dev/null 2>"$TMP/err"
    st=$?
    nl=$(wc -l <"$TMP/err")
    if [ $st -eq 2 ] && [ "$nl" -eq 1 ]; then ok; else
        bad "tapegrad $line: exit $st, $nl stderr lines: $(head -2 "$TMP/err" | tr '\n' '|')"
    fi
done <<EOF_CASES

frobnicate
--frobnicate
attention
attention --module
attention --module gpt2
attention --module mha --bogus
attention --module mha stray
attention --module mha --heads x
attention --module mha --heads
attention --module mha --heads 0
attention --module mha --heads -2
attention --module mha --heads 2.5
attention --module mha --d-in 0
attention --module mha --d-out -1
attention --module mha --d-in 3x
attention --module mha --d-in ' 3'
attention --module mha --d-in 99999999999999999999999
attention --module mha --seed -1
attention --module mha --seed abc
attention --module mha --seed 18446744073709551616
attention --module mha --d-in=
attention --module mha --d-out 3 --heads 2
attention --module mha --context 4
attention --module causal --context 5
attention --module mha --input rand:1:2:100 --context 50
attention --module mha --dropout 1
attention --module mha --dropout -0.1
attention --module mha --dropout nan
attention --module mha --dropout inf
attention --module mha --dropout 0.5x
attention --module mha --load $TMP/does-not-exist.safetensors
attention --module mha --load $TMP/empty.safetensors
attention --module mha --load $TMP/junk.safetensors
attention --module mha --load $TMP/dir
attention --module sa-v1 --load $TMP/mha.safetensors
attention --module mha --save $TMP/no/such/dir/x.safetensors
attention --module mha --input rand:1:0
attention --module mha --input rand:x:3
attention --module mha --input rand:1:2:3:4
attention --module mha --input rand:1
attention --module mha --input rand::3
attention --module mha --input rand:1:2:
attention --module mha --input rand:-1:2:3
attention --module mha --input rand:18446744073709551616:2:3
attention --module mha --input bookx
attention --module mha --input ''
attention --module mha --input rand:1:5
attention --module sa-v1 --input rand:1:2:5
attention --module mha --gradcheck --dropout 0.1
attention --module mha --gradcheck --json
attention --module mha --json=1
attention --module mha --d-in 1048576 --d-out 1048576
attention --module mha --input rand:1:65536:65536
train --steps 0
train --steps -5
train --steps ten
train --lr 0
train --lr -1
train --lr nan
train --momentum 1
train --momentum -0.5
train --module sa-v1
train --plot $TMP/no/such/dir/loss.svg
train --seed
train --threads 0
bench --module causal
bench --precision half
bench --heads 0
bench --d 0
bench --d-out 10 --heads 3
bench --threads 0
bench --dropout 1
bench --steps 0
bench --tokens 100000
bench --batch 100000 --tokens 65536
bench --nope
bench --model gpt --layers 1 --emb 8 --heads 2 --vocab 50 --tokens 4 --dist
summary --layers 0
summary --heads 5
summary --config gpt5
summary --config qwen3-0.6b --dropout 0.1
summary --config qwen3-0.6b --kv-groups 3
summary --config qwen3-0.6b --head-dim 7
summary --config qwen3-0.6b --qk-norm --no-qk-norm
summary --rope-base 10000
summary --norm batch
summary --mlp relu
summary --config gemma3-270m --layer-types sliding,full
summary --config gemma3-270m --layers 2 --layer-types sliding,middle
summary --config gemma3-270m --layers 2 --layer-types sliding,
summary --config gemma3-270m --sliding-window 0
summary --config gemma3-270m --norm layer
summary --config gemma3-270m --query-pre-attn-scalar 0
summary --config gemma3-270m --rope-local-base -1
summary --config qwen3-0.6b --rope-base 0
generate --config llama3.2-1b --layers 1 --emb 64 --heads 2 --kv-groups 2
generate --hf $(dirname "$0")/ref/hf_qwen3_tiny --emb 32
generate --hf $(dirname "$0")/ref
generate --hf $(dirname "$0")/ref/hf_qwen3_tiny --no-qk-norm
bench --model gpt --layers 1 --emb 8 --heads 2 --vocab 50 --tokens 4 --precision fp16
bench --model gpt --layers 1 --emb 8 --heads 2 --vocab 50 --tokens 4 --weights bf16
bench --model dpo --layers 1 --emb 8 --heads 2 --vocab 50 --tokens 1
generate --hf $(dirname "$0")/ref/hf_qwen3_tiny --weights f16
generate --weights q4
generate --config qwen3-0.6b --layers 1 --emb 48 --heads 2 --head-dim 24 --kv-groups 1 --hidden 64 --weights q8
generate --config qwen3-0.6b --layers 1 --emb 64 --heads 2 --head-dim 32 --kv-groups 1 --hidden 64 --weights q8 --load $TMP/nan_q8.safetensors
generate --config qwen3-0.6b --layers 1 --emb 64 --heads 2 --head-dim 32 --kv-groups 1 --hidden 64 --weights q8 --load $TMP/short_q8.safetensors
pretrain --text data/the-verdict.txt --weights q8
pretrain --text data/the-verdict.txt --config qwen3-0.6b --weights bf16
bench --model gpt --config qwen3-0.6b --layers 1 --emb 32 --heads 2 --kv-groups 1 --head-dim 16 --hidden 32 --vocab 50 --tokens 4 --weights q8
finetune classify --train a.csv --val b.csv --weights q8
generate --precision EXACT
pretrain --text data/the-verdict.txt --precision
summary --dropout 1
summary --emb 100000000
summary --vocab 0
generate --heads 7
generate --top-k 60000
generate --eos 50257
generate --max-new-tokens -1
generate --temperature -1
generate --load $TMP/no/such/file.safetensors
generate --hf $TMP/no/such/file.safetensors
generate --load a.safetensors --hf b.safetensors
generate --qkv-bias --hf $TMP/no/such/file.safetensors
generate --prompt ''
generate --prompt "$(printf 'bad \377')"
generate --context 4 --vocab 100 --emb 8 --heads 2 --layers 1
pretrain
pretrain --text $TMP/no/such/file.txt
pretrain --text $VERDICT --dist
pretrain --text $TMP/dir
pretrain --text $TMP/empty.safetensors
pretrain --text $TMP/verdict_small.txt
pretrain --text $TMP/junk.safetensors --context 4
pretrain --text $TMP/bad_utf8.txt --context 4
pretrain --text $VERDICT --batch 0
pretrain --text $VERDICT --epochs 0
pretrain --text $VERDICT --lr -1
pretrain --text $VERDICT --lr nan
pretrain --text $VERDICT --weight-decay -0.1
pretrain --text $VERDICT --train-ratio 0
pretrain --text $VERDICT --train-ratio 1.5
pretrain --text $VERDICT --stride 0
pretrain --text $VERDICT --optimizer sgd
pretrain --text $VERDICT --eval-freq 0
pretrain --text $VERDICT --eval-iter -1
pretrain --text $VERDICT --initial-lr 1e-4
pretrain --text $VERDICT --clip-grad-norm 0
pretrain --text $VERDICT --dropout 1
pretrain --text $VERDICT --plot $TMP/no/such/dir/p.svg
pretrain --text $VERDICT --checkpoint $TMP/no/such/dir/c.ckpt
pretrain --text $VERDICT --save $TMP/no/such/dir/m.safetensors
pretrain --text $VERDICT --checkpoint $TMP/dir
pretrain --text $VERDICT --start ''
pretrain --text $VERDICT --context 4096
pretrain --text $VERDICT --batch 4000
pretrain $TINY --train-ratio 0.999
pretrain $TINY --vocab 100
pretrain $TINY --warmup 100000
pretrain $TINY --resume $TMP/no/such/file
pretrain $TINY --resume $TMP/junk.safetensors
pretrain $TINY --resume $TMP/ck_trunc
pretrain $TINY --resume $TMP/mha.safetensors
pretrain $TINY --emb 8 --resume $TMP/ck1
finetune
finetune frobnicate
finetune classify
finetune classify --train $FT/train.csv
finetune classify --train $TMP/no/such.csv --val $FT/val.csv $FTTINY
finetune classify --train $TMP/badlabel.csv --val $FT/val.csv $FTTINY
finetune classify --train $TMP/unterminated.csv --val $FT/val.csv $FTTINY
finetune classify --train $FT/train.csv --val $TMP/dir $FTTINY
finetune classify --train $FT/train.csv --val $FT/val.csv --data $FT/instruction-40.json
finetune classify --train $FT/train.csv --val $FT/val.csv --lora-alpha 2
finetune classify --train $FT/train.csv --val $FT/val.csv --lora-rank 0
finetune classify --train $FT/train.csv --val $FT/val.csv --vocab 100
finetune classify --train $FT/train.csv --val $FT/val.csv --init a.safetensors --hf b.safetensors
finetune classify --train $FT/train.csv --val $FT/val.csv --max-length 0
finetune classify --train $FT/train.csv --val $FT/val.csv $FTTINY --context 8
finetune classify --train $FT/train.csv --val $FT/val.csv $FTTINY --batch 1000
finetune classify --train $FT/train.csv --val $FT/val.csv $FTTINY --init $TMP/junk.safetensors
finetune classify --train $FT/train.csv --val $FT/val.csv $FTTINY --init $TMP/mha.safetensors
finetune classify --train $FT/train.csv --val $FT/val.csv $FTTINY --save $TMP/no/such/dir/m.safetensors
finetune classify --train $FT/train.csv --val $FT/val.csv $FTTINY --plot $TMP/no/such/dir/p.svg
finetune classify --train $FT/train.csv --val $FT/val.csv $FTTINY --precision half
finetune instruct
finetune instruct --data $TMP/badentry.json $FTTINY
finetune instruct --data $TMP/truncated.json $FTTINY
finetune instruct --data $FT/train.csv $FTTINY
finetune instruct --data $FT/instruction-40.json --limit 3 $FTTINY
finetune instruct --data $FT/instruction-40.json --train $FT/train.csv
finetune instruct --data $FT/instruction-40.json --allowed-max-length 0
finetune instruct --data $FT/instruction-40.json $FTTINY --context 16
finetune classify --train $FT/train.csv --val $FT/val.csv --checkpoint-every 3
finetune classify --train $FT/train.csv --val $FT/val.csv --accumulate 0
finetune classify --train $FT/train.csv --val $FT/val.csv --min-lr 1e-5
finetune classify --train $FT/train.csv --val $FT/val.csv $FTTINY --warmup 1000
finetune classify --train $FT/train.csv --val $FT/val.csv $FTTINY --resume $TMP/no/such/file
finetune classify --train $FT/train.csv --val $FT/val.csv $FTTINY --resume $TMP/ck1
finetune instruct --data $FT/instruction-40.json $FTTINY --checkpoint $TMP/no/such/dir/c.ckpt
finetune instruct --data $FT/instruction-40.json $FTTINY --dist
pretrain $TINY --accumulate 0
pretrain $TINY --checkpoint-every 0
generate --lora-alpha 4
pretrain $TINY --dropout 0.2 --resume $TMP/ck1
pretrain $TINY --batch 3 --resume $TMP/ck1
pretrain $TINY --optimizer adam --resume $TMP/ck1
pretrain $TINY --fast-dropout --resume $TMP/ck1
pretrain $TINY --train-ratio 0.3 --resume $TMP/ck1
pretrain --text $VERDICT --bogus
tokenize
tokenize --text a --file b
tokenize --text a --decode 1
tokenize --file $TMP/no/such/file.txt
tokenize --file $TMP/dir
tokenize --text "$(printf 'caf\303')"
tokenize --decode "1 50257"
tokenize --decode "-1"
tokenize --decode "12 x 3"
tokenize --decode 99999999999999999999999999999999999
tokenize --bogus
tokenize --tokenizer $TMP/no/such/tokenizer.json --text a
tokenize --tokenizer $VERDICT --text a
tokenize --tokenizer $TMP/dir --text a
tokenize --tokenizer $FT/train.csv --text a
tokenize --chat --text hi
tokenize --generation-prompt --text hi
tokenize --think --text hi
tokenize --tokenizer $DATA/qwen3 --chat --messages $TMP/chat.json
tokenize --tokenizer $DATA/qwen3 --text "$(printf 'caf\303')"
tokenize --tokenizer $DATA/qwen3 --chat --text "$(printf 'caf\303')"
tokenize --tokenizer $DATA/qwen3 --messages $TMP/badentry.json
tokenize --tokenizer $DATA/qwen3 --messages $TMP/truncated.json
tokenize --tokenizer $DATA/qwen3 --chat --file $TMP/nul.txt
tokenize --tokenizer $DATA/qwen3 --messages $TMP/nul.json
tokenize --tokenizer $DATA/qwen3 --decode "151669"
generate --tokenizer $DATA/qwen3 --prompt "<think>" --max-new-tokens 1 --vocab 100 --context 16 --emb 8 --heads 2 --layers 1
generate --think
generate --chat --max-new-tokens 1
pretrain $TINY --tokenizer $TMP/no/such/tokenizer.json
finetune instruct --data $FT/instruction-40.json $FTTINY --tokenizer $TMP/no/such/tokenizer.json
finetune instruct --data $FT/instruction-40.json $FTTINY --format chat
finetune instruct --data $FT/instruction-40.json $FTTINY --format json
finetune classify --train $FT/train.csv --val $FT/val.csv $FTTINY --format chat
export
export --layers 1 --emb 8 --heads 2 --hf $TMP/x --gguf $TMP/x.gguf
export --layers 1 --emb 8 --heads 2 --hf $TMP/x --type q8_0
export --layers 1 --emb 8 --heads 2 --gguf $TMP/x.gguf --dtype f16
export --layers 1 --emb 8 --heads 2 --hf $TMP/x --dtype q8_0
export --layers 1 --emb 8 --heads 2 --gguf $TMP/x.gguf --type q4_0
export --layers 1 --emb 8 --heads 2 --hf $TMP/x --max-shard-size 5XB
export --layers 1 --emb 8 --heads 2 --hf $TMP/x --max-shard-size 0
export --layers 1 --emb 8 --heads 2 --gguf $TMP/x.gguf --max-shard-size 1GB
export --layers 1 --emb 8 --heads 2 --hf $TMP/x --merge
export --layers 1 --emb 8 --heads 2 --hf $TMP/x --adapter
export --layers 1 --emb 8 --heads 2 --gguf $TMP/x.gguf --adapter --lora-rank 2 --load $TMP/ft.safetensors
export --layers 1 --emb 8 --heads 2 --hf $TMP/x --merge --adapter --lora-rank 2 --load $TMP/ft.safetensors
export --layers 1 --emb 8 --heads 2 --hf $TMP/x --lora-rank 2
export --layers 1 --emb 8 --heads 2 --hf $TMP/x --lora-alpha 2
export --layers 1 --emb 8 --heads 2 --hf $TMP/x --from $VERDICT
export --layers 1 --emb 8 --heads 2 --hf $TMP/x --from $TMP/dir
export --layers 1 --emb 8 --heads 2 --hf $VERDICT
export --layers 1 --emb 8 --heads 2 --hf $TMP/no/such/dir/x
export --layers 1 --emb 8 --heads 2 --gguf $TMP/dir
export --layers 1 --emb 8 --heads 2 --gguf $TMP/no/such/dir/x.gguf
export --layers 1 --emb 8 --heads 2 --hf $TMP
export --layers 1 --emb 8 --heads 2 --vocab 50 --hf $TMP/x
export --layers 1 --emb 8 --heads 2 --vocab 50 --gguf $TMP/x.gguf
export --layers 1 --emb 8 --heads 2 --norm rms --hf $TMP/x
export --layers 1 --emb 8 --heads 2 --load $TMP/mha.safetensors --hf $TMP/x
export --layers 1 --emb 8 --heads 2 --load $TMP/ft.safetensors --hf $TMP/x
export --context 256 --emb 8 --heads 2 --layers 1 --load $TMP/ft.safetensors --lora-rank 3 --hf $TMP/x
export --context 256 --emb 8 --heads 2 --layers 1 --load $TMP/ftplain.safetensors --lora-rank 2 --hf $TMP/x
export --layers 1 --emb 8 --heads 2 --load $TMP/junk.safetensors --gguf $TMP/x.gguf
export --layers 1 --emb 8 --heads 2 --tokenizer $TMP/no/such/tokenizer.json --gguf $TMP/x.gguf
export --config llama3.2-1b --layers 1 --emb 64 --heads 2 --kv-groups 2 --hidden 64 --gguf $TMP/x.gguf --tokenizer $TMP/dir
export --config qwen3-0.6b --layers 1 --emb 16 --heads 2 --head-dim 8 --kv-groups 1 --hidden 16 --qkv-bias --gguf $TMP/x.gguf
export --config qwen3-0.6b --layers 1 --emb 16 --heads 2 --head-dim 8 --kv-groups 1 --hidden 16 --no-qk-norm --hf $TMP/x
EOF_CASES

total=$((pass + fail))
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
