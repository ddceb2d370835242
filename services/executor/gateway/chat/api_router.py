"""`POST /v1/chat/completions`: OpenAI's chat API with skills in and trajectories out
(`services.executor.gateway.chat.serving.ChatGateway`)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from services.executor.gateway.chat.protocol import ChatCompletionRequest
from services.executor.gateway.errors import OpenAIErrorResponse
from skillos.auth import Auth

router = APIRouter(prefix="/v1", tags=["gateway"])
_ERRORS = {code: {"model": OpenAIErrorResponse} for code in (400, 401, 403, 404, 409, 413, 429, 502)}


@router.post("/chat/completions", responses=_ERRORS,
             summary="OpenAI chat completion with the top-k skills of the conversation's task (SSE with stream)")
async def create_chat_completion(body: ChatCompletionRequest, request: Request, auth: Auth):
    """Headers in: ``X-SkillOS-Repo`` (else the default repo; a token limited to a prefix: its own),
    ``X-SkillOS-Task`` (else the first user message), ``X-SkillOS-Trajectory`` (a trajectory's later calls).
    Headers out: ``X-SkillOS-Trajectory``, ``X-SkillOS-Skills`` (the injected skills' names, comma-separated).
    With auth on, the token (``api_key`` of the openai client) must reach the repo: 401 without a known token,
    403 beyond its repos."""
    return await request.app.state.gateway.create(body, request.headers, auth)
