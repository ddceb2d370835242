"""How the executor decides: the options of `skillos.acting`, one object for the service, the harness
and the trainer. Every option is the same for every arm of a comparison (No Memory and the methods with
skills); bench/RESULTS-learning.md ("the executor that explores") measures what each adds.

The defaults are the paper's setting: no demonstration of the task's type (the executor prompt of the
paper shows none, and a deployment has no handcoded expert); the only worked examples are those the
skills retrieved for the task carry (`examples`), kept from the system's own successes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ActingOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    state_line: bool = Field(True, description=(
        "ALFWorld: each turn restates where the agent is, what it holds, where the objects the task names "
        "were seen and which places it has not searched yet (skillos.acting.state)"))
    hold_back: bool = Field(True, description=(
        "no-progress actions are not offered: actions that already changed nothing in the same situation "
        "(every env), and in ALFWorld look / examine / inventory / close, going where the agent stands, taking "
        "an object the task does not name, putting the object back unchanged where it was taken from, leaving "
        "a closed place right after arriving (skillos.acting.state.held_back)"))
    demos: Literal["none", "generic", "expert"] = Field("generic", description=(
        "none: no demonstration; generic: one made-up game in the system prompt that shows the answer format "
        "(not of the task's type; left out when worked examples are shown); expert: games of the task's own "
        "type played by ALFWorld's handcoded expert on valid_train (never an evaluation split, never the task's "
        "own floorplan): the ceiling arm, not the paper's setting"))
    demos_per_type: int = Field(1, ge=0, le=3, description="expert demonstrations shown per episode")
    examples: int = Field(1, ge=0, le=3, description=(
        "worked examples of the retrieved skills shown per episode (their own successes, of the task's kind "
        "where the env has kinds); 0: none"))
    examples_chars: int = Field(1600, ge=0, le=8000, description=(
        "the most characters the worked examples may take together (~4 per token)"))


@dataclass(frozen=True)
class PlayerOptions:
    """What an in-process episode player (`skillos.acting.player.EpisodePlayer`) reaches and how it asks:
    `skillos.settings.ActingSettings.player_options` reads them from the environment."""

    env_urls: dict[str, str]          # env name (alfworld, webshop, reasoning) -> its server
    skillrepo_url: str
    api_token: str | None = None
    timeout_s: float = 120.0          # HTTP timeout towards the env servers and the skill repo
    reasoning_max_tokens: int = 512   # the reasoning turn's budget when a request does not set one
    action_format: Literal["json", "tags"] = "json"
    acting: ActingOptions = field(default_factory=ActingOptions)  # when a request does not say


def from_pairs(pairs: list[str]) -> ActingOptions | None:
    """``["state_line=false", "demos=generic"]`` -> options (the others at their defaults); [] -> None.
    Raises ValueError naming what to fix."""
    if not pairs:
        return None
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or key not in ActingOptions.model_fields:
            raise ValueError(f"--acting {pair!r}: use KEY=VALUE with KEY one of {', '.join(ActingOptions.model_fields)}")
        values[key] = value.strip()
    try:
        return ActingOptions.model_validate(values)
    except ValueError as e:
        raise ValueError(f"--acting: {e}") from e
