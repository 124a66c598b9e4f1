#!/usr/bin/env python
"""Train one short cell of every model family and print what ran and how fast (`make gpu-check`);
see arrepro.cluster.gpucheck."""
import sys

from arrepro.cluster.gpucheck import main

if __name__ == "__main__":
    sys.exit(main())
