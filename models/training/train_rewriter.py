#!/usr/bin/env python3
"""Trains the default model's prompt rewriter (models/default/prompt_extender): a tiny Qwen3
language model with a word-level tokenizer of its own that maps free-form phrasings ("a crimson
disc gliding leftwards over snow") to the default model's plain prompts ("a red circle moving
left on a white background"). Pinned stack: tests/fixtures/requirements.txt. CPU is enough.

    fastvideo dataset --paraphrases --clips 60000 --seed 0 --out /tmp/para-train
    fastvideo dataset --paraphrases --clips 2000 --seed 1 --split heldout --out /tmp/para-eval
    .venv/bin/python models/training/train_rewriter.py --train /tmp/para-train --eval /tmp/para-eval

Recipe: the phrasings come from `fastvideo-procedural` (paraphrase.rs; the held-out split is
held-out scenes written with templates training never sees). Each example is a ChatML chat, the
phrasing as the user turn and the plain prompt as the assistant's; the loss is on the
assistant's tokens and its closing <|im_end|>. One training phrasing in five gets a word the
tokenizer does not know inserted at random (it becomes [UNK]), so the rewriter learns to drop
what it cannot read. AdamW, cosine decay from --lr, batch --batch. Writes config.json,
model.safetensors, generation_config.json, tokenizer.json, tokenizer_config.json and
chat_template.jinja to --out, and appends the exact-match rate on the held-out phrasings (greedy,
what `fastvideo generate --extend-prompt` runs) to models/training/logs/rewriter_train_log.jsonl.
"""
import argparse
import json
import math
import os
import random
import time

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "[UNK]"]
# ChatML without a default system turn: the rewriter reads exactly one user turn.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
NOISE = ["zzqx", "qqvb", "xxkf", "wwpj"]  # not in the vocabulary: each reads as [UNK]


def read_pairs(folder):
    with open(os.path.join(folder, "paraphrases.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def build_tokenizer(words_file):
    with open(words_file) as f:
        words = [w.strip() for w in f if w.strip()]
    vocab = {t: i for i, t in enumerate(SPECIALS + ["user", "assistant", "system", ","])}
    for w in words:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)  # joins words with spaces
    tok.add_special_tokens(SPECIALS[:3])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token="[UNK]")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def noisy(prompt, rng):
    words = prompt.split()
    if rng.random() < 0.2:
        words.insert(rng.randrange(len(words) + 1), rng.choice(NOISE))
    return " ".join(words)


def encode(tok, prompt, target=None):
    chat = [{"role": "user", "content": prompt}]
    ids = list(tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False))
    if target is None:
        return ids, []
    answer = tok.encode(target, add_special_tokens=False) + [tok.eos_token_id]
    return ids + answer, [-100] * len(ids) + answer


def batches(tok, pairs, batch, rng):
    while True:
        picks = [pairs[rng.randrange(len(pairs))] for _ in range(batch)]
        rows = [encode(tok, noisy(p["prompt"], rng), p["target"]) for p in picks]
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((batch, width), tok.pad_token_id)
        labels = torch.full((batch, width), -100)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for i, (x, y) in enumerate(rows):
            ids[i, : len(x)] = torch.tensor(x)
            labels[i, : len(y)] = torch.tensor(y)
            mask[i, : len(x)] = 1
        yield ids, labels, mask


@torch.no_grad()
def exact_match(model, tok, pairs, max_new=24):
    hits = 0
    misses = []
    for p in pairs:
        ids = torch.tensor([encode(tok, p["prompt"])[0]])
        out = model.generate(ids, max_new_tokens=max_new, do_sample=False, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id)
        text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True).strip()
        if text == p["target"]:
            hits += 1
        elif len(misses) < 5:
            misses.append({"prompt": p["prompt"], "got": text, "want": p["target"]})
    return hits / max(len(pairs), 1), misses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True, help="folder of `fastvideo dataset --paraphrases`")
    ap.add_argument("--eval", required=True, help="the same with --split heldout")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "default", "prompt_extender"))
    ap.add_argument("--steps", type=int, default=2500)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--eval-n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    tok = build_tokenizer(os.path.join(args.train, "words.txt"))
    train, held = read_pairs(args.train), read_pairs(args.eval)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=128, intermediate_size=384, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=128,
                      rms_norm_eps=1e-6, tie_word_embeddings=True,
                      rope_parameters={"rope_theta": 10000.0, "rope_type": "default"},
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = Qwen3ForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 100) * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps)))
    t0 = time.time()
    model.train()
    data = batches(tok, train, args.batch, rng)
    for step in range(args.steps):
        ids, labels, mask = next(data)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 250 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item():.4f} {time.time() - t0:.0f}s", flush=True)
    model.eval()
    acc, misses = exact_match(model, tok, held[: args.eval_n])
    train_acc, _ = exact_match(model, tok, train[: min(args.eval_n, 200)])
    print(f"held-out exact match {acc:.3f} (train {train_acc:.3f}); misses: {misses}")
    os.makedirs(args.out, exist_ok=True)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                               max_new_tokens=24, do_sample=False)
    model.save_pretrained(args.out)
    tok.save_pretrained(args.out)
    log = {"steps": args.steps, "batch": args.batch, "lr": args.lr, "seconds": round(time.time() - t0, 1),
           "params": sum(p.numel() for p in model.parameters()), "final_loss": round(loss.item(), 5),
           "heldout_exact_match": acc, "train_exact_match": train_acc, "heldout_n": min(args.eval_n, len(held)),
           "misses": misses}
    os.makedirs(os.path.join(HERE, "logs"), exist_ok=True)
    with open(os.path.join(HERE, "logs", "rewriter_train_log.jsonl"), "a") as f:
        f.write(json.dumps(log) + "\n")
    print(json.dumps(log))


if __name__ == "__main__":
    main()
