"""The incremental BM25 index agrees with a reference Okapi BM25 and with bm25s, through writes and deletes."""

import math
import random

import numpy as np
import pytest

from services.skillrepo.search import K1, B, BM25Index, document_tokens, tokenize

WORDS = ["apple", "mug", "fridge", "microwave", "sink", "clean", "heat", "cool", "lamp", "desk", "drawer", "cabinet", "shelf", "knife", "pan", "pot", "tomato", "egg", "potato", "bread", "lettuce", "cup", "plate", "bowl", "spoon", "book", "pen", "cd", "key", "watch", "soap", "towel"]


def reference_scores(docs: dict[str, list[str]], query: list[str], k1=K1, b=B) -> dict[str, float]:
    """Textbook Okapi BM25 with Lucene's idf, written plainly (no shared code with the index)."""
    n = len(docs)
    avgdl = sum(len(t) for t in docs.values()) / n
    out = {}
    for name, toks in docs.items():
        s = 0.0
        for q in query:
            df = sum(1 for t in docs.values() if q in t)
            if df == 0:
                continue
            tf = toks.count(q)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            s += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(toks) / avgdl))
        if s > 0:
            out[name] = s
    return out


def random_doc(rng: random.Random) -> list[str]:
    return [rng.choice(WORDS) for _ in range(rng.randint(1, 40))]


def test_tokenizer():
    assert tokenize("Put the clean Apples in the fridge!") == ["put", "clean", "apple", "fridge"]
    assert tokenize("glass-bottles 2x") == ["glass", "bottle", "2x"]
    assert document_tokens("heat-mug", "Heat a mug", "go") == ["heat", "mug", "heat", "mug", "heat", "mug",
                                                                "heat", "mug", "go"]


def removed_one(rng, idx, docs: dict, p: float) -> bool:
    """With probability ``p``, remove a random document from both the index and the reference."""
    if rng.random() < p and docs:
        victim = rng.choice(sorted(docs))
        idx.remove(victim)
        docs.pop(victim)
        return True
    return False


@pytest.mark.parametrize("small_query", [BM25Index.SMALL_QUERY, 0], ids=["python-path", "numpy-path"])
def test_agrees_with_reference_through_random_writes(small_query):
    rng = random.Random(7)
    idx = BM25Index()
    idx.SMALL_QUERY = small_query
    docs: dict[str, list[str]] = {}
    for step in range(600):
        name = f"s{rng.randint(0, 80)}"
        if not removed_one(rng, idx, docs, 0.25):
            toks = random_doc(rng)
            idx.upsert(name, toks)
            docs[name] = toks
        if step % 50 == 0 and docs:
            for _ in range(5):
                query = [rng.choice(WORDS) for _ in range(rng.randint(1, 5))]
                assert idx.scores(query) == idx.scores(query)  # cached weights give the same answer
                ref = reference_scores(docs, query)
                got = idx.scores(query)
                assert got.keys() == ref.keys()
                for k in ref:
                    assert got[k] == pytest.approx(ref[k], rel=1e-5)
                top = idx.search(query, 5)
                expect = sorted(ref.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
                assert [n for n, _, _ in top] == [n for n, _ in expect]


def test_agrees_with_bm25s_lucene():
    bm25s = pytest.importorskip("bm25s")
    rng = random.Random(3)
    corpus = [random_doc(rng) for _ in range(300)]
    idx = BM25Index()
    idx.SMALL_QUERY = 0  # the vectorized path, with its per-term weight cache
    for i, toks in enumerate(corpus):
        idx.upsert(f"d{i}", toks)
    ref = bm25s.BM25(k1=K1, b=B, method="lucene")
    ref.index(corpus, show_progress=False)
    for _ in range(20):
        query = list(dict.fromkeys(rng.choice(WORDS) for _ in range(3)))  # bm25s counts a query term once
        want = ref.get_scores(query)
        got = idx.scores(query)
        for i, w in enumerate(want):
            # bm25s's "lucene" drops the constant (k1 + 1) factor of the numerator (as Lucene 8 does)
            assert got.get(f"d{i}", 0.0) == pytest.approx(float(w) * (K1 + 1), rel=1e-4, abs=1e-6)


def test_compaction_keeps_results():
    idx = BM25Index()
    for i in range(200):
        idx.upsert(f"d{i}", ["apple"] * (i % 5 + 1) + ["pad"] * 3)
    for i in range(0, 200, 2):
        idx.remove(f"d{i}")
    for i in range(1, 200, 2):  # replacing every doc leaves many dead slots: compaction runs
        idx.upsert(f"d{i}", ["apple"] * (i % 5 + 1) + ["pad"] * 3)
    assert len(idx) == 100 and len(idx.names) < 300
    docs = {f"d{i}": ["apple"] * (i % 5 + 1) + ["pad"] * 3 for i in range(1, 200, 2)}
    ref = reference_scores(docs, ["apple"])
    got = idx.scores(["apple"])
    assert got.keys() == ref.keys() and all(got[k] == pytest.approx(ref[k]) for k in ref)


def _fast_reference(docs: dict[str, list[str]], query: list[str], k1=K1, b=B) -> dict[str, float]:
    """`reference_scores` with each df counted once (thousands of documents)."""
    n = len(docs)
    avgdl = sum(len(t) for t in docs.values()) / n
    df = {q: sum(1 for t in docs.values() if q in t) for q in set(query)}
    out = {}
    for name, toks in docs.items():
        s = 0.0
        for q in query:
            if df[q]:
                tf = toks.count(q)
                s += math.log(1 + (n - df[q] + 0.5) / (df[q] + 0.5)) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(toks) / avgdl))
        if s > 0:
            out[name] = s
    return out


def test_cached_columns_stay_exact_through_writes_and_drift():
    """Large-repo path: frequent terms come from quantized columns that writes update in place, while
    avgdl and idf drift (documents grow ~3x, a frequent word becomes rare); the top k is still exact."""
    rng = random.Random(11)
    idx = BM25Index()
    idx.SMALL_QUERY = 0
    docs = {f"s{i}": random_doc(rng) for i in range(1500)}
    idx.upsert_many([(n, t, None) for n, t in docs.items()])  # the vectorized path
    checked = 0
    for step in range(900):
        name = f"s{rng.randint(0, 1999)}"
        if not removed_one(rng, idx, docs, 0.2):
            grow = 1 + step // 300  # longer documents as it goes, without "apple": avgdl and idf move
            toks = [w for w in random_doc(rng) * grow if w != "apple" or step < 300]
            idx.upsert(name, toks)
            docs[name] = toks
        if step % 60 == 0:
            for _ in range(3):
                query = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))] + ["apple"]
                ref = _fast_reference(docs, query)
                expect = sorted(ref.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
                top = idx.search(query, 5)
                assert [n for n, _, _ in top] == [n for n, _ in expect]
                assert [s for _, s, _ in top] == pytest.approx([s for _, s in expect], rel=1e-9)
                checked += 1
    assert checked > 30 and idx._columns  # the column path ran


def test_upsert_many_equals_upserts():
    rng = random.Random(5)
    batch = [(f"s{rng.randint(0, 300)}", random_doc(rng), i) for i in range(2000)]  # names repeat
    one, many = BM25Index(), BM25Index()
    for name, toks, p in batch:
        one.upsert(name, toks, p)
    many.upsert_many(batch)
    assert one.documents() == many.documents()
    for _ in range(10):
        query = [rng.choice(WORDS) for _ in range(4)]
        assert many.scores(query) == pytest.approx(one.scores(query), rel=1e-12)
        assert [h[0] for h in many.search(query, 5)] == [h[0] for h in one.search(query, 5)]


def _forward(idx: BM25Index) -> tuple[dict, dict]:
    """Each live document's (length, sorted (term, tf), payload), and each live term's df: the index's
    content whatever its slots' and terms' numbering."""
    docs = {}
    for name, slot in idx.slot_of.items():
        a, z = idx.fwd_ptr[slot], idx.fwd_ptr[slot + 1]
        docs[name] = (idx.dl[slot], sorted((idx.term_str[idx.fwd_terms[i]], idx.fwd_tfs[i]) for i in range(a, z)),
                      idx.payload[slot])
    return docs, {t: idx.df[i] for i, t in enumerate(idx.term_str) if idx.df[i]}


# what the chunk tokenizer must fold as `tokenize` does: case, NFKD (ligatures, accents, combining marks),
# stop words, one-character and plural tokens, separators of every kind, tokens past the kept length, the
# mark it joins texts with (\x01) inside a text, empty texts
_TEXT_WORDS = ["apple", "Apples", "glass", "the", "a", "x", "Café", "naïve", "\ufb01le", "ÅNGSTRÖM", "z9", "12",
               "heat-mug", "bus", "buses", "\x01", "foo\x01bar", "x" * 50, "y" * 41, "", "  ", "A/B\tc\n", "über",
               "日本", "e\u0301t\u00e9", "UPPER_case"]


@pytest.mark.parametrize("raw_ids_max", [BM25Index.RAW_IDS_MAX, 5], ids=["kept", "forgotten"])
def test_upsert_texts_equals_document_tokens(raw_ids_max, monkeypatch):
    """`upsert_texts` (a chunk's texts folded and split as one string) indexes exactly what `upsert_many`
    of `document_tokens` does: the same documents, lengths, tfs and dfs, the same answers; also as a load,
    with replaced and repeated names, and with its raw-token memory emptied between chunks (and chunks cut
    by their bytes)."""
    from services.skillrepo import search

    rng = random.Random(3)
    folded = []  # True: a chunk went the one-string way (not the fallback a text with the mark takes)
    real_folded = search._folded_texts
    monkeypatch.setattr(search, "_folded_texts", lambda texts: folded.append(real_folded(texts) is not None)
                        or real_folded(texts))

    def text(k: int) -> str:
        return " ".join(rng.choice(_TEXT_WORDS) for _ in range(k))

    for trial in range(40):
        docs = [(f"s{rng.randint(0, 300)}", text(rng.randint(0, 6)), text(rng.randint(0, 30)), (i, "h"))
                for i in range(rng.randint(64, 400))]  # names repeat: the last one wins
        if trial % 2:
            docs = [d for d in docs if "\x01" not in d[1] + d[2]]  # the one-string path (else one at a time)
        before = [(f"s{j}", "old text apple", "body glass", (0, "o")) for j in range(0, 300, 7)]  # replaced
        by_tokens, by_texts = BM25Index(), BM25Index()
        by_texts.RAW_IDS_MAX = raw_ids_max
        by_texts.TEXT_BATCH = 100  # several chunks
        if raw_ids_max == 5:
            by_texts.TEXT_BYTES = 3000
        folded.clear()
        for part in (before, docs):
            by_tokens.upsert_many([(n, document_tokens(n, d, b), p) for n, d, b, p in part])
            by_texts.upsert_texts(part)
        assert _forward(by_texts) == _forward(by_tokens)
        if trial % 2 and len(docs) >= 64:  # no text with the mark: every chunk the one-string way
            assert folded and all(folded)
        for query in (["apple"], ["glass", "file"], ["cafe", "naive", "angstrom"], ["heat", "mug", "bus"]):
            assert [(n, pytest.approx(s, rel=1e-12)) for n, s, _ in by_texts.search(query, 5)] == \
                   [(n, s) for n, s, _ in by_tokens.search(query, 5)]
        loaded, by_load = BM25Index(), BM25Index()
        loaded.upsert_texts(docs, load=True)
        by_load.load([(n, document_tokens(n, d, b), p) for n, d, b, p in docs])
        assert _forward(loaded) == _forward(by_load)
        assert loaded.segments == [] and len(loaded.base_slots) == len(loaded.fwd_terms)  # the base built


def test_export_in_chunks_with_writes_between_is_one_moment():
    """A save copies the forward index in chunks, letting writes in between: the state is still that of
    one moment (the last chunk's), and an index built from it answers as the live one did then."""
    from services.skillrepo.index_files import IndexFiles

    rng = random.Random(9)
    idx = BM25Index()
    idx.upsert_many([(f"s{i}", random_doc(rng) + [f"u{i}"], (1, f"{i:064x}")) for i in range(400)])
    idx.EXPORT_CHUNK = 50
    real_frombuffer, calls = np.frombuffer, []

    def frombuffer_and_write(buf, dtype):  # a write lands between two chunks
        calls.append(1)
        if len(calls) == 4:
            idx._lock.release()
            try:
                idx.upsert("s3", ["apple", "late"], (2, "f" * 64))
                idx.remove("s5")
            finally:
                idx._lock.acquire()
        return real_frombuffer(buf, dtype)

    np.frombuffer = frombuffer_and_write
    try:
        state = idx.export_state()
    finally:
        np.frombuffer = real_frombuffer
    assert len(calls) > 10
    import tempfile

    files = IndexFiles(tempfile.mkdtemp())
    files.save(1, {}, state, None)
    back = files.load(1, {}, 0, lambda s: None)
    assert back.documents() == idx.documents() and back.documents()["s3"] == (2, "f" * 64)
    for q in (["apple"], ["late", "mug"], ["u17", "pan", "pan"]):
        assert back.search(q, 5) == idx.search(q, 5)


def _reference_tokenize(text: str) -> list[str]:
    """The module doc's definition, written plainly: NFKD to ASCII, lower-case, split on _SPLIT, normalize."""
    import unicodedata

    from services.skillrepo.search import _SPLIT, _norm_token
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return [n for n in map(_norm_token, _SPLIT.split(folded.lower())) if n]


def test_tokenizer_agrees_with_its_definition_on_random_text():
    rng = random.Random(11)
    alphabet = "abcXYZ019 -_.,;:!?/\\\t\n\r\x00\x7f\"'()[]{}#*éÉüßﬁ½²Ωπ漢😀\u00a0\u2028"
    texts = ["", " ", "-", "a", "Apples", "glass-bottles 2x", "the THE tHe", "ﬁsh ＡＢＣ", "Ça va? naïve café"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(3000)]
    texts += [" ".join(rng.choice(WORDS + ["ss", "bus", "glasses", "is", "us"]) for _ in range(20)) for _ in range(200)]
    for text in texts:
        assert tokenize(text) == _reference_tokenize(text), repr(text)
    # the document's tokens are the fields' tokens, name and description twice (a multiset)
    for _ in range(200):
        name, desc, body = (" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 8))) for _ in range(3))
        name = name.replace(" ", "-")
        want = (_reference_tokenize(name.replace("-", " ")) * 2 + _reference_tokenize(desc) * 2
                + _reference_tokenize(body))
        assert sorted(document_tokens(name, desc, body)) == sorted(want)


@pytest.mark.parametrize("small_query", [BM25Index.SMALL_QUERY, 0], ids=["python-path", "numpy-path"])
def test_bulk_segments_agree_with_reference_through_mixed_writes(small_query):
    """Bulk writes land as segments merged like a binary counter's digits; between them single upserts,
    replacements of bulk-written names, removals and rebuilds: every answer stays the reference's."""
    rng = random.Random(21)
    idx = BM25Index()
    idx.SMALL_QUERY, idx.BATCH = small_query, 150  # several chunks, so segments, per call
    docs: dict[str, list[str]] = {}
    most_segments = 0
    for step in range(40):
        batch = [(f"s{rng.randint(0, 3000)}", random_doc(rng) + [f"u{rng.randint(0, 500)}"], step)
                 for _ in range(rng.randint(64, 700))]
        idx.upsert_many(batch)
        docs.update((n, t) for n, t, _ in batch)
        most_segments = max(most_segments, len(idx.segments))
        for _ in range(rng.randint(0, 30)):
            if not removed_one(rng, idx, docs, 0.4):
                name, toks = f"s{rng.randint(0, 3000)}", random_doc(rng)
                idx.upsert(name, toks)
                docs[name] = toks
        for _ in range(3):
            query = [rng.choice(WORDS) for _ in range(rng.randint(1, 5))] + [f"u{rng.randint(0, 500)}"]
            ref = _fast_reference(docs, query)
            got = idx.scores(query)
            assert got.keys() == ref.keys()
            assert all(got[k] == pytest.approx(ref[k], rel=1e-9) for k in ref)
            expect = sorted(ref.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
            assert [n for n, _, _ in idx.search(query, 5)] == [n for n, _ in expect]
    assert idx.rebuilds > 0 and 1 < most_segments <= 12
    assert idx._columns or small_query  # on the numpy path, columns that segments updated
    for segment in idx.segments:  # each: terms ascending, each term's slots ascending
        assert (np.diff(segment.terms) > 0).all()
        for i in range(len(segment.terms)):
            assert (np.diff(segment.slots[segment.ptr[i]:segment.ptr[i + 1]]) > 0).all()


def test_a_bulk_batch_of_empty_documents_and_a_later_one():
    idx = BM25Index()
    idx.upsert_many([(f"e{i}", [], i) for i in range(100)])  # no postings: no segment
    assert len(idx) == 100 and idx.segments == [] and idx.scores(["apple"]) == {}
    idx.upsert_many([(f"e{i}", ["apple"] * (i % 3 + 1) if i % 2 else [], i) for i in range(100)])
    docs = {f"e{i}": ["apple"] * (i % 3 + 1) if i % 2 else [] for i in range(100)}
    assert idx.scores(["apple"]) == pytest.approx(_fast_reference(docs, ["apple"]), rel=1e-12)


def test_the_token_memo_stays_bounded_by_unique_tokens(monkeypatch):
    from services.skillrepo import search

    monkeypatch.setattr(search, "_NORM_MAX", 500)
    search._NORM.clear()
    for i in range(5000):  # every text has tokens never seen before (a bulk import's ids and numbers)
        text = f"Apples n{i} id-{i}x {'z' * 50}{i} the glasses"
        assert tokenize(text) == _reference_tokenize(text)
        assert len(search._NORM) <= 500 + 10
    search._NORM.clear()



def test_segments_stay_few_when_each_bulk_chunk_is_smaller_than_the_last():
    """An import sorted longest first: every chunk has fewer postings than the one before, which a rule of
    merging only equal sizes never merges (a segment per request until the next rebuild, each one more
    search per query term). Sizes at least halve down the stack: O(log n) segments."""
    idx = BM25Index()
    idx.upsert_many([(f"b{i}", [f"t{(i + j) % 500}" for j in range(40)], 0) for i in range(20_000)])  # the base
    most = 0
    for call in range(65):
        distinct = 140 - 2 * call  # each document two terms fewer than the last call's
        idx.upsert_many([(f"c{call}-{i}", [f"t{(i + j) % 500}" for j in range(distinct - 1)] + ["pear"], 0)
                         for i in range(64)])
        most = max(most, len(idx.segments))
    assert (idx.rebuilds, idx.folds) == (0, 1) and 1 <= most <= 8  # no slot died: folded, not rebuilt
    assert len(idx.scores(["pear"])) == 65 * 64


def test_merge_runs_equals_a_stable_sort(monkeypatch):
    """Rows merged by computed positions are the stable sort of the concatenation by output row: across
    empty rows, an empty part, rows longer than a step and steps cutting rows (MERGE_CHUNK made small)."""
    from services.skillrepo import search

    monkeypatch.setattr(search, "MERGE_CHUNK", 7)
    rng = np.random.default_rng(5)
    n_out, parts, next_slot = 40, [], 0
    for _ in range(5):
        where = np.sort(rng.choice(n_out, size=rng.integers(0, 25), replace=False))
        lens = rng.integers(0, 12, size=len(where)) * (rng.random(len(where)) < 0.8)
        ptr = np.zeros(len(where) + 1, np.int64)
        np.cumsum(lens, out=ptr[1:])
        slots = np.arange(next_slot, next_slot + int(ptr[-1]), dtype=np.int32)  # a later part's are higher
        rng.shuffle(slots)  # (any order within a row: merge_runs keeps it)
        next_slot += int(ptr[-1])
        parts.append((where, ptr, slots, (slots * 3 + 1).astype(np.int32)))
    empty = np.zeros(0, np.int32)
    parts.insert(2, (np.zeros(0, np.int64), np.zeros(1, np.int64), empty, empty))  # a part of no rows
    parts.insert(4, (np.array([3, 9]), np.zeros(3, np.int64), empty, empty))        # of empty rows only
    lead = np.array([0, 0, 0, 20], np.int64)  # two empty rows, then one longer than a step
    parts.append((np.array([1, 2, 5]), lead, np.arange(next_slot, next_slot + 20, dtype=np.int32),
                  np.arange(next_slot, next_slot + 20, dtype=np.int32) * 3 + 1))
    ptr, slots, tfs = search.merge_runs(parts, n_out)
    row = np.concatenate([np.repeat(w, np.diff(p)) for w, p, _, _ in parts])
    order = np.argsort(row, kind="stable")
    assert (slots == np.concatenate([s for _, _, s, _ in parts])[order]).all()
    assert (tfs == slots * 3 + 1).all()
    assert (ptr == np.r_[0, np.cumsum(np.bincount(row, minlength=n_out))]).all()


@pytest.mark.parametrize("small_query", [BM25Index.SMALL_QUERY, 0], ids=["python-path", "numpy-path"])
def test_bulk_writes_fold_segments_into_the_base_without_renumbering(small_query):
    """An import's shape: bulk writes only, a few of them replacing names (dead slots under an eighth). The
    segments are folded into the base (no rebuild: slot and term ids stay, cached columns kept), and every
    answer stays the reference's, a rare term's (the plain-Python scorer) as a frequent one's; dead slots
    past an eighth make the next one a rebuild."""
    rng = random.Random(9)
    idx = BM25Index()
    idx.SMALL_QUERY = small_query
    docs: dict[str, list[str]] = {}
    cached, kept_through_fold = {}, False
    for step in range(60):
        folds = idx.folds
        batch = [(f"s{rng.randint(0, 30_000) if rng.random() < 0.05 else 100_000 + step * 1000 + i}",
                  random_doc(rng) + [f"u{rng.randint(0, 500)}"], step) for i in range(rng.randint(64, 900))]
        if step % 2:
            idx.upsert_many(batch)
        else:
            idx.upsert_texts([(name, "", " ".join(toks), payload) for name, toks, payload in batch])
            batch = [(name, document_tokens(name, "", " ".join(toks)), payload) for name, toks, payload in batch]
        docs.update((n, t) for n, t, _ in batch)
        if step % 10 == 9:
            for query in ([rng.choice(WORDS) for _ in range(rng.randint(1, 4))] + [f"u{rng.randint(0, 500)}"],
                          [f"u{rng.randint(0, 500)}"]):
                ref = _fast_reference(docs, query)
                got = idx.scores(query)
                assert got.keys() == ref.keys() and all(got[k] == pytest.approx(ref[k], rel=1e-9) for k in ref)
                expect = sorted(ref.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
                assert [n for n, _, _ in idx.search(query, 5)] == [n for n, _ in expect]
            cached = dict(idx._columns)
        elif idx.folds > folds and cached:  # a fold kept the columns searches had built (a rebuild drops them)
            assert cached.keys() <= idx._columns.keys()
            kept_through_fold = True
    assert idx.rebuilds == 0 and idx.folds >= 2 and idx.dead > 0 and not idx.tails
    assert kept_through_fold or small_query
    for tid in range(len(idx.base_ptr) - 1):  # each term's base slots ascending across the folded runs
        assert (np.diff(idx.base_slots[idx.base_ptr[tid]:idx.base_ptr[tid + 1]]) > 0).all()
    for name in sorted(docs)[: len(docs) // 4]:  # dead slots past an eighth: the next one rebuilds
        idx.remove(name)
        docs.pop(name)
    late = [(f"late{i}", random_doc(rng), 0) for i in range(20_000)]
    idx.SEGMENT_SHARE = 0.25  # (this many entries trigger the base's next turn)
    idx.upsert_many(late)
    docs.update((n, t) for n, t, _ in late)
    assert idx.rebuilds >= 1
    query = [rng.choice(WORDS) for _ in range(3)]
    ref = _fast_reference(docs, query)
    got = idx.scores(query)
    assert got.keys() == ref.keys() and all(got[k] == pytest.approx(ref[k], rel=1e-9) for k in ref)


def test_a_single_write_between_bulk_ones_makes_the_next_turn_a_rebuild():
    """A tail's slot lies between two segments' slots, which a fold's order (base, segments) would misplace:
    with tails the segments' turn is a rebuild, and answers stay the reference's."""
    idx = BM25Index()
    docs = {f"b{i}": [f"t{i % 50}", "pear"] for i in range(5000)}
    idx.upsert_many([(n, t, 0) for n, t in docs.items()])
    turns = idx.rebuilds, idx.folds
    idx.upsert("single", ["pear", "plum"])
    docs["single"] = ["pear", "plum"]
    late = {f"c{i}": [f"t{i % 70}", "plum"] for i in range(20_000)}
    idx.upsert_many([(n, t, 0) for n, t in late.items()])
    docs.update(late)
    assert (idx.rebuilds, idx.folds) == (turns[0] + 1, turns[1]) and not idx.tails and not idx.segments
    for query in (["plum"], ["pear", "plum"], ["t3", "plum"]):
        ref = _fast_reference(docs, query)
        got = idx.scores(query)
        assert got.keys() == ref.keys() and all(got[k] == pytest.approx(ref[k], rel=1e-9) for k in ref)
