"""The embedded LLM on llama.cpp's own `llama-server`: parallel slots, continuous batching and a KV
cache per slot, so concurrent episodes each keep their prompt prefix (docs/llm-backends.md has the
measurements that chose it over llama-cpp-python's single-sequence server).

`skillos serve llm` runs `llama-server` as a child process on a private loopback port and answers on
the public port with the shape of every SkillOS service — ``/healthz``, ``/readyz`` (the child is up
and its model loaded), ``/metrics`` (ours followed by llama.cpp's) — and passes ``/v1/*`` through
unchanged (streaming included). The binary is built by `scripts/setup.sh` from the llama.cpp sources
vendored in the llama-cpp-python sdist (same version as the Python bindings); ``SKILLOS_LLAMA_SERVER_BIN``
points elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from skillos.errors import APIError
from skillos.logging import get_logger
from skillos.net import free_port
from skillos.service import unless_disconnected

log = get_logger("llm")

# hop-by-hop headers (RFC 9110 §7.6.1) and the ones httpx recomputes
_DROP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
         "transfer-encoding", "upgrade", "content-length", "host", "content-encoding"}


def find_binary() -> Path:
    explicit = os.environ.get("SKILLOS_LLAMA_SERVER_BIN")
    candidates = [Path(explicit)] if explicit else []
    candidates += [Path(sys.prefix) / "bin" / "llama-server"]
    which = shutil.which("llama-server")
    if which:
        candidates.append(Path(which))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise FileNotFoundError("llama-server not found (built by `make setup` into .venv/bin/llama-server; "
                            "or set SKILLOS_LLAMA_SERVER_BIN)")


class LlamaServer:
    """The child process: start, wait until its model is loaded, stop."""

    def __init__(self, model_path: Path, *, alias: str, n_threads: int, ctx_per_slot: int, parallel: int,
                 n_batch: int = 512, seed: int = 0, log_path: Path | None = None, prompt_cache: bool = True,
                 extra: list[str] | None = None):
        """``prompt_cache=False`` recomputes every prompt from scratch (the benchmark's baseline)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [str(find_binary()), "--model", str(model_path), "--alias", alias,
                    "--host", "127.0.0.1", "--port", str(self.port),
                    "--threads", str(n_threads), "--threads-batch", str(n_threads),
                    # the context is shared by the slots: each gets ctx_per_slot tokens
                    "--ctx-size", str(ctx_per_slot * parallel), "--parallel", str(parallel),
                    "--batch-size", str(n_batch), "--seed", str(seed),
                    "--metrics", "--no-webui", "--jinja", *([] if prompt_cache else ["--no-cache-prompt"]),
                    *(extra or [])]
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115 - kept for the child
        # the child dies with us (PR_SET_PDEATHSIG), so a kill -9 of this process leaves no orphan holding
        # the model's memory; started before uvicorn, while this process has no other thread
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT,
                                     preexec_fn=_die_with_parent)  # noqa: PLW1509
        log.info("llama_server_started", pid=self.proc.pid, port=self.port, cmd=" ".join(self.cmd))

    def wait_ready(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode} while loading"
                                   + (f" (log: {self.log_path})" if self.log_path else ""))
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"llama-server not ready after {timeout:.0f}s")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def build_proxy_app(server: LlamaServer, *, model_name: str, model_path: Path, timeout_s: float = 3600.0) -> FastAPI:
    from skillos.service import create_app

    client = httpx.AsyncClient(base_url=server.url, timeout=httpx.Timeout(timeout_s, connect=5.0),
                               limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))

    async def model_loaded() -> None:
        r = await client.get("/health", timeout=2.0)
        if r.status_code != 200:
            raise RuntimeError(f"llama-server /health answered {r.status_code}: {r.text[:200]}")

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        yield
        await client.aclose()
        server.stop()

    async def upstream_metrics() -> bytes:
        try:
            return (await client.get("/metrics", timeout=2.0)).content
        except httpx.HTTPError:
            return b""

    app = create_app("llm", title="SkillOS embedded LLM (llama.cpp llama-server)", readiness=[model_loaded],
                     lifespan=lifespan, extra_metrics=upstream_metrics,
                     description=f"OpenAI-compatible /v1 API of {model_name} ({model_path.name}) served by "
                                 "llama.cpp's llama-server on the CPU.")
    app.state.model_path = str(model_path)

    @app.api_route("/v1/{path:path}", methods=["GET", "POST"], include_in_schema=False)
    async def passthrough(path: str, request: Request):
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP}
        upstream = client.build_request(request.method, f"/v1/{path}", params=request.query_params,
                                        headers=headers, content=await request.body())
        try:
            # a client that goes away cancels the upstream request too (llama-server then frees the slot)
            resp = await unless_disconnected(request, client.send(upstream, stream=True))
        except httpx.HTTPError as e:
            raise APIError(502, "llm_unavailable", f"llama-server did not answer: {type(e).__name__}: {e}") from e
        out_headers = {k: v for k, v in resp.headers.items() if k.lower() not in _DROP}
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            async def stream():
                try:
                    async for chunk in resp.aiter_raw():
                        yield chunk
                finally:
                    await resp.aclose()
            return StreamingResponse(stream(), status_code=resp.status_code, headers=out_headers)
        try:
            body = await resp.aread()
        finally:
            await resp.aclose()
        return Response(body, status_code=resp.status_code, headers=out_headers)

    return app

