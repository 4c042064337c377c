#!/usr/bin/env python3
"""The seed corpus of fuzz_tokenizer_json (tests/fuzz/corpus/fuzz_tokenizer_json/):
small tokenizer.json files and tiktoken rank files, valid ones and malformed
variants of them, each a file named after what it holds.

    python3 tests/fuzz/make_tokenizer_json_seeds.py

rewrites the seed_* files (the units tools/fuzz.sh --merge adds keep their
hash names and are left alone). Python's standard library only.
"""
import base64
import copy
import json
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_tokenizer_json")

# Qwen3's pre-tokenizer pattern (data/qwen3/tokenizer.json)
QWEN3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_alphabet():
    """GPT-2's bytes_to_unicode: byte -> the character standing for it."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


ALPHA = byte_alphabet()


def tok(raw):
    """Bytes (or text, as UTF-8) in GPT-2's alphabet."""
    if isinstance(raw, str):
        raw = raw.encode()
    return "".join(ALPHA[b] for b in raw)


# merges in rank order, as byte strings; each result is a vocabulary entry
MERGES = [(b" ", b"t"), (b"h", b"e"), (b" t", b"he"), (b"i", b"n"), (b"e", b"r"), (b"c", b"a"),
          (b"ca", b"f"), ("é".encode()[:1], "é".encode()[1:]), (b"caf", "é".encode()), (b" ", b"a"),
          (b"l", b"l"), (b"'", b"s"), ("日".encode()[:1], "日".encode()[1:2]), ("日".encode()[:2], "日".encode()[2:]),
          (b"\n", b"\n"), (b"1", b"2")]


def vocab():
    v = {tok(bytes([b])): b for b in range(256)}
    for a, b in MERGES:
        v.setdefault(tok(a + b), len(v))
    return v


def merges(style):
    if style == "pairs":
        return [[tok(a), tok(b)] for a, b in MERGES]
    return [tok(a) + " " + tok(b) for a, b in MERGES]


def added(content, id_, special=True, **extra):
    a = {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": special}
    a.update(extra)
    return a


def tokenizer_json(merge_style="strings", pre="bytelevel", norm=None, added_tokens=(), ignore_merges=False):
    if pre == "bytelevel":
        pre_tokenizer = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    else:
        pre_tokenizer = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN3_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": list(added_tokens),
        "normalizer": norm,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": ignore_merges, "vocab": vocab(), "merges": merges(merge_style)},
    }


# Gemma 3's kind of file (model.byte_fallback): a vocabulary of text, U+2581
# for a space, "<0xNN>" for the bytes of a character that is no token
META = "\u2581"
FB_MERGES = [("a", "b"), (META, "a"), (META, "t"), ("h", "e"), (META + "t", "he"), ("c", "a"), ("ca", "f"),
             ("caf", "\u00e9"), ("\n", "\n"), (META, META)]
FB_SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]


def fallback_vocab():
    v = {t: i for i, t in enumerate(FB_SPECIAL)}
    for b in range(256):
        v["<0x%02X>" % b] = len(v)
    for ch in "abcdefhilnrt\n\u00e9\u65e5" + META:
        v.setdefault(ch, len(v))
    for a, b in FB_MERGES:
        v.setdefault(a + b, len(v))
    return v


def fallback_json(norm=True, pre=True, post="bos", added_extra=()):
    v = fallback_vocab()
    added_tokens = [added(t, v[t]) for t in FB_SPECIAL] + [added(META * 2, v[META * 2], False)] + list(added_extra)
    bos = {"SpecialToken": {"id": "<bos>", "type_id": 0}}
    seq = {"Sequence": {"id": "A", "type_id": 0}}
    specials = {"<bos>": {"id": "<bos>", "ids": [v["<bos>"]], "tokens": ["<bos>"]}}
    post_processor = {
        "bos": {"type": "TemplateProcessing", "single": [bos, seq],
                "pair": [bos, seq, bos, {"Sequence": {"id": "B", "type_id": 1}}], "special_tokens": specials},
        "seq_eos": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            {"type": "TemplateProcessing", "single": [seq, {"SpecialToken": {"id": "<eos>", "type_id": 0}}],
             "pair": [seq, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<eos>": {"id": "<eos>", "ids": [v["<eos>"]], "tokens": ["<eos>"]}}}]},
        "roberta": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]},
        None: None,
    }[post]
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added_tokens,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": META} if norm else None,
        "pre_tokenizer": ({"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                           "invert": False} if pre else None),
        "post_processor": post_processor,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": META}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": v, "merges": [[a, b] for a, b in FB_MERGES]},
    }


def dump(obj, ascii_only=False):
    return json.dumps(obj, ensure_ascii=ascii_only, indent=1).encode()


QWEN_ADDED = [added("<|endoftext|>", 300), added("<|im_start|>", 301), added("<|im_end|>", 302),
              added("<think>", 303, special=False), added("</think>", 304, special=False)]
LLAMA_ADDED = [added("<|begin_of_text|>", 400), added("<|end_of_text|>", 401),
               added("<|start_header_id|>", 402), added("<|end_header_id|>", 403), added("<|eot_id|>", 404)]


def valid_json():
    yield "bytelevel_strmerges", dump(tokenizer_json())
    yield "bytelevel_strmerges_ascii", dump(tokenizer_json(), ascii_only=True)
    yield "split_pairs_nfc_qwen_added", dump(tokenizer_json("pairs", "split", {"type": "NFC"}, QWEN_ADDED, True))
    yield "split_pairs_seqnfc_ignore_false", dump(
        tokenizer_json("pairs", "split", {"type": "Sequence", "normalizers": [{"type": "NFC"}]}, QWEN_ADDED[3:]))
    yield "split_strings_none_llama_added", dump(tokenizer_json("strings", "split", None, LLAMA_ADDED, True))
    yield "bytelevel_seq_empty_norm", dump(
        tokenizer_json("strings", "bytelevel", {"type": "Sequence", "normalizers": []}, [added("<|endoftext|>", 300, False)]))
    # an added token that is also a vocabulary entry, with its id
    t = tokenizer_json("pairs", "bytelevel", None, [added("ca", vocab()[tok("ca")], False), added("\u00e9", 320)])
    yield "added_is_vocab_entry", dump(t)
    # the same added token listed twice; two tokens with one text
    t = tokenizer_json("strings", "split", {"type": "NFC"},
                       [added("<|x|>", 300), added("<|x|>", 300), added("<|y|>", 301, False), added("<|y|>", 302)])
    yield "added_twice", dump(t)
    # a composed character as an added token, under NFC
    t = tokenizer_json("strings", "split", {"type": "NFC"}, [added("\u00e9", 300, False), added("\u0338", 301, False)])
    yield "added_nfc_characters", dump(t)
    # the largest id there may be: 2^24 ids
    t = tokenizer_json()
    t["model"]["vocab"][tok("xyz")] = (1 << 24) - 1
    yield "id_max", dump(t)
    # model without "type", merges empty, a pattern that matches nothing or empty strings
    t = tokenizer_json()
    del t["model"]["type"]
    t["model"]["merges"] = []
    yield "model_untyped_no_merges", dump(t)
    for name, regex in [("regex_empty", ""), ("regex_nomatch", "zzz"), ("regex_bytes", r"(?s)\C"),
                        ("regex_lookbehind", r"(?<=a)b|\s+|\S"), ("regex_backtrack", r"(a|aa)+$|.")]:
        t = tokenizer_json(pre="split")
        t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = regex
        yield name, dump(t)
    # byte fallback (Gemma 3's kind): with its normaliser, Split and <bos>; without them, an <eos> after the
    # text; a post-processor tapegrad does not implement (refused when its ids are asked for); added tokens
    # written as byte tokens and with U+2581 (decoded as a byte, as spaces)
    yield "fallback_gemma", dump(fallback_json())
    yield "fallback_plain_eos_after", dump(fallback_json(norm=False, pre=False, post="seq_eos"))
    yield "fallback_roberta_post", dump(fallback_json(post="roberta"))
    v = fallback_vocab()
    yield "fallback_added_bytes", dump(fallback_json(post=None, added_extra=[
        added("<0x41>", v["<0x41>"], False), added(META + "t", v[META + "t"], False)]))


def malformed_json():
    base = tokenizer_json("strings", "split", {"type": "NFC"}, QWEN_ADDED, True)
    text = dump(base)
    yield "truncated_half", text[: len(text) // 2]
    yield "truncated_end", text[:-2]
    yield "empty_file", b""
    yield "not_json", b"hello world\n"
    yield "json_array", b"[1, 2, 3]\n"
    yield "no_model", dump({"normalizer": None})

    def variant(name, edit):
        t = copy.deepcopy(base)
        edit(t)
        return name, dump(t)

    def setp(*path_value):
        *path, value = path_value

        def edit(t):
            o = t
            for k in path[:-1]:
                o = o[k]
            o[path[-1]] = value
        return edit

    yield variant("model_wordpiece", setp("model", "type", "WordPiece"))
    yield variant("model_not_object", setp("model", 7))
    yield variant("model_dropout", setp("model", "dropout", 0.1))
    yield variant("model_unk_token", setp("model", "unk_token", "<unk>"))
    yield variant("model_byte_fallback", setp("model", "byte_fallback", True))
    yield variant("model_suffix", setp("model", "end_of_word_suffix", "</w>"))
    yield variant("vocab_array", setp("model", "vocab", [1, 2]))
    yield variant("vocab_empty", setp("model", "vocab", {}))
    yield variant("merges_object", setp("model", "merges", {"a": "b"}))
    yield variant("merges_missing", lambda t: t["model"].pop("merges"))
    yield variant("merge_three_words", setp("model", "merges", ["a b c"]))
    yield variant("merge_no_space", setp("model", "merges", ["ab"]))
    yield variant("merge_one_string", setp("model", "merges", [["a"]]))
    yield variant("merge_not_string", setp("model", "merges", [["a", 1]]))
    yield variant("merge_missing_token", setp("model", "merges", ["x y"]))
    yield variant("merge_missing_result", setp("model", "merges", [["q", "z"]]))
    yield variant("merge_not_alphabet", setp("model", "merges", ["\u2603 a"]))
    yield variant("id_string", lambda t: t["model"]["vocab"].__setitem__(tok("a"), "97"))
    yield variant("id_negative", lambda t: t["model"]["vocab"].__setitem__(tok("a"), -1))
    yield variant("id_huge", lambda t: t["model"]["vocab"].__setitem__(tok("a"), 1 << 24))
    yield variant("id_2_63", lambda t: t["model"]["vocab"].__setitem__(tok("a"), (1 << 63) - 1))
    yield variant("id_duplicate", lambda t: t["model"]["vocab"].__setitem__(tok("a"), 98))
    yield variant("id_float", lambda t: t["model"]["vocab"].__setitem__(tok("a"), 97.0))
    yield variant("vocab_lacks_byte", lambda t: t["model"]["vocab"].pop(tok(b"\x00")))
    yield variant("vocab_key_not_alphabet", lambda t: t["model"]["vocab"].__setitem__("a b", 500))
    yield variant("vocab_key_empty", lambda t: t["model"]["vocab"].__setitem__("", 500))
    yield variant("vocab_key_long", lambda t: t["model"]["vocab"].__setitem__("a" * 1100, 500))
    yield variant("norm_nfkc", setp("normalizer", {"type": "NFKC"}))
    yield variant("norm_lowercase", setp("normalizer", {"type": "Lowercase"}))
    yield variant("norm_seq_two", setp("normalizer", {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "NFC"}]}))
    yield variant("norm_string", setp("normalizer", "NFC"))
    yield variant("pre_whitespace", setp("pre_tokenizer", {"type": "Whitespace"}))
    yield variant("pre_none", setp("pre_tokenizer", None))
    yield variant("pre_bytelevel_prefix", setp("pre_tokenizer", {"type": "ByteLevel", "add_prefix_space": True}))
    yield variant("pre_bytelevel_noregex", setp("pre_tokenizer", {"type": "ByteLevel", "use_regex": False}))
    yield variant("pre_split_removed", setp("pre_tokenizer", "pretokenizers", 0, "behavior", "Removed"))
    yield variant("pre_split_invert", setp("pre_tokenizer", "pretokenizers", 0, "invert", True))
    yield variant("pre_split_string", setp("pre_tokenizer", "pretokenizers", 0, "pattern", {"String": " "}))
    yield variant("pre_split_bad_regex", setp("pre_tokenizer", "pretokenizers", 0, "pattern", {"Regex": "(a"}))
    yield variant("pre_seq_one", setp("pre_tokenizer", "pretokenizers", [base["pre_tokenizer"]["pretokenizers"][0]]))
    yield variant("pre_seq_bytelevel_regex", setp("pre_tokenizer", "pretokenizers", 1, "use_regex", True))
    yield variant("added_not_array", setp("added_tokens", {"id": 1}))
    yield variant("added_lstrip", lambda t: t["added_tokens"].append(added("<x>", 310, lstrip=True)))
    yield variant("added_rstrip", lambda t: t["added_tokens"].append(added("<x>", 310, rstrip=True)))
    yield variant("added_single_word", lambda t: t["added_tokens"].append(added("<x>", 310, single_word=True)))
    yield variant("added_empty", lambda t: t["added_tokens"].append(added("", 310)))
    yield variant("added_nul", lambda t: t["added_tokens"].append(added("a\u0000b", 310)))
    yield variant("added_no_id", lambda t: t["added_tokens"].append({"content": "<x>"}))
    yield variant("added_huge_id", lambda t: t["added_tokens"].append(added("<x>", 1 << 40)))
    yield variant("added_id_taken", lambda t: t["added_tokens"].append(added("<x>", 97)))
    yield variant("added_id_twice", lambda t: t["added_tokens"].append(added("<x>", 300)))
    yield variant("added_long", lambda t: t["added_tokens"].append(added("<" * 5000, 310)))
    # JSON-level problems: duplicate keys, invalid UTF-8 in a key, a lone surrogate
    yield "duplicate_key", text.replace(b'"normalizer"', b'"model": 1, "normalizer"', 1)
    yield "key_invalid_utf8", text.replace(b'"' + tok("ca").encode() + b'"', b'"c\xffa"', 1)
    yield "key_lone_surrogate", text.replace(b'"' + tok("ca").encode() + b'"', b'"c\\udc00a"', 1)
    yield "key_nul_escape", text.replace(b'"' + tok("ca").encode() + b'"', b'"c\\u0000a"', 1)


def malformed_fallback():
    base = fallback_json()

    def variant(name, edit):
        t = copy.deepcopy(base)
        edit(t)
        return name, dump(t)

    yield variant("lacks_byte", lambda t: t["model"]["vocab"].pop("<0x0A>"))
    yield variant("norm_nfc", lambda t: t.__setitem__("normalizer", {"type": "NFC"}))
    yield variant("norm_replace_other", lambda t: t["normalizer"].__setitem__("content", "_"))
    yield variant("pre_bytelevel", lambda t: t.__setitem__("pre_tokenizer", {"type": "ByteLevel"}))
    yield variant("pre_split_no_norm", lambda t: t.__setitem__("normalizer", None))
    yield variant("decoder_none", lambda t: t.__setitem__("decoder", None))
    yield variant("decoder_no_fallback", lambda t: t["decoder"]["decoders"].pop(1))
    yield variant("byte_fallback_number", lambda t: t["model"].__setitem__("byte_fallback", 1))
    yield variant("post_single_object", lambda t: t["post_processor"].__setitem__("single", {}))
    yield variant("post_no_sequence", lambda t: t["post_processor"]["single"].pop(1))
    yield variant("post_unknown_token", lambda t: t["post_processor"]["special_tokens"].pop("<bos>"))
    yield variant("post_id_missing", lambda t: t["post_processor"]["special_tokens"]["<bos>"].__setitem__("ids", [9999]))
    yield variant("post_ids_many", lambda t: t["post_processor"]["special_tokens"]["<bos>"].__setitem__("ids", [2] * 17))
    # GPT-2's alphabet with Gemma 3's normaliser
    t = tokenizer_json()
    t["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": META}
    yield "bytelevel_norm_replace", dump(t)


def rank_file(tokens, eol=b"\n"):
    return b"".join(base64.b64encode(t) + b" " + str(r).encode() + eol for t, r in tokens)


def rank_tokens():
    toks = [(bytes([b]), b) for b in range(256)]
    for a, b in MERGES:
        if all(a + b != t for t, _ in toks):
            toks.append((a + b, len(toks)))
    return toks


def rank_files():
    toks = rank_tokens()
    yield "ranks_valid", rank_file(toks)
    yield "ranks_valid_crlf", rank_file(toks, b"\r\n")
    yield "ranks_valid_shuffled_blank_lines", rank_file(toks[::-1]).replace(b"\n", b"\n\n", 5)
    yield "ranks_added_id_taken", rank_file(toks + [(b"zz", 1000)])
    yield "ranks_added_same_text", rank_file(toks + [(b"<|endoftext|>", 1000)])
    yield "ranks_lacks_byte", rank_file(toks[1:])
    yield "ranks_bad_base64", rank_file(toks[:10]) + b"!!!! 10\n"
    yield "ranks_bad_padding", rank_file(toks[:10]) + b"YQ=a 10\n"
    yield "ranks_negative", rank_file(toks[:10]) + b"YQ== -1\n"
    yield "ranks_no_space", rank_file(toks[:10]) + b"YQ==\n"
    yield "ranks_two_spaces", rank_file(toks[:10]) + b"YQ== 1 2\n"
    yield "ranks_huge", rank_file(toks + [(b"xyz", 1 << 24)])
    yield "ranks_overflow", rank_file(toks) + b"eHl6 99999999999999999999\n"
    yield "ranks_duplicate_rank", rank_file(toks + [(b"xyz", 5)])
    yield "ranks_duplicate_token", rank_file(toks + [(b"a", 500)])
    yield "ranks_long_token", rank_file(toks + [(b"x" * 1100, 500)])
    yield "ranks_truncated", rank_file(toks)[:700]


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.startswith("seed_"):
            os.remove(os.path.join(OUT, f))
    n = 0
    for prefix, gen in [("seed_json_", valid_json()), ("seed_json_bad_", malformed_json()),
                        ("seed_json_bad_", malformed_fallback()), ("seed_", rank_files())]:
        for name, data in gen:
            with open(os.path.join(OUT, prefix + name), "wb") as f:
                f.write(data)
            n += 1
    print(f"{n} seed files in {OUT}")


if __name__ == "__main__":
    main()
