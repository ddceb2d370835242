"""`GET /v1/models`, `GET /v1/models/{model}` (OpenAI's)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from services.executor.gateway.errors import OpenAIErrorResponse
from services.executor.gateway.models.protocol import Model, ModelList
from skillos.auth import Auth

router = APIRouter(prefix="/v1", tags=["gateway"])


@router.get("/models", response_model=ModelList, responses={401: {"model": OpenAIErrorResponse}},
            summary="The models this gateway serves")
async def list_models(request: Request, _auth: Auth) -> ModelList:
    return request.app.state.models.list()


@router.get("/models/{model:path}", response_model=Model,
            responses={c: {"model": OpenAIErrorResponse} for c in (401, 404)}, summary="One model this gateway serves")
async def get_model(model: str, request: Request, _auth: Auth) -> Model:
    return request.app.state.models.get(model)
