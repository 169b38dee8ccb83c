#!/usr/bin/env python3
"""Builds a random-weight Qwen3 folder in the transformers layout, for benchmarks only.

    python3 make_qwen.py OUT_DIR [--size 1.7b|tiny] [--device cuda]

Shapes follow the published Qwen3-1.7B config (28 layers, width 2048, 16 query and 8 key/value
heads of 128, FFN 6144, vocabulary 151,936, tied embeddings, rope theta 1e6); `tiny` is a
2-layer width-64 model for a CPU check. The tokenizer and chat template are the test
fixture's (tests/fixtures/tiny-qwen3): the benchmark feeds token ids, not text. Weights are drawn
on --device and saved in bf16.
"""
import argparse
import os
import shutil

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SIZES = {
    "1.7b": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960),
    "tiny": dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=4096),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--size", default="1.7b", choices=SIZES)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    cfg = Qwen3Config(**SIZES[a.size], tie_word_embeddings=True, rms_norm_eps=1e-6,
                      rope_parameters={"rope_theta": 1000000.0, "rope_type": "default"})
    torch.manual_seed(0)
    with torch.device(a.device):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(a.out)
    fixture = os.path.join(ROOT, "tests", "fixtures", "tiny-qwen3")
    for f in ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]:
        shutil.copy(os.path.join(fixture, f), os.path.join(a.out, f))
    print("wrote", a.out, sum(p.numel() for p in model.parameters()), "parameters")


if __name__ == "__main__":
    main()
