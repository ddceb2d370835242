"""The curator's prompt (our own wording of the paper's §3.1 / App. A.1 design). No I/O.

`build_curator_messages` is the one prompt of a curation decision, used by the curator service and
by the trainer's in-process policy alike, so training samples exactly what serving asks. The op
signatures in the system prompt come from `ops.signature`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from skillos.curation.ops import signature


@dataclass(frozen=True)
class EnvWording:
    """The environment-specific words of the curator's prompt. A small curator copies the example's
    shape and often its words: with ALFWorld's example in a WebShop run, the 0.5B wrote "take OBJECT
    from PLACE" skills for buying shorts (bench/RESULTS-methods.md). So each env gets its own."""

    numbered: str     # this task's particulars that a skill must not name
    actions: str      # example actions of the environment
    concrete_tail: str  # what else a concrete step says
    name_like: str    # an example skill name
    example: str      # a good skill's content
    example_json: str  # the same skill as the JSON mode's arguments


_ALFWORLD = EnvWording(
    numbered='OBJECT and PLACE (or the kind of thing) instead of this task\'s numbered items such as \
"apple 1" or "cabinet 3"',
    actions='"go to PLACE", "open PLACE", "take OBJECT from PLACE"',
    concrete_tail="with where to look first",
    name_like="clean-then-place",
    example="""---
name: place-object
description: Put an object in or on a place.
---
Use when the task says "put OBJECT in/on PLACE".
1. Go to where OBJECT usually is (countertop, table, cabinet); open closed places to see inside.
2. take OBJECT from PLACE where you found it (the object the task names, not another).
3. go to the target PLACE.
4. move OBJECT to the target PLACE.
If an action gives "Nothing happens", check you hold OBJECT and stand at the right place.""",
    example_json='{"skill_name": "place-object", "description": "Put an object in or on a place.", "steps": \
["Go to where OBJECT usually is; open closed places to see inside.", "take OBJECT from PLACE where you \
found it.", "go to the target PLACE.", "move OBJECT to the target PLACE."]}')

ENV_WORDING: dict[str, EnvWording] = {
    "alfworld": _ALFWORLD,
    "webshop": EnvWording(
        numbered='PRODUCT, OPTION and PRICE LIMIT (or the kind of thing) instead of this request\'s values \
such as "black", "3x-large" or a product id',
        actions='"search[QUERY]", "click[PRODUCT ID]", "click[OPTION]", "click[buy now]"',
        concrete_tail="in the order the store needs them",
        name_like="buy-product-under-price-limit",
        example="""---
name: buy-product-with-options
description: Buy a product that matches the request's attributes, options and price limit.
---
Use when the request names a product with attributes, options (size, color) and a price limit.
1. Search with the PRODUCT and its main attributes, leaving out the options and the price.
2. click[PRODUCT ID] of the first result whose title matches and whose price is under the limit.
3. click[OPTION] for each option the request names.
4. click[buy now].
If no title matches, click[back to search] and search with fewer words instead of paging on.""",
        example_json='{"skill_name": "buy-product-with-options", "description": "Buy a product that \
matches the request\'s attributes, options and price limit.", "steps": ["Search with the PRODUCT and its \
main attributes, leaving out the options and the price.", "click[PRODUCT ID] of the first result whose \
title matches and whose price is under the limit.", "click[OPTION] for each option the request names.", \
"click[buy now]."]}'),
    "reasoning": EnvWording(
        numbered="QUANTITY, EQUATION or OPTION (or the kind of thing) instead of this problem's numbers",
        actions='"write what is given and what is asked", "solve", "check the answer"',
        concrete_tail="ending with how to check the answer",
        name_like="check-answer-by-substitution",
        example="""---
name: solve-equation-problem
description: Solve a problem that asks for an unknown defined by equations or conditions.
---
Use when a problem states conditions on an unknown and asks for its value.
1. Write what is given and what is asked, as equations in the unknowns.
2. Simplify and solve, one step per line.
3. Substitute the answer back into every condition of the problem.
4. Give the answer in the form asked (a number, an expression or an option letter).
If the answer breaks a condition, find the first wrong step instead of guessing an option.""",
        example_json='{"skill_name": "solve-equation-problem", "description": "Solve a problem that asks \
for an unknown defined by equations or conditions.", "steps": ["Write what is given and what is asked, as \
equations in the unknowns.", "Simplify and solve, one step per line.", "Substitute the answer back into \
every condition of the problem.", "Give the answer in the form asked (a number, an expression or an \
option letter)."]}'),
}
# An env without its own words (or none given) gets ALFWorld's, the words the curator was built with.
DEFAULT_WORDING = _ALFWORLD


def wording(env: str = "") -> EnvWording:
    return ENV_WORDING.get(env, DEFAULT_WORDING)


def system_prompt(env: str = "") -> str:
    w = wording(env)
    return f"""You maintain a library of skills for an agent that solves tasks one after another in the same \
environment. A skill is a short Markdown procedure for one KIND of task: when it applies, the steps in \
the environment's own actions, and what to do when a step fails.

Good skills help the next tasks of the same kind:
- general: write {w.numbered}; never paste the trajectory;
- concrete: every step is an action of the environment (for example {w.actions}), {w.concrete_tail};
- short: a first line saying when to use it, then 3 to 6 numbered steps (under 80 words);
- corrective: when the agent failed, write the step it missed or the mistake to avoid.

After each task you see what the agent did, whether it believes it succeeded, and the skills it was \
given. Then you edit the library with function calls:
- {signature('new_skill_insert')}: add a skill for a kind of task the library does not cover yet;
- {signature('skill_update')}: fix or improve a retrieved skill, e.g. add a \
missing step or a recovery for a failure you saw;
- {signature('skill_delete')}: remove a retrieved skill that misled the agent or duplicates another.

Rules: skill_name is lowercase words joined by hyphens naming the kind of task (like \
{w.name_like}). Only update or delete skills listed under "Retrieved skills". Make at most 2 calls, \
and none if the task taught nothing new.

Example of a good skill's content:
{w.example}"""


def json_format_hint(env: str = "") -> str:
    w = wording(env)
    return f"""Answer with one JSON object and nothing else. A skill is written as its description \
(when to use it) and its steps; skill_update gives the whole new skill the same way:
{{"calls": [{{"name": "new_skill_insert", "arguments": {w.example_json}}}]}}"""


TEXT_FORMAT_HINT = """Write each call as <tool_call>{"name": "...", "arguments": {...}}</tool_call>."""

# Bounds on what goes into the prompt: the trajectory keeps its start and its end, where the
# useful signal (setup, then success or the failure loop) usually is.
MAX_TURNS_SHOWN = 20
MAX_FIELD_CHARS = 240
MAX_THOUGHT_CHARS = 160
MAX_SKILL_CHARS = 1500


def _clip(text: str, limit: int) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _field(obj: Any, name: str, default: Any = "") -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def format_trajectory(trajectory: Any) -> str:
    turns = list(_field(trajectory, "turns", []) or [])
    lines: list[str] = []
    numbered: list[tuple[int, Any]] = list(enumerate(turns, start=1))
    if len(turns) > MAX_TURNS_SHOWN:
        head = MAX_TURNS_SHOWN // 3
        numbered = numbered[:head] + [(0, None)] + numbered[-(MAX_TURNS_SHOWN - head):]
    for number, turn in numbered:
        if turn is None:
            lines.append(f"... ({len(turns) - MAX_TURNS_SHOWN} turns omitted) ...")
            continue
        obs = _clip(_field(turn, "observation"), MAX_FIELD_CHARS)
        thought = _clip(_field(turn, "thought"), MAX_THOUGHT_CHARS)
        action = _clip(_field(turn, "action"), 200)
        valid = _field(turn, "valid", None)
        lines.append(f"Step {number}:")
        if obs:
            lines.append(f"  Observation: {obs}")
        if thought:
            lines.append(f"  Thought: {thought}")
        if action:
            lines.append(f"  Action: {action}" + (" (not accepted by the environment)" if valid is False else ""))
    answer = _field(trajectory, "final_answer", "")
    if answer:
        lines.append(f"Final answer: {_clip(answer, 2000)}")
    return "\n".join(lines) if lines else "(the agent took no steps)"


MAX_EXAMPLE_CHARS = 300


def format_examples(examples: list[Any]) -> str:
    """A skill's worked examples as the curator sees them: one line each, the task and the actions (the system
    keeps them from successes; the curator reads them, e.g. to fix a step its procedure lacks)."""
    lines = []
    for e in examples or []:
        task, steps = _field(e, "task"), _field(e, "steps", []) or []
        actions = "; ".join(_field(s, "action") for s in steps)
        taken = _field(e, "taken", 0)
        lines.append(_clip(f"- \"{task}\" ({taken} actions, kept {len(steps)}): {actions}", MAX_EXAMPLE_CHARS))
    if not lines:
        return ""
    return "\nWorked examples kept with it from successful tasks (kept by the system; do not copy them):\n" + \
        "\n".join(lines)


def format_skills(retrieved_skills: list[Any]) -> str:
    if not retrieved_skills:
        return "(none: the library had nothing relevant)"
    parts = []
    for skill in retrieved_skills:
        name = _field(skill, "name")
        content = _field(skill, "content") or _field(skill, "description")
        parts.append(f"### {name}\n{_clip(content, MAX_SKILL_CHARS)}{format_examples(_field(skill, 'examples', []))}")
    return "\n\n".join(parts)


def build_curator_messages(trajectory: Any, self_judged_success: bool, retrieved_skills: list[Any],
                           *, output_format: str = "tools") -> list[dict[str, str]]:
    """The chat messages for one curation decision.

    ``trajectory`` and the skills may be pydantic models or plain dicts. ``output_format`` adds the
    instruction for how to write calls: "tools" (the backend's tools API; nothing added), "json"
    (one JSON object, for grammar-constrained decoding) or "text" (<tool_call> tags).
    """
    env = _field(trajectory, "env", "") or ""
    system = system_prompt(env)
    if output_format == "json":
        system += "\n\n" + json_format_hint(env)
    elif output_format == "text":
        system += "\n\n" + TEXT_FORMAT_HINT
    outcome = "SUCCEEDED" if self_judged_success else "FAILED"
    user = (f"Task: {_clip(_field(trajectory, 'task'), 2000)}\n\n"
            f"What the agent did:\n{format_trajectory(trajectory)}\n\n"
            f"The agent judges that it {outcome}.\n\n"
            f"Retrieved skills:\n{format_skills(retrieved_skills)}\n\n"
            "Now edit the skill library.")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
