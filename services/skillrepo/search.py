"""Incremental in-memory Okapi BM25, one index per repo.

Scoring (Lucene's BM25 variant, the one bm25s calls "lucene"):

    score(q, d) = sum over query tokens t of  idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))      (never negative, unlike the original Okapi idf)

with k1 = 1.2, b = 0.75 (the usual defaults). A query token that occurs twice counts twice.

Fields and weights: a skill's document is ``name`` x2 + ``description`` x2 + ``body`` x1 (weights applied by
repeating the field's tokens, so tf and |d| include them). The name and the description are the text that
says *when* a skill applies, which is what a task description (the query) talks about; the body is long
procedural text whose words would otherwise dominate.

Tokenizer (`tokenize`): NFKD-fold to ASCII, lower-case, split on anything that is not a-z or 0-9, drop
English stop words and 1-char tokens, strip a plural "s" from tokens longer than 3 chars that do not end
in "ss" ("apples" -> "apple", "glass" stays).

Why not a library: no BM25 library here adds a document without rebuilding (rank_bm25, bm25s). This index
keeps per-term postings as growable numpy arrays, so a write costs O(tokens of the skill) and a query
costs O(sum of the query terms' posting lengths), vectorized. A deleted or replaced document leaves a dead
slot; when dead slots outnumber live ones the postings are compacted (amortized O(1) per write).
"""

from __future__ import annotations

import itertools
import math
import re
import threading
import unicodedata
from array import array
from collections import Counter
from functools import lru_cache

import numpy as np

K1 = 1.2
B = 0.75
FIELD_WEIGHTS = {"name": 2, "description": 2, "body": 1}
_SERIALS = itertools.count(1)

STOPWORDS = frozenset(["a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "me", "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours", "yourself", "yourselves"])
_SPLIT = re.compile(r"[^a-z0-9]+")


@lru_cache(maxsize=65536)
def _norm_token(tok: str) -> str:
    if len(tok) > 3 and tok.endswith("s") and not tok.endswith("ss"):
        return tok[:-1]
    return tok


def tokenize(text: str) -> list[str]:
    if not text.isascii():
        text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return [_norm_token(t) for t in _SPLIT.split(text.lower()) if len(t) > 1 and t not in STOPWORDS]


def document_tokens(name: str, description: str, body: str) -> list[str]:
    """The weighted token list of one skill (see the module doc)."""
    name_t = tokenize(name.replace("-", " "))
    desc_t = tokenize(description)
    return (name_t * FIELD_WEIGHTS["name"] + desc_t * FIELD_WEIGHTS["description"]
            + tokenize(body) * FIELD_WEIGHTS["body"])


class BM25Index:
    """One repo's index. Thread-safe; documents are keyed by skill name.

    Postings are `array.array`s (cheap appends). A query whose postings are short (small repos: the
    training regime) is scored in plain Python; otherwise the arrays are viewed as numpy arrays without
    copying and scored vectorized into a dense accumulator (large repos: production).
    """

    SMALL_QUERY = 512  # total posting entries below which plain Python beats numpy's per-call overhead
    DENSE_SHARE = 32   # a term in >= 1/32 of the slots is summed as a dense column (see _term_weights)
    CACHE_BYTES = 64 << 20  # weight cache per index; cleared when exceeded

    def __init__(self, k1: float = K1, b: float = B):
        self.k1, self.b = k1, b
        self.serial = next(_SERIALS)  # unique in this process: a reloaded index is another index
        self._lock = threading.Lock()
        self._reset()
        self.seq = 0  # the repo change counter this index reflects

    def _reset(self) -> None:
        self.slot_of: dict[str, int] = {}
        self.names: list[str | None] = []
        self.terms: list[Counter | None] = []
        self.payload: list[object] = []  # whatever the owner wants back with a hit
        self.dl = array("d")             # document length per slot
        self.alive = bytearray()         # 1 per live slot
        self.postings: dict[str, tuple[array, array]] = {}  # term -> (slots 'i', tfs 'i')
        self.df: Counter = Counter()
        self.total_len = 0
        self.dead = 0
        # term -> (generation, slots or None for a dense column, idf-weighted BM25 weights): reused until
        # the next write, since any write moves N, df and avgdl. Reads outnumber writes in production, so big postings are scored
        # once per write instead of once per query (the eager scoring bm25s does, without its rebuild).
        self._weights: dict[str, tuple[int, np.ndarray | None, np.ndarray]] = {}
        self._cache_bytes = 0
        self._norm_cache: tuple[int, np.ndarray] | None = None
        self._tf_columns: dict[str, tuple[int, np.ndarray]] = {}  # term -> (postings applied, tf per slot)
        self._tf_bytes = 0
        self.generation = 0

    def __len__(self) -> int:
        return len(self.slot_of)

    # --- writes ---

    def upsert(self, name: str, tokens: list[str], payload: object = None) -> None:
        counts = Counter(tokens)
        with self._lock:
            self._remove(name)
            self._add(name, counts, payload, len(tokens))

    def _add(self, name: str, counts: Counter, payload: object, length: int) -> None:
        self.generation += 1
        slot = len(self.names)
        self.names.append(name)
        self.terms.append(counts)
        self.payload.append(payload)
        self.dl.append(length)
        self.alive.append(1)
        self.slot_of[name] = slot
        self.total_len += length
        postings, df = self.postings, self.df
        for term, tf in counts.items():
            p = postings.get(term)
            if p is None:
                p = postings[term] = (array("i"), array("i"))
            p[0].append(slot)
            p[1].append(tf)
            df[term] += 1

    def remove(self, name: str) -> None:
        with self._lock:
            self._remove(name)

    def _remove(self, name: str) -> None:
        slot = self.slot_of.pop(name, None)
        if slot is None:
            return
        self.generation += 1
        self.alive[slot] = 0
        self.total_len -= int(self.dl[slot])
        for term in self.terms[slot]:
            self.df[term] -= 1
            if self.df[term] == 0:
                del self.df[term]
        self.names[slot] = self.terms[slot] = self.payload[slot] = None
        self.dead += 1
        if self.dead > max(64, len(self.slot_of)):
            self._compact()

    def _compact(self) -> None:
        live = [(self.names[s], self.terms[s], self.payload[s], int(self.dl[s]))
                for s in range(len(self.names)) if self.names[s] is not None]
        generation = self.generation
        self._reset()
        self.generation = generation  # keeps counting: followers (the dense index) compare generations
        for name, counts, payload, length in live:
            self._add(name, counts, payload, length)

    # --- reads ---

    def snapshot(self) -> tuple[int, dict[str, object]]:
        """(generation, name -> payload of every live document), read together."""
        with self._lock:
            return self.generation, {name: self.payload[slot] for name, slot in self.slot_of.items()}

    def documents(self) -> dict[str, object]:
        """name -> payload of every live document."""
        with self._lock:
            return {name: self.payload[slot] for name, slot in self.slot_of.items()}

    def scores(self, query_tokens: list[str]) -> dict[str, float]:
        """Every matching document's score (for tests and diagnostics)."""
        with self._lock:
            return {self.names[i]: sc for i, sc in self._score(query_tokens, None)}

    def search(self, query_tokens: list[str], k: int = 5) -> list[tuple[str, float, object]]:
        """Top k (name, score, payload), best first; ties broken by name."""
        with self._lock:
            scored = self._score(query_tokens, k)
            ranked = sorted(((sc, self.names[i], i) for i, sc in scored), key=lambda t: (-t[0], t[1]))[:k]
            return [(name, sc, self.payload[i]) for sc, name, i in ranked]

    def _term_weights(self, term: str, idf: float, avgdl: float) -> tuple[np.ndarray | None, np.ndarray]:
        """(slots, idf-weighted BM25 weights) of one term, or (None, dense column over all slots).

        Cached until the next write (any write moves N, df or avgdl, so every weight). A term found
        in at least 1/DENSE_SHARE of the slots is kept as a dense column: adding a contiguous column
        costs ~0.5 ns per slot, scattering a posting ~25 ns per entry (numpy, 50k slots, measured here), so frequent terms (most of a
        typical query's postings in a large repo) are summed densely, rare ones scattered.
        """
        cached = self._weights.get(term)
        if cached is not None and cached[0] == self.generation:
            return cached[1], cached[2]
        n_slots = len(self.names)
        scale = np.float32(idf * (self.k1 + 1.0))
        norm = self._norms(avgdl)
        if len(self.postings[term][0]) * self.DENSE_SHARE >= n_slots:
            tf = self._dense_tf(term, n_slots)
            column = tf + norm
            np.divide(tf, column, out=column)
            column *= scale
            entry = (self.generation, None, column)
        else:
            slots, tfs = self.postings[term]
            ids = np.array(slots, dtype=np.int32)  # a copy: the array.array must stay growable
            tf = np.array(tfs, dtype=np.float32)
            entry = (self.generation, ids, scale * tf / (tf + norm[ids]))
        self._cache_bytes += entry[2].nbytes + (0 if entry[1] is None else entry[1].nbytes)
        if self._cache_bytes > self.CACHE_BYTES or len(self._weights) > 4096:
            self._weights.clear()
            self._cache_bytes = entry[2].nbytes + (0 if entry[1] is None else entry[1].nbytes)
        self._weights[term] = entry
        return entry[1], entry[2]

    def _dense_tf(self, term: str, n_slots: int) -> np.ndarray:
        """The term's tf per slot (0 where absent), kept across writes and extended incrementally.

        Postings only grow between compactions (a removed document leaves a dead slot, which its
        infinite norm zeroes), so only the entries added since the last call are scattered in. This
        keeps the first search after a write at a few vector passes per frequent term instead of a
        rebuild of its column from the postings.
        """
        slots, tfs = self.postings[term]
        applied, column = self._tf_columns.get(term, (0, np.zeros(0, np.float32)))
        before = column.nbytes
        if len(column) < n_slots:
            grown = np.zeros(max(n_slots, 2 * len(column)), np.float32)
            grown[:len(column)] = column
            column = grown
        if applied < len(slots):
            column[np.array(slots[applied:], dtype=np.int32)] = np.array(tfs[applied:], dtype=np.float32)
        self._tf_bytes += column.nbytes - before
        if self._tf_bytes > self.CACHE_BYTES:
            self._tf_columns.clear()
            self._tf_bytes = column.nbytes
        self._tf_columns[term] = (len(slots), column)
        return column[:n_slots]

    def _norms(self, avgdl: float) -> np.ndarray:
        """k1 * (1 - b + b * |d| / avgdl) per slot, 0-weight slots made infinite; once per generation."""
        if self._norm_cache is None or self._norm_cache[0] != self.generation:
            dl = np.frombuffer(self.dl, dtype=np.float64)
            norm = (self.k1 * (1.0 - self.b + self.b * dl / avgdl)).astype(np.float32)
            del dl  # drop the buffer view before the array can grow again
            norm[np.frombuffer(self.alive, dtype=np.uint8) == 0] = np.inf  # dead slots score 0
            self._norm_cache = (self.generation, norm)
        return self._norm_cache[1]

    def _score(self, query_tokens: list[str], k: int | None) -> list[tuple[int, float]]:
        """[(slot, score)] of matching live documents; with k, a superset of the top k (ties kept)."""
        n = len(self.slot_of)
        if n == 0:
            return []
        avgdl = self.total_len / n if self.total_len else 1.0
        terms = []
        for term in query_tokens:
            df = self.df.get(term, 0)
            if df:
                terms.append((term, math.log(1.0 + (n - df + 0.5) / (df + 0.5))))
        if not terms:
            return []
        postings = self.postings
        if sum(len(postings[t][0]) for t, _ in terms) < self.SMALL_QUERY:
            return self._score_python(terms, avgdl)
        # a repeated query token counts again: weight its column by its multiplicity
        multiplicity = Counter(t for t, _ in terms)
        idf_of = dict(terms)
        total: np.ndarray | None = None
        sparse = []
        for term, times in multiplicity.items():
            ids, weights = self._term_weights(term, idf_of[term], avgdl)
            if times > 1:
                weights = weights * np.float32(times)
            if ids is not None:
                sparse.append((ids, weights))
            elif total is None:
                total = weights.copy()
            else:
                total += weights
        if total is None:
            total = np.zeros(len(self.names), np.float32)
        for ids, weights in sparse:
            total[ids] += weights  # a term's slots are distinct, so plain fancy-add is exact
        if k is not None and 0 < k and len(total) > 64 * k:
            # The k-th best of every 32nd slot is <= the k-th best of all: a threshold that keeps the
            # top k (ties included) and ~32*k others, found without partitioning the whole array.
            sample = total[::32]
            floor = np.partition(sample, len(sample) - k)[len(sample) - k]
            nz = np.flatnonzero(total >= floor) if floor > 0 else np.flatnonzero(total)
        else:
            nz = np.flatnonzero(total)
        return list(zip(nz.tolist(), total[nz].tolist(), strict=True))

    def _score_python(self, terms: list[tuple[str, float]], avgdl: float) -> list[tuple[int, float]]:
        k1, b, k1p1 = self.k1, self.b, self.k1 + 1.0
        dl, alive = self.dl, self.alive
        acc: dict[int, float] = {}
        for term, idf in terms:
            ids, tfs = self.postings[term]
            for d, tf in zip(ids, tfs, strict=True):
                if alive[d]:
                    acc[d] = acc.get(d, 0.0) + idf * tf * k1p1 / (tf + k1 * (1.0 - b + b * dl[d] / avgdl))
        return list(acc.items())
