#!/usr/bin/env python3
"""Golden data for verl-cpp's tokenizers (tests/data/tokenizer/), produced by the real
Hugging Face `tokenizers` package and jinja2, with nothing downloaded from the hub.

    pip install tokenizers jinja2
    python3 tools/scripts/make_tokenizer_golden.py [--out tests/data/tokenizer]

It trains four small byte-level BPE tokenizers locally on a generated multilingual corpus, one per
pre-tokenization style, with the special tokens laid out like the real models (added after the
trained vocabulary):
  gpt2         ByteLevel pre-tokenizer with the GPT-2 regex; merges saved in the legacy "a b" form
  gpt2_prefix  the same with add_prefix_space=true, plus added tokens that use lstrip / rstrip /
               single_word and a non-special, normalized added token
  qwen2        NFC normalizer + Split(Qwen2 regex) + ByteLevel(use_regex=false); ChatML specials
  llama3       Split(Llama-3 regex) + ByteLevel(use_regex=false), ignore_merges, a
               TemplateProcessing post-processor that prepends <|begin_of_text|>
and three SentencePiece-style BPE tokenizers with byte_fallback, laid out like Llama-2 (<unk> <s> </s>
at ids 0-2, then <0x00>..<0xFF> as ordinary vocabulary entries, then the learned pieces; a small
limit_alphabet leaves many characters to byte fallback):
  llama2         the legacy normalizer Sequence[Prepend("▁"), Replace(" " -> "▁")], no pre-tokenizer,
                 fuse_unk, decoder Sequence[Replace("▁" -> " "), ByteFallback, Fuse, Strip(" ", 1, 0)],
                 TemplateProcessing prepending <s>
  mistral        no normalizer, Metaspace(prepend_scheme "first", split false) (trained on whole lines,
                 so pieces also span words and whitespace runs), the same decoder and post-processor
  metaspace_unk  Metaspace(prepend_scheme "always", split true), some byte tokens missing (so unk is
                 used, with fuse_unk false), the Metaspace decoder alone (byte tokens decode literally)
and writes, for each, <name>.tokenizer.json and <name>.golden.jsonl with one line per string
(>= 1,000 strings: Unicode incl. CJK, emoji, combining marks, RTL, whitespace runs, digits and long
numbers, contractions, special tokens embedded in text, the empty string):
  {"text", "ids" (add_special_tokens=True), "ids_plain" (False; only when different),
   "decoded" (decode(ids_plain) with skip_special_tokens=False; only when != text),
   "decoded_skip" (the same with True; only when != decoded)}
and lines {"decode_ids", "decoded", "decoded_skip"} decoding random id sequences (partial UTF-8
byte tokens included, so U+FFFD replacement is checked too; for the SentencePiece styles also runs
of <0xXX> tokens: whole characters, cut characters, random bytes, between other tokens).

With --nfc-tables it also regenerates include/verl/model/tokenizer/detail/nfc_tables.hpp, the
Unicode data (from Python's unicodedata) behind our NFC normalizer (Qwen2's tokenizer.json uses one).

nfc.golden.jsonl holds the NFC normalizer's output (the package's Rust implementation) for every code
point NFC changes and for random combining sequences; split.golden.jsonl the pieces of Split
pre-tokenizers for every delimiter behaviour, with and without invert.

chat_templates.jsonl renders message lists with the official Jinja templates of Qwen2-Instruct
(ChatML with a default system prompt), plain ChatML and Llama-3-Instruct, exactly as transformers'
apply_chat_template does (sandboxed environment, trim_blocks, lstrip_blocks), for both values of
add_generation_prompt, with the ids of each rendering under the matching tokenizer.
"""
import argparse
import json
import os
import random

from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import trainers

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")

# The official templates (tokenizer_config.json "chat_template"), as Jinja source.
QWEN2_CHAT_TEMPLATE = (
    r"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    r"{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    r"{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    r"{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
CHATML_TEMPLATE = (
    r"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'"
    r" + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA3_CHAT_TEMPLATE = (
    r"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    r"'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    r"'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    r"{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

# ---- corpus -------------------------------------------------------------------------------------
ENGLISH = ("the of and to in is it that was for on are with as his they be at one have this from or had by "
           "word but what some we can out other were all there when up use your how said an each she which do "
           "their time if will way about many then them write would like so these her long make thing see him "
           "two has look more day could go come did number sound no most people my over know water than call "
           "first who may down side been now find any new work part take get place made live where after back "
           "little only round man year came show every good me give our under name very through just form "
           "sentence great think say help low line differ turn cause much mean before move right boy old too "
           "same tell does set three want air well also play small end put home read hand port large spell add "
           "even land here must big high such follow act why ask men change went light kind off need house "
           "picture try us again animal point mother world near build self earth father reinforcement learning "
           "policy gradient reward advantage token model training rollout critic actor Hello World OpenAI Python "
           "HybridFlow verl GRPO PPO").split()
CONTRACTIONS = ["it's", "don't", "I'm", "we're", "they've", "you'll", "he'd", "IT'S", "We'RE", "can't", "won't",
                "o'clock", "rock'n'roll", "'tis", "y'all", "Ma'am", "it'S", "SHE'LL", "I'D", "they'Ve"]
CJK = ["你好，世界", "强化学习", "大语言模型的训练", "我们今天去公园散步。", "数学题：三加五等于八", "深度学习框架",
       "こんにちは世界", "日本語のテキストです", "東京タワー", "カタカナとひらがな", "한국어 텍스트", "안녕하세요 여러분",
       "서울특별시", "漢字かな混じり文", "中文、日本語、한국어"]
RTL = ["مرحبا بالعالم", "السلام عليكم ٢٠٢٤", "שלום עולם", "עברית 123 English", "كتاب 42 صفحة", "ئۇيغۇرچە"]
OTHER_SCRIPTS = ["Привет, мир!", "Съешь же ещё этих мягких французских булок", "Γειά σου Κόσμε", "ΣΊΣΥΦΟΣ σίσυφος",
                 "नमस्ते दुनिया", "हिन्दी में लिखा गया वाक्य", "สวัสดีชาวโลก", "ภาษาไทย", "Ελληνικά", "Ꭰ Ꭱ Ꭲ",
                 "İstanbul ıi", "straße STRASSE", "Ǆemal ǅ ǆ", "ǅ", "Tiếng Việt có dấu", "Zürich Ærø Øresund"]
EMOJI = ["😀", "🚀", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸", "🇯🇵", "❤️", "🤖", "🎉🎉🎉", "☕", "🧑‍💻", "🏳️‍🌈", "✌🏿", "🫠"]
COMBINING = ["e\u0301", "cafe\u0301", "A\u030a", "n\u0303o", "o\u0308\u0304", "a\u0328\u0301", "\u1100\u1161\u11a8",
             "\u212b", "\u2126", "\u00c5", "Ä\u0323", "q\u0307\u0323", "\u0958", "ḱ\u0301", "x\u0301\u0302\u0303",
             "\u0301start", "ﬁ ligature", "①②③", "㎏", "Ｆｕｌｌｗｉｄｔｈ"]
SYMBOLS = ["Ω≈ç√∫", "∀x∈ℝ: x²≥0", "½ ¾ ⅞", "€100 £5 ¥300", "→ ← ↑ ↓", "—–-", "“quoted” ‘single’", "…",
           "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟘𝟙𝟚", "™©®", "§¶†‡", "«»‹›", "¿¡", "♠♣♥♦", "\u00a0nbsp\u00a0", "\u3000ideographic\u3000",
           "zero\u200bwidth", "soft\u00adhyphen", "\ufeffbom", "nel\u0085line", "line\u2028sep", "para\u2029sep",
           "tab\u000bvt", "ff\u000cff", "\x00nul", "del\x7f", "\x1b[31mred\x1b[0m", "\x1cfs\x1dgs\x1ers\x1fus"]
CODE = ["def f(x):\n    return x ** 2  # square\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
        "if __name__ == '__main__':\n    main()", "SELECT * FROM users WHERE id = 42;", "<div class=\"x\">hi</div>",
        "{\"key\": [1, 2.5, null, true]}", "x+=1;y-=2;z*=3", "https://example.com/path?q=1&r=two#frag",
        "user@example.org", "C:\\Users\\name\\file.txt", "~/.bashrc && echo $HOME", "#include <vector>",
        "std::vector<int> v{1,2,3};", "λx.x", "a != b && c >= d || !e", "   indented\n\t\ttabs\n"]
NUMBERS = ["0", "7", "42", "123", "1234", "12345", "1234567890", "3.14159", "2.718281828459045", "-17", "+5",
           "1,000,000", "1_000_000", "1e-10", "6.022e23", "0x1F", "0b1011", "99.9%", "$1,234.56", "2024-06-01",
           "12:34:56", "٣٤٥", "१२३", "²³", "Ⅻ", "12345678901234567890123", "007", "3/4", "10^9", "٠١٢٣٤٥٦٧٨٩"]
WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r", " \n ", "\n \n", "\t \n",
              " \t ", "        ", "\u3000", "\u00a0", "\u2003", " \u00a0 "]


def random_sentence(rng, specials):
    pieces = []
    for _ in range(rng.randint(1, 12)):
        kind = rng.random()
        if kind < 0.45:
            word = rng.choice(ENGLISH)
            pieces.append(word.capitalize() if rng.random() < 0.15 else word.upper() if rng.random() < 0.03 else word)
        elif kind < 0.52:
            pieces.append(rng.choice(CONTRACTIONS))
        elif kind < 0.62:
            pieces.append(rng.choice(CJK))
        elif kind < 0.66:
            pieces.append(rng.choice(RTL))
        elif kind < 0.71:
            pieces.append(rng.choice(OTHER_SCRIPTS))
        elif kind < 0.75:
            pieces.append(rng.choice(EMOJI))
        elif kind < 0.79:
            pieces.append(rng.choice(COMBINING))
        elif kind < 0.83:
            pieces.append(rng.choice(SYMBOLS))
        elif kind < 0.87:
            pieces.append(rng.choice(CODE))
        elif kind < 0.94:
            pieces.append(rng.choice(NUMBERS))
        elif kind < 0.97 and specials:
            pieces.append(rng.choice(specials))
        else:
            pieces.append(rng.choice(WHITESPACE))
    out = ""
    for piece in pieces:
        out += piece
        separator = rng.random()
        out += " " if separator < 0.7 else "" if separator < 0.8 else rng.choice([", ", ". ", "! ", "? ", "\n", "  "])
    return out if rng.random() < 0.5 else out.rstrip()


def training_corpus(seed):
    rng = random.Random(seed)
    lines = [random_sentence(rng, []) for _ in range(4000)]
    for group in (ENGLISH, CONTRACTIONS, CJK, RTL, OTHER_SCRIPTS, EMOJI, COMBINING, SYMBOLS, CODE, NUMBERS):
        lines.extend(group * 3)
    return lines


EDGE_CASES = [
    "", " ", "  ", "a", "A", "ab", "Hello", " Hello", "Hello ", "Hello world", "Hello  world", "Hello\tworld",
    "Hello\nworld", "Hello\r\nworld", "Hello \n world", "   leading spaces", "trailing spaces   ", "a  b   c    d",
    "\n\n\nthree newlines", "tabs\t\t\tand spaces   \t ", " \t\n\r ", "it's", "It's", "IT'S", "it'ſ", "we're",
    "they've", "I'm", "you'll", "he'd", "'s", "'", "''", "'''", "s's's", "' s", "'S", "'ll'd're", "don't stop",
    "rock'n'roll", "o'clock", "x'", "'x", "1", "12", "123", "1234", "12345", "123456", "1234567", "12345678901234567890",
    "3.14", "-1", "1,000", "10.000,00", "٣٤٥", "²", "Ⅻ", "1a2b3c", "a1b2c3", "99 bottles", "v1.2.3", "2024-06-01T12:00:00Z",
    "e\u0301", "\u00e9", "\u212b", "\u1100\u1161\u11a8", "\u0301", "\u0301\u0301", "a\u0301\u0301", "한", "각",
    "😀", "😀😀", "👨‍👩‍👧‍👦", "🇺🇸🇯🇵", "👍🏽", "\u200d", "\ufe0f", "\u200b", "\u00a0", "\u3000", "\u0085", "\u2028",
    "\x00", "\x7f", "\x1b", "\ufffd", "\ufeff", "\U0010ffff", "\U0001f600 \U0001f600", "𝔘", "ﬁ", "ǅ",
    "<", "<|", "<|im_start", "<|im_start|", "<|endoftext|", "|>", "<|>", "<|unknown|>", "<s>", "</s>",
    "!!!", "???", "...", "—", "--", "==", "->", "=>", "::", "#!", "@@", "$$", "%%", "^^", "&&", "**", "~~",
    "a" * 100, " " * 50, "ab" * 40, "1" * 60, "\n" * 20, "😀" * 10, "你好" * 20, "-" * 80, "=" * 33,
]


def golden_strings(specials, seed):
    rng = random.Random(seed)
    strings = list(EDGE_CASES)
    for group in (CONTRACTIONS, CJK, RTL, OTHER_SCRIPTS, EMOJI, COMBINING, SYMBOLS, CODE, NUMBERS, WHITESPACE):
        strings.extend(group)
    # Special tokens embedded in text, adjacent to each other and to whitespace.
    for special in specials:
        strings += [special, special + special, f"x{special}y", f" {special} ", f"{special}\n", f"\n{special}",
                    f"a {special}b", f"a{special} b", f"{special}hello{special}", f"  {special}  text  "]
    while len(strings) < 1100:
        strings.append(random_sentence(rng, specials))
    # Keep order, drop duplicates.
    return list(dict.fromkeys(strings))


# ---- tokenizers ---------------------------------------------------------------------------------
def train(name, corpus):
    bpe = models.BPE(ignore_merges=(name == "llama3"))
    tokenizer = Tokenizer(bpe)
    if name in ("gpt2", "gpt2_prefix"):
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=(name == "gpt2_prefix"), use_regex=True)
    else:
        if name == "qwen2":
            tokenizer.normalizer = normalizers.NFC()
        pattern = QWEN2_PATTERN if name == "qwen2" else LLAMA3_PATTERN
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1400 if name != "gpt2_prefix" else 1000, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(corpus, trainer=trainer)

    # Special tokens after the trained vocabulary, as in the released models.
    if name in ("gpt2", "gpt2_prefix"):
        tokenizer.add_special_tokens(["<|endoftext|>"])
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=True)
    elif name == "qwen2":
        tokenizer.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
        tokenizer.add_tokens([AddedToken("<tool_call>", special=False, normalized=False),
                              AddedToken("</tool_call>", special=False, normalized=False)])
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        tokenizer.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                                      "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"])
        bos_id = tokenizer.token_to_id("<|begin_of_text|>")
        tokenizer.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos_id)]),
        ])
    if name == "gpt2_prefix":
        # The added-token options the real tokenizers use: lstrip (e.g. <mask>), rstrip, single_word,
        # and a non-special token matched after normalization.
        tokenizer.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, special=True),
                                      AddedToken("[SEP]", rstrip=True, special=True)])
        tokenizer.add_tokens([AddedToken("verl", single_word=True, normalized=True, special=False),
                              AddedToken("ab", single_word=False, normalized=True, special=False)])
    return tokenizer


SENTENCEPIECE_SPECIALS = ["<unk>", "<s>", "</s>"]
# metaspace_unk lacks these byte tokens: 4-byte lead bytes (emoji and other astral characters
# become <unk>) and some continuation bytes.
MISSING_BYTES = {"metaspace_unk": set(range(0xF0, 0x100)) | set(range(0x80, 0x88))}


def train_sentencepiece(name, corpus):
    split = name != "mistral"
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=(name != "metaspace_unk"), byte_fallback=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=split)
    trainer = trainers.BpeTrainer(vocab_size=1000, min_frequency=2, special_tokens=SENTENCEPIECE_SPECIALS,
                                  limit_alphabet=100, show_progress=False)
    tokenizer.train_from_iterator(corpus, trainer=trainer)

    # Llama-2's vocabulary layout: the specials, the 256 byte tokens, then the learned pieces.
    data = json.loads(tokenizer.to_str())
    learned = [token for token, _ in sorted(data["model"]["vocab"].items(), key=lambda item: item[1])
               if token not in SENTENCEPIECE_SPECIALS]
    missing = MISSING_BYTES.get(name, set())
    byte_tokens = [f"<0x{b:02X}>" for b in range(256) if b not in missing]
    vocab = {token: i for i, token in enumerate(SENTENCEPIECE_SPECIALS + byte_tokens + learned)}
    data["model"]["vocab"] = vocab
    data["added_tokens"] = [{"id": vocab[content], "content": content, "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True}
                            for content in SENTENCEPIECE_SPECIALS]
    tokenizer = Tokenizer.from_str(json.dumps(data))

    sentencepiece_decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                               decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    if name == "llama2":
        tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        tokenizer.pre_tokenizer = None
        tokenizer.decoder = sentencepiece_decoder
    elif name == "mistral":
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
        tokenizer.decoder = sentencepiece_decoder
    else:
        tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    if name in ("llama2", "mistral"):
        tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1",
                                                                 special_tokens=[("<s>", vocab["<s>"])])
    return tokenizer


# Text for the SentencePiece styles on top of golden_strings(): the meta symbol and byte-token
# spellings typed as text, characters that are rare or absent in the corpus (byte fallback, unk).
SENTENCEPIECE_EDGE_CASES = [
    "\u2581", "\u2581\u2581", " \u2581", "\u2581 ", "\u2581a", "a\u2581b", "a \u2581 b", "<0x41>", "<0xE4><0xB8>",
    "<unk>", "<unk><unk>", "x<unk>y", "<s><s>", "</s> </s>", " <s>", "<s> ", "a<s>b", "  <s>  ",
    "\U0010ffff\U0010fffe", "\U0001d11e", "\ua66e", "\U00013000\U00013001", "a\U0001f600b", "\U0001f600" * 3,
    "\u00e9\U0001f600\u4e2d", "\U0001f600\u00e9\U0001f600", "\u4e2d\U0001f600", "\u03a9\U0001f600\u03a9",
    "\u0800\u07ff", "\u00ff\u0100", "  two leading", "two trailing  ", "   ", "\t", "\n", " \n ", "a\u3000b",
    "\u00a0", "x" * 300, "ab " * 120,
]
RARE_CHARACTER_RANGES = [(0x0100, 0x024F), (0x0370, 0x03FF), (0x0400, 0x04FF), (0x0590, 0x06FF), (0x0900, 0x0DFF),
                         (0x1E00, 0x1EFF), (0x2000, 0x2BFF), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
                         (0x1F300, 0x1FAFF), (0x10000, 0x1007F), (0xE000, 0xE0FF)]


def sentencepiece_strings(seed):
    rng = random.Random(seed)
    strings = list(SENTENCEPIECE_EDGE_CASES)
    for _ in range(150):
        pieces = []
        for _ in range(rng.randint(1, 8)):
            if rng.random() < 0.5:
                first, last = rng.choice(RARE_CHARACTER_RANGES)
                pieces.append("".join(chr(rng.randint(first, last)) for _ in range(rng.randint(1, 4))))
            else:
                pieces.append(rng.choice(ENGLISH + WHITESPACE + SENTENCEPIECE_SPECIALS))
        strings.append(rng.choice(["", " ", "  "]) + rng.choice([" ", "", "  "]).join(pieces))
    return strings


def byte_run_rows(tokenizer, seed):
    """Decoding runs of <0xXX> tokens: whole UTF-8 characters, cut ones, random bytes, mixed with
    other tokens and specials (ByteFallback turns a broken run into one U+FFFD per byte)."""
    rng = random.Random(seed)
    vocab = tokenizer.get_vocab()
    byte_ids = {b: vocab[f"<0x{b:02X}>"] for b in range(256) if f"<0x{b:02X}>" in vocab}
    others = sorted(i for token, i in vocab.items() if not (token.startswith("<0x") and len(token) == 6))
    rows = []
    for _ in range(200):
        ids = []
        for _ in range(rng.randint(1, 6)):
            kind = rng.random()
            if kind < 0.55:
                first, last = rng.choice(RARE_CHARACTER_RANGES + [(0x20, 0x7E), (0x80, 0x7FF)])
                data = chr(rng.randint(first, last)).encode("utf-8")
                if rng.random() < 0.3:
                    data = data[:rng.randint(1, len(data))] if rng.random() < 0.5 else data[rng.randint(0, len(data) - 1):]
            elif kind < 0.7:
                data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 3)))
            else:
                data = b""
                ids.append(rng.choice(others))
            ids.extend(byte_ids[b] for b in data if b in byte_ids)
        if not ids:
            ids = [rng.choice(others)]
        rows.append({"decode_ids": ids, "decoded": tokenizer.decode(ids, skip_special_tokens=False),
                     "decoded_skip": tokenizer.decode(ids, skip_special_tokens=True)})
    return rows


def special_strings(name):
    return {
        "gpt2": ["<|endoftext|>"],
        "gpt2_prefix": ["<|endoftext|>", "<mask>", "[SEP]", "verl", "ab"],
        "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"],
        "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                   "<|reserved_special_token_0|>"],
        "llama2": SENTENCEPIECE_SPECIALS,
        "mistral": SENTENCEPIECE_SPECIALS,
        "metaspace_unk": SENTENCEPIECE_SPECIALS,
    }[name]


def legacy_merges(path):
    """Rewrites the merges in the legacy "a b" string form (GPT-2 era files); the list form stays
    in the others, so both forms are tested."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data["model"]["merges"] = [" ".join(pair) for pair in data["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def golden_rows(tokenizer, strings, seed):
    rows = []
    for text in strings:
        encoding = tokenizer.encode(text, add_special_tokens=True)
        plain = tokenizer.encode(text, add_special_tokens=False)
        row = {"text": text, "ids": encoding.ids}
        if plain.ids != encoding.ids:
            row["ids_plain"] = plain.ids
        decoded = tokenizer.decode(plain.ids, skip_special_tokens=False)
        decoded_skip = tokenizer.decode(plain.ids, skip_special_tokens=True)
        if decoded != text:
            row["decoded"] = decoded
        if decoded_skip != decoded:
            row["decoded_skip"] = decoded_skip
        rows.append(row)
    # Random id sequences: single bytes of multi-byte characters decode to U+FFFD.
    rng = random.Random(seed)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    for _ in range(300):
        ids = [rng.randrange(size) for _ in range(rng.randint(1, 12))]
        rows.append({"decode_ids": ids, "decoded": tokenizer.decode(ids, skip_special_tokens=False),
                     "decoded_skip": tokenizer.decode(ids, skip_special_tokens=True)})
    return rows


# ---- chat templates -----------------------------------------------------------------------------
def chat_cases():
    return [
        [{"role": "user", "content": "What is 2 + 3?"}],
        [{"role": "system", "content": "You are a math tutor."}, {"role": "user", "content": "Solve x + 1 = 3."}],
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
         {"role": "user", "content": "Tell me a joke."}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"},
         {"role": "assistant", "content": "Paris."}],
        [{"role": "user", "content": "  padded content \n\n"}],
        [{"role": "user", "content": "\u3000\u00a0ideographic and nbsp\u00a0\u3000"}],
        [{"role": "user", "content": "\x85\x1c control whitespace \x1f\u2028"}],
        [{"role": "user", "content": ""}],
        [{"role": "user", "content": "Line one\nLine two\n\tindented"}],
        [{"role": "user", "content": "你好，请用中文回答。"}, {"role": "assistant", "content": "好的。😀"}],
        [{"role": "user", "content": "Embedded <|im_end|> and <|eot_id|> markers"}],
        [{"role": "system", "content": ""}, {"role": "user", "content": "Empty system prompt"}],
        [{"role": "assistant", "content": "An assistant message first"}],
        [{"role": "user", "content": "first"}, {"role": "system", "content": "a later system message"},
         {"role": "user", "content": "second"}],
        [{"role": "tool", "content": "{\"result\": 42}"}, {"role": "user", "content": "Use the tool output."}],
        [{"role": "user", "content": "Janet’s ducks lay 16 eggs per day. She eats three for breakfast every "
                                     "morning and bakes muffins for her friends every day with four. How much "
                                     "does she make every day at the farmers' market? Let's think step by step "
                                     "and output the final answer after \"####\"."}],
    ]


# ---- components -----------------------------------------------------------------------------------
def nfc_rows(seed):
    """NFC by the tokenizers package's normalizer (the Rust implementation, not Python's) on every
    code point NFC changes, canonical-ordering and Hangul cases, and random mark sequences."""
    import unicodedata as ud
    nfc = normalizers.NFC()
    texts = [chr(cp) for cp in range(0x80, 0x30000)
             if not 0xD800 <= cp <= 0xDFFF and ud.normalize("NFC", chr(cp)) != chr(cp)]
    marks = [chr(cp) for cp in range(0x300, 0x370)] + ["\u0323", "\u0328", "\u0345", "\u05b0", "\u0e38", "\u3099",
                                                        "\u302a", "\U0001d165", "\U0001d16d"]
    bases = ["a", "e", "o", "u", "A", "O", "\u1100", "\uac00", "\u304b", "\u03b1", "\u0391", "\u0985", "x", "1", " "]
    rng = random.Random(seed)
    for _ in range(1500):
        text = ""
        for _ in range(rng.randint(1, 4)):
            text += rng.choice(bases) + "".join(rng.choice(marks) for _ in range(rng.randint(0, 4)))
        texts.append(text)
    texts += ["\u1100\u1161\u11a8", "\u1100\u1161", "\uac00\u11a8", "\u1100\u1100\u1161", "\u0301abc", "e\u0301\u0301",
              "\u0958\u093c", "\u212b\u0301", "\u0344", "\u0f73", "\U0001d15e", "\u00c5\u0301", "A\u0301\u0308"]
    return [{"text": text, "nfc": nfc.normalize_str(text)} for text in texts]


SPLIT_TEXTS = ["How are you doing?", "  leading and trailing  ", "a,b,,c,", ",start", "end,", "no delimiters",
               "x--y---z", "--", "", "1,234 and 5,678", "tabs\tand\nnewlines", "混合,text,文字", "a", ",", "aaa"]


def split_rows():
    rows = []
    patterns = [("Regex", r"\s+"), ("Regex", ","), ("Regex", r"-+"), ("Regex", r"\p{L}+"), ("String", ","),
                ("String", "--"), ("Regex", r"\d"), ("Regex", r"(?=,)"), ("Regex", r"a*")]
    for kind, pattern in patterns:
        for behavior in ("removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"):
            for invert in (False, True):
                split = pre_tokenizers.Split(Regex(pattern) if kind == "Regex" else pattern, behavior=behavior,
                                             invert=invert)
                for text in SPLIT_TEXTS:
                    pieces = [piece for piece, _ in split.pre_tokenize_str(text)]
                    rows.append({"pattern": {kind: pattern}, "behavior": behavior, "invert": invert, "text": text,
                                 "pieces": pieces})
    return rows


def render(template, messages, add_generation_prompt, bos_token):
    # What transformers' apply_chat_template does for these templates.
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return environment.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                                     bos_token=bos_token, eos_token="", pad_token="")


# ---- NFC tables ---------------------------------------------------------------------------------
def write_nfc_tables(path):
    import unicodedata as ud

    def canonical(cp):
        d = ud.decomposition(chr(cp))
        return [int(x, 16) for x in d.split()] if d and not d.startswith("<") else None

    def full_decomposition(cp):
        parts = canonical(cp)
        if parts is None:
            return [cp]
        return [q for p in parts for q in full_decomposition(p)]

    combining = [(cp, ud.combining(chr(cp))) for cp in range(0x110000) if ud.combining(chr(cp))]
    combining_runs = []  # [first, last, ccc] for runs of consecutive code points with one class
    for cp, c in combining:
        if combining_runs and combining_runs[-1][1] == cp - 1 and combining_runs[-1][2] == c:
            combining_runs[-1][1] = cp
        else:
            combining_runs.append([cp, cp, c])
    decompositions, data = [], []
    compositions = []
    unstable = set(cp for cp, _ in combining)
    for cp in range(0x110000):
        if 0xAC00 <= cp <= 0xD7A3:
            continue  # Hangul syllables are decomposed and composed arithmetically
        parts = canonical(cp)
        if parts is None:
            continue
        unstable.add(cp)
        full = full_decomposition(cp)
        decompositions.append((cp, len(data), len(full)))
        data.extend(full)
        # Primary composites: two-character decompositions that NFC recomposes.
        if len(parts) == 2 and ud.normalize("NFC", ud.normalize("NFD", chr(cp))) == chr(cp):
            compositions.append(((parts[0] << 21) | parts[1], cp))
            unstable.add(parts[1])
    unstable.update(range(0x1161, 0x1176))  # Hangul V jamo compose with a preceding L
    unstable.update(range(0x11A8, 0x11C3))  # Hangul T jamo compose with a preceding LV
    compositions.sort()
    ranges = []
    for cp in sorted(unstable):
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    # Self-check against Python's NFC on every single code point and on all composition pairs.
    assert all(len(d) <= 4 for d in [data[o:o + n] for _, o, n in decompositions])

    def rows(items, per_line):
        items = list(items)
        return "\n".join("    " + " ".join(items[i:i + per_line]) for i in range(0, len(items), per_line))

    version = ud.unidata_version.split(".")
    text = f"""// Unicode data for NFC normalization. GENERATED by
//   python3 tools/scripts/make_tokenizer_golden.py --nfc-tables
// from Python's unicodedata (Unicode {ud.unidata_version}); do not edit.
#pragma once

#include <cstdint>

namespace verl::tokenizer::detail::nfc_data {{

inline constexpr int unicode_version[3] = {{{", ".join(version)}}};

struct CombiningClassRun {{
  char32_t first;
  char32_t last;
  std::uint8_t ccc;
}};
/// Canonical combining classes that are not 0, as sorted runs of code points.
inline constexpr CombiningClassRun combining_classes[] = {{
{rows((f"{{0x{a:X}, 0x{b:X}, {c}}}," for a, b, c in combining_runs), 6)}
}};

struct Decomposition {{
  char32_t code_point;
  std::uint16_t offset;  ///< into decomposition_data
  std::uint8_t length;
}};
/// Full (recursive) canonical decompositions except Hangul syllables, sorted by code point.
inline constexpr Decomposition decompositions[] = {{
{rows((f"{{0x{cp:X}, {o}, {n}}}," for cp, o, n in decompositions), 6)}
}};
inline constexpr char32_t decomposition_data[] = {{
{rows((f"0x{cp:X}," for cp in data), 12)}
}};

struct Composition {{
  std::uint64_t pair;  ///< first << 21 | second
  char32_t composite;
}};
/// Primary composites by their two-character decomposition, sorted by pair.
inline constexpr Composition compositions[] = {{
{rows((f"{{0x{pair:X}, 0x{cp:X}}}," for pair, cp in compositions), 5)}
}};

struct Range {{
  char32_t first;
  char32_t last;
}};
/// Code points that can change under NFC or change their neighbours (non-zero combining class,
/// canonical decompositions, second halves of compositions); text without them is already NFC.
inline constexpr Range unstable_ranges[] = {{
{rows((f"{{0x{a:X}, 0x{b:X}}}," for a, b in ranges), 6)}
}};

}}  // namespace verl::tokenizer::detail::nfc_data
"""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"NFC tables: {len(combining_runs)} class runs, {len(decompositions)} decompositions, "
          f"{len(compositions)} compositions, {len(ranges)} unstable ranges -> {path}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "../../tests/data/tokenizer"))
    parser.add_argument("--nfc-tables", action="store_true",
                        help="also regenerate include/verl/model/tokenizer/detail/nfc_tables.hpp")
    arguments = parser.parse_args()
    out = os.path.abspath(arguments.out)
    if arguments.nfc_tables:
        write_nfc_tables(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                      "../../include/verl/model/tokenizer/detail/nfc_tables.hpp"))
    os.makedirs(out, exist_ok=True)
    corpus = training_corpus(seed=1)
    tokenizers = {}
    for seed, name in enumerate(["gpt2", "gpt2_prefix", "qwen2", "llama3"], start=100):
        tokenizer = train(name, corpus)
        path = os.path.join(out, f"{name}.tokenizer.json")
        tokenizer.save(path, pretty=True)
        if name == "gpt2":
            legacy_merges(path)
        # Golden data comes from the file as saved, the way users load it.
        tokenizer = Tokenizer.from_file(path)
        tokenizers[name] = tokenizer
        strings = golden_strings(special_strings(name), seed=seed)
        assert len(strings) >= 1000, len(strings)
        write_jsonl(os.path.join(out, f"{name}.golden.jsonl"), golden_rows(tokenizer, strings, seed=seed + 1000))
        print(f"{name}: vocab {tokenizer.get_vocab_size()}, {len(strings)} strings")

    for seed, name in enumerate(["llama2", "mistral", "metaspace_unk"], start=200):
        tokenizer = train_sentencepiece(name, corpus)
        path = os.path.join(out, f"{name}.tokenizer.json")
        tokenizer.save(path, pretty=True)
        tokenizer = Tokenizer.from_file(path)
        strings = list(dict.fromkeys(golden_strings(special_strings(name), seed=seed) +
                                     sentencepiece_strings(seed=seed + 500)))
        assert len(strings) >= 1000, len(strings)
        rows = golden_rows(tokenizer, strings, seed=seed + 1000) + byte_run_rows(tokenizer, seed=seed + 2000)
        write_jsonl(os.path.join(out, f"{name}.golden.jsonl"), rows)
        print(f"{name}: vocab {tokenizer.get_vocab_size()}, {len(strings)} strings")

    rows = []
    for messages in chat_cases():
        for add_generation_prompt in (False, True):
            for template_name, template, tokenizer_name in (("qwen2", QWEN2_CHAT_TEMPLATE, "qwen2"),
                                                            ("chatml", CHATML_TEMPLATE, "qwen2"),
                                                            ("llama3", LLAMA3_CHAT_TEMPLATE, "llama3")):
                text = render(template, messages, add_generation_prompt, bos_token="<|begin_of_text|>")
                ids = tokenizers[tokenizer_name].encode(text, add_special_tokens=False).ids
                rows.append({"template": template_name, "messages": messages,
                             "add_generation_prompt": add_generation_prompt, "text": text, "ids": ids,
                             "tokenizer": tokenizer_name})
    write_jsonl(os.path.join(out, "chat_templates.jsonl"), rows)
    write_jsonl(os.path.join(out, "nfc.golden.jsonl"), nfc_rows(seed=7))
    write_jsonl(os.path.join(out, "split.golden.jsonl"), split_rows())
    with open(os.path.join(out, "chat_template_sources.json"), "w", encoding="utf-8") as f:
        json.dump({"qwen2": QWEN2_CHAT_TEMPLATE, "chatml": CHATML_TEMPLATE, "llama3": LLAMA3_CHAT_TEMPLATE}, f,
                  indent=1)
        f.write("\n")
    print(f"chat templates: {len(rows)} renderings")


if __name__ == "__main__":
    main()
