"""The models the gateway serves: the names clients may ask for (``SKILLOS_GATEWAY_MODELS``, else the
executor LLM's model name), each answered by the executor's LLM backend."""

from __future__ import annotations

import time

from services.executor.gateway.errors import gateway_error
from services.executor.gateway.models.protocol import Model, ModelList


class ServedModels:
    def __init__(self, names: list[str]):
        self.names = names
        self.created = int(time.time())

    def list(self) -> ModelList:
        return ModelList(data=[Model(id=n, created=self.created) for n in self.names])

    def get(self, name: str) -> Model:
        if name not in self.names:
            raise gateway_error(404, "model_not_found", f"the model {name!r} does not exist", param="model")
        return Model(id=name, created=self.created)
