#!/usr/bin/env python
"""Train one short cell of every model family and print what ran and how fast (`make gpu-check`;
arrepro.cluster.gpucheck); `gpu_check.py verify`: the kernel packages from the carried folder
against the portable paths, and timed (`make gpu-verify`; arrepro.cluster.gpuverify)."""
import sys

from arrepro.cluster.gpucheck import main
from arrepro.cluster.gpuverify import verify_main

if __name__ == "__main__":
    sys.exit(verify_main(sys.argv[2:]) if sys.argv[1:2] == ["verify"] else main())
