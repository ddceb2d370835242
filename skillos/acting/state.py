"""What an ALFWorld agent knows so far, read off the episode's own text: the state line.

A 1.5B executor forgets within a few turns where it has been and what it saw, so it looks around
again and again (bench/evidence/curation-alfworld-pick: 65 % of turns were look / examine /
inventory, 2.4-2.8 places visited of 9-31). The state line restates, every turn, what the episode
has already shown it:

    In your hand: apple 1 (heated).
    Seen that your task names: apple 1 (countertop 1), fridge 1.
    Not searched yet: cabinet 1-17, drawer 1, ...

and, once the object of a clean / heat / cool task is in hand but not changed yet, instead of the places
left: ``Next: go to microwave 1 and heat the apple 1 with it.`` It says each thing once: not where the agent
is when the observation just said so, and places in runs (``cabinet 1-17``), since on a 2-core CPU server a
turn's cost is the new prompt tokens it adds.

It uses only what the agent itself saw (the first observation, its actions and their observations)
and the task sentence, never the game's hidden state, so it is the same information a careful
player would write down. ``state_of`` is a pure function of the episode so far: the executor
service, `/v1/act` (which gets the history from its caller) and the trainer's rollouts compute the
same line from the same turns.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

_SEE = re.compile(r"you see (.*?)(?:\.\s*$|\.\s+[A-Z]|$)", re.IGNORECASE | re.DOTALL)
_ITEM = re.compile(r"^(?:a|an|some|the)\s+", re.IGNORECASE)
_ARRIVE = re.compile(r"^you arrive at (?:loc \d+|(.+?))\.", re.IGNORECASE)
_OPEN = re.compile(r"^you open the (.+?)\.", re.IGNORECASE)
_TAKE = re.compile(r"^you pick up the (.+?) from the (.+?)\.", re.IGNORECASE)
_PUT = re.compile(r"^you (?:move|put) the (.+?) (?:to|in|on|into|onto) the (.+?)\.", re.IGNORECASE)
_CHANGE = re.compile(r"^you (heat|cool|clean) the (.+?) using the (.+?)\.", re.IGNORECASE)
_CLOSED = re.compile(r"the (.+?) is closed", re.IGNORECASE)
_WORDS = re.compile(r"[a-z]+")
_DONE = {"heat": "heated", "cool": "cooled", "clean": "cleaned"}
# actions that never move an ALFWorld task forward: they only restate what the agent saw
NO_PROGRESS = ("look", "inventory", "examine ", "close ")
# the change a task sentence asks for ("put a clean mug in ...", "heat some egg and ...", "a cool apple")
_NEEDS = {"clean": "cleaned", "heat": "heated", "hot": "heated", "cool": "cooled", "cold": "cooled"}
# where ALFWorld makes each change ("clean X with sinkbasin 1", "heat X with microwave 1", "cool X with fridge 1")
_CHANGED_AT = {"cleaned": ("sinkbasin", "clean"), "heated": ("microwave", "heat"), "cooled": ("fridge", "cool")}


def needed_change(task: str) -> str | None:
    """``cleaned`` / ``heated`` / ``cooled`` when the task sentence asks for that change, else None."""
    words = task_words(task)
    return next((done for w, done in _NEEDS.items() if w in words), None)


def object_class(name: str) -> str:
    """``apple 1`` -> ``apple``."""
    return name.rsplit(" ", 1)[0] if name.rsplit(" ", 1)[-1].isdigit() else name


def seen_items(observation: str) -> list[str]:
    """The objects an observation lists after "you see" (``a apple 1, a knife 2, and a bread 1``)."""
    m = _SEE.search(observation)
    if not m or m.group(1).strip().lower().startswith("nothing"):
        return []
    items = []
    for part in re.split(r",\s*(?:and\s+)?|\s+and\s+", m.group(1)):
        item = _ITEM.sub("", part.strip()).strip().rstrip(".")
        if item and item[-1].isdigit():
            items.append(item)
    return items


def task_words(task: str) -> set[str]:
    return set(_WORDS.findall(task.lower()))


@dataclass
class AlfworldState:
    at: str | None = None
    holding: str | None = None
    holding_done: list[str] = field(default_factory=list)   # heated / cooled / cleaned
    places: list[str] = field(default_factory=list)          # every place of the room, in the game's order
    searched: set[str] = field(default_factory=set)          # places whose contents the agent has seen
    where: dict[str, str] = field(default_factory=dict)      # object -> the place it was last seen at
    taken_from: dict[str, str] = field(default_factory=dict)  # object in hand -> the place it was taken from
    placed: dict[str, str] = field(default_factory=dict)      # object -> the place the agent put it
    at_closed: bool = False                                  # just arrived at a closed place, nothing done yet
    changed: bool = True                                     # the last action changed what the agent knows

    def line(self, task: str, observation: str = "") -> str:
        """What the agent knows, each thing said once: where it is only when ``observation`` (what it just
        read) does not say; the places the task names only before the first action (the room's list is in
        the opening observation); the places not searched yet only while there is something to search for
        (not before the first action, when the observation just listed them all, nor with the task's object in
        hand unless a look task's lamp is still to be found), grouped by kind (``cabinet 1-17``)."""
        words = task_words(task)
        hand = self.holding or "nothing"
        if self.holding and self.holding_done:
            hand += f" ({', '.join(self.holding_done)})"
        # "cabinet 1" is not said by "cabinet 10"
        said = self.at and re.search(rf"\b{re.escape(self.at)}\b", observation.lower())
        where = f"You are at {self.at}. " if self.at and not said else ""
        parts = [f"{where}In your hand: {hand}."]
        named = [f"{o} (you put it in {p})" if self.placed.get(o) == p else f"{o} ({p})"
                 for o, p in self.where.items() if object_class(o) in words and o != self.holding]
        started = bool(self.searched) or self.at is not None
        places = [] if started else grouped([p for p in self.places if object_class(p) in words])
        if named or places:
            parts.append("Seen that your task names: " + ", ".join(named + places) + ".")
        left = [p for p in self.places if p not in self.searched]
        need = needed_change(task)
        holding_task_object = self.holding is not None and object_class(self.holding) in words
        lamps = {w for w in words if "lamp" in w}   # the lamp the task names (desklamp, floorlamp)
        lamp_unseen = bool(lamps) and not any(object_class(o) in lamps for o in self.where)
        if holding_task_object and need and need not in self.holding_done:
            # the object is in hand and its change is due: where to make it, not where to search (with the
            # list of places left, the 1.5B took the butterknife and opened cabinets for 25 turns, 0d)
            kind, verb = _CHANGED_AT[need]
            there = [p for p in self.places if object_class(p) == kind] or [kind]
            parts.append(f"Next: go to {there[0]} and {verb} the {self.holding} with it.")
        elif left and started and (not holding_task_object or lamp_unseen):
            parts.append("Not searched yet: " + ", ".join(grouped(left)) + ".")
        elif self.places and not left:
            parts.append("You have searched every place.")
        return "\n".join(parts)


def grouped(places: Sequence[str]) -> list[str]:
    """Places of one kind as runs of numbers, kinds in first-seen order: ``cabinet 3, cabinet 1, cabinet 2,
    drawer 1`` -> ``cabinet 1-3``, ``drawer 1`` (a kitchen's 40 places in a dozen names)."""
    numbers: dict[str, list[int]] = {}
    plain: list[str] = []
    for p in places:
        kind, _, n = p.rpartition(" ")
        if kind and n.isdigit():
            numbers.setdefault(kind, []).append(int(n))
        elif p not in plain:
            plain.append(p)
    out = []
    for kind, ns in numbers.items():
        ns = sorted(set(ns))
        start = prev = ns[0]
        for n in [*ns[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            out.append(f"{kind} {start}" if start == prev else f"{kind} {start}-{prev}")
            if n is not None:
                start = prev = n
    return out + plain


def _places(first_admissible: Sequence[str] | None, first_observation: str) -> list[str]:
    places = [a.removeprefix("go to ") for a in (first_admissible or []) if a.startswith("go to ")]
    return places or seen_items(first_observation)


def state_of(first_observation: str, first_admissible: Sequence[str] | None,
             history: Sequence[tuple], observation: str) -> AlfworldState:
    """The state after every action of ``history`` (``(observation before, action, ...)`` tuples;
    ``observation`` is what the last action gave)."""
    s = AlfworldState(places=_places(first_admissible, first_observation))
    after = [step[0] for step in history[1:]] + [observation] if history else []
    for step, obs in zip(history, after, strict=True):
        _apply(s, str(step[1]), obs.strip())
    return s


def _apply(s: AlfworldState, action: str, obs: str) -> None:
    before = (s.at, s.holding, tuple(s.holding_done), len(s.searched), len(s.where))
    if not obs.lower().startswith("nothing happens"):
        s.at_closed = False  # only right after arriving at a closed place (set below) has nothing been done there
    if m := _ARRIVE.match(obs):
        s.at = m.group(1) or action.removeprefix("go to ").strip()
        s.at_closed = bool(_CLOSED.search(obs)) and s.at not in s.searched
        if not _CLOSED.search(obs):
            s.searched.add(s.at)
        for item in seen_items(obs):
            s.where[item] = s.at
    elif m := _OPEN.match(obs):
        s.searched.add(m.group(1))
        for item in seen_items(obs):
            s.where[item] = m.group(1)
    elif m := _TAKE.match(obs):
        s.holding, s.holding_done = m.group(1), []
        s.taken_from = {m.group(1): m.group(2)}
        s.placed.pop(m.group(1), None)
        s.where.pop(m.group(1), None)
    elif m := _PUT.match(obs):
        s.where[m.group(1)] = m.group(2)
        s.placed[m.group(1)] = m.group(2)
        s.holding, s.holding_done, s.taken_from = None, [], {}
    elif (m := _CHANGE.match(obs)) and m.group(2) == s.holding \
            and _DONE[m.group(1).lower()] not in s.holding_done:
        s.holding_done.append(_DONE[m.group(1).lower()])
    s.changed = before != (s.at, s.holding, tuple(s.holding_done), len(s.searched), len(s.where))


def held_back(admissible: Sequence[str], state: AlfworldState, task: str) -> list[str]:
    """ALFWorld actions that cannot move this task forward now:

    - looking around (look, examine, inventory): the state line already says what they would show;
    - closing a place: no goal needs a closed door (the 1.5B closed each cabinet it had just opened,
      the object it sought inside);
    - going where the agent stands;
    - taking an object the task does not name (12 of 24 episodes of the record took the wrong object);
      every class of object and place in ALFWorld's 340 task sentences here is named in its sentence
      (checked over valid_seen and valid_train), so the object a task needs is never held back;
    - putting the object in hand back, unchanged, where it was taken from, which undoes the take (3 of
      the first 4 episodes of the all-options run did it right after taking the task's object); once it
      is heated, cooled or cleaned it may go back (the place it came from can be the task's target);
    - leaving a closed place right after arriving, before doing anything there: the agent came to look
      inside or to use it (the same run walked past ten closed cabinets without opening one);
    - putting an object into a place the sentence does not name (the target is always named, and a
      heat / cool / clean is one action, no "move" into the appliance), or anywhere in a look task;
    - taking back out an object the agent itself put somewhere (pick two: the first one is done);
    - in a clean / heat / cool task, putting the task's object down before it is changed: the change is one
      action with the object in hand at the sinkbasin / microwave / fridge (in the gold and No Memory runs of
      section 0c the 1.5B put the butterknife and the apple straight on the target, then wandered);
    - slicing: no ALFWorld goal of the six types slices (both `clean` episodes of the all-options run
      sliced bread and lettuce with the butterknife they were to clean); using a lamp outside a look task.
    Nothing is held back when it would leave no action (`shown_actions` then offers them all)."""
    words = task_words(task)
    look_task = task.lower().lstrip().startswith(("look at", "examine"))
    need = needed_change(task)
    here = f"go to {state.at}".lower() if state.at else None
    undo = {f"move {obj} to {place}".lower() for obj, place in state.taken_from.items()
            if obj == state.holding and not state.holding_done}
    out = []
    for a in admissible:
        low = a.lower()
        wrong_object = (low.startswith("take ") and " from " in low
                        and object_class(low.removeprefix("take ").split(" from ")[0]) not in words)
        leaving_unopened = state.at_closed and low.startswith("go to ")
        # a task's object goes only into the place its sentence names, and a look task puts nothing down
        wrong_place = low.startswith("move ") and " to " in low and (
            look_task or object_class(low.rsplit(" to ", 1)[1]) not in words)
        # what the agent already put where the task wants it is not taken out again (pick two)
        taking_back = low.startswith("take ") and low.removeprefix("take ").split(" from ")[0] in state.placed
        needless = low.startswith("slice ") or (low.startswith("use ") and not look_task)
        unchanged = (low.startswith("move ") and state.holding is not None and need is not None
                     and low.removeprefix("move ").split(" to ")[0] == state.holding.lower()
                     and object_class(state.holding) in words and need not in state.holding_done)
        if (low.startswith(NO_PROGRESS) or low == here or wrong_object or low in undo or leaving_unopened
                or wrong_place or taking_back or needless or unchanged):
            out.append(a)
    return out
