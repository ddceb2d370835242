"""Wire schema of `POST /v1/chat/completions`: OpenAI's chat request, checked only as far as the gateway
reads it (the model, the messages' roles and contents). The other fields (``tools``, ``tool_choice``,
``response_format``, sampling, ``stream_options``, a backend's sampling extras) and every other key of a
message (``tool_calls``, ``tool_call_id``, ``name``) go to the backend exactly as the client sent them, once
`services.executor.gateway.chat.policy` has let them through.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_MESSAGES = 2048

# the headers of the gateway (requests: repo, task, trajectory; answers: trajectory, skills)
REPO_HEADER = "X-SkillOS-Repo"
TASK_HEADER = "X-SkillOS-Task"
TRAJECTORY_HEADER = "X-SkillOS-Trajectory"
SKILLS_HEADER = "X-SkillOS-Skills"


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _content(self) -> ChatMessage:
        if self.content is None and self.role != "assistant":
            raise ValueError(f"a {self.role} message needs a content")
        if self.role == "assistant" and self.content is None and not (self.model_extra or {}).get("tool_calls"):
            raise ValueError("an assistant message needs a content or tool_calls")
        return self


class ChatCompletionRequest(BaseModel):
    """OpenAI's chat completion request (https://platform.openai.com/docs/api-reference/chat/create)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(..., min_length=1, max_length=256)
    messages: list[ChatMessage] = Field(..., min_length=1, max_length=MAX_MESSAGES)
    stream: bool = False

    def as_sent(self) -> dict[str, Any]:
        """The request as the client wrote it (nothing added, nothing dropped)."""
        return self.model_dump(mode="json", exclude_unset=True)


def task_of(messages: list[dict[str, Any]]) -> str:
    """The conversation's task: the text of its first user message."""
    for m in messages:
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):
                return "\n".join(str(p.get("text", "")) for p in content
                                 if isinstance(p, dict) and p.get("type") == "text").strip()
            return str(content or "").strip()
    return ""
