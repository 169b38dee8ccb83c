#!/usr/bin/env python3
"""What transformers makes of the shipped prompt rewriter (models/default/prompt_extender): the
chat-template ids and greedy rewrite of held-out phrasings, as the fixture models/qwen's
`extend` test compares fastvideo's rewrites with. Pinned stack: tests/fixtures/requirements.txt.

    fastvideo dataset --paraphrases --clips 24 --seed 5 --split heldout --out /tmp/para-samples
    .venv/bin/python models/training/rewriter_samples.py /tmp/para-samples

Writes tests/fixtures/rewriter_samples.json: a list of {prompt, ids, rewrite}.
"""
import json
import os
import sys

import torch
from transformers import AutoTokenizer, Qwen3ForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def main():
    folder = os.path.join(ROOT, "models", "default", "prompt_extender")
    tok = AutoTokenizer.from_pretrained(folder)
    model = Qwen3ForCausalLM.from_pretrained(folder).eval()
    with open(os.path.join(sys.argv[1], "paraphrases.jsonl")) as f:
        pairs = [json.loads(line) for line in f if line.strip()]
    samples = []
    for p in pairs:
        chat = [{"role": "user", "content": p["prompt"]}]
        ids = list(tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False))
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=128, do_sample=False)
        rewrite = tok.decode(out[0, len(ids):], skip_special_tokens=True).strip()
        samples.append({"prompt": p["prompt"], "ids": ids, "rewrite": rewrite, "target": p["target"]})
    path = os.path.join(ROOT, "tests", "fixtures", "rewriter_samples.json")
    with open(path, "w") as f:
        json.dump(samples, f, indent=1)
    hits = sum(s["rewrite"] == s["target"] for s in samples)
    print(f"wrote {len(samples)} samples to {path}; {hits} rewrites equal the plain prompt")


if __name__ == "__main__":
    main()
