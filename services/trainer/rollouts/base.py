"""What every rollout shares, curator or agent: the policy as a `ChatLLM` (`PolicyLLM`, sampled
in-process, each completion kept as a `grpo.sample.PolicySample`), and the group of N rollouts with its
retries.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from services.trainer.decoding.constrained import schema_of
from services.trainer.grpo.policy import GenerationBatcher, encode_prompt
from services.trainer.grpo.sample import PolicySample
from skillos.llm.client import ChatResult, Usage
from skillos.logging import get_logger
from skillos.methods.writer import PURPOSE
from skillos.stream import TASK_POSITION

log = get_logger("trainer.rollout")


@dataclass
class GroupResult:
    group_id: str
    rollouts: list[Any] = field(default_factory=list)   # RolloutResult | AgentRolloutResult
    dropped: bool = False
    reason: str = ""


class RolloutFailed(Exception):
    pass


# The episode an agent decision belongs to (set by the agent mode's in-process executor, `agent.PolicyExecutor`).
EPISODE: ContextVar[str | None] = ContextVar("skillos_policy_episode", default=None)


class PolicyLLM:
    """The trainer's policy as a `skillos.curation.ChatLLM` (what the HTTP `LLMClient` is to the service)."""

    def __init__(self, batcher: GenerationBatcher, tokenizer, max_prompt_tokens: int, model_name: str,
                 grammars=None):
        self.batcher = batcher
        self.tokenizer = tokenizer
        self.grammars = grammars     # GrammarCache: honour response_format as llama.cpp does
        self.max_prompt_tokens = max_prompt_tokens
        self.model = model_name
        self.samples: list[PolicySample] = []
        self.truncated_prompts = 0

    async def chat(self, messages: list[dict], response_format: dict | None = None, max_tokens: int | None = None,
                   stop: list[str] | None = None, **_ignored: Any):
        # the temperature is the trainer's (the log-probs of the loss are taken at it), not the caller's;
        # max_tokens is honoured below the trainer's max_response_tokens
        prompt_ids, truncated = encode_prompt(self.tokenizer, messages, self.max_prompt_tokens)
        self.truncated_prompts += truncated
        start = time.perf_counter()
        if getattr(self.batcher, "applies_schema", False):   # llama-server's grammar (grpo/served.py)
            constraint = None
            ids = await self.batcher.generate(prompt_ids, schema_of(response_format), max_tokens)
        else:
            constraint = self.grammars.for_response_format(response_format) if self.grammars else None
            ids = await self.batcher.generate(prompt_ids, constraint, max_tokens)
        stopped = False
        if stop and constraint is None:
            ids, stopped = cut_at_stop(self.tokenizer, ids, stop)
        self.samples.append(PolicySample(prompt_ids=prompt_ids, completion_ids=ids, constraint=constraint,
                                         segment=PURPOSE.get(), position=TASK_POSITION.get(),
                                         episode=EPISODE.get()))
        finished = stopped or (bool(ids) and ids[-1] == self.tokenizer.eos_token_id)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if stopped:      # as an OpenAI server answers: the stop sequence itself is not in the content
            text = text[:min(i for i in (text.find(s) for s in stop) if i >= 0)]
        return ChatResult(content=text, finish_reason="stop" if finished else "length",
                          usage=Usage(len(prompt_ids), len(ids)), latency_s=time.perf_counter() - start,
                          raw={"model": self.model})

    async def aclose(self) -> None:
        pass


def cut_at_stop(tokenizer, ids: list[int], stop: list[str]) -> tuple[list[int], bool]:
    """The shortest prefix of ``ids`` whose text contains a stop sequence (and whether there was one).
    Cutting after sampling is exact: the tokens kept were drawn from the same distributions as if the
    generation had stopped there, so their log-probs in the loss are the sampling ones."""
    stop = [s for s in stop if s]
    if not stop or not any(s in tokenizer.decode(ids, skip_special_tokens=True) for s in stop):
        return ids, False
    lo, hi = 1, len(ids)            # the text of a prefix only grows: binary search the first hit
    while lo < hi:
        mid = (lo + hi) // 2
        if any(s in tokenizer.decode(ids[:mid], skip_special_tokens=True) for s in stop):
            hi = mid
        else:
            lo = mid + 1
    return ids[:lo], True


async def run_group(ctx, group, n_rollouts: int, step: int, retries: int, seed: int, *,
                    rollout: Callable[..., Awaitable[Any]], credit: Callable[[GroupResult], None]) -> GroupResult:
    """N rollouts of one group in parallel (bounded by ctx.concurrency); each retried on failure.
    A rollout that still fails drops the whole group: a group with a missing member would give
    the others a wrong baseline. ``rollout`` plays one (`curator.run_rollout`, `agent.run_agent_rollout`);
    ``credit`` sets the advantages of a complete group (Eq. 1's reward group-centred, or per segment)."""
    result = GroupResult(group.id)
    t0 = time.perf_counter()

    async def one(n: int):
        last = ""
        for attempt in range(retries + 1):
            try:
                if ctx.concurrency is not None:
                    async with ctx.concurrency:
                        return await rollout(ctx, group, n, step, attempt, seed)
                return await rollout(ctx, group, n, step, attempt, seed)
            except RolloutFailed as e:
                last = str(e)
            except Exception as e:  # noqa: BLE001 - service errors (HTTP, repo) are rollout failures
                last = f"{type(e).__name__}: {e}"
            log.warning("rollout_failed", group=group.id, rollout=n, attempt=attempt, reason=last[:500])
        return last

    outcomes = await asyncio.gather(*(one(n) for n in range(n_rollouts)))
    failed = [(n, o) for n, o in enumerate(outcomes) if isinstance(o, str)]
    if failed:
        result.dropped = True
        result.reason = f"rollout {failed[0][0]} failed after {retries + 1} attempt(s): {failed[0][1][:300]}"
        log.warning("group_dropped", group=group.id, reason=result.reason)
        return result
    result.rollouts = [o for o in outcomes if not isinstance(o, str)]
    credit(result)
    # the rollouts are most of a step and otherwise silent: a line per group shows the step moving
    log.info("group_done", step=step, group=group.id, rollouts=len(result.rollouts),
             seconds=round(time.perf_counter() - t0, 1))
    return result
