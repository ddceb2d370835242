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
keeps a forward index (each slot's term ids and tfs, append-only) and postings in tiers: a base in
compressed-row form (numpy, built in one vectorized pass from the forward index, or loaded from a file), and
what was added since: a single write's postings in per-term tails, a bulk write's chunk as one segment
(compressed rows of its own, built in whole-array steps; a segment merges into the one before it once it is
half that one's size, so there are O(log n) of them). A write costs O(tokens of the skill), amortized
O(tokens x log n) for a bulk one (its merges); a query costs O(the query terms' posting lengths),
vectorized. A deleted or replaced document leaves a dead slot; when dead slots
outnumber live ones, or the tails outgrow the base, the base is rebuilt (amortized O(1) per write); when the
segments grow to twice its size they are folded into it, a merge of sorted runs that renumbers nothing (a
rebuild instead if there are tails, or dead slots past an eighth);
a replica that saves its index puts the save's compaction in place of a fragmented one (indexes.py). A bulk
write's texts are tokenized a chunk at a time (`upsert_texts`: folded and split as one string, each distinct
raw token mapped to its term id once), to the very tokens `document_tokens` gives.

Frequent terms at scale (a query of a million-skill repo touches millions of postings) are summed from
cached per-term columns of quantized weights (one uint8 per slot), which writes update in place instead of
invalidating: a column is computed at a reference avgdl and idf and reused while the live ones stay within
`DRIFT` of them. Its approximate sum bounds every document's exact score from both sides, so the candidates
that can be in the top k are found from it and re-scored exactly (float64): answers are exact, not
approximate (see `_score`).
"""

from __future__ import annotations

import itertools
import math
import re
import threading
import unicodedata
from array import array
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

K1 = 1.2
B = 0.75
FIELD_WEIGHTS = {"name": 2, "description": 2, "body": 1}
_SERIALS = itertools.count(1)

STOPWORDS = frozenset(["a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "me", "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours", "yourself", "yourselves"])
_SPLIT = re.compile(r"[^a-z0-9]+")


def _norm_token(tok: str) -> str:
    """The indexed form of one split-off token; "" when it is dropped (a stop word or one char)."""
    if len(tok) <= 1 or tok in STOPWORDS:
        return ""
    if len(tok) > 3 and tok.endswith("s") and not tok.endswith("ss"):
        return tok[:-1]
    return tok


# raw token -> indexed form ("" dropped): one C-level lookup per token (a million skills are ~100M tokens)
_NORM: dict[str, str] = {}
_NORM_MAX = 500_000  # emptied when full: unique tokens (numbers, ids) must not grow it without bound
_NORM_KEEP = 40  # longer tokens are not kept: a 64 KiB body can be one token, and the bound is by entries


# _SPLIT as a byte table: every byte but a-z and 0-9 becomes a space, so `bytes.split()` splits where _SPLIT
# does, without the empty strings (~2x faster than the regex on an import's texts; the same tokens)
_SEPARATORS = bytes.maketrans(bytes(c for c in range(256) if not (48 <= c <= 57 or 97 <= c <= 122)),
                              b" " * (256 - 36))


def raw_tokens(text: str) -> list[str]:
    """The text split as `tokenize` splits it, before stop words and plurals (`_norm_token`)."""
    if text.isascii():
        return text.encode("ascii").lower().translate(_SEPARATORS).decode("ascii").split()
    return (unicodedata.normalize("NFKD", text).encode("ascii", "ignore").lower()
            .translate(_SEPARATORS).decode("ascii").split())


def tokenize(text: str) -> list[str]:
    raw = raw_tokens(text)
    try:
        return list(filter(None, map(_NORM.__getitem__, raw)))
    except KeyError:  # tokens not seen before (a bulk import's skills have a few each: ids, numbers)
        pass
    for t in set(raw).difference(_NORM):
        if len(t) <= _NORM_KEEP:
            _NORM[t] = _norm_token(t)
    if len(_NORM) > _NORM_MAX:
        _NORM.clear()  # unique tokens (numbers, ids) must not grow it without bound: the slow path below
    try:
        return list(filter(None, map(_NORM.__getitem__, raw)))
    except KeyError:
        # another thread emptied _NORM meanwhile, or a token is too long to keep: one step per token,
        # never indexing _NORM again between an insert and a read
        out = []
        for t in raw:
            n = _NORM.get(t)
            if n is None:
                n = _norm_token(t)
                if len(t) <= _NORM_KEEP:
                    _NORM[t] = n
            if n:
                out.append(n)
        if len(_NORM) > _NORM_MAX:
            _NORM.clear()
        return out


assert FIELD_WEIGHTS["name"] == FIELD_WEIGHTS["description"]  # document_tokens reads them as one text


def document_tokens(name: str, description: str, body: str) -> list[str]:
    """The weighted token list of one skill (see the module doc): name and description tokenized as one
    text (both weigh 2; a hyphen splits like a space), so the list is a multiset in that order."""
    head = tokenize(f"{name} {description}")
    return head * FIELD_WEIGHTS["name"] + tokenize(body) * FIELD_WEIGHTS["body"]


# `_SEPARATORS` keeping \x01: the mark between a chunk's texts when they are folded and split as one (see
# `BM25Index.upsert_texts`); \x01 is not a-z or 0-9, so it never occurs inside a token
_SEPARATORS_MARKED = bytes.maketrans(bytes(c for c in range(256) if not (48 <= c <= 57 or 97 <= c <= 122 or c == 1)),
                                     b" " * (256 - 37))


def _folded_texts(texts: list[str]) -> bytes | None:
    """The texts as `raw_tokens` folds them (ASCII, lower case, every separator a space), joined by b" \x01 "
    so that one `split()` splits them all; None when a text holds \x01 itself (then there is no telling
    where one ends). NFKD folds character by character and ASCII characters are never reordered, so the
    join's folding is each text's folding, joined."""
    big = "\x01".join(texts)
    raw = big.encode("ascii") if big.isascii() else unicodedata.normalize("NFKD", big).encode("ascii", "ignore")
    if raw.count(b"\x01") != len(texts) - 1:
        return None
    return raw.lower().translate(_SEPARATORS_MARKED).replace(b"\x01", b" \x01 ")


def _copy(values: array, dtype) -> np.ndarray:
    return np.frombuffer(values, dtype).copy()  # a copy: no view may keep the array from growing


def _array(typecode: str, values: np.ndarray) -> array:
    """A growable copy of ``values`` (one copy: ``tobytes`` would make a second, 280 MB of a million skills'
    forward index)."""
    out = array(typecode)
    out.frombytes(memoryview(np.ascontiguousarray(values, np.dtype(typecode))).cast("B"))
    return out


def build_postings(fwd_ptr: np.ndarray, fwd_terms: np.ndarray, fwd_tfs: np.ndarray, alive: np.ndarray,
                   df: np.ndarray) -> dict[str, np.ndarray]:
    """The compacted forward index and its postings (compressed rows by term, slots ascending), dead slots
    and terms no live slot has dropped. A sort of one int64 key per posting entry (term, then position):
    ~5x faster than numpy's stable argsort of the term ids, and it keeps each term's slots in order.
    Temporaries are int32 where they can be and freed early: at a million skills (45M entries) each
    int64 array is 360 MB, and this runs beside the live index (a save, a compaction)."""
    alive = alive.astype(bool)
    lens = np.diff(fwd_ptr)
    entry_slot = np.repeat(np.arange(len(lens), dtype=np.int32), lens)
    terms, tfs = fwd_terms, fwd_tfs
    if not alive.all():
        keep = alive[entry_slot]
        terms, tfs = terms[keep], tfs[keep]
        entry_slot = (np.cumsum(alive, dtype=np.int64) - 1).astype(np.int32)[entry_slot[keep]]
        del keep
        lens = lens[alive]
    live_terms = df > 0
    if not live_terms.all():
        terms = (np.cumsum(live_terms, dtype=np.int64) - 1).astype(np.int32)[terms]
    n_terms = int(live_terms.sum())
    keys = terms.astype(np.int64)
    keys <<= 32
    keys |= np.arange(len(keys), dtype=np.int64)
    keys.sort()
    keys &= 0xFFFFFFFF  # now the entries' positions, by term then position
    base_slots, base_tfs = entry_slot[keys], tfs[keys].astype(np.int32)
    del keys, entry_slot
    base_ptr = np.zeros(n_terms + 1, np.int64)
    np.cumsum(np.bincount(terms, minlength=n_terms), out=base_ptr[1:])
    fwd = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=fwd[1:])
    return {"fwd_ptr": fwd, "fwd_terms": terms.astype(np.int32, copy=False), "fwd_tfs": tfs.astype(np.int32, copy=False),
            "base_ptr": base_ptr, "base_slots": base_slots, "base_tfs": base_tfs, "alive_slots": alive,
            "live_terms": live_terms, "df": df[live_terms].astype(np.int32)}


@dataclass
class Compacted:
    """An index's exported state (`BM25Index.export_state`) with dead slots and terms dropped and its postings
    built: what a file holds (`index_files.py`) and what a save installs in place of a fragmented index
    (`BM25Index.from_compacted`)."""

    names: list[str]
    payload: list[object]
    dl: np.ndarray
    term_str: list[str]
    built: dict[str, np.ndarray]
    seq: int


def compact_state(state: dict[str, object]) -> Compacted:
    built = build_postings(state["fwd_ptr"], state["fwd_terms"], state["fwd_tfs"], state["alive"], state["df"])
    live = built["alive_slots"]
    keep = live.tolist()
    return Compacted(names=[n for n, a in zip(state["names"], keep, strict=True) if a],
                     payload=[p for p, a in zip(state["payload"], keep, strict=True) if a],
                     dl=state["dl"][live],
                     term_str=[t for t, a in zip(state["term_str"], built["live_terms"].tolist(), strict=True) if a],
                     built=built, seq=state["seq"])


class Segment:
    """The postings of slots added by bulk writes since the base was last rebuilt or folded into, in
    compressed-row form over the terms they hold: ``terms`` ascending, term ``terms[i]`` has slots ``slots[ptr[i]:ptr[i + 1]]``
    (ascending) with those tfs. Every slot of a later segment is above every slot of an earlier one."""

    __slots__ = ("ptr", "slots", "terms", "tfs")

    def __init__(self, terms: np.ndarray, ptr: np.ndarray, slots: np.ndarray, tfs: np.ndarray):
        self.terms, self.ptr, self.slots, self.tfs = terms, ptr, slots, tfs

    @property
    def entries(self) -> int:
        return len(self.slots)

    def _find(self, tid: int) -> int:
        i = int(np.searchsorted(self.terms, tid))
        return i if i < len(self.terms) and self.terms[i] == tid else -1

    def postings(self, tid: int) -> tuple[np.ndarray, np.ndarray] | None:
        i = self._find(tid)
        if i < 0:
            return None
        a, z = self.ptr[i], self.ptr[i + 1]
        return self.slots[a:z], self.tfs[a:z]

    def length(self, tid: int) -> int:
        i = self._find(tid)
        return 0 if i < 0 else int(self.ptr[i + 1] - self.ptr[i])

    def merged(self, later: Segment) -> Segment:
        """This segment and a later one as one: per term this one's slots, then the later one's."""
        terms = np.union1d(self.terms, later.terms).astype(np.int32)
        ptr, slots, tfs = merge_runs([(np.searchsorted(terms, self.terms), self.ptr, self.slots, self.tfs),
                                      (np.searchsorted(terms, later.terms), later.ptr, later.slots, later.tfs)],
                                     len(terms))
        return Segment(terms, ptr, slots, tfs)


MERGE_CHUNK = 1 << 22  # entries placed per step of `merge_runs` (its int64 temporaries: ~32 MB each; a row
                       # longer than this, at most one entry a slot, is placed in one step)


def merge_runs(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
               n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compressed rows merged, not sorted: each part is (where, ptr, slots, tfs), its i-th row (entries
    ``ptr[i]:ptr[i + 1]`` of its slots and tfs, ``ptr[0]`` = 0) being output row ``where[i]`` (distinct
    within a part); the output's rows hold the parts' runs in the order of ``parts``. Each entry is placed
    once at its computed position (a few linear passes) instead of sorting the concatenation (segment merges
    9.9 → 7.8 % of the service's busy time in a 1M import, RESULTS-reliability.md, 2026-12-04)."""
    counts = np.zeros(n_out, np.int64)
    for where, ptr, _, _ in parts:
        counts[where] += np.diff(ptr)
    out_ptr = np.zeros(n_out + 1, np.int64)
    np.cumsum(counts, out=out_ptr[1:])
    del counts
    slots, tfs = np.empty(int(out_ptr[-1]), np.int32), np.empty(int(out_ptr[-1]), np.int32)
    fill = out_ptr[:-1].copy()  # where each output row's next run goes
    for where, ptr, part_slots, part_tfs in parts:
        assert ptr[0] == 0
        if ptr[-1] == 0:
            continue
        lens = np.diff(ptr)
        shift = fill[where] - ptr[:-1]  # entry e of row i goes to e + shift[i]
        cuts = np.searchsorted(ptr, np.arange(0, int(ptr[-1]), MERGE_CHUNK), side="right") - 1
        for i, j in zip(cuts.tolist(), [*cuts[1:].tolist(), len(lens)], strict=True):
            a, z = int(ptr[i]), int(ptr[j])
            dest = np.repeat(shift[i:j], lens[i:j])
            dest += np.arange(a, z, dtype=np.int64)
            slots[dest], tfs[dest] = part_slots[a:z], part_tfs[a:z]
            del dest
        fill[where] += lens
    return out_ptr, slots, tfs


def _segment(tid: np.ndarray, slot: np.ndarray, tf: np.ndarray) -> Segment:
    """A segment of (term, slot, tf) entries sorted by term, then slot."""
    starts = np.flatnonzero(np.r_[True, tid[1:] != tid[:-1]]) if len(tid) else np.zeros(0, np.int64)
    ptr = np.empty(len(starts) + 1, np.int64)
    ptr[:-1], ptr[-1] = starts, len(tid)
    return Segment(np.ascontiguousarray(tid[starts], np.int32), ptr, np.ascontiguousarray(slot, np.int32),
                   np.ascontiguousarray(tf, np.int32))


class _RawIds(dict):
    """Raw token (bytes, as `_folded_texts` splits) -> term id of its indexed form, -1 when it is dropped (a
    stop word, one character), -2 for the mark between texts; a token not seen before is looked up (its
    term added) by ``term_id`` on first use. Tokens longer than `_NORM_KEEP` are not kept (a 64 KiB body can
    be one token). ``term_id`` (the index's `_term_id`) is set only while the index maps a chunk: kept, the
    bound method would tie the index into a reference cycle, which only a full garbage collection frees (an
    adopted or evicted index of a million skills would stay resident until then)."""

    __slots__ = ("term_id",)

    def __init__(self):
        super().__init__({b"\x01": -2})
        self.term_id = None

    def __missing__(self, token: bytes) -> int:
        norm = _norm_token(token.decode("ascii"))
        tid = self.term_id(norm) if norm else -1
        if len(token) <= _NORM_KEEP:
            self[token] = tid
        return tid


class BM25Index:
    """One repo's index. Thread-safe; documents are keyed by skill name.

    A query whose postings are short (small repos: the training regime) is scored in plain Python;
    otherwise vectorized (large repos: production).
    """

    SMALL_QUERY = 512  # total posting entries below which plain Python beats numpy's per-call overhead
    DENSE_SHARE = 32   # a term in >= 1/32 of the slots is summed from a cached column (see _column)
    CACHE_BYTES = 256 << 20  # cached columns per index (1 byte per slot each), least recently used go
    DRIFT = 0.05       # a column is recomputed once the live avgdl or the term's idf moved 5% from its own

    def __init__(self, k1: float = K1, b: float = B):
        self.k1, self.b = k1, b
        self.serial = next(_SERIALS)  # unique in this process: a reloaded index is another index
        self._lock = threading.Lock()
        # the quantum of column weights: the largest weight a column can hold (a term at half the dense
        # share, tf -> infinity) is 255 of them
        self.idf_max = math.log(1.0 + 2 * self.DENSE_SHARE)
        self.step = self.idf_max * (k1 + 1.0) / 255.0
        self.generation = 0
        self.rebuilds = 0  # term ids and slots are renumbered by each
        self.folds = 0     # segments merged into the base (`_fold_segments`): nothing renumbered
        self._reset()
        self.seq = 0  # the repo change counter this index reflects

    def _reset(self) -> None:
        self.slot_of: dict[str, int] = {}
        self.names: list[str | None] = []
        self.payload: list[object] = []  # whatever the owner wants back with a hit
        self.dl = array("i")             # document length per slot
        self.alive = bytearray()         # 1 per live slot
        self.vocab: dict[str, int] = {}  # term -> term id
        self.term_str: list[str] = []    # term id -> term
        self.df = array("i")             # live documents per term id
        # forward index: slot s has terms fwd_terms[fwd_ptr[s]:fwd_ptr[s + 1]] with those tfs
        self.fwd_ptr = array("q", [0])
        self.fwd_terms = array("i")
        self.fwd_tfs = array("i")
        # postings: base (term ids < len(base_ptr) - 1), then what was added since: bulk chunks' segments and
        # single writes' per-term tails; each by slot
        self.base_ptr = np.zeros(1, np.int64)
        self.base_slots = np.zeros(0, np.int32)
        self.base_tfs = np.zeros(0, np.int32)
        self.tails: dict[int, tuple[array, array]] = {}  # one write at a time: per term
        self.segments: list[Segment] = []                 # bulk writes: one per chunk, merged as they grow
        self.tail_entries = 0     # in the tails
        self.segment_entries = 0  # in the segments
        self.total_len = 0
        self.dead = 0
        self._columns: OrderedDict[int, tuple[float, np.ndarray]] = OrderedDict()  # term id -> (idf, q per slot)
        self._cap = 0            # the columns' length (>= slots)
        self._avgdl_ref = 0.0    # the avgdl every cached column was computed at
        self._raw_ids = _RawIds()  # raw token -> term id (`_raw_term_ids`)

    def __len__(self) -> int:
        return len(self.slot_of)

    # --- writes ---

    def upsert(self, name: str, tokens: list[str], payload: object = None) -> None:
        counts = Counter(tokens)
        with self._lock:
            self._remove(name)
            self._add(name, counts, payload, len(tokens))
            self._maybe_rebuild()

    def load(self, docs: Iterable[tuple[str, list[str] | tuple[str, ...], object]]) -> None:
        """Add many documents at once (a repo read from the database): the postings are built in one pass."""
        with self._lock:
            self._add_batch(docs, tails=False)
            self._rebuild()

    def upsert_many(self, docs: list[tuple[str, list[str] | tuple[str, ...], object]]) -> None:
        """`upsert` of each (name, tokens, payload) in order, vectorized: a bulk import's thousands."""
        if len(docs) < 64:
            for name, tokens, payload in docs:
                self.upsert(name, list(tokens), payload)
            return
        with self._lock:
            self._add_batch(docs, tails=True)
            self._maybe_rebuild()

    BATCH = 50_000  # documents per vectorized step (bounds the temporary arrays: ~100 tokens each)

    def _add_batch(self, docs: Iterable[tuple[str, list[str] | tuple[str, ...], object]], tails: bool) -> None:
        chunk: dict[str, tuple] = {}
        for name, tokens, payload in docs:
            chunk.pop(name, None)  # a name twice: the last one wins, as in upsert
            chunk[name] = (tokens, payload)
            if len(chunk) >= self.BATCH:
                self._add_chunk(chunk, tails)
                chunk = {}
        if chunk:
            self._add_chunk(chunk, tails)

    TEXT_BATCH = 10_000  # documents per `upsert_texts` step (its tokens are Python objects until mapped)
    TEXT_BYTES = 32 << 20  # and at most this much text (64 KiB bodies: ~50 bytes of objects a token)
    RAW_IDS_MAX = 500_000  # raw tokens remembered with their term ids (see `_raw_ids`)

    def upsert_texts(self, docs: list[tuple[str, str, str, object]], load: bool = False) -> None:
        """`upsert` of each (name, description, body, payload) in order, with the tokens `document_tokens`
        gives, without a Python step per document: a chunk's texts are folded and split as one string and
        its raw tokens mapped to term ids in one pass (a bulk import spent a quarter of its time
        tokenizing skill by skill). ``load``: into an empty index, the base built at the end (`load`)."""
        if len(docs) < 64 and not load:
            for name, description, body, payload in docs:
                self.upsert(name, document_tokens(name, description, body), payload)
            return
        with self._lock:
            chunk: dict[str, tuple] = {}
            size = 0
            for doc in docs:
                chunk.pop(doc[0], None)  # a name twice: the last one wins, as in upsert
                chunk[doc[0]] = doc
                size += len(doc[1]) + len(doc[2])
                if len(chunk) >= self.TEXT_BATCH or size >= self.TEXT_BYTES:
                    self._add_texts(chunk, tails=not load)
                    chunk, size = {}, 0
            if chunk:
                self._add_texts(chunk, tails=not load)
            if load:
                self._rebuild()
            else:
                self._maybe_rebuild()

    def _add_texts(self, chunk: dict[str, tuple], tails: bool) -> None:
        docs = list(chunk.values())
        n = len(docs)
        folded = _folded_texts([f"{name} {description}" for name, description, _, _ in docs]
                               + [body for _, _, body, _ in docs])
        if folded is None:  # a text holds the mark: one document at a time
            self._add_chunk({name: (document_tokens(name, description, body), payload)
                             for name, description, body, payload in docs}, tails)
            return
        raw = folded.split()
        del folded
        ids = self._raw_term_ids(raw)
        del raw
        mark = ids == -2
        text = np.cumsum(mark, dtype=np.int32)  # which text each token is of: marks before it
        kept = ids >= 0
        text, ids = text[kept], ids[kept]
        del mark, kept
        cut = int(np.searchsorted(text, n))  # heads (texts 0..n-1), then bodies (n..2n-1)
        w = FIELD_WEIGHTS["name"]
        head_doc, body_doc = text[:cut].astype(np.int64), (text[cut:] - n).astype(np.int64)
        lens = (w * np.bincount(head_doc, minlength=n) + FIELD_WEIGHTS["body"] * np.bincount(body_doc, minlength=n))
        doc = np.concatenate([head_doc] * w + [body_doc] * FIELD_WEIGHTS["body"])
        ids = np.concatenate([ids[:cut]] * w + [ids[cut:]] * FIELD_WEIGHTS["body"])
        self._add_pairs([d[0] for d in docs], [d[3] for d in docs], lens.astype(np.int64), doc, ids, tails)

    def _raw_term_ids(self, raw: list[bytes]) -> np.ndarray:
        """Each raw token's term id (-1: dropped, a stop word or one character; -2: the mark between texts),
        new terms added (by `_RawIds.__missing__`, one C-level lookup per token otherwise)."""
        known = self._raw_ids
        known.term_id = self._term_id
        try:
            ids = np.fromiter(map(known.__getitem__, raw), np.int32, count=len(raw))
        finally:
            known.term_id = None
        if len(known) > self.RAW_IDS_MAX:
            self._raw_ids = _RawIds()
        return ids

    def _add_chunk(self, chunk: dict[str, tuple], tails: bool) -> None:
        """Add a chunk of distinct names' token lists in whole-array steps (`_add_pairs`)."""
        names = list(chunk)
        values = chunk.values()
        token_lists = [tokens for tokens, _ in values]
        lens = np.fromiter(map(len, token_lists), np.int64, count=len(names))
        flat = list(itertools.chain.from_iterable(token_lists))
        lookup = self.vocab.__getitem__
        try:
            ids = np.fromiter(map(lookup, flat), np.int32, count=len(flat))
        except KeyError:  # new terms (a skill's name has one of its own, often)
            for t in set(flat).difference(self.vocab):
                self._term_id(t)
            ids = np.fromiter(map(lookup, flat), np.int32, count=len(flat))
        del flat
        doc = np.repeat(np.arange(len(names), dtype=np.int64), lens)
        self._add_pairs(names, [payload for _, payload in values], lens, doc, ids, tails)

    def _add_pairs(self, names: list[str], payloads: list[object], lens: np.ndarray, doc: np.ndarray,
                   ids: np.ndarray, tails: bool) -> None:
        """Add documents of distinct names, given as (document, term id) pairs (one per token, documents
        numbered from 0 in ``names``' order), in whole-array steps: a bulk import's cost is these few passes
        over its tokens, not a Python step per skill and term. With ``tails`` (a live index) the chunk's
        postings become one segment; without (a load) the caller rebuilds the base."""
        for name in self.slot_of.keys() & set(names):  # replaced: the old slot dies, the new one is added
            self._remove(name)
        n_new, first = len(names), len(self.names)
        self.slot_of.update(zip(names, range(first, first + n_new)))
        self.names.extend(names)
        self.payload.extend(payloads)
        self.dl.frombytes(lens.astype(np.int32).tobytes())
        self.total_len += int(lens.sum())
        self.alive.extend(b"\x01" * n_new)
        self.generation += n_new
        # (term, document) pairs with their counts, sorted by term then document: the segment's order; the
        # forward index's (by document, then term) from a stable sort of the documents, a radix sort's
        # linear pass where they fit 16 bits (BATCH's and TEXT_BATCH's chunks do; a bigger one takes a
        # merge sort), not a second sort of the pairs
        bits = max(1, (n_new - 1).bit_length())
        keys, tf = np.unique((ids.astype(np.int64) << bits) | doc, return_counts=True)
        del doc, ids
        tid = (keys >> bits).astype(np.int32)
        local = (keys & ((1 << bits) - 1)).astype(np.uint16 if bits <= 16 else np.int32)
        tf = tf.astype(np.int32)
        del keys
        order = np.argsort(local, kind="stable")
        per_doc = np.bincount(local, minlength=n_new)
        self.fwd_ptr.frombytes((self.fwd_ptr[-1] + np.cumsum(per_doc)).astype(np.int64).tobytes())
        self.fwd_terms.frombytes(tid[order].tobytes())
        self.fwd_tfs.frombytes(tf[order].tobytes())
        del order
        df = np.frombuffer(self.df, np.int32)
        df += np.bincount(tid, minlength=len(df)).astype(np.int32)
        del df
        if not tails and not self._columns:
            return
        if self._columns and len(self.names) > self._cap:
            self._grow(len(self.names))
        segment = _segment(tid, local.astype(np.int32) + np.int32(first), tf)
        del local
        if self._columns:
            dl = np.frombuffer(self.dl, np.int32)
            for t, (idf, col) in self._columns.items():
                part = segment.postings(t)
                if part is not None:
                    col[part[0]] = self._quanta(idf, part[1], dl[part[0]])
            del dl
        if tails and segment.entries:
            self.segments.append(segment)
            # each segment at least twice the next one's size: O(log n) segments whatever the chunks' sizes
            # (an import sorted longest first has each chunk smaller than the last), and each entry is merged
            # O(log n) times
            while len(self.segments) > 1 and 2 * self.segments[-1].entries >= self.segments[-2].entries:
                later = self.segments.pop()
                self.segments[-1] = self.segments[-1].merged(later)
            self.segment_entries += len(tid)

    def _quanta(self, idf: float, tfs: np.ndarray, dls: np.ndarray) -> np.ndarray:
        """`_quantum` of many (tf, length) pairs."""
        k1, b = self.k1, self.b
        tf = tfs.astype(np.float32)
        w = np.float32(idf * (k1 + 1.0)) * tf / (tf + np.float32(k1) * (np.float32(1.0 - b) + np.float32(b / self._avgdl_ref) * dls))
        return np.minimum(np.rint(w / np.float32(self.step)), 255).astype(np.uint8)

    def _term_id(self, term: str) -> int:
        tid = self.vocab.get(term)
        if tid is None:
            tid = self.vocab[term] = len(self.term_str)
            self.term_str.append(term)
            self.df.append(0)
        return tid

    def _add(self, name: str, counts: Counter, payload: object, length: int, tails: bool = True) -> None:
        self.generation += 1
        slot = len(self.names)
        self.names.append(name)
        self.payload.append(payload)
        self.dl.append(length)
        self.alive.append(1)
        self.slot_of[name] = slot
        self.total_len += length
        columns = self._columns
        if columns and slot >= self._cap:
            self._grow(slot + 1)
        df, fwd_terms, fwd_tfs, term_id = self.df, self.fwd_terms, self.fwd_tfs, self._term_id
        for term, tf in counts.items():
            tid = term_id(term)
            df[tid] += 1
            fwd_terms.append(tid)
            fwd_tfs.append(tf)
            if tails:
                t = self.tails.get(tid)
                if t is None:
                    t = self.tails[tid] = (array("i"), array("i"))
                t[0].append(slot)
                t[1].append(tf)
            col = columns.get(tid) if columns else None
            if col is not None:
                col[1][slot] = self._quantum(col[0], tf, length)
        self.fwd_ptr.append(len(fwd_terms))
        if tails:
            self.tail_entries += len(counts)

    def _quantum(self, idf: float, tf: int, length: int) -> int:
        k1 = self.k1
        w = idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - self.b + self.b * length / self._avgdl_ref))
        return min(255, round(w / self.step))

    def remove(self, name: str) -> None:
        with self._lock:
            self._remove(name)
            self._maybe_rebuild()

    def _remove(self, name: str) -> None:
        slot = self.slot_of.pop(name, None)
        if slot is None:
            return
        self.generation += 1
        self.alive[slot] = 0
        self.total_len -= self.dl[slot]
        df, columns = self.df, self._columns
        for i in range(self.fwd_ptr[slot], self.fwd_ptr[slot + 1]):
            tid = self.fwd_terms[i]
            df[tid] -= 1
            if columns:
                col = columns.get(tid)
                if col is not None:
                    col[1][slot] = 0
        self.names[slot] = self.payload[slot] = None
        self.dead += 1

    # Segments may hold this many times the base's entries before they are folded into it. Segments merge
    # among themselves (O(log n) of them), so folding them in is for searches (one postings list a term).
    # At 2 an import from empty folds about 2/3 of what it would at 1 (the base doubling): a million skills in
    # batches of 5,000, 895,000 skills' postings instead of 1,235,000; at most 2/3 of the entries wait in
    # segments for the next fold (or for a save's compaction, indexes.py). Per-term tails cost a search more
    # each (a Python array per term): they still wait for the base's size.
    SEGMENT_SHARE = 2
    # dead slots (or tail entries) past 1/8 of the slots (of the base's entries): a fold gives way to a
    # rebuild, and a save's compaction replaces the live index (`fragmented`)
    DEAD_SHARE = 8

    def _maybe_rebuild(self) -> None:
        room = max(4096, len(self.base_slots))
        if self.dead > max(64, len(self.slot_of)) or self.tail_entries > room:
            self._rebuild()
        elif self.segment_entries > self.SEGMENT_SHARE * room:
            # a bulk import's case: few dead slots, no tails, nothing to renumber; a merge of the sorted
            # runs (`_fold_segments`) costs a fraction of a rebuild (a sort of every entry, then the slot
            # and term maps made again, and each raw token's term id looked up again)
            if self.tails or self.DEAD_SHARE * self.dead > len(self.names):
                self._rebuild()
            else:
                self._fold_segments()

    def _fold_segments(self) -> None:
        """The segments merged into the base, dead slots left in it as in any posting (searches skip them):
        slot and term ids stay, and so do the cached columns. A tail's slots may lie between two segments'
        (a single write between bulk ones), so only a rebuild takes tails."""
        assert not self.tails
        n_base = len(self.base_ptr) - 1
        parts = [(np.arange(n_base), self.base_ptr, self.base_slots, self.base_tfs)]
        parts += [(segment.terms, segment.ptr, segment.slots, segment.tfs) for segment in self.segments]
        self.base_ptr, self.base_slots, self.base_tfs = merge_runs(parts, len(self.term_str))
        self.segments, self.segment_entries = [], 0
        self.folds += 1

    def _rebuild(self) -> None:
        """Postings rebuilt from the forward index, dead slots and dead terms dropped (slots renumbered): the
        compaction a save makes of its copy (`compact_state`), made of the live arrays in place."""
        c = compact_state({"fwd_ptr": np.frombuffer(self.fwd_ptr, np.int64),
                           "fwd_terms": np.frombuffer(self.fwd_terms, np.int32),
                           "fwd_tfs": np.frombuffer(self.fwd_tfs, np.int32),
                           "alive": np.frombuffer(self.alive, np.uint8), "df": np.frombuffer(self.df, np.int32),
                           "names": self.names, "payload": self.payload, "dl": np.frombuffer(self.dl, np.int32),
                           "term_str": self.term_str, "seq": self.seq})
        seq, generation, total_len, rebuilds, folds = self.seq, self.generation, self.total_len, self.rebuilds, self.folds
        self._reset()
        self.seq, self.generation, self.total_len, self.rebuilds, self.folds = seq, generation, total_len, rebuilds + 1, folds
        self._install(c.names, c.payload, _array("i", c.dl), c.term_str, c.built)

    def _install(self, names: list[str], payload: list[object], dl: array, term_str: list[str],
                 built: dict[str, np.ndarray]) -> None:
        self.names, self.payload, self.dl, self.term_str = names, payload, dl, term_str
        self._raw_ids = _RawIds()  # term ids are renumbered
        self.slot_of = dict(zip(names, range(len(names))))
        self.vocab = dict(zip(term_str, range(len(term_str))))
        self.alive = bytearray(b"\x01") * len(names)
        self.df = _array("i", built["df"])
        self.fwd_ptr = _array("q", built["fwd_ptr"])
        self.fwd_terms = _array("i", built["fwd_terms"])
        self.fwd_tfs = _array("i", built["fwd_tfs"])
        self.base_ptr, self.base_slots, self.base_tfs = built["base_ptr"], built["base_slots"], built["base_tfs"]

    # --- persistence (the file format is index_files.py's) ---

    EXPORT_CHUNK = 4_000_000  # forward entries copied per hold of the lock (~10 ms)

    def export_state(self) -> dict[str, object]:
        """Everything needed to rebuild this index, copied (postings are derived: `build_postings`).

        The forward index only grows between rebuilds, so it is copied in chunks with the lock let go
        between them (a million skills' is ~360 MB: a search must not wait the second one copy takes);
        its rest and every part that changes in place are copied in one last hold, which is the moment
        the state is of.
        """
        while True:
            with self._lock:
                shape, done = self.rebuilds, 0
            terms, tfs, state = [], [], None
            while True:
                with self._lock:
                    if self.rebuilds != shape:
                        break  # renumbered meanwhile: start again
                    end = len(self.fwd_terms)
                    last = end - done <= self.EXPORT_CHUNK
                    stop = end if last else done + self.EXPORT_CHUNK
                    terms.append(np.frombuffer(self.fwd_terms[done:stop], np.int32))  # a slice is a copy
                    tfs.append(np.frombuffer(self.fwd_tfs[done:stop], np.int32))
                    done = stop
                    if last:
                        state = {"names": list(self.names), "payload": list(self.payload),
                                 "dl": _copy(self.dl, np.int32), "alive": np.frombuffer(bytes(self.alive), np.uint8),
                                 "term_str": list(self.term_str), "df": _copy(self.df, np.int32),
                                 "fwd_ptr": _copy(self.fwd_ptr, np.int64), "total_len": self.total_len,
                                 "seq": self.seq}
                        break
            if state is not None:
                state["fwd_terms"], state["fwd_tfs"] = np.concatenate(terms), np.concatenate(tfs)
                return state

    @classmethod
    def from_built(cls, names: list[str], payload: list[object], dl: np.ndarray, term_str: list[str],
                   built: dict[str, np.ndarray], seq: int) -> BM25Index:
        """An index of compacted state (`build_postings`' output, every slot live), as a file holds it."""
        idx = cls()
        idx._install(names, payload, _array("i", dl), term_str, built)
        idx.total_len = int(np.asarray(dl, np.int64).sum())
        idx.seq = seq
        return idx

    @classmethod
    def from_compacted(cls, c: Compacted) -> BM25Index:
        return cls.from_built(c.names, c.payload, c.dl, c.term_str, c.built, c.seq)

    def fragmented(self) -> bool:
        """Whether a compaction would speed searches up: segments to read besides the base, or dead slots or
        tail entries past an eighth of the slots or of the base's entries (a few are cheap: a search's cost
        is the base's)."""
        return (bool(self.segments) or self.DEAD_SHARE * self.dead > len(self.names)
                or self.DEAD_SHARE * self.tail_entries > len(self.base_slots))

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

    def _postings(self, tid: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """The term's (slots, tfs) parts, each ascending by slot: the base's, the segments' and the tail's
        (copied: the tail's array must stay growable)."""
        parts = []
        if tid < len(self.base_ptr) - 1:
            a, z = self.base_ptr[tid], self.base_ptr[tid + 1]
            if z > a:
                parts.append((self.base_slots[a:z], self.base_tfs[a:z]))
        for segment in self.segments:
            part = segment.postings(tid)
            if part is not None:
                parts.append(part)
        t = self.tails.get(tid)
        if t is not None and len(t[0]):
            parts.append((np.array(t[0], np.int32), np.array(t[1], np.int32)))
        return parts

    def _plen(self, tid: int) -> int:
        n = int(self.base_ptr[tid + 1] - self.base_ptr[tid]) if tid < len(self.base_ptr) - 1 else 0
        for segment in self.segments:
            n += segment.length(tid)
        t = self.tails.get(tid)
        return n + (len(t[0]) if t is not None else 0)

    def _grow(self, need: int) -> None:
        cap = max(1024, need, int(self._cap * 1.25))
        for tid, (idf, col) in self._columns.items():
            grown = np.zeros(cap, np.uint8)
            grown[:len(col)] = col
            self._columns[tid] = (idf, grown)
        self._cap = cap

    def _column(self, tid: int, idf: float) -> tuple[float, np.ndarray]:
        """(idf it was computed at, quantized weight per slot) of a frequent term: round(w / step) with w
        its idf-weighted BM25 weight at the reference avgdl, 0 where the slot lacks it or is dead. Kept
        across writes (a write sets its own slot's entries), recomputed once the term's idf drifted."""
        cached = self._columns.get(tid)
        if cached is not None and abs(cached[0] / idf - 1.0) <= self.DRIFT:
            self._columns.move_to_end(tid)
            return cached
        n_slots = len(self.names)
        if n_slots > self._cap:
            self._grow(n_slots)
        col = np.zeros(self._cap, np.uint8)
        dl = np.frombuffer(self.dl, np.int32)
        alive = np.frombuffer(self.alive, np.uint8)
        for slots, tfs in self._postings(tid):
            col[slots] = self._quanta(idf, tfs, dl[slots]) * alive[slots]
        del dl, alive  # no buffer view may outlive the call (the arrays must stay growable)
        self._columns[tid] = (idf, col)
        while len(self._columns) > 1 and len(self._columns) * self._cap > self.CACHE_BYTES:
            self._columns.popitem(last=False)
        return self._columns[tid]

    def warm(self, budget: int | None = None) -> int:
        """Build the columns of the most frequent terms before queries need them (after a load: at a
        million skills a first use costs tens of ms per term). The lock is taken per column, so searches
        and writes go on meanwhile. Returns how many were built."""
        with self._lock:
            n, n_slots = len(self.slot_of), len(self.names)
            if n_slots <= 64 * 5 or not n:
                return 0
            avgdl = self.total_len / n if self.total_len else 1.0
            if not self._avgdl_ref or abs(avgdl / self._avgdl_ref - 1.0) > self.DRIFT:
                self._columns.clear()
                self._avgdl_ref = avgdl
            df = np.frombuffer(self.df, np.int32)
            frequent = np.flatnonzero(df * self.DENSE_SHARE >= n_slots)
            order = frequent[np.argsort(-df[frequent], kind="stable")].tolist()
            del df
            shape = self.rebuilds
        built = 0
        for tid in order[:(budget or self.CACHE_BYTES) // max(1, self._cap, n_slots)]:
            with self._lock:
                if self.rebuilds != shape:
                    break  # term ids were renumbered: queries build what they need
                n, d = len(self.slot_of), self.df[tid]
                idf = math.log(1.0 + (n - d + 0.5) / (d + 0.5)) if d else 0.0
                if d and idf <= self.idf_max and tid not in self._columns:
                    self._column(tid, idf)
                    built += 1
        return built

    def _score(self, query_tokens: list[str], k: int | None) -> list[tuple[int, float]]:
        """[(slot, exact score)] of matching live documents; with k, a superset of the top k (ties kept)."""
        n = len(self.slot_of)
        if n == 0:
            return []
        avgdl = self.total_len / n if self.total_len else 1.0
        mult: Counter = Counter()  # a repeated query token counts again
        for tok in query_tokens:
            tid = self.vocab.get(tok)
            if tid is not None and self.df[tid] > 0:
                mult[tid] += 1
        if not mult:
            return []
        terms = [(tid, math.log(1.0 + (n - self.df[tid] + 0.5) / (self.df[tid] + 0.5)), m) for tid, m in mult.items()]
        lengths = {tid: self._plen(tid) for tid in mult}
        if sum(lengths.values()) < self.SMALL_QUERY:
            return self._score_python(terms, avgdl)
        n_slots = len(self.names)
        if k is None or k <= 0 or n_slots <= 64 * k:
            return self._exact(terms, self._matching(terms), avgdl)
        dense = [t for t in terms if lengths[t[0]] * self.DENSE_SHARE >= n_slots and t[1] <= self.idf_max]
        if dense and (not self._avgdl_ref or abs(avgdl / self._avgdl_ref - 1.0) > self.DRIFT):
            self._columns.clear()
            self._avgdl_ref = avgdl
        sparse = [t for t in terms if t not in dense]
        # the largest possible sum picks the accumulator (quantized weights are small integers)
        most = sum(255 * m for _, _, m in dense) + sum(math.ceil(m * idf * (self.k1 + 1) / self.step) + 1
                                                          for _, idf, m in sparse)
        total = np.zeros(n_slots, np.uint16 if most < 65535 else np.uint32)
        lo = hi = 1.0  # every approximate term weight is within [lo, hi] x exact, +- step / 2 per rounding
        roundings = 0
        if dense:
            rho = self._avgdl_ref / avgdl  # a column's norm used avgdl_ref: its weights are off by <= rho
            for tid, idf, m in dense:
                ref_idf, col = self._column(tid, idf)
                r = ref_idf / idf
                lo, hi = min(lo, r * min(1.0, rho)), max(hi, r * max(1.0, rho))
                for _ in range(m):
                    np.add(total, col[:n_slots], out=total)
                roundings += m
        if sparse:
            dl = np.frombuffer(self.dl, np.int32)
            alive = np.frombuffer(self.alive, np.uint8)
            k1, b = self.k1, self.b
            for tid, idf, m in sparse:
                for slots, tfs in self._postings(tid):
                    tf = tfs.astype(np.float64)
                    w = m * idf * (k1 + 1.0) * tf / (tf + k1 * (1.0 - b + b * dl[slots] / avgdl))
                    total[slots] += (np.rint(w / self.step) * alive[slots]).astype(total.dtype)
                roundings += 1
            del dl, alive
        return self._exact(terms, self._candidates(total, k, lo, hi, roundings, terms), avgdl)

    def _candidates(self, total: np.ndarray, k: int, lo: float, hi: float, roundings: int,
                    terms: list[tuple[int, float, int]]) -> np.ndarray:
        """Slots whose exact score may be in the top k, from the approximate sums (in steps).

        With s the approximate and S the exact score of a document, step * s lies within
        [lo * S - e, hi * S + e], e = roundings * step / 2. The k-th best exact score is then at least
        (step * s_k - e) / hi (s_k: the k-th best approximate sum), so a document of the exact top k has
        s >= lo / hi * (s_k - r) - r, r = roundings / 2.
        """
        # The k-th best of every 32nd slot is <= the k-th best of all: a first cut without partitioning
        # the whole array.
        sample = total[::32]
        floor = int(np.partition(sample, len(sample) - k)[len(sample) - k])
        cand = np.flatnonzero(total >= max(floor, 1))
        if len(cand) < k:
            return self._matching(terms)
        values = total[cand]
        s_k = float(np.partition(values, len(values) - k)[len(values) - k])
        r = roundings / 2.0
        bound = lo / hi * (s_k - r) - r - 1e-6 * s_k
        if bound <= 0:
            return self._matching(terms)  # matches whose weights all rounded to 0 could be among them
        cut = math.ceil(bound)
        if cut >= floor:
            return cand[values >= cut]
        return np.flatnonzero(total >= cut)

    def _matching(self, terms: list[tuple[int, float, int]]) -> np.ndarray:
        """Every slot holding a query term (dead ones included; `_exact` zeroes them), ascending."""
        parts = [slots for tid, _, _ in terms for slots, _ in self._postings(tid)]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def _exact(self, terms: list[tuple[int, float, int]], slots: np.ndarray, avgdl: float) -> list[tuple[int, float]]:
        """Exact scores (float64) of ``slots`` (ascending); those of dead slots and non-matches dropped."""
        if len(slots) == 0:
            return []
        k1, b = self.k1, self.b
        dl = np.frombuffer(self.dl, np.int32)[slots].astype(np.float64)
        norm = k1 * (1.0 - b + b * dl / avgdl)
        score = np.zeros(len(slots), np.float64)
        slots32 = slots.astype(np.int32)  # int64 keys would make searchsorted convert each whole posting
        for tid, idf, m in terms:
            tf = np.zeros(len(slots), np.float64)
            for ps, pt in self._postings(tid):
                pos = np.searchsorted(ps, slots32)
                pos[pos >= len(ps)] = len(ps) - 1
                hit = ps[pos] == slots32
                tf[hit] = pt[pos[hit]]
            score += (m * idf * (k1 + 1.0)) * tf / (tf + norm)
        score *= np.frombuffer(self.alive, np.uint8)[slots]
        keep = np.flatnonzero(score > 0)
        return list(zip(slots[keep].tolist(), score[keep].tolist(), strict=True))

    def _score_python(self, terms: list[tuple[int, float, int]], avgdl: float) -> list[tuple[int, float]]:
        k1, b, k1p1 = self.k1, self.b, self.k1 + 1.0
        dl, alive = self.dl, self.alive
        acc: dict[int, float] = {}
        for tid, idf, m in terms:
            for slots, tfs in self._postings(tid):
                for d, tf in zip(slots.tolist(), tfs.tolist(), strict=True):
                    if alive[d]:
                        acc[d] = acc.get(d, 0.0) + m * idf * tf * k1p1 / (tf + k1 * (1.0 - b + b * dl[d] / avgdl))
        return list(acc.items())
