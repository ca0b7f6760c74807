"""Structured logs: one JSON object per line on stderr (``--log-format console`` for people)."""

from __future__ import annotations

import logging
import os
import sys
import time

import structlog

LEVELS = ("debug", "info", "warning", "error")


def _process_started() -> float:
    """When this process was started, on the ``time.monotonic`` clock (Linux: from ``/proc``, so that the
    interpreter's start and the imports count; elsewhere: when this module was imported)."""
    try:
        with open(f"/proc/{os.getpid()}/stat") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as uptime:
            booted = time.monotonic() - float(uptime.read().split()[0])
        return booted + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.monotonic()


_STARTED = _process_started()


def since_start() -> dict[str, float]:
    """Wall seconds since the process started and the CPU seconds it has used: the fields of the log lines
    that mark how far a start has come (``discovered``, ``informers synced``, ``leading``, ``first bind``)."""
    return {"since_start_s": round(time.monotonic() - _STARTED, 3), "cpu_s": round(time.process_time(), 3)}


def _stderr_logger(*_: object) -> structlog.PrintLogger:
    # Whatever sys.stderr is when the line is written, not when logging was configured: an embedding
    # program (or a test harness) may swap it, and a closed stream must not take the scheduler down.
    return structlog.PrintLogger(sys.stderr)


def configure(level: str = "info", fmt: str = "json") -> None:
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
