#!/usr/bin/env python
"""Benchmark: vectorised MQAR generation, 100,000 examples at each paper setting."""
import time

from arrepro.data.mqar import MQARSpec, generate

if __name__ == "__main__":
    for L, K in ((64, 4), (128, 8), (256, 16), (512, 64)):
        t = time.perf_counter()
        generate(MQARSpec(8192, L, K), 100_000, [0, 0])
        print(f"MQAR L={L:4d} K={K:3d} V=8192: 100,000 examples in {time.perf_counter() - t:.2f}s")
