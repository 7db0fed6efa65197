"""Logs: JSON lines in the state dir's log file (0600: it names commands and their
outcomes), and on stderr either the same JSON lines or, for a person at a terminal, one
readable line per event.

Choices, and why
- **The file is always JSON lines**: it is what tools read (jq, a log shipper), whoever
  started the daemon.
- **stderr follows ``--log-format``**: ``auto`` (the default) is text when stderr is a
  terminal and JSON otherwise, so ``shellwardd`` in a shell reads like a program's output,
  while under systemd or in a container the journal gets structured events.
- **Text keeps every field**: ``key=value`` after the event, the same fields the JSON has,
  so nothing is lost by reading the terminal instead of the file.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from shellwardd.statedir import private_file

# Attributes every LogRecord has; anything else came in through ``extra=`` and is logged.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def _fields(record: logging.LogRecord) -> dict[str, object]:
    """What the record carries beyond the standard attributes (its ``extra=``)."""
    return {key: value for key, value in vars(record).items() if key not in _STANDARD}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        return json.dumps(event, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``23:40:01 WARNING server: event key=value ...``, local time, for a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        name = record.name.removeprefix("shellwardd.")
        line = (
            f"{time.strftime('%H:%M:%S', time.localtime(record.created))} "
            f"{record.levelname:<7} {name}: {record.getMessage()}"
        )
        for key, value in _fields(record).items():
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            line += f" {key}={text}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure(level: str, log_file: Path | None, stderr_format: str = "auto") -> None:
    """Send every ``shellwardd`` logger (and watchdog's) to stderr, in ``stderr_format``
    (auto, text or json), and to ``log_file`` as JSON lines."""
    text = stderr_format == "text" or (stderr_format == "auto" and sys.stderr.isatty())
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(TextFormatter() if text else JsonFormatter())
    handlers: list[logging.Handler] = [console]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        handlers.append(logging.FileHandler(private_file(log_file), encoding="utf-8"))
        handlers[-1].setFormatter(JsonFormatter())
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("shellwardd").setLevel(level.upper())
