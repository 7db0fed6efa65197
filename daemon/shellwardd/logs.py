"""Structured logs: one JSON object per line, on stderr and in the state dir's log file
(0600: it names commands and their outcomes)."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from shellwardd.statedir import private_file

# Attributes every LogRecord has; anything else came in through ``extra=`` and is logged.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD:
                event[key] = value
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        return json.dumps(event, default=str, ensure_ascii=False)


def configure(level: str, log_file: Path | None) -> None:
    """Send every ``shellwardd`` logger (and watchdog's) to stderr and ``log_file``."""
    formatter = JsonFormatter()
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        handlers.append(logging.FileHandler(private_file(log_file), encoding="utf-8"))
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("shellwardd").setLevel(level.upper())
