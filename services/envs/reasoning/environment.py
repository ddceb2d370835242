"""Single-turn reasoning tasks from JSONL files: the problem is the observation, one action is the
final answer, and the episode ends with reward 1 (correct) or 0.

A data directory holds ``<split>.jsonl`` files (AIME 2024/2025, GPQA-Diamond, DeepMath, or the
demonstration set in ``data/``). One JSON object per line:

    {"id": "...", "problem": "...", "answer": "...", "type": "...", "choices": ["...", ...]}

``question``/``prompt`` are accepted for ``problem``, ``final_answer`` for ``answer``, ``source`` for
``type``. With ``choices`` the task is multiple choice and ``answer`` is the letter (or the text of
the right choice); otherwise it is graded as math by math-verify.

The same server can also serve reasoning-gym's generated families (``services.envs.reasoning.gym``:
splits ``train``/``valid``/``test``, ids ``rg/<family>/<split>/<index>``, scored by each family's own
scorer); ``build_reasoning_environment`` picks the sources from the settings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from services.envs.base import Environment, Game, StepResult, TaskInfo
from services.envs.reasoning.grading import LETTERS, MathGrader, option_letter
from services.envs.reasoning.gym import DEFAULT_FAMILIES, GymGame, ReasoningGym
from skillos.logging import get_logger

log = get_logger("envs.reasoning")
DEMO_DATA = Path(__file__).resolve().parent / "data"
# where the tasks come from (SKILLOS_REASONING_SOURCE): auto = reasoning-gym's families and the demo set
# beside them (the JSONL files alone when a data directory is given, the demo set alone when
# reasoning-gym is not installed); reasoning-gym = the families only; jsonl = the JSONL files only
SOURCES = ("auto", "reasoning-gym", "jsonl")


@dataclass(frozen=True)
class Problem:
    task: TaskInfo
    answer: str
    choices: tuple[str, ...] = ()


def _first(row: dict, *keys: str):
    for k in keys:
        if row.get(k) not in (None, ""):
            return row[k]
    return None


def _load_problem(row: dict, split: str, line_no: int, where: str) -> Problem:
    problem = _first(row, "problem", "question", "prompt", "Problem", "Question")
    answer = _first(row, "answer", "final_answer", "Answer")
    if not isinstance(problem, str) or answer is None:
        raise ValueError(f"{where}:{line_no}: each line needs 'problem' (text) and 'answer'")
    choices = tuple(str(c) for c in (row.get("choices") or row.get("options") or ()))
    answer = str(answer).strip()
    if choices:
        if len(choices) > len(LETTERS):
            raise ValueError(f"{where}:{line_no}: at most {len(LETTERS)} choices")
        if answer.upper().strip("()") in LETTERS[:len(choices)]:
            answer = answer.upper().strip("()")
        elif answer in choices:
            answer = LETTERS[choices.index(answer)]
        else:
            raise ValueError(f"{where}:{line_no}: answer {answer!r} is neither an option letter nor a choice")
        text = problem + "\n\n" + "\n".join(f"({LETTERS[i]}) {c}" for i, c in enumerate(choices))
    else:
        text = problem
    task = TaskInfo(id=str(row.get("id") or f"{split}/{line_no}"),
                    type=str(_first(row, "type", "source", "subject") or split), instruction=text, split=split)
    return Problem(task, answer, choices)


class ReasoningGame(Game):
    def __init__(self, problem: Problem, grader: MathGrader):
        self.problem, self.task, self.grader = problem, problem.task, grader

    def start(self) -> StepResult:
        return StepResult(observation=self.task.instruction)

    def step(self, action: str) -> StepResult:
        p = self.problem
        if p.choices:
            picked = option_letter(action, len(p.choices))
            correct, info = picked == p.answer, {"graded_by": "option_letter", "picked": picked}
        else:
            correct, how = self.grader.equal(p.answer, action)
            info = {"graded_by": how}
        info["correct"] = correct
        observation = "Correct." if correct else "Incorrect."
        return StepResult(observation=observation, reward=1.0 if correct else 0.0, done=True, won=correct,
                          info=info)


class ReasoningEnvironment(Environment):
    """JSONL files (``data_dir``, default the demo set; none when ``files`` is false) and, with ``gym``,
    reasoning-gym's families; their split names must differ."""

    name = "reasoning"
    max_episode_steps = 1

    def __init__(self, data_dir: Path | None = None, *, gym: ReasoningGym | None = None, files: bool = True):
        self.gym = gym
        self.data_dir = (Path(data_dir) if data_dir else DEMO_DATA) if files else None
        self._by_split: dict[str, list[Problem]] = {}
        self._by_id: dict[str, Problem] = {}
        if self.data_dir is not None:
            self._load_files(self.data_dir)
        if gym is not None and (clash := sorted(set(gym.splits()) & set(self._by_split))):
            raise ValueError(f"{self.data_dir}: split(s) {clash} clash with reasoning-gym's splits "
                             f"{gym.splits()}; rename the files or serve one source (SKILLOS_REASONING_SOURCE)")
        self.grader = MathGrader()

    def _load_files(self, data_dir: Path) -> None:
        files = sorted(data_dir.glob("*.jsonl"))
        if not files:
            raise FileNotFoundError(f"no <split>.jsonl files in {data_dir}")
        for f in files:
            problems = []
            for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
                if line.strip():
                    problems.append(_load_problem(json.loads(line), f.stem, n, str(f)))
            self._by_split[f.stem] = problems
            for p in problems:
                if p.task.id in self._by_id:
                    raise ValueError(f"{f}: duplicate task id {p.task.id!r}")
                self._by_id[p.task.id] = p

    def splits(self) -> list[str]:
        return (self.gym.splits() if self.gym else []) + list(self._by_split)

    def tasks(self, split: str) -> list[TaskInfo]:
        if split in self._by_split:
            return [p.task for p in self._by_split[split]]
        if self.gym is not None:
            return self.gym.tasks(split)
        raise KeyError(split)

    def task(self, task_id: str) -> TaskInfo:
        if task_id in self._by_id:
            return self._by_id[task_id].task
        if self.gym is not None:
            return self.gym.problem(task_id).task
        raise KeyError(task_id)

    def open(self, task: TaskInfo, *, expert: bool = False, seed: int | None = None) -> Game:
        if task.id in self._by_id:
            return ReasoningGame(self._by_id[task.id], self.grader)
        if self.gym is not None:
            return GymGame(self.gym.problem(task.id))
        raise KeyError(task.id)

    def close(self) -> None:
        self.grader.close()


def build_reasoning_environment(source: str = "auto", data_dir: Path | None = None, *,
                                families: str | list[str] = "", tasks_per_split: int = 200) -> ReasoningEnvironment:
    """The reasoning env of one source (``SOURCES``); ValueError (with what is known) for a bad choice."""
    if source not in SOURCES:
        raise ValueError(f"unknown reasoning source {source!r}; use one of {', '.join(SOURCES)}")
    if source == "jsonl" or (source == "auto" and data_dir):
        return ReasoningEnvironment(data_dir)
    if source == "auto":
        try:
            import reasoning_gym  # noqa: F401 - only: is it installed?
        except ImportError as e:
            if e.name != "reasoning_gym":
                raise ValueError(f"reasoning-gym is installed but does not import: {e}") from e
            log.warning("reasoning_gym_missing", serving="the demo set only")
            return ReasoningEnvironment(None)
    gym = ReasoningGym(families or DEFAULT_FAMILIES, tasks_per_split)
    return ReasoningEnvironment(None, gym=gym, files=source == "auto")
