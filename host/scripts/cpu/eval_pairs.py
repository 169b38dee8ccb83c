#!/usr/bin/env python3
"""Paired comparison of two `fastvideo eval --verbose` runs on the same scenes and seeds: the
quality gate of a lossy option (docs/benchmarks.md, "Precision presets"). Each clip is right or
wrong on all four attributes in both runs; the clips where the runs disagree carry the whole
difference, so the paired interval is much narrower than two independent rates would give.

    python3 host/scripts/cpu/eval_pairs.py base.log variant.log [more variants...]

Prints, per variant: clips, "all four" for both, the difference in points with its 95 % interval
(normal approximation for paired proportions), and the discordant clips each way.
"""
import math
import re
import sys

LINE = re.compile(r"^(ok  |MISS) (.*) seed (\d+): ")


def read(path):
    out = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                out[(m.group(2), int(m.group(3)))] = m.group(1) == "ok  "
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    base = read(sys.argv[1])
    for path in sys.argv[2:]:
        var = read(path)
        keys = sorted(set(base) & set(var))
        n = len(keys)
        if n == 0:
            print(f"{path}: no clip in common with {sys.argv[1]}")
            continue
        a = sum(base[k] for k in keys)
        b = sum(var[k] for k in keys)
        lost = sum(base[k] and not var[k] for k in keys)
        gained = sum(var[k] and not base[k] for k in keys)
        diff = (gained - lost) / n
        se = math.sqrt(max(lost + gained - (gained - lost) ** 2 / n, 0.0)) / n
        print(
            f"{path}: {n} clips; all four {100 * a / n:.1f} % -> {100 * b / n:.1f} %; "
            f"difference {100 * diff:+.2f} points (95 % interval {100 * (diff - 1.96 * se):+.2f} to "
            f"{100 * (diff + 1.96 * se):+.2f}); {lost} clips lost, {gained} gained"
        )


if __name__ == "__main__":
    main()
