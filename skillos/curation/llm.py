"""`ChatLLM`: the one thing curation needs of a language model.

Satisfied by the HTTP client `skillos.llm.LLMClient` (any OpenAI-compatible backend) and by the
trainer's in-process policy (`services.trainer.rollouts.base.PolicyLLM`), so a curation decision runs the
same code whichever model answers. An implementation may ignore sampling arguments it controls
itself (the trainer takes temperature and max_tokens from its own config) but must honour
``tools`` / ``response_format``: they decide the shape of what the parser reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from skillos.llm.client import ChatResult


@runtime_checkable
class ChatLLM(Protocol):
    @property
    def model(self) -> str:
        """The model's name, reported in ``Decision.model`` when the backend does not say."""
        ...

    async def chat(self, messages: list[dict], *, tools: list[dict] | None = None, tool_choice: Any = None,
                   temperature: float | None = None, max_tokens: int | None = None, seed: int | None = None,
                   logprobs: bool = False, response_format: dict | None = None,
                   extra_body: dict | None = None) -> ChatResult:
        """One completion. Raises `skillos.llm.LLMError` when the backend gives no answer."""
        ...

    async def aclose(self) -> None: ...
