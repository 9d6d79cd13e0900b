#!/usr/bin/env python3
"""Writes the Hugging Face parity fixtures under tests/data (run once; the outputs are committed).

Needs torch, transformers, peft and tokenizers from PyPI (not needed to build or run MARLaaS):
    python3 -m venv /tmp/fixenv && /tmp/fixenv/bin/pip install torch transformers peft tokenizers
    /tmp/fixenv/bin/python tests/data/make_fixtures.py

What it writes, all from peers nobody here wrote:
  tokenizer/tokenizer.json   a byte-level BPE trained by `tokenizers` (Qwen2-style regex
                             pre-tokenizer, merges, added and special tokens); gpt2.json and
                             llama3.json the same with GPT-2's and Llama-3's pre-tokenizers
  tokenizer/expected.json    per file: texts and the ids `tokenizers` gives them
  llama/                     tiny random LlamaForCausalLM (weights ~N(0, 0.2): large enough that
                             attention is far from uniform, so RoPE or masking errors show): config.json, model.safetensors (f32),
                             lora/ (a PEFT LoRA adapter on all seven modules), expected.safetensors
                             (input_ids, logits, logits_lora)
  qwen2/                     tiny random Qwen2ForCausalLM (tied embeddings, q/k/v bias), stored
                             sharded in bf16 with model.safetensors.index.json; expected logits
                             computed from the bf16 weights in f32
"""
import json
import os
import shutil

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
from peft import LoraConfig, get_peft_model

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(1234)

CORPUS = [
    "The quick brown fox jumps over the lazy dog. 12 + 30 = 42, and 7 * 6 = 42 as well.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))  # 5",
    "Grüße aus Köln! Ça va très bien, merci. ¿Dónde está la biblioteca?",
    "你好，世界。今天的天气很好。我们一起学习机器学习。",
    "Привет, мир! Как дела? Всё хорошо.",
    "こんにちは世界。カタカナとひらがな。",
    "Emoji: 🙂🚀✨ and symbols → ≤ ≥ ≠ ∑ ∫ √",
    "<tool name=\"calc\">(3+4)*5</tool><result>35</result> The answer is 35.",
    "   leading spaces\ttabs\nnewlines\r\nand    runs of spaces   ",
    "I'm sure you're right; they'll see it's what we've done. I'D SAY IT'S FINE.",
] * 20

TEXTS = [
    "Hello, world! Grüße aus Köln — 你好，世界 🙂 x=3.14\n\tend",
    "def f(x):\n    return x*x  # square\n",
    "They'll say it's 12345 + 678 = 13023. DON'T PANIC!!",
    "   spaces   and\n\n\nnewlines \r\n",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>",
    "Numbers 1234567 and 3.14159, hex 0xFF; I'M SURE 'TIS FINE",
    "tabs\t\tand  double  spaces\n\n  indented\n",
    "Привет мир, こんにちは, ∑∫√ ≤≥",
]


QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
               r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
                r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def train_tokenizer(style):
    from tokenizers import Regex
    tok = Tokenizer(models.BPE(ignore_merges=(style == "llama3")))
    if style == "gpt2":  # the GPT-2 regex inside ByteLevel itself
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:  # Qwen2 / Llama-3: a Split on their regex, then ByteLevel without a regex
        regex = QWEN2_REGEX if style == "qwen2" else LLAMA3_REGEX
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(pattern=Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400, min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tok.add_tokens(["<tool>", "</tool>"])  # added (non-special) tokens
    return tok


def make_tokenizer(out_dir):
    """tokenizer.json is the Qwen2-style one the models use; gpt2.json and llama3.json cover the
    other two pre-tokenizer patterns."""
    os.makedirs(out_dir, exist_ok=True)
    expected = {}
    for style, name in (("qwen2", "tokenizer.json"), ("gpt2", "gpt2.json"), ("llama3", "llama3.json")):
        tok = train_tokenizer(style)
        tok.save(os.path.join(out_dir, name))
        expected[name] = [{"text": t, "ids": tok.encode(t).ids} for t in TEXTS]
        if style == "qwen2":
            vocab = tok.get_vocab_size()
    with open(os.path.join(out_dir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
    return vocab


def input_ids(vocab):
    g = torch.Generator().manual_seed(99)
    return torch.randint(0, vocab, (2, 11), generator=g)


def make_llama(out_dir, vocab):
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
                      initializer_range=0.2)
    model = LlamaForCausalLM(cfg).eval()
    shutil.rmtree(out_dir, ignore_errors=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    ids = input_ids(vocab)
    with torch.no_grad():
        logits = model(ids).logits.float()
    lcfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, init_lora_weights=False,
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                      "up_proj", "down_proj"])
    peft_model = get_peft_model(model, lcfg).eval()
    with torch.no_grad():
        logits_lora = peft_model(ids).logits.float()
    peft_model.save_pretrained(os.path.join(out_dir, "lora"))
    os.remove(os.path.join(out_dir, "lora", "README.md"))  # PEFT's model-card template
    save_file({"input_ids": ids.to(torch.int64).contiguous(), "logits": logits.contiguous(),
               "logits_lora": logits_lora.contiguous()},
              os.path.join(out_dir, "expected.safetensors"))


def make_qwen2(out_dir, vocab):
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
                      initializer_range=0.2)
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():  # non-zero q/k/v biases, so the test sees them
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    model = model.to(torch.bfloat16)
    shutil.rmtree(out_dir, ignore_errors=True)
    model.save_pretrained(out_dir, safe_serialization=True, max_shard_size="20KB")
    ids = input_ids(vocab)
    # Reload in f32 rather than calling model.float(): casting the model to bf16 also rounded its
    # RoPE inv_freq buffer, which a fresh load (like ours) computes in full precision.
    reloaded = Qwen2ForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = reloaded(ids).logits.float()
    save_file({"input_ids": ids.to(torch.int64).contiguous(), "logits": logits.contiguous()},
              os.path.join(out_dir, "expected.safetensors"))


if __name__ == "__main__":
    vocab = make_tokenizer(os.path.join(HERE, "tokenizer"))
    make_llama(os.path.join(HERE, "llama"), vocab)
    make_qwen2(os.path.join(HERE, "qwen2"), vocab)
    for d in ("tokenizer", "llama", "qwen2"):
        for root, _, files in os.walk(os.path.join(HERE, d)):
            for f in sorted(files):
                p = os.path.join(root, f)
                print(f"{os.path.relpath(p, HERE):50s} {os.path.getsize(p):8d}")
