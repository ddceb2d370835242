"""Configuration of the curator service (env vars ``SKILLOS_<FIELD>``).

The curator's LLM is the "curator" role of `skillos.llm` (``SKILLOS_CURATOR_LLM_*``); the content
judge's LLM is the "judge" role (``SKILLOS_JUDGE_LLM_*``). How a decision asks its LLM
(``SKILLOS_CURATOR_OUTPUT_MODE``, ``..._JSON_STYLE``, ``..._MIN_CALLS``, ...) is
`skillos.settings.CurationSettings`, shared with the trainer.
"""

from __future__ import annotations

from typing import Literal

from skillos.settings import ApiTokenSettings, CurationSettings, InboundAuthSettings, SkillRepoAddress


class CuratorSettings(CurationSettings, ApiTokenSettings, SkillRepoAddress, InboundAuthSettings):
    """The curator reads the skill repo and applies its ops there (with its own token); its callers need a
    token that reaches the repo they name (rw to apply ops) when auth is on."""

    # content judge (r_cnt): "llm" asks the judge role's model, "heuristic" scores structure and
    # generality without a model
    curator_judge_backend: Literal["llm", "heuristic"] = "llm"
    curator_judge_max_tokens: int = 64
