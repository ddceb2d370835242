"""`GET /v1/models`, `GET /v1/models/{model}` (OpenAI's)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from services.executor.gateway.errors import OpenAIErrorResponse
from services.executor.gateway.models.protocol import Model, ModelList

router = APIRouter(prefix="/v1", tags=["gateway"])


@router.get("/models", response_model=ModelList, summary="The models this gateway serves")
async def list_models(request: Request) -> ModelList:
    return request.app.state.models.list()


@router.get("/models/{model:path}", response_model=Model, responses={404: {"model": OpenAIErrorResponse}},
            summary="One model this gateway serves")
async def get_model(model: str, request: Request) -> Model:
    return request.app.state.models.get(model)
