#!/usr/bin/env python
"""Train one short cell of every model family and print what ran and how fast (`make gpu-check`);
`gpu_check.py verify`: the kernel packages from the carried folder against the portable paths, and
timed (`make gpu-verify`); see arrepro.cluster.gpucheck."""
import sys

from arrepro.cluster.gpucheck import main

if __name__ == "__main__":
    sys.exit(main())
