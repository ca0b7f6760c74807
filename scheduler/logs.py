"""Structured logs: one JSON object per line on stderr (``--log-format console`` for people)."""

from __future__ import annotations

import logging
import sys

import structlog

LEVELS = ("debug", "info", "warning", "error")


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
