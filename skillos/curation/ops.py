"""The three curator ops, written once: one discriminated pydantic union.

An op is one function call of the curator (the paper's tool names):

    new_skill_insert(skill_name, content)                add a skill
    skill_update(skill_name, new_name?, new_content?)    rewrite and/or rename a skill
    skill_delete(skill_name)                             remove a skill

Everything else that spells an op out is derived from the classes below: the OpenAI tools
definition and the JSON-mode schema (`schema.py`), the signatures in the system prompt
(`prompt.py`), the positional order of a Python-style call and the allowed/required arguments
(`parse.py`, `validate.py`), and the skill repo's argument checks (`services/skillrepo/ops.py`).
Field order is the signature's order. A field without a default is required.

``json_schema_extra`` holds what the tools definition shows the model; it is a hint, not a check
(a name longer than 64 chars is cut by `skillos.skills.normalize_name`, not refused).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

OpName = Literal["new_skill_insert", "skill_update", "skill_delete"]

_NAME_HINT = {"maxLength": 64}   # skillos.skills.NAME_MAX, shown to the model in the tools definition
_CONTENT = ("the whole skill as Markdown: optional YAML frontmatter (name, description) then numbered steps, "
            "when to use it and how to recover from failure")


class _Op(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def arguments(self) -> dict[str, Any]:
        """The call's arguments as sent to the skill repo (optional ones left out when not given)."""
        return self.model_dump(exclude={"name"}, exclude_none=True)


class NewSkillInsert(_Op):
    """Add a new reusable skill to the repository."""

    name: Literal["new_skill_insert"] = "new_skill_insert"
    skill_name: str = Field(description="lowercase words joined by hyphens, e.g. heat-then-place",
                            json_schema_extra=_NAME_HINT)
    content: str = Field(description=_CONTENT)


class SkillUpdate(_Op):
    """Rewrite and/or rename an existing skill. Give new_content, new_name or both."""

    name: Literal["skill_update"] = "skill_update"
    skill_name: str = Field(description="the existing skill's name", json_schema_extra=_NAME_HINT)
    new_name: str | None = Field(None, description="optional new name", json_schema_extra=_NAME_HINT)
    new_content: str | None = Field(None, description="optional replacement for the whole skill")


class SkillDelete(_Op):
    """Remove a skill that is wrong, redundant or harmful."""

    name: Literal["skill_delete"] = "skill_delete"
    skill_name: str = Field(description="the skill to remove", json_schema_extra=_NAME_HINT)


CuratorOp = Annotated[NewSkillInsert | SkillUpdate | SkillDelete, Field(discriminator="name")]
CURATOR_OP: TypeAdapter[NewSkillInsert | SkillUpdate | SkillDelete] = TypeAdapter(CuratorOp)

OP_TYPES: dict[str, type[_Op]] = {cls.model_fields["name"].default: cls
                                  for cls in (NewSkillInsert, SkillUpdate, SkillDelete)}
OP_NAMES: tuple[str, ...] = tuple(OP_TYPES)            # ("new_skill_insert", "skill_update", "skill_delete")


def parameters(name: str) -> list[str]:
    """The op's arguments in signature order, e.g. ["skill_name", "new_name", "new_content"]."""
    return [f for f in OP_TYPES[name].model_fields if f != "name"]


def required(name: str) -> list[str]:
    """The arguments the op cannot do without, in signature order."""
    fields = OP_TYPES[name].model_fields
    return [f for f in parameters(name) if fields[f].is_required()]


def signature(name: str) -> str:
    """How the prompt writes the op: ``skill_update(skill_name, new_name?, new_content?)``."""
    req = required(name)
    return f"{name}({', '.join(p if p in req else p + '?' for p in parameters(name))})"


def description(name: str) -> str:
    return (OP_TYPES[name].__doc__ or "").strip()
