"""Stage 1 (App. B.2.1): an LLM annotates each task with five short phrase lists.

Z_i = (topics, skills, concepts, heuristics, pitfalls). The request carries a JSON schema as
`response_format` (structured decoding on vLLM and llama.cpp); the answer is validated again
here, and an answer that does not fit is retried once, then recorded as an empty annotation with
the reason. Results are cached in a JSONL file keyed by (model, sha256 of the task text), so a
rerun only annotates new tasks.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from skillos.textguard import without_lone_surrogates

FIELDS = ("topics", "skills", "concepts", "heuristics", "pitfalls")

INSTRUCTION = (
    "You label problems for building a curriculum. Read the problem and return JSON with five "
    "lists of short phrases (at most five words each): topics (high-level subject areas), skills "
    "(capabilities needed), concepts (mathematical concepts or theorems used), heuristics (solution "
    "strategies that apply) and pitfalls (typical mistakes). Use standard terminology, nothing "
    "specific to this problem's numbers or answer, and as few phrases per list as suffice."
)


class Annotation(BaseModel):
    topics: list[str] = Field(default_factory=list, max_length=8)
    skills: list[str] = Field(default_factory=list, max_length=8)
    concepts: list[str] = Field(default_factory=list, max_length=8)
    heuristics: list[str] = Field(default_factory=list, max_length=8)
    pitfalls: list[str] = Field(default_factory=list, max_length=8)

    def cleaned(self) -> Annotation:
        """Phrases trimmed to five words, blanks and duplicates removed."""
        def fix(items: list[str]) -> list[str]:
            out = [" ".join(str(p).split()[:5]).lower() for p in items]
            return list(dict.fromkeys(p for p in out if p))
        return Annotation(**{f: fix(getattr(self, f)) for f in FIELDS})


def response_format(style: str = "openai") -> dict:
    """The schema in the dialect of the backend: "openai" (OpenAI, vLLM) or "llama_cpp"."""
    # minItems 1: every dimension is populated (App. B.2.1); under a grammar SmolLM2-135M left
    # whole annotations empty (3 of 20 demo tasks), which stage 2 can never match
    phrase_list = {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 60},
                   "minItems": 1, "maxItems": 5}
    schema = {"type": "object", "properties": {f: phrase_list for f in FIELDS},
              "required": list(FIELDS), "additionalProperties": False}
    if style == "llama_cpp":
        return {"type": "json_object", "schema": schema}
    return {"type": "json_schema", "json_schema": {"name": "task_attributes", "schema": schema, "strict": True}}


def cache_key(model: str, text: str) -> str:
    return f"{model}:{hashlib.sha256(text.encode()).hexdigest()[:32]}"


class AnnotationCache:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.entries: dict[str, dict] = {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    self.entries[row["key"]] = row

    def get(self, key: str) -> Annotation | None:
        row = self.entries.get(key)
        return Annotation(**row["annotation"]) if row and row.get("ok") else None

    def put(self, key: str, task_id: str, annotation: Annotation, ok: bool, reason: str = "",
            attempts: int = 1, seconds: float = 0.0) -> None:
        row = {"key": key, "task_id": task_id, "ok": ok, "reason": reason, "attempts": attempts,
               "seconds": round(seconds, 3), "annotation": annotation.model_dump()}
        self.entries[key] = row
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:  # append-only: a crash loses at most the line in flight
            # the annotation is parsed from a model's JSON: a lone surrogate there is written as U+FFFD
            f.write(without_lone_surrogates(json.dumps(row, ensure_ascii=False)) + "\n")


def parse_annotation(content: str) -> Annotation:
    """The answer, checked like the schema asks (a backend may ignore response_format)."""
    text = content.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    # strict=False: llama.cpp's string grammar lets raw newlines through (2 of 20 demo answers);
    # cleaned() folds them into spaces anyway
    ann = Annotation.model_validate(json.loads(text, strict=False)).cleaned()
    empty = [f for f in FIELDS if not getattr(ann, f)]
    if empty:
        raise ValueError(f"no phrases for {', '.join(empty)}")
    return ann


async def annotate_tasks(tasks: list[dict], client, cache: AnnotationCache, concurrency: int = 4,
                         max_tokens: int = 400, json_style: str = "openai") -> dict[str, Annotation]:
    """tasks: dicts with `id` and `instruction`. client: a `skillos.llm.LLMClient`."""
    model = client.settings.model
    sem = asyncio.Semaphore(concurrency)
    out: dict[str, Annotation] = {}

    async def one(task: dict) -> None:
        key = cache_key(model, task["instruction"])
        cached = cache.get(key)
        if cached is not None:
            out[task["id"]] = cached
            return
        reason = ""
        async with sem:
            start = time.perf_counter()
            for attempt in (1, 2):
                # the first try is greedy; the retry samples, since greedy decoding would repeat itself
                sampling = {"temperature": 0.0} if attempt == 1 else {"temperature": 0.7, "seed": attempt}
                result = await client.chat(
                    [{"role": "system", "content": INSTRUCTION},
                     {"role": "user", "content": task["instruction"]}],
                    max_tokens=max_tokens, response_format=response_format(json_style), **sampling)
                try:
                    ann = parse_annotation(result.content)
                    cache.put(key, task["id"], ann, ok=True, reason=reason, attempts=attempt,
                              seconds=time.perf_counter() - start)   # reason: why a first try failed
                    out[task["id"]] = ann
                    return
                except (ValueError, ValidationError) as e:
                    reason = f"{type(e).__name__}: {str(e)[:200]}"
            cache.put(key, task["id"], Annotation(), ok=False, reason=reason, attempts=2,
                      seconds=time.perf_counter() - start)
        out[task["id"]] = Annotation()

    await asyncio.gather(*(one(t) for t in tasks))
    return out
