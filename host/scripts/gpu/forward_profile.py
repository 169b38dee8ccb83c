"""One transformer forward's GPU time by kernel, from `ncu --csv --page raw` (forward_profile.sh).

The forward is found as the launches from the first call of a kernel that runs a fixed number
of times per forward (--marker, --per-forward: the 8-bit attention, once in each of
Wan2.1-1.3B's 30 blocks) to its call that many later: a whole forward's kernels, rotated. Kernels are summed by name and by kind (GEMM, attention, norm, ...), in milliseconds.
"""

import argparse
import collections
import csv
import re
import sys

KINDS = [  # first match wins
    ("attention 8-bit", r"attention_int8"),
    ("attention quantize", r"quant_int8_rows|quant_v_|kv_stats"),
    ("attention (SDPA)", r"fmha|flash|cudnn|attn|sdpa|softmax"),
    ("FP8 quantize", r"quantize_fp8"),
    ("GEMM", r"gemm|sm90_xmma|cutlass|nvjet|ampere|hopper|sgemm|matmul|splitK"),
    ("norm / modulation", r"norm|modulat"),
    ("rope", r"rope"),
    ("elementwise / copy", r"elementwise|vectorized|copy|cat|fill|index|reduce|unrolled"),
]


def kind(name):
    for k, pat in KINDS:
        if re.search(pat, name, re.I):
            return k
    return "other"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--marker", default=r"attention_int8")
    ap.add_argument("--per-forward", type=int, default=30)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    rows = []
    with open(a.csv) as f:
        lines = [ln for ln in f if ln.startswith('"')]
    r = csv.reader(lines)
    header = next(r)
    ni, ti = header.index("Kernel Name"), header.index("gpu__time_duration.sum")
    for row in r:
        if len(row) <= ti:
            continue
        try:
            rows.append((row[ni], float(row[ti].replace(",", ""))))
        except ValueError:  # the units row
            continue
    if not rows:
        sys.exit(f"{a.csv}: no kernels")
    counts = collections.Counter(n for n, _ in rows)
    mark = next((n for n, c in counts.most_common() if re.search(a.marker, n, re.I) and c > a.per_forward), None)
    if mark is None:
        sys.exit(f"{a.csv}: no kernel matching {a.marker!r} launched more than {a.per_forward} times (raise LAUNCHES)")
    at = [i for i, (n, _) in enumerate(rows) if n == mark]
    lo, hi = at[0], at[a.per_forward]
    win = rows[lo:hi]
    unit = 1e-6  # ns → ms
    total = sum(t for _, t in win) * unit
    print(f"{len(rows)} kernels profiled; one forward = launches {lo}..{hi} ({len(win)} kernels), "
          f"GPU time {total:.1f} ms (kernels back to back, no gaps)")
    by_kind = collections.defaultdict(float)
    by_name = collections.defaultdict(lambda: [0, 0.0])
    for n, t in win:
        by_kind[kind(n)] += t * unit
        by_name[n][0] += 1
        by_name[n][1] += t * unit
    print("\nby kind:")
    for k, t in sorted(by_kind.items(), key=lambda x: -x[1]):
        print(f"  {k:22s} {t:8.1f} ms  {100 * t / total:5.1f} %")
    print(f"\ntop {a.top} kernels (calls, ms, ms per call):")
    for n, (c, t) in sorted(by_name.items(), key=lambda x: -x[1][1])[: a.top]:
        print(f"  {t:8.2f} {c:4d} {t / c:8.4f}  {n[:150]}")


if __name__ == "__main__":
    main()
