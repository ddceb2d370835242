"""Reasoning tasks from reasoning-gym's procedural generators, scored by each family's own scorer.

A **family** is one reasoning-gym dataset (``gsm_symbolic``, ``chain_sum``, ...): it is the task's
``type``. A task is ``rg/<family>/<split>/<index>``; its generator seed is a function of (family,
split, index), with the splits ``train``, ``valid`` and ``test`` in disjoint seed ranges, so one
id is the same problem on every machine and no seed is shared between splits.

Items are generated in fixed chunks of ``CHUNK`` (one reasoning-gym dataset each, seeded
``split base + family offset + chunk start``; reasoning-gym seeds item ``i`` of a dataset with
``seed + i``), so an item does not depend on how many tasks a split lists: any index below
``MAX_INDEX`` can be opened by id. ``tasks(split)`` lists the first ``tasks_per_split`` indices of
every family, generated on first use and cached.

The answer is scored with the family's ``score_answer``: a float in [0, 1], partial credit kept
where the family gives it (``won`` only at 1.0).
"""

from __future__ import annotations

import math
import re
import threading
import zlib
from collections import OrderedDict
from typing import Any

from services.envs.base import Game, StepResult, TaskInfo

SPLITS = ("train", "valid", "test")
# the seed ranges: split base + family offset (< FAMILY_OFFSETS) + index (< MAX_INDEX); the bases are
# further apart than any offset + index, so the splits never share a seed; the largest seed stays
# below 2**32 (some generators seed numpy with it)
SPLIT_BASE = {"train": 0, "valid": 1_000_000_000, "test": 2_000_000_000}
FAMILY_OFFSETS = 100_000_000
MAX_INDEX = 100_000_000
CHUNK = 1000
TASK_ID = re.compile(r"rg/([a-z0-9_]{1,64})/(train|valid|test)/(0|[1-9][0-9]{0,8})")
ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
BOXED_WHOLE = re.compile(r"\$*\s*\\boxed\{(.*)\}\s*\$*", re.DOTALL)   # "\boxed{42}", "$\boxed{42}$"


DEFAULT_FAMILIES = ("gsm_symbolic", "chain_sum", "letter_counting", "base_conversion")
# One line on the answer format the family's scorer wants, appended to the question where the question
# itself leaves it open (the executor submits what it puts inside <answer></answer>).
FORMAT_HINTS = {
    "gsm_symbolic": "Give only the number as the answer, without units or thousands separators.",
    "chain_sum": "Give only the resulting number as the answer.",
    "letter_counting": "Give only the count, as a number, as the answer.",
    "base_conversion": "Give only the digits of the converted number as the answer (no prefix such as 0x or 0b, "
                       "no base subscript).",
    "basic_arithmetic": "Give only the resulting number as the answer.",
    "gcd": "Give only the number as the answer.",
    "lcm": "Give only the number as the answer.",
}


def known_families() -> list[str]:
    """Every family the installed reasoning-gym registers."""
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def parse_families(value: str | list[str] | tuple[str, ...]) -> list[str]:
    """``"a, b,a"`` -> ``["a", "b"]`` (order kept, duplicates and blanks dropped)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    return list(dict.fromkeys(s.strip() for s in items if s.strip()))


def unknown_families_message(unknown: list[str], known: list[str], what: str = "reasoning-gym families") -> str:
    return f"unknown {what} {', '.join(map(repr, unknown))}; known: {', '.join(known)}"


def family_offset(family: str) -> int:
    return zlib.crc32(family.encode()) % FAMILY_OFFSETS


def task_seed(family: str, split: str, index: int) -> int:
    """The generator seed of one task (reasoning-gym's item rng): disjoint ranges per split."""
    return SPLIT_BASE[split] + family_offset(family) + index


def task_id(family: str, split: str, index: int) -> str:
    return f"rg/{family}/{split}/{index}"


def parse_task_id(value: str) -> tuple[str, str, int]:
    """(family, split, index) of ``rg/<family>/<split>/<index>``; KeyError for anything else."""
    m = TASK_ID.fullmatch(value)
    if not m or int(m.group(3)) >= MAX_INDEX:
        raise KeyError(value)
    return m.group(1), m.group(2), int(m.group(3))


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += (ch == "{") - (ch == "}")
        if depth < 0:
            return False
    return depth == 0


def submitted_answer(action: str) -> str:
    """What the scorer gets: the last ``<answer>...</answer>`` of the action when it has one (a client
    that sends the whole completion), else the action; stripped, and out of a ``\\boxed{}`` that wraps
    all of it (math-tuned models box their answers; the scorers compare the bare answer)."""
    found = ANSWER_TAG.findall(action)
    answer = (found[-1] if found else action).strip()
    boxed = BOXED_WHOLE.fullmatch(answer)
    return boxed.group(1).strip() if boxed and _balanced(boxed.group(1)) else answer


class Problem:
    """One generated task: its TaskInfo, reasoning-gym's entry, its seed and the family's scorer (a dataset
    of the family: reasoning-gym's ``score_answer`` reads the entry, not the dataset's seed)."""

    __slots__ = ("entry", "scorer", "seed", "task")

    def __init__(self, task: TaskInfo, entry: dict[str, Any], scorer: Any, seed: int):
        self.task, self.entry, self.scorer, self.seed = task, entry, scorer, seed

    def score(self, answer: str) -> tuple[float, dict[str, Any]]:
        """(score in [0, 1], info): the family's own ``score_answer``."""
        family = self.task.type
        info: dict[str, Any] = {"graded_by": f"reasoning_gym:{family}"}
        try:
            score = float(self.scorer.score_answer(answer, self.entry))
        except Exception as e:  # noqa: BLE001 - a scorer that chokes on an odd answer scores it 0
            score, info["grading_error"] = 0.0, f"{type(e).__name__}: {e}"[:300]
        if math.isnan(score):
            score = 0.0
        return min(1.0, max(0.0, score)), info


class GymGame(Game):
    def __init__(self, problem: Problem):
        self.problem, self.task = problem, problem.task

    def start(self) -> StepResult:
        return StepResult(observation=self.task.instruction)

    def step(self, action: str) -> StepResult:
        answer = submitted_answer(action)
        score, info = self.problem.score(answer)
        won = score == 1.0
        info.update(correct=won, score=score, answer=answer[:200])
        if won:
            observation = "Correct."
        elif score > 0:
            observation = f"Partly correct (score {score:.2f})."
        else:
            observation = "Incorrect."
        return StepResult(observation=observation, reward=score, done=True, won=won, info=info)


class ReasoningGym:
    """The tasks of some reasoning-gym families over the splits train / valid / test."""

    def __init__(self, families: str | list[str] | tuple[str, ...] = DEFAULT_FAMILIES, tasks_per_split: int = 200):
        try:
            known = known_families()
        except ImportError as e:
            raise ValueError("the reasoning-gym source needs the reasoning-gym package "
                             f"(pip install reasoning-gym==0.1.25): {e}") from e
        self.families = parse_families(families)
        if not self.families:
            raise ValueError("no reasoning-gym families given; known: " + ", ".join(known))
        unknown = [f for f in self.families if f not in known]
        if unknown:
            raise ValueError(unknown_families_message(unknown, known))
        if not 1 <= tasks_per_split <= MAX_INDEX:
            raise ValueError(f"tasks per split must be 1..{MAX_INDEX}, got {tasks_per_split}")
        self.tasks_per_split = tasks_per_split
        self._lock = threading.Lock()
        self._chunks: OrderedDict[tuple[str, str, int], Any] = OrderedDict()   # LRU of datasets
        self._listed: dict[str, list[TaskInfo]] = {}
        self._problems: OrderedDict[str, Problem] = OrderedDict()             # LRU of generated tasks
        self._scorers: dict[str, Any] = {}
        for family in self.families:   # fail at startup, not at the first request, on a family that breaks
            try:
                self._scorers[family] = self._chunk(family, "train", 0)
                self._scorers[family][0]   # one item generated
            except Exception as e:  # e.g. composite, which needs a config of its own
                raise ValueError(f"reasoning-gym family {family!r} does not generate with its default "
                                 f"configuration: {type(e).__name__}: {e}") from e

    def splits(self) -> list[str]:
        return list(SPLITS)

    def tasks(self, split: str) -> list[TaskInfo]:
        if split not in SPLITS:
            raise KeyError(split)
        with self._lock:
            listed = self._listed.get(split)
        if listed is None:
            listed = [self.problem(task_id(f, split, i)).task
                      for f in self.families for i in range(self.tasks_per_split)]
            with self._lock:
                self._listed[split] = listed
        return listed

    def problem(self, tid: str) -> Problem:
        """The task of an id (generated, or from the cache); KeyError for an id this source does not serve."""
        with self._lock:
            if (found := self._problems.get(tid)) is not None:
                self._problems.move_to_end(tid)
                return found
        try:
            family, split, index = parse_task_id(tid)
        except KeyError:
            raise KeyError(f"not a reasoning-gym task id: they are rg/<family>/<train|valid|test>/<index below "
                           f"{MAX_INDEX}>") from None
        if family not in self.families:
            raise KeyError(f"family {family!r} is not served here; the families are: {', '.join(self.families)}")
        chunk, position = divmod(index, CHUNK)
        with self._lock:
            dataset = self._chunk(family, split, chunk)
            entry = dataset[position]
        text = str(entry["question"]).strip()
        if hint := FORMAT_HINTS.get(family):
            text += "\n\n" + hint
        problem = Problem(TaskInfo(id=tid, type=family, instruction=text, split=split), entry,
                          self._scorers[family], task_seed(family, split, index))
        with self._lock:
            self._problems[tid] = problem
            # bounded (twice the listed tasks, at least 4096): the least recently opened go, and are
            # generated again when asked for
            while len(self._problems) > max(4096, 2 * len(self.families) * len(SPLITS) * self.tasks_per_split):
                self._problems.popitem(last=False)
        return problem

    def _chunk(self, family: str, split: str, chunk: int):
        """The dataset of one chunk (the caller holds the lock, or runs before any thread does)."""
        key = (family, split, chunk)
        dataset = self._chunks.get(key)
        if dataset is None:
            import reasoning_gym

            dataset = reasoning_gym.create_dataset(family, size=CHUNK, seed=task_seed(family, split, chunk * CHUNK))
            self._chunks[key] = dataset
            if len(self._chunks) > 64:
                self._chunks.popitem(last=False)
        else:
            self._chunks.move_to_end(key)
        return dataset
