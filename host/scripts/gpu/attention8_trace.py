#!/usr/bin/env python3
"""Reads the per-tile clocks a TRACE=1 build of kernels/cuda/attention8.cu leaves
(attention8_variants.sh: $OUT/<variant>/trace.<recipe>.u32) and prints, per warpgroup, the median
clocks of each phase of a tile step and, with --timeline, when each warpgroup runs its softmax
tile by tile, so overlap between the two warpgroups shows.

    python3 host/scripts/gpu/attention8_trace.py [--timeline] trace.f16pv.u32 ...
"""
import statistics
import struct
import sys

EVENTS = ["start", "softmax", "wait P·V(j-1)", "rescale", "refill", "issue Q·Kᵀ(j+1)", "issue P·V(j)",
          "wait Q·Kᵀ(j+1)"]
E = len(EVENTS)


def main(path, timeline):
    raw = open(path, "rb").read()
    words = struct.unpack(f"<{len(raw) // 4}I", raw)
    t = [[words[(wg * 64 + j) * E:(wg * 64 + j) * E + E] for j in range(64)] for wg in range(2)]
    base = min(t[0][0][0], t[1][0][0])
    rel = lambda c: (c - base) & 0xFFFFFFFF
    print(path)
    for wg in range(2):
        phases = []
        for e in range(E - 1):
            phases.append(statistics.median(rel(t[wg][j][e + 1]) - rel(t[wg][j][e]) for j in range(4, 60)))
        step = statistics.median(rel(t[wg][j + 1][0]) - rel(t[wg][j][0]) for j in range(4, 60))
        print(f"  wg{wg}: step {step:.0f} clk = " + ", ".join(f"{EVENTS[e + 1]} {p:.0f}" for e, p in enumerate(phases)))
    if not timeline:
        return
    print("  tile: wg0 softmax [start, end) | wg1 softmax [start, end)")
    for j in range(8, 16):
        a, b = t[0][j], t[1][j]
        print(f"  {j:3d}: {rel(a[0]):8d} {rel(a[1]):8d} | {rel(b[0]):8d} {rel(b[1]):8d}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--timeline"]
    for p in args:
        main(p, "--timeline" in sys.argv[1:])
