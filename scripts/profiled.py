"""Run ``phalanx`` under cProfile counting CPU time (not wall time: a process waiting for a busy API server
is not spending anything), and write the statistics to the file named first: ``profiled.py OUT ARGS...``."""

from __future__ import annotations

import cProfile
import sys
import time

from scheduler.frontends.cli import main

if __name__ == "__main__":
    profile = cProfile.Profile(time.process_time)
    try:
        profile.runcall(main, sys.argv[2:])
    finally:
        profile.dump_stats(sys.argv[1])
