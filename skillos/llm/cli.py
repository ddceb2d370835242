"""`skillos serve llm`: the embedded LLM backend; `skillos llm chat`: one request to any role's backend.

Imports inside the commands are deliberate: every part's cli.py is loaded whenever any `skillos` command
starts (registration), so what only one command needs stays in it: the LLM settings and client (pydantic-settings, httpx) and the model store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from skillos.cli.common import HostOption
from skillos.cli.serve import serve_service

llm_app = typer.Typer(no_args_is_help=True, help="LLM backends: try a chat request against a role's endpoint.")


def register(app: typer.Typer, serve_app: typer.Typer) -> None:
    app.add_typer(llm_app, name="llm")

    @serve_app.command("llm")
    def serve_llm(
        host: str = HostOption,
        port: Annotated[int, typer.Option("--port", envvar="SKILLOS_LLM_PORT")] = 8080,
        model: Annotated[str, typer.Option(
            "--model", envvar="SKILLOS_LLM_SERVE_MODEL",
            help="a registry name (`skillos models list`) or a GGUF file")] = "qwen2.5-coder-1.5b-instruct",
        models_dir: Annotated[Path | None, typer.Option(
            "--models-dir", envvar="SKILLOS_MODELS_DIR", help="model cache (default: $XDG_CACHE_HOME/skillos/models)")
        ] = None,
        backend: Annotated[str, typer.Option(
            "--backend", envvar="SKILLOS_LLM_BACKEND",
            help="llama-server (llama.cpp's server: parallel slots, a prompt cache per slot) or "
                 "llama-cpp-python (one sequence at a time)")] = "llama-server",
        n_threads: Annotated[int, typer.Option("--n-threads", envvar="SKILLOS_LLM_N_THREADS")] = 2,
        ctx: Annotated[int | None, typer.Option(
            "--ctx", envvar="SKILLOS_LLM_CTX", help="context window per sequence (default: the model's entry)")] = None,
        parallel: Annotated[int, typer.Option(
            "--parallel", envvar="SKILLOS_LLM_PARALLEL", min=1,
            help="llama-server slots: requests decoded together, each keeping its own prompt cache")] = 4,
        prompt_cache: Annotated[bool, typer.Option(
            "--prompt-cache/--no-prompt-cache",
            help="llama-server: reuse each slot's cached prompt prefix (off: the benchmark's baseline)")] = True,
        logits_all: Annotated[bool, typer.Option(
            "--logits-all/--no-logits-all",
            help="llama-cpp-python only: keep all logits (needed for log-probs; slower prompts)")] = False,
        chat_format: Annotated[str | None, typer.Option(
            "--chat-format", help="llama-cpp-python only: chat format (default: the GGUF's own template)")] = None,
    ) -> None:
        """The embedded OpenAI-compatible LLM server (llama.cpp on the CPU)."""
        from skillos.cli.common import fail
        from skillos.models import ModelError, resolve
        from skillos.settings import CommonSettings

        def build():
            try:
                path, spec = resolve(model, models_dir)
            except (ModelError, KeyError) as e:
                fail(str(e.args[0] if isinstance(e, KeyError) else e))
            alias = spec.name if spec else path.stem
            n_ctx = ctx or (spec.context if spec else 4096)
            if backend == "llama-server":
                from skillos.llm.llama_server import LlamaServer, build_proxy_app

                try:
                    server = LlamaServer(path, alias=alias, n_threads=n_threads, ctx_per_slot=n_ctx,
                                         parallel=parallel, prompt_cache=prompt_cache)
                except FileNotFoundError as e:
                    fail(str(e))
                server.start()
                try:
                    server.wait_ready()
                except RuntimeError as e:
                    server.stop()
                    fail(str(e))
                return build_proxy_app(server, model_name=alias, model_path=path)
            if backend == "llama-cpp-python":
                from skillos.llm.embedded import build_app

                return build_app(path, model_alias=alias, n_threads=n_threads, n_ctx=n_ctx, logits_all=logits_all,
                                 chat_format=chat_format)
            fail(f"unknown backend {backend!r}: use llama-server or llama-cpp-python")
            return None

        serve_service(CommonSettings(), build, host, port)

    @llm_app.command("chat")
    def chat(prompt: Annotated[str, typer.Argument(help="the user message")],
             role: Annotated[str, typer.Option("--role", help="executor | curator | judge")] = "executor",
             max_tokens: Annotated[int | None, typer.Option("--max-tokens")] = None) -> None:
        """Send one chat request with a role's settings (SKILLOS_<ROLE>_LLM_*) and print the answer."""
        import asyncio

        from skillos.cli.common import fail, print_json
        from skillos.llm import LLMClient, LLMError, LLMSettings

        async def go():
            async with LLMClient(LLMSettings.for_role(role)) as c:
                return await c.chat([{"role": "user", "content": prompt}], max_tokens=max_tokens)

        try:
            r = asyncio.run(go())
        except (LLMError, ValueError) as e:
            fail(str(e))
        print_json({"content": r.content, "tool_calls": r.tool_calls, "finish_reason": r.finish_reason,
                    "usage": {"prompt_tokens": r.usage.prompt_tokens, "completion_tokens": r.usage.completion_tokens},
                    "latency_s": round(r.latency_s, 3)})
