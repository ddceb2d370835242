"""Logging outlives the stream it was configured under: the trainer's tests configure it inside one test's
captured stderr and log from llama-server's launcher in a later one (CI failed on exactly that)."""

from __future__ import annotations

import io
import json
import logging
import sys

from skillos.logging import configure_logging, get_logger


def test_loggers_write_to_the_current_stderr_after_the_first_one_was_closed(monkeypatch):
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure_logging("INFO", "json")
    log = get_logger("test.logging")
    log.info("under_the_first")                              # caches the logger while `first` is the stream
    first.close()
    monkeypatch.setattr(sys, "stderr", second)
    log.info("under_the_second", n=2)
    logging.getLogger("test.stdlib").warning("stdlib too")
    lines = [json.loads(line) for line in second.getvalue().splitlines()]
    assert [(x["event"], x.get("n")) for x in lines] == [("under_the_second", 2), ("stdlib too", None)]
