#!/usr/bin/env python3
"""transformers' generate on the same folder and token ids as `fastvideo bench-lm`: time to
first token for a 512-token prompt, and decode tokens/s at batch 1, 8, 32, 128 — eager
(dynamic cache) and with a static cache + torch.compile. Prints one JSON object.

    python3 transformers_lm_bench.py MODEL_DIR [--batches 1,8,32,128] [--steps 32] [--no-compile]
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM


def prompt(n, seed, vocab):
    return [(i * 7919 + seed * 104729) % vocab for i in range(n)]


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--decode-prompt-len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).cuda().eval()
    vocab = model.config.vocab_size
    report = {}
    modes = ["eager"] + ([] if a.no_compile else ["compiled"])
    for name in modes:
        kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
        if name == "compiled":
            # generate compiles the decode forward itself with a static cache (CUDA graphs,
            # "reduce-overhead"), marking each step for the graph trees; wrapping model.forward
            # by hand instead trips the cudagraph-overwrite check on the cache update.
            from transformers import CompileConfig
            kw.update(cache_implementation="static", compile_config=CompileConfig(fullgraph=True, mode="reduce-overhead"))
        ids = torch.tensor([prompt(a.prompt_len, 1, vocab)], device="cuda")
        for _ in range(2):
            model.generate(ids, max_new_tokens=1, **kw)
        ttft = sorted(timed(lambda: model.generate(ids, max_new_tokens=1, **kw))[0] for _ in range(3))[1]
        decode = []
        for b in [int(x) for x in a.batches.split(",")]:
            ids = torch.tensor([prompt(a.decode_prompt_len, 10 + i, vocab) for i in range(b)], device="cuda")
            model.generate(ids, max_new_tokens=4, **kw)  # warm-up (and compile at this shape)
            t_short, _ = timed(lambda: model.generate(ids, max_new_tokens=2, **kw))
            t_long, _ = timed(lambda: model.generate(ids, max_new_tokens=2 + a.steps, **kw))
            step = (t_long - t_short) / a.steps  # prefill cancels out
            decode.append({"batch": b, "step_s": step, "tokens_per_s": b / step})
        report[name] = {"ttft_s": ttft, "decode": decode}
        print(name, json.dumps(report[name]), flush=True)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
