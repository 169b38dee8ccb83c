"""What the diffusers-side benchmark scripts share: device sync, peak memory, median timing, and a
JSON of the figures rewritten after each phase (a call cut by its time limit keeps what it ran)."""

import gc
import json
import statistics
import time

import torch


class Bench:
    def __init__(self, device, name, json_path, figures):
        self.dev = device
        self.cuda = device.type == "cuda"
        self.name = name
        self.json_path = json_path
        self.R = figures

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.dev)

    def free(self):
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.dev)

    def peak(self):
        return torch.cuda.max_memory_allocated(self.dev) if self.cuda else None

    def timed(self, fn, runs, warmup):
        """Median seconds of `runs` calls after `warmup` untimed ones, and the last result."""
        out = None
        for _ in range(warmup):
            out = fn()
        times = []
        for _ in range(runs):
            self.sync()
            t = time.perf_counter()
            out = fn()
            self.sync()
            times.append(time.perf_counter() - t)
        return statistics.median(times), out

    def log(self, msg):
        print(f"{self.name}: {msg}", flush=True)

    def dump(self):
        """Figures so far: a call cut short by its time limit still leaves the phases it finished."""
        with open(self.json_path, "w") as f:
            json.dump(self.R, f, indent=2)
