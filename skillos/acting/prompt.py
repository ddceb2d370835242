"""Prompt templates of the executor (our wording of the GiGPO/SkillRL-style ReAct prompt).

An agentic episode is one growing chat, ordered so that an OpenAI-compatible server's prompt cache
(llama.cpp's per-slot cache, vLLM's prefix caching) reuses everything but the newest turn:

    system     who the agent is, how the environment works, the answer format   (same for every episode)
    user       the task, the retrieved skills, the first observation              (same for the episode)
    assistant  <action>a_0</action>          ┐
    user       step 2: what happened …        │ append-only: the previous turn's prompt is a prefix
    …                                         ┘
    user       step t: the observation and the actions possible now

Each turn therefore costs the server the new observation and action (~100 tokens) instead of the whole
prompt (bench/RESULTS-executor.md: "prefix reuse"). Past thoughts are not replayed (only the actions),
and ALFWorld's admissible actions are shown compactly: the places to go to are in the first
observation, each turn lists only the other actions possible there. ``history_len`` caps the past steps
shown in full; older ones are dropped in chunks (``HISTORY_CHUNK``) so the cache survives between drops.

Reasoning tasks are one turn of chain-of-thought with the answer in ``<answer>``. The judge prompts ask
the same backbone for a verdict about a finished trajectory (paper App. A.4).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from skillos.acting.demos import expert_examples
from skillos.acting.options import ActingOptions
from skillos.acting.state import held_back, state_of
from skillos.protocol.executor import RetrievedSkill
from skillos.worked_examples import WorkedExample, examples_block, select

MAX_SKILL_CHARS = 1500  # per skill body: keeps 5 skills inside a small model's context
MAX_OBS_CHARS = 2000
MAX_ADMISSIBLE = 60
HISTORY_CHUNK = 8

ENV_ROLES = {
    "alfworld": "a household robot in a text-based home (ALFWorld)",
    "webshop": "a shopping assistant browsing the WebShop online store",
    "reasoning": "a careful problem solver",
    "generic": "an autonomous agent",
}

FORMATS = {
    "tags": ("At every step, first think briefly (one or two short sentences) inside <think></think>, then give "
             "exactly one action inside <action></action>."),
    "json": ('At every step, answer with one JSON object: {"thought": "one short sentence: what to do next and '
             'why", "action": "exactly one of the actions you can take now"}.'),
}

# One short demonstration per environment (our own, in a made-up room/store): the format, and how an
# episode moves forward. Fixed text at the top of every prompt, so a prompt cache holds it for free.
DEMOS = {
    "alfworld": """Example (another room, another task):
Task: put a mug in shelf.
Step 1. You are in the middle of a room. Looking quickly around you, you see a shelf 1, a cabinet 2, a cabinet 1, a countertop 1 and a sinkbasin 1.
<think>A mug is often on a countertop or in a cabinet. I check countertop 1 first.</think>
<action>go to countertop 1</action>
Step 2. You arrive at countertop 1. On the countertop 1, you see a knife 1 and a bread 1.
<think>No mug here. Cabinets are closed, so I go to cabinet 1 and open it.</think>
<action>go to cabinet 1</action>
Step 3. You arrive at cabinet 1. The cabinet 1 is closed.
<think>I open it to see inside.</think>
<action>open cabinet 1</action>
Step 4. You open the cabinet 1. In it, you see a mug 2.
<think>Found a mug. I take it.</think>
<action>take mug 2 from cabinet 1</action>
Step 5. You pick up the mug 2 from the cabinet 1.
<think>Now I bring it to the shelf.</think>
<action>go to shelf 1</action>
Step 6. You arrive at shelf 1. On the shelf 1, you see nothing.
<think>I move the mug to the shelf to finish the task.</think>
<action>move mug 2 to shelf 1</action>""",
    "webshop": """Example (another request):
Task: i need a blue cotton t-shirt for men, size large, under 30 dollars.
Step 1. Search
<think>I search with the key words of the request.</think>
<action>search[blue cotton t-shirt men]</action>
Step 2. Page 1 (Total results: 50) [SEP] B07X1 [SEP] Men's Cotton Crew T-Shirt, Blue [SEP] $19.99 [SEP] B08Y2 [SEP] Women's Tank Top [SEP] $12.00
<think>B07X1 is a men's blue cotton t-shirt under 30 dollars. I open it.</think>
<action>click[b07x1]</action>
Step 3. size [SEP] small [SEP] medium [SEP] large [SEP] color [SEP] blue [SEP] black [SEP] Buy Now
<think>The request says size large and blue; I select both, then buy.</think>
<action>click[large]</action>""",
}

GUIDES = {
    "alfworld": """How the game works:
- Actions: go to PLACE | open PLACE | close PLACE | take OBJECT from PLACE | move OBJECT to PLACE | \
heat OBJECT with microwave N | cool OBJECT with fridge N | clean OBJECT with sinkbasin N | use LAMP | \
examine THING | inventory | look
- Name places and objects exactly as the game does, number included (countertop 1, apple 2).
- You carry one object at a time: take the object the task names, not another one. Objects lie on or \
inside places; closed places (cabinets, drawers, fridge, microwave, safe) must be opened to see inside.
- Search where the object usually is first, then the other places you have not visited. "look" and \
"examine" only repeat what you already saw.
- "Nothing happens." means the action did not work: do something else.
- The task is done only when the game accepts the final step (for example moving the object to its place).""",
    "webshop": """How the store works:
- Actions: search[QUERY] on the search page; click[LABEL] with a label shown on the page (a product id \
like b0xxxxxxx, an option value, "buy now", "back to search", "next >", "< prev").
- Search with the key words of the request, open a product that matches it, click every option the \
request names (size, color, …), then click[buy now]. The price must be below the limit.""",
}

SYSTEM = "You are {role}. {guide}\n\n{fmt}"
_DEMO_TURN = re.compile(r"<think>(.*?)</think>\n<action>(.*?)</action>", re.DOTALL)


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + " …"


def system_prompt(env: str, action_format: str = "json", generic_demo: bool = True) -> str:
    text = SYSTEM.format(role=ENV_ROLES.get(env, ENV_ROLES["generic"]), guide=GUIDES.get(env, ""),
                         fmt=FORMATS[action_format])
    if env not in DEMOS or not generic_demo:
        return text
    demo = DEMOS[env]
    if action_format == "json":
        demo = _DEMO_TURN.sub(lambda m: assistant_turn(m.group(2), m.group(1), "json"), demo)
    return text + "\n\n" + demo


def assistant_turn(action: str, thought: str = "", action_format: str = "json") -> str:
    """A decision as the model writes it (the thought kept: without it, a small model copies the bare
    actions of its history, stops thinking and repeats itself)."""
    if action_format == "json":
        return json.dumps({"thought": _clip(thought, MAX_THOUGHT), "action": action}, ensure_ascii=False)
    return (f"<think>{_clip(thought, MAX_THOUGHT)}</think>\n" if thought else "") + f"<action>{action}</action>"


def action_schema(admissible: Sequence[str] | None, avoid: Sequence[str] = ()) -> dict | None:
    """JSON schema of one decision: a thought, and an action from the admissible list minus ``avoid``
    (WebShop's ``search[<your query>]`` becomes any ``search[...]``). None without a list: free text
    cannot be checked, so no schema is asked for."""
    if not admissible:
        return None
    exact = [a for a in shown_actions(admissible, avoid) if not a.startswith("search[")]
    choices: list[dict] = [{"enum": exact}] if exact else []
    if any(a.startswith("search[") for a in admissible):
        # no angle brackets: the 1.5B typed WebShop's placeholder "search[<your query>]" as it reads in 5 of
        # 12 plays (bench/evidence/methods-webshop-1.5b-none); a query of the request's words has none
        choices.append({"type": "string", "pattern": "^search\\[[^\\]<>]{1,200}\\]$"})
    action = choices[0] if len(choices) == 1 else {"anyOf": choices}
    # The thought is bounded: a 1.5B model that starts listing the room in its thought otherwise runs to
    # max_tokens and the turn ends without an action (seen in 4 of 360 turns of the learning bench).
    return {"type": "object", "properties": {"thought": {"type": "string", "maxLength": MAX_THOUGHT},
                                             "action": action},
            "required": ["thought", "action"], "additionalProperties": False}


# A thought says what to do next, not what the observation said again: each character of it is generated (the
# slowest tokens of a CPU server) and then read back every later turn (bench/RESULTS-learning.md, "speed").
MAX_THOUGHT = 150


NO_PROGRESS = "(Your last action changed nothing. Do something different.)"


def stale_actions(history: Sequence[tuple], observation: str) -> list[str]:
    """Actions already taken in the situation the agent is in now (the same observation; after a
    refused action, the situation before it): in a text game they would give what they gave before.
    The executor does not offer them again, which breaks the loops small models fall into
    (examine, look, examine, look …)."""
    def situations(observations):
        key = ""
        for o in observations:
            if not o.strip().lower().startswith("nothing happens"):
                key = o.strip()
            yield key

    keys = list(situations([step[0] for step in history] + [observation]))
    stale: list[str] = []
    for step, key in zip(history, keys, strict=False):
        if key == keys[-1] and step[1] not in stale:
            stale.append(step[1])
    return stale


def avoided(env: str, task: str, history: Sequence[tuple], observation: str, admissible: Sequence[str] | None,
            first_observation: str | None = None, first_admissible: Sequence[str] | None = None,
            options: ActingOptions | None = None) -> list[str]:
    """The actions not offered this turn: `stale_actions` always, and with ``hold_back`` in ALFWorld
    the actions that cannot move the task forward (`skillos.acting.state.held_back`)."""
    avoid = stale_actions(history, observation)
    opts = options or ActingOptions()
    if env == "alfworld" and opts.hold_back and admissible:
        first = first_observation if first_observation is not None else (history[0][0] if history else observation)
        state = state_of(first, first_admissible if first_admissible is not None else admissible, history,
                         observation)
        avoid += [a for a in held_back(admissible, state, task) if a not in avoid]
    return avoid


def _no_progress(history: Sequence[tuple], observation: str) -> bool:
    """The last action was repeated and left the observation as it was, or the game refused it."""
    if not history:
        return False
    last_obs, last_action = history[-1][0], history[-1][1]
    if observation.strip().lower().startswith("nothing happens"):
        return True
    return len(history) >= 2 and history[-2][1] == last_action and observation.strip() == last_obs.strip()


def skills_block(skills: Sequence[RetrievedSkill]) -> str:
    if not skills:
        return ""
    parts = ["Skills from earlier tasks (follow one when it fits this task):"]
    for i, s in enumerate(skills, 1):
        head = f"[{i}] {s.name}" + (f": {s.description}" if s.description else "")
        parts.append(head + ("\n" + _clip(s.body, MAX_SKILL_CHARS) if s.body.strip() else ""))
    return "\n\n".join(parts) + "\n\n"


_WEBSHOP_HEADER = re.compile(r"^\s*(WebShop\s*\[SEP\]\s*)?Instruction:\s*\[SEP\].*?\[SEP\]\s*", re.DOTALL)


def show_observation(env: str, observation: str) -> str:
    """The observation as the model reads it: WebShop's pages repeat the instruction, which the task says."""
    if env == "webshop":
        observation = _WEBSHOP_HEADER.sub("", observation, count=1)
    return _clip(observation, MAX_OBS_CHARS)


def shown_actions(admissible: Sequence[str] | None, avoid: Sequence[str] = ()) -> list[str]:
    """The admissible actions offered to the model: without "help" and without ``avoid`` (actions
    that just changed nothing), unless that would leave nothing."""
    actions = [a for a in (admissible or []) if a.strip().lower() != "help"]
    kept = [a for a in actions if a not in set(avoid)]
    return kept or actions


def actions_block(env: str, admissible: Sequence[str] | None, avoid: Sequence[str] = ()) -> str:
    if not admissible:
        return "What do you do next?"
    actions = shown_actions(admissible, avoid)
    if env == "alfworld":
        # the places do not change during an episode: they are listed once at the start (cached),
        # each turn names the other actions possible where the agent stands
        local = [a for a in actions if not a.startswith("go to ")][:MAX_ADMISSIBLE]
        if len(local) < len(actions):
            local.append("go to PLACE")
        return "Actions now: " + " | ".join(local)
    return "Actions now: " + " | ".join(actions[:MAX_ADMISSIBLE])


def turn_tail(history: Sequence[tuple], observation: str, env: str, admissible: Sequence[str] | None,
              avoid: Sequence[str] = ()) -> str:
    """What closes a turn's message: the no-progress note when it applies, and the actions possible now. An
    episode keeps it with the step (``history[i][3]``) so that later prompts repeat it word for word."""
    note = f"{NO_PROGRESS}\n" if _no_progress(history, observation) else ""
    return note + actions_block(env, admissible, avoid)


def places_block(env: str, admissible: Sequence[str] | None, observation: str = "") -> str:
    """The places to go to, once, where the opening observation does not already name them all (ALFWorld's
    names every place of the room: "you see a cabinet 2, a cabinet 1, ...")."""
    if env != "alfworld" or not admissible:
        return ""
    places = [a.removeprefix("go to ") for a in admissible if a.startswith("go to ")]
    if all(re.search(rf"\b{re.escape(p)}\b", observation) for p in places):
        return ""
    return f"\nPlaces you can go to: {', '.join(places)}." if places else ""


def _shown_history(n: int, history_len: int, hidden: int = 0) -> int:
    """Index of the first of the ``n`` past steps shown in full. The window moves in chunks, so between
    two moves the prompt only grows (and stays cached); it shows between ``history_len`` and
    ``history_len + HISTORY_CHUNK - 1`` steps, at least one. ``hidden``: the first steps hidden in any
    case, because the prompt outgrew the LLM's context (`hide_more`)."""
    keep = max(1, history_len)
    start = 0 if n <= keep else (n - keep) // HISTORY_CHUNK * HISTORY_CHUNK
    return min(max(start, hidden), max(0, n - 1))


def hide_more(n: int, history_len: int, hidden: int) -> int | None:
    """The next ``hidden`` once a prompt with ``n`` past steps did not fit the LLM's context: the window's
    start moved on by a chunk, at most to the last step (so the turns after it grow append-only from there,
    cached again), or None when only the last step is shown and nothing is left to hide. A long episode with a full history
    (30 steps, the state line each turn) reaches 12k tokens in ALFWorld: without this it ended on the
    backend's HTTP 400 (bench/RESULTS-learning.md, section 0e)."""
    start = _shown_history(n, history_len, hidden)
    if start >= n - 1:
        return None
    # never past the last step: a start beyond it would be clamped now and move again next turn, rewriting
    # the opening message (and missing the cache) on every turn until the episode caught up with it
    return min((start // HISTORY_CHUNK + 1) * HISTORY_CHUNK, n - 1)


def shown_examples(env: str, task: str, skills: Sequence[RetrievedSkill], options: ActingOptions | None = None,
                   task_type: str | None = None, task_id: str | None = None) -> list[WorkedExample]:
    """The worked examples an episode shows, in one format: the expert's games of the task's type (only with
    ``demos=expert``, the ceiling arm), then the best of the retrieved skills' own (`worked_examples.select`)."""
    opts = options or ActingOptions()
    shown: list[WorkedExample] = []
    if env == "alfworld" and opts.demos == "expert":
        shown += expert_examples(task_type, opts.demos_per_type, task_id=task_id)
    return shown + select(skills, task, env, opts.examples, opts.examples_chars)


def agent_messages(env: str, task: str, observation: str, *, skills: Sequence[RetrievedSkill],
                   history: Sequence[tuple[str, ...]], admissible: Sequence[str] | None,
                   history_len: int = 30, first_observation: str | None = None,
                   first_admissible: Sequence[str] | None = None, avoid: Sequence[str] = (),
                   action_format: str = "json", options: ActingOptions | None = None,
                   task_type: str | None = None, task_id: str | None = None, hidden: int = 0,
                   examples: Sequence[WorkedExample] | None = None) -> list[dict]:
    """Chat messages for one ReAct decision.

    ``history``: every past (observation, action[, thought[, asked[, completion]]]) of the episode, oldest
    first; ``asked``: what closed the message the action answered (`turn_tail`), ``completion``: the model's
    own answer (both kept by `episode.react` so that every later prompt repeats the turn word for word: the
    prompt only grows, and a server's prompt cache processes each turn's new text once); ``observation``: now.
    ``first_observation``/``first_admissible``: the episode's opening observation and actions (default:
    the first history entry's observation, or ``observation`` and ``admissible`` at the first step).
    ``avoid``: actions not offered this turn (they just changed nothing; see `avoided`).
    ``options``: the state line and the demonstrations (`ActingOptions`); ``task_type`` picks the latter,
    never of the floorplan of ``task_id``.
    ``hidden``: the first past steps not shown in full whatever ``history_len`` says (`hide_more`).
    ``examples``: the worked examples shown (default: `shown_examples`; an episode picks them once).
    """
    opts = options or ActingOptions()
    first = first_observation if first_observation is not None else (history[0][0] if history else observation)
    # the places come from the first turn's actions (go to PLACE); a caller that does not give them gets
    # today's list, which in ALFWorld names the same places
    first_adm = first_admissible if first_admissible is not None else admissible
    if examples is None:
        examples = shown_examples(env, task, skills, opts, task_type, task_id)
    opening = (f"{examples_block(examples, env)}Your task: {task.strip()}\n\n{skills_block(skills)}The episode starts.\n"
               f"{show_observation(env, first)}" + places_block(env, first_adm, show_observation(env, first)))
    # the made-up format game unless a worked one is shown (an expert arm without games of its env keeps it)
    generic = opts.demos != "none" and not examples
    messages = [{"role": "system", "content": system_prompt(env, action_format, generic_demo=generic)}]

    def state(upto: int, obs: str) -> str:
        """The state line after the first ``upto`` actions (each past turn keeps its own: append-only)."""
        if env != "alfworld" or not opts.state_line:
            return ""
        return "\n" + state_of(first, first_adm, history[:upto], obs).line(task, show_observation(env, obs))

    def asked(j: int) -> str:
        """What closed the message before past action ``j``, as the episode kept it ("" when not kept: a caller
        of /v1/act sends no such record)."""
        return f"\n{history[j][3]}" if len(history[j]) > 3 and history[j][3] else ""

    step1 = f"{opening}{state(0, first)}\n\nStep 1.\n"
    if not history:
        messages.append({"role": "user", "content": step1 + turn_tail(history, observation, env, admissible, avoid)})
        return messages
    start = _shown_history(len(history), history_len, hidden)
    if start > 0:
        earlier = "; ".join(step[1] for step in history[:start])
        opening += f"\n\n(Steps 1-{start} are not shown. Your actions in them: {_clip(earlier, 1200)})"
        messages.append({"role": "user", "content": opening + f"\n\nStep {start + 1}. "
                         + show_observation(env, history[start][0]) + state(start, history[start][0]) + asked(start)})
    elif asked(0):
        messages.append({"role": "user", "content": step1 + asked(0).lstrip("\n")})
    elif first_admissible is not None:
        # word for word what the first turn was asked, so the server's prompt cache keeps all of it
        first_avoid = avoided(env, task, [], first, first_admissible, first, first_admissible, opts)
        messages.append({"role": "user", "content": step1 + actions_block(env, first_admissible, first_avoid)})
    else:
        messages.append({"role": "user", "content": step1.rstrip()})
    for i in range(start, len(history)):
        step = history[i]
        # the model's own words when they were kept (`react`: an exact action), so the server's cache of what it
        # generated is reused; else the decision written again
        said = step[4] if len(step) > 4 and step[4] else assistant_turn(step[1], step[2] if len(step) > 2 else "",
                                                                        action_format)
        messages.append({"role": "assistant", "content": said})
        nxt = history[i + 1][0] if i + 1 < len(history) else observation
        content = f"Step {i + 2}. {show_observation(env, nxt)}{state(i + 1, nxt)}"
        if i + 1 < len(history):
            content += asked(i + 1)
        else:
            content += "\n" + turn_tail(history, observation, env, admissible, avoid)
        messages.append({"role": "user", "content": content})
    return messages


def reasoning_messages(problem: str, skills: Sequence[RetrievedSkill],
                       examples: Sequence[WorkedExample] = ()) -> list[dict]:
    user = examples_block(examples, "reasoning") + skills_block(skills) + f"Problem:\n{problem.strip()}\n\n"
    user += ("Reason step by step inside <think></think>, then give only the final answer inside "
             "<answer></answer>.")
    return [{"role": "system", "content": "You are a careful problem solver. Show your reasoning, then the answer."},
            {"role": "user", "content": user}]


JUDGE_SYSTEM = ("You review an agent's work. Decide from the record alone whether the task was accomplished. "
                "Answer with a short reason, then a last line that is exactly VERDICT: SUCCESS or VERDICT: FAILURE.")
JUDGE_SYSTEM_JSON = ("You review an agent's work. Decide from the record alone whether the task was accomplished. "
                     'Answer with one JSON object: {"last_observation_shows_the_task_done": true or false, '
                     '"reason": "one sentence", "verdict": "SUCCESS" or "FAILURE"}.')
# the model first reads off the evidence (the end of the record), then decides: a 1.5B model asked
# for a verdict straight away calls almost every failure a success (docs/llm-backends.md, "judge")
JUDGE_SCHEMA = {"type": "object",
                "properties": {"last_observation_shows_the_task_done": {"type": "boolean"},
                               "reason": {"type": "string"}, "verdict": {"enum": ["SUCCESS", "FAILURE"]}},
                "required": ["last_observation_shows_the_task_done", "reason", "verdict"]}


def judge_messages(env: str, task: str, turns: Sequence[tuple[str, str]], final_answer: str,
                   ended_by_env: bool | None = None, max_turns: int | None = None,
                   output_format: str = "text") -> list[dict]:
    """``ended_by_env``: whether the environment closed the episode (ALFWorld does so only when the
    task is complete) rather than the agent running out of turns — a fact the agent saw, not the
    environment's hidden verdict. It is stated last, next to the question, where a small model reads it."""
    user = f"Task: {task.strip()}\n\n"
    if turns:
        user += "What the agent did:\n"
        for i, (obs, act) in enumerate(turns, 1):
            user += f"{i}. saw: {_clip(obs, 300)}\n   did: {act}\n"
        user += "\n"
    if final_answer:
        user += f"The agent's final answer: {_clip(final_answer, 2000)}\n\n"
    if turns:
        user += f"What the agent saw last: {_clip(turns[-1][0], 300)}\n"
    if ended_by_env is True:
        user += f"The environment ended the episode after step {len(turns)}.\n"
    elif ended_by_env is False:
        user += (f"The environment did not end the episode: the agent used all {max_turns or len(turns)} steps "
                 "it was allowed.\n")
    if env == "alfworld":
        user += ("In this household game the environment ends an episode early only when the task is complete; "
                 "an episode that runs out of steps failed.\n")
    if output_format == "json":
        user += "Was the task accomplished?"
        return [{"role": "system", "content": JUDGE_SYSTEM_JSON}, {"role": "user", "content": user}]
    user += "Was the task accomplished? End with VERDICT: SUCCESS or VERDICT: FAILURE."
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]
