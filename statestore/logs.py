"""Structured logs: one JSON document a line, `event` plus key=value fields, on stderr."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any, TextIO


class JsonLinesFormatter(logging.Formatter):
    """Formats a record as one JSON line: ts, level, logger, event and the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        document.update(getattr(record, "fields", {}))
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str, sort_keys=False)


def configure_logging(level: str = "INFO", stream: TextIO | None = None) -> None:
    """Send every `statestore` log record to `stream` (default stderr) as JSON lines."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLinesFormatter())
    root = logging.getLogger("statestore")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def log_event(logger: logging.Logger, event: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log `event` with structured `fields`."""
    if logger.isEnabledFor(level):
        logger.log(level, event, extra={"fields": fields})
