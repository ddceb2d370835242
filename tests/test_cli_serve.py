"""`skillos.cli.serve.serve_service`, the body of every `skillos serve <service>`, without a server."""

from __future__ import annotations

import pytest
import typer

import skillos.service
from skillos.cli.serve import serve_service
from skillos.settings import CommonSettings


@pytest.fixture
def served(monkeypatch):
    calls = []
    monkeypatch.setattr(skillos.service, "serve", lambda app, host, port, log_level: calls.append(
        (app, host, port, log_level)))
    return calls


def test_builds_then_serves_at_the_settings_log_level(served):
    settings = CommonSettings()
    seen = []
    serve_service(settings, lambda: "app", "127.0.0.1", 8123, then=seen.append)
    assert seen == ["app"] and served == [("app", "127.0.0.1", 8123, settings.log_level)]


def test_a_refused_build_is_a_message_and_exit_1(served, capsys):
    def build():
        raise ValueError("no such database")

    with pytest.raises(typer.Exit) as e:
        serve_service(CommonSettings(), build, "127.0.0.1", 8123, refuse=(ValueError,))
    assert e.value.exit_code == 1 and "error: no such database" in capsys.readouterr().err and served == []
    with pytest.raises(ValueError):   # not refused: the error as it is
        serve_service(CommonSettings(), build, "127.0.0.1", 8123)
