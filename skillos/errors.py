"""One JSON error shape for every service: ``{"error": {"code", "message", "details"}}``.

``code`` is a stable machine-readable string; ``message`` says what to fix.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ErrorBody(BaseModel):
    code: str
    message: str
    details: Any | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class APIError(Exception):
    """Raise from route or domain code; rendered as the error shape with ``status``."""

    def __init__(self, status: int, code: str, message: str, details: Any | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers = headers

    def body(self) -> dict:
        return ErrorResponse(error=ErrorBody(code=self.code, message=self.message, details=self.details)).model_dump()


def bad_request(message: str, code: str = "bad_request", details: Any = None) -> APIError:
    return APIError(400, code, message, details)


def not_found(message: str, code: str = "not_found") -> APIError:
    return APIError(404, code, message)


def conflict(message: str, code: str = "conflict") -> APIError:
    return APIError(409, code, message)


def unavailable(dependency: str, message: str, retry_after_s: int = 1) -> APIError:
    """503 ``<dependency>_unavailable`` with ``Retry-After``: a dependency (the database) cannot be reached
    now; the same request may succeed later. A write answered so may or may not have been applied: retry it
    with the same idempotency key (or ``If-Match``) to apply it exactly once."""
    return APIError(503, f"{dependency}_unavailable", message, headers={"Retry-After": str(max(1, int(retry_after_s)))})
