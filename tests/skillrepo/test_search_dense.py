"""Dense and hybrid search: the fusion and the vector index by hand-computed cases, then the real
service with the real all-MiniLM-L6-v2 encoder over HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from conftest import run_service
from skillrepo_fixtures import database

from services.skillrepo.dense import RRF_K, DenseIndex, fuse, skill_text
from skillos.clients.skillrepo import SkillRepoClient, SkillRepoError

# --- fusion, by hand ---------------------------------------------------------------------------


def _ranking(*names):
    return [(n, 1.0, (1, f"{n} description", f"{n} body", f"h-{n}")) for n in names]


def test_rrf_scores_are_the_sum_of_reciprocal_ranks():
    fused = fuse(_ranking("a", "b", "c"), _ranking("c", "d"), k=4)
    expected = {"a": 1 / (RRF_K + 1), "b": 1 / (RRF_K + 2), "c": 1 / (RRF_K + 3) + 1 / (RRF_K + 1),
                "d": 1 / (RRF_K + 2)}
    assert [n for n, _, _ in fused] == ["c", "a", "b", "d"]  # b and d tie: by name
    for name, score, payload in fused:
        assert score == pytest.approx(expected[name])
        assert payload[3] == f"h-{name}"


def test_a_keyword_only_hit_competes_and_the_best_keyword_hit_is_never_dropped():
    # five skills found by both rankings outrank a skill BM25 alone ranks first ...
    both = ["p", "q", "r", "s", "t"]
    keyword = _ranking("exact", *both)
    dense = _ranking(*both)
    by_rrf = sorted({n: (1 / (RRF_K + 1 + i + 1) + 1 / (RRF_K + i + 1)) for i, n in enumerate(both)}.items(),
                    key=lambda kv: -kv[1])
    assert by_rrf[4][1] > 1 / (RRF_K + 1)  # RRF alone would drop "exact" from the top 5
    fused = [n for n, _, _ in fuse(keyword, dense, k=5)]
    assert "exact" in fused and len(fused) == 5 and "t" not in fused  # ... but it keeps its place
    # a skill only the dense ranking finds is in the pool too
    assert "only-dense" in [n for n, _, _ in fuse(_ranking("a"), _ranking("only-dense"), k=2)]
    assert fuse([], _ranking("x", "y"), k=1)[0][0] == "x"
    assert fuse(_ranking("x"), [], k=0) == []


# --- the vector index, by hand ------------------------------------------------------------------


def _unit(*xs):
    v = np.array(xs, np.float32)
    return v / np.linalg.norm(v)


def test_dense_index_ranks_by_cosine_and_reuses_rows():
    idx = DenseIndex(dim=3)
    idx.upsert("x", "hx", _unit(1, 0, 0), (1, "", "", "hx"))
    idx.upsert("y", "hy", _unit(1, 1, 0), (1, "", "", "hy"))
    idx.upsert("z", "hz", _unit(0, 0, 1), (1, "", "", "hz"))
    q = _unit(1, 0.2, 0)
    assert [n for n, _, _ in idx.search(q, 3)] == ["x", "y", "z"]
    assert idx.search(q, 1)[0][1] == pytest.approx(float(_unit(1, 0, 0) @ q), abs=2e-3)  # rows are float16
    idx.remove("x")
    assert [n for n, _, _ in idx.search(q, 5)] == ["y", "z"] and len(idx) == 2
    idx.upsert("y", "hy2", _unit(0, 0, 1), (2, "", "", "hy2"))  # an update replaces the row in place
    assert idx.hash_of["y"] == "hy2" and len(idx) == 2
    for i in range(40):  # past the first 16 rows: the matrix grows, rows freed by removals are reused
        idx.upsert(f"n{i}", f"h{i}", _unit(1, i, 1), (1, "", "", f"h{i}"))
    assert idx.slot_of["n0"] == 0  # the row "x" left
    assert len(idx) == 42 and idx.rows == 42 and idx.search(_unit(1, 39, 1), 1)[0][0] == "n39"


def test_the_embedded_text_leads_with_name_and_description():
    assert skill_text("heat-object", "Use when a task says heat", "1. go to microwave") == \
        "heat object: Use when a task says heat\n1. go to microwave"


# --- the real service, over HTTP -----------------------------------------------------------------

SKILLS = {
    "heat-object": ("Use when a task asks to heat or warm something and place it somewhere.",
                    ("1. find and take the object\n2. go to microwave 1, heat it with the microwave\n3. put it "
                    "in or on the target receptacle")),
    "cool-object": ("Use when a task asks to cool or chill an object before placing it.",
                    "1. take the object\n2. go to fridge 1, cool it with the fridge\n3. put it at the target"),
    "clean-object": ("Use when a task asks to clean or wash an object and put it somewhere.",
                     "1. take the object\n2. go to sinkbasin 1, clean it with the sinkbasin\n3. put it down"),
    "examine-in-light": ("Use when a task asks to look at or examine an object under a lamp.",
                         "1. take the object\n2. go to the desklamp and use it"),
}


def skill(name: str) -> dict:
    description, body = SKILLS[name]
    return {"name": name, "description": description, "body": body}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def dense_service(request, tmp_path_factory):
    with database(request.param, request, tmp_path_factory.mktemp(request.param)) as url:
        tmp = tmp_path_factory.mktemp("svc")
        with run_service(["skillrepo"], env={"SKILLOS_DATABASE_URL": url}, tmp_path=tmp, ready_timeout=300) as svc:
            yield svc, url, tmp


@pytest.fixture
def client(dense_service):
    with SkillRepoClient(dense_service[0].url, timeout=120) as c:
        yield c


@pytest.fixture
def repo(client):
    name = f"d-{uuid.uuid4().hex[:10]}"
    client.create_repo(name)
    for n in SKILLS:
        client.insert_skill(name, skill(n))
    return name


def names(hits):
    return [h.name for h in hits]


def test_dense_finds_by_meaning_what_bm25_cannot(client, repo):
    # none of these queries shares a word with any skill: BM25 finds nothing, the encoder finds the procedure
    for query, expected in (("make the soup hot", "heat-object"), ("freeze a lettuce", "cool-object"),
                            ("scrub the pan", "clean-object")):
        assert client.search(repo, query, k=5, mode="bm25") == []
        assert names(client.search(repo, query, k=1, mode="dense")) == [expected], query
        assert names(client.search(repo, query, k=1, mode="hybrid")) == [expected], query
    hits = client.search(repo, "freeze a lettuce", k=5, mode="dense")
    assert len(hits) == 4 and all(-1.0 <= h.score <= 1.0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert names(client.search(repo, "chill the tomato, then place it on the countertop", k=1,
                               mode="hybrid")) == ["cool-object"]


def test_writes_are_searchable_by_the_next_dense_query(client, repo):
    client.insert_skill(repo, {"name": "slice-food", "description": "Use when a task asks to cut or slice food.",
                               "body": "take a knife, then slice the object"})
    assert names(client.search(repo, "cut the bread into pieces", k=1, mode="dense")) == ["slice-food"]
    client.put_skill(repo, {"name": "slice-food", "description": "Use when a task asks to turn on the television.",
                            "body": "find the remote control and press power"})
    assert names(client.search(repo, "switch on the TV", k=1, mode="dense")) == ["slice-food"]
    client.delete_skill(repo, "slice-food")
    assert "slice-food" not in names(client.search(repo, "switch on the TV", k=5, mode="dense"))
    assert "slice-food" not in names(client.search(repo, "switch on the TV", k=5, mode="hybrid"))
    ops = client.apply_ops(repo, [{"name": "new_skill_insert", "arguments": {
        "skill_name": "open-container", "content": "---\nname: open-container\ndescription: Use when an object "
        "is inside a closed drawer, cabinet or safe.\n---\n\n1. open the container\n2. take the object"}}])
    assert ops.applied
    assert names(client.search(repo, "the key is locked away in a drawer", k=1, mode="hybrid")) == ["open-container"]


def test_a_restored_or_reinserted_skill_is_found_with_its_new_version(client, repo):
    first = client.get_skill(repo, "clean-object").version
    client.put_skill(repo, {"name": "clean-object", "description": "Use when a task asks to turn on a lamp.",
                            "body": "switch it on"})
    assert names(client.search(repo, "scrub the pan", k=1, mode="dense")) == ["clean-object"]  # the index syncs
    restored = client.restore_skill(repo, "clean-object", first)  # same content as version 1, a new version
    hit = client.search(repo, "scrub the pan", k=1, mode="dense")[0]
    assert (hit.name, hit.version) == ("clean-object", restored.version) and restored.version > first
    client.delete_skill(repo, "clean-object")
    again = client.insert_skill(repo, skill("clean-object"))
    hit = client.search(repo, "scrub the pan", k=1, mode="hybrid")[0]
    assert (hit.name, hit.version) == ("clean-object", again.version)


def test_hybrid_keeps_an_exact_keyword_hit(client, repo):
    client.insert_skill(repo, {"name": "xk42-widget", "description": "Use for product xk42.", "body": "buy it"})
    hits = names(client.search(repo, "heat the mug xk42", k=2, mode="hybrid"))
    assert "xk42-widget" in hits and "heat-object" in hits


def vectors_made(url: str) -> dict[str, float]:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics").text
    return {s.labels["source"]: s.value for f in text_string_to_metric_families(text)
            if f.name == "skillos_skillrepo_skill_vectors" for s in f.samples if s.name.endswith("_total")}


def test_forks_and_a_restarted_replica_reuse_stored_vectors(client, repo, dense_service):
    svc, url, tmp = dense_service
    client.search(repo, "warm an egg", k=1, mode="dense")
    before = vectors_made(svc.url)
    client.fork_repo(repo, repo + "-f")
    assert names(client.search(repo + "-f", "warm an egg", k=1, mode="dense")) == ["heat-object"]
    after = vectors_made(svc.url)
    assert after["encoded"] == before["encoded"]  # a fork shares its source's content, so its vectors
    assert after["stored"] - before.get("stored", 0) == len(SKILLS)
    with run_service(["skillrepo"], env={"SKILLOS_DATABASE_URL": url}, tmp_path=tmp, ready_timeout=300) as other:
        with SkillRepoClient(other.url, timeout=120) as c2:
            assert names(c2.search(repo, "warm an egg", k=1, mode="dense")) == ["heat-object"]
        # another replica (or a restart) reads every skill's vector from the database
        assert vectors_made(other.url) == {"stored": len(SKILLS), "encoded": 0}


def test_bad_search_modes_are_refused_clearly(client, repo, dense_service):
    import httpx

    r = httpx.get(f"{dense_service[0].url}/v1/repos/{repo}/search", params={"q": "x", "mode": "semantic"})
    assert r.status_code == 422 and "bm25" in r.text
    with pytest.raises(SkillRepoError) as e:
        client.search("no-such-repo-" + uuid.uuid4().hex[:6], "x", mode="dense")
    assert e.value.status == 404


def test_dense_search_off_refuses_with_what_to_do(tmp_path):
    env = {"SKILLOS_DATABASE_URL": f"sqlite:///{tmp_path}/off.db", "SKILLOS_DENSE_SEARCH": "false"}
    with run_service(["skillrepo"], env=env, tmp_path=tmp_path) as svc, SkillRepoClient(svc.url) as c:
        c.create_repo("r")
        c.insert_skill("r", skill("heat-object"))
        assert names(c.search("r", "heat", mode="bm25")) == ["heat-object"]
        for mode in ("dense", "hybrid"):
            with pytest.raises(SkillRepoError) as e:
                c.search("r", "heat", mode=mode)
            assert e.value.status == 400 and e.value.code == "dense_search_off"
            assert "SKILLOS_DENSE_SEARCH" in e.value.message


@pytest.mark.parametrize("model", ["missing", "broken"])
def test_an_encoder_that_cannot_load_is_a_clear_503_not_a_500(model, tmp_path):
    path = tmp_path / "model"
    if model == "broken":  # a directory that looks like a model and is not one
        path.mkdir()
        (path / "config.json").write_text('{"model_type": "bert"}')
        (path / "model.safetensors").write_bytes(b"not weights")
    env = {"SKILLOS_DATABASE_URL": f"sqlite:///{tmp_path}/nomodel.db", "SKILLOS_EMBEDDING_MODEL": str(path)}
    with run_service(["skillrepo"], env=env, tmp_path=tmp_path) as svc, SkillRepoClient(svc.url) as c:
        c.create_repo("r")
        c.insert_skill("r", skill("heat-object"))
        for _ in range(2):  # the second answer comes from the remembered failure
            with pytest.raises(SkillRepoError) as e:
                c.search("r", "heat", mode="dense")
            assert e.value.status == 503 and e.value.code == "dense_unavailable"
            assert ("SKILLOS_EMBEDDING_MODEL" if model == "missing" else "failed to load") in e.value.message
        assert names(c.search("r", "heat")) == ["heat-object"]  # BM25 unaffected


def test_the_client_refuses_an_answer_that_ignored_the_mode():
    """A skill repo older than search modes answers BM25 hits without `mode`: not taken for dense ones."""
    import httpx

    def old_server(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"hits": []})

    with SkillRepoClient("http://old-repo", transport=httpx.MockTransport(old_server)) as c:
        assert c.search("r", "heat") == []
        with pytest.raises(SkillRepoError) as e:
            c.search("r", "heat", mode="dense")
        assert e.value.code == "search_mode_unsupported"
