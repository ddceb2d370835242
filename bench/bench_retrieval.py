"""Skill retrieval: BM25 alone (the baseline) against dense and hybrid search, on one repo. One command.

    .venv/bin/python -m bench.bench_retrieval              # 1k and 10k skills (~10 min on 2 cores)
    .venv/bin/python -m bench.bench_retrieval --sizes 1000 # ~3 min

Quality, on a labelled set built from the shared data (nothing is downloaded):
  * queries: the human task descriptions of the real ALFWorld games (ALFRED's turk annotations of
    valid_seen and valid_train, three per game), labelled with the game's task type; and the shopping
    queries of WebShop's 1,000 products, labelled with the product's category;
  * skills: for each label a few procedures written from the task type's definition (not from the
    queries: `LABELLED` below), in a repo filled up to the size with one "buy" skill per WebShop product
    (labelled with its category) and then ALFWorld "find" skills that share the queries' words (objects
    and receptacles) but belong to no task type;
  * measures: hit@1 and hit@5 (does the top k hold a skill of the query's label?) and MRR@10.
Precision: the default int8 encoder, and float32 (its quality) on repos up to --fp32-up-to skills.
Latency: top-5 over HTTP on loopback (one uvicorn worker, one sequential client), every query
different (the encoder's query cache never hits), then one query repeated (the training regime).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import tempfile
import time
from pathlib import Path

import httpx

from bench.bench_skillrepo import Table, load_repo, machine_line, pct, service_for, start_http
from skillos.protocol.skillrepo import SEARCH_MODES as MODES
from skillos.skills import SkillDoc

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("SKILLOS_BENCH_DATA", ROOT.parent / "shared" / "data"))
# Procedures per label, written from each task type's definition (ALFWorld's six, WebShop's five
# categories), the way a curator would phrase them.
LABELLED: dict[str, list[tuple[str, str, str]]] = {
    "pick_and_place_simple": [
        ("place-object-in-receptacle", "Use when a task asks to put or place one object in or on a receptacle.",
         ("1. look around and go to where the object is likely to be\n2. take the object\n3. go to the target "
         "receptacle, open it if it is closed\n4. put the object in or on it")),
        ("move-item-to-location", "Use when an item must be moved to another location and nothing else done to it.",
         ("1. search countertops, tables and shelves for the item\n2. pick it up\n3. carry it to the location and "
         "set it down")),
    ],
    "look_at_obj_in_light": [
        ("examine-object-under-lamp", "Use when a task asks to look at or examine an object under a lamp or light.",
         ("1. find and take the object\n2. find a desklamp or floorlamp\n3. use (turn on) the lamp while holding "
         "the object")),
        ("inspect-with-light", "Use when something must be inspected by the light of a lamp.",
         "1. hold the thing to inspect\n2. go to the lamp and switch it on"),
    ],
    "pick_clean_then_place_in_recep": [
        ("clean-object-then-place", "Use when a task asks to clean or wash an object and then put it somewhere.",
         "1. take the object\n2. go to the sinkbasin and clean it with the sinkbasin\n3. put it at the target"),
        ("rinse-before-storing", "Use when an item has to be rinsed before it is stored.",
         "1. pick the item up\n2. rinse it at the sink\n3. store it where the task says"),
    ],
    "pick_heat_then_place_in_recep": [
        ("heat-object-then-place", "Use when a task asks to heat or warm an object and then put it somewhere.",
         "1. take the object\n2. go to the microwave and heat it with the microwave\n3. put it at the target"),
        ("warm-food-in-microwave", "Use when food must be made hot before it is put away.",
         "1. pick up the food\n2. heat it in the microwave\n3. place it where the task says"),
    ],
    "pick_cool_then_place_in_recep": [
        ("cool-object-then-place", "Use when a task asks to cool or chill an object and then put it somewhere.",
         "1. take the object\n2. go to the fridge and cool it with the fridge\n3. put it at the target"),
        ("chill-in-fridge", "Use when an item must be cold before it is put down.",
         "1. pick up the item\n2. cool it in the refrigerator\n3. place it where the task says"),
    ],
    "pick_two_obj_and_place": [
        ("place-two-objects", "Use when a task asks to put two objects of the same kind in or on a receptacle.",
         ("1. find and take the first object, put it at the target\n2. find the second one, take it and put "
         "it there too")),
        ("move-a-pair", "Use when a pair of identical items must both end up in one place.",
         "1. carry the first item to the place\n2. come back for the second and carry it too"),
    ],
    "beauty": [
        ("shop-beauty-products", ("Use when shopping for beauty and personal care: skin care, hair care, makeup, "
         "fragrance."), ("1. search with the product type and the key attribute\n2. check size, scent and skin "
         "type options\n3. buy the one under the price limit")),
    ],
    "electronics": [
        ("shop-electronics", ("Use when shopping for electronics: cables, chargers, headphones, cases, cameras, "
         "accessories."), ("1. search with the device and the connector or model\n2. check compatibility and "
         "color options\n3. buy within the budget")),
    ],
    "garden": [
        ("shop-home-and-garden", "Use when shopping for home, kitchen, furniture or garden items.",
         "1. search the item and its material\n2. check size and color options\n3. buy within the budget"),
    ],
    "fashion": [
        ("shop-clothing-and-shoes", "Use when shopping for clothing, shoes or fashion accessories.",
         "1. search the garment and its style\n2. choose the size and color the goal asks for\n3. buy it"),
    ],
    "grocery": [
        ("shop-food-and-grocery", "Use when shopping for food, snacks, drinks or grocery items.",
         ("1. search the food and its dietary attributes (gluten free, vegan, sugar free)\n2. pick the flavor "
         "and pack size\n3. buy within the budget")),
    ],
}

OBJECTS = ["apple", "mug", "cup", "plate", "bowl", "knife", "fork", "spoon", "pan", "pot", "egg", "potato", "tomato",
           "lettuce", "bread", "book", "pen", "pencil", "cd", "keychain", "watch", "soapbar", "towel", "cellphone",
           "creditcard", "statue", "vase", "pillow", "laptop", "alarmclock", "newspaper", "remotecontrol", "box",
           "candle", "cloth", "spraybottle", "toiletpaper", "glassbottle", "winebottle", "kettle", "ladle", "spatula",
           "butterknife", "dishsponge", "saltshaker", "peppershaker", "tissuebox", "basketball", "baseballbat"]
RECEPTACLES = ["countertop", "diningtable", "sidetable", "coffeetable", "desk", "drawer", "cabinet", "shelf",
               "dresser", "bed", "sofa", "armchair", "safe", "garbagecan", "sinkbasin", "bathtubbasin", "toilet",
               "stoveburner", "microwave", "fridge", "coffeemachine", "toaster", "countertop 2", "shelf 3"]


def alfworld_queries() -> list[tuple[str, str]]:
    out = []
    for split in ("valid_seen", "valid_train"):
        for path in sorted(glob.glob(str(DATA / "alfworld" / "json_2.1.1" / split / "*" / "*" / "traj_data.json"))):
            d = json.loads(Path(path).read_text())
            for ann in d["turk_annotations"]["anns"]:
                out.append((ann["task_desc"].strip(), d["task_type"]))
    return out


def webshop_products() -> list[dict]:
    return json.loads((DATA / "webshop" / "items_shuffle_1000.reconstructed.json").read_text())


def webshop_queries() -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for p in webshop_products():
        q = (p.get("query") or "").strip()
        if q and q not in seen:
            seen[q] = p["category"]
    return sorted(seen.items())


def _slug(text: str, limit: int = 48) -> str:
    words = "".join(c if c.isalnum() else " " for c in text.lower()).split()
    return "-".join(words)[:limit].strip("-") or "x"


def distractors(n: int, seed: int = 11) -> list[SkillDoc]:
    """Skills that share the queries' words: notes on each WebShop product, then ALFWorld "find" skills."""
    rng = random.Random(seed)
    docs: list[SkillDoc] = []
    for p in webshop_products():
        title = p["name"][:120]
        docs.append(SkillDoc(f"buy-{_slug(title, 40)}-{len(docs)}", f"Product notes: {title}.",
                             f"asin {p['asin']}; {p.get('small_description', '')[:300]}", {}))
    while len(docs) < n:
        obj, recep, other = rng.choice(OBJECTS), rng.choice(RECEPTACLES), rng.choice(RECEPTACLES)
        docs.append(SkillDoc(f"find-{_slug(obj)}-{_slug(recep)}-{len(docs)}",
                             f"Where a {obj} is usually found: the {recep} or the {other}.",
                             f"check the {recep} first, then the {other}; open it if it is closed; the {obj} may "
                             f"be behind other objects", {}))
    return docs[:n]


def build_repo(svc, repo: str, size: int) -> dict[str, str]:
    """Fill ``repo`` with the labelled skills plus distractors up to ``size``; name -> label (a product's
    notes count for its WebShop category; the ALFWorld "find" skills belong to no task type)."""
    label_of = {name: label for label, skills in LABELLED.items() for name, _, _ in skills}
    docs = [SkillDoc(n, d, b, {}) for skills in LABELLED.values() for n, d, b in skills]
    docs += distractors(size - len(docs))
    category = {p["asin"]: p["category"] for p in webshop_products()}
    for d in docs:
        if d.name.startswith("buy-"):
            label_of[d.name] = category[d.body.split(";")[0].removeprefix("asin ")]
    load_repo(svc, repo, docs)
    return label_of


def quality(svc, repo: str, queries: list[tuple[str, str]], label_of: dict[str, str], mode: str) -> dict:
    hit1 = hit5 = rr = 0.0
    for q, label in queries:
        names = [h.name for h in svc.search(repo, q, 10, mode)]
        ranks = [i for i, n in enumerate(names, start=1) if label_of.get(n) == label]
        first = ranks[0] if ranks else None
        hit1 += first == 1
        hit5 += first is not None and first <= 5
        rr += 1.0 / first if first else 0.0
    n = len(queries)
    return {"hit1": hit1 / n, "hit5": hit5 / n, "mrr": rr / n}


def http_latency(url: str, repo: str, queries: list[str], mode: str) -> list[float]:
    out = []
    with httpx.Client(base_url=url, timeout=600) as h:
        for q in queries:
            t = time.perf_counter()
            h.get(f"/v1/repos/{repo}/search", params={"q": q, "k": 5, "mode": mode}).raise_for_status()
            out.append((time.perf_counter() - t) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100,1000,10000", help="repo sizes (skills)")
    ap.add_argument("--latency-queries", type=int, default=300)
    ap.add_argument("--fp32-up-to", type=int, default=1000,
                    help="also measure the float32 encoder's quality on repos up to this size (it embeds ~2x slower)")
    args = ap.parse_args()
    import logging

    logging.disable(logging.WARNING)
    alf, shop = alfworld_queries(), webshop_queries()
    print(f"labelled queries: {len(alf)} ALFWorld task descriptions, {len(shop)} WebShop product queries; "
          f"{sum(len(v) for v in LABELLED.values())} labelled skills", flush=True)
    table = Table()
    with tempfile.TemporaryDirectory(prefix="skillos-bench-retrieval-") as d:
        for size in [int(s) for s in args.sizes.split(",") if s]:
            db = f"sqlite:///{d}/retrieval-{size}.db"
            variants = [True] + ([False] if size <= args.fp32_up_to else [])
            label_of: dict[str, str] = {}
            for int8 in variants:
                svc = service_for(db, embedding_int8=int8)
                if not label_of:  # the fp32 pass searches the repo the int8 pass built
                    label_of = build_repo(svc, "bench", size)
                precision = "int8" if int8 else "fp32"
                t = time.perf_counter()
                svc.search("bench", "warm up", 5, "dense")  # loads the encoder, embeds and stores every skill
                table.add(f"embed {size} skills (first dense query)", f"dense, {precision}",
                          f"{time.perf_counter() - t:.1f} s")
                enc = svc.dense.encoder
                lat: list[float] = []
                for q, _ in alf[:200]:
                    t = time.perf_counter()
                    enc._one(q)
                    lat.append((time.perf_counter() - t) * 1000)
                table.add("encode one query, in-process", f"encoder {precision}",
                          f"p50 {pct(lat, 50):.2f} ms  p99 {pct(lat, 99):.2f} ms")
                for name, queries in (("ALFWorld", alf), ("WebShop", shop)):
                    for mode in (MODES if int8 else MODES[1:]):
                        m = quality(svc, "bench", queries, label_of, mode)
                        system = "bm25 (baseline)" if mode == "bm25" else f"{mode}, {precision}"
                        table.add(f"{name} quality, {size} skills", system,
                                  f"hit@1 {m['hit1']:.3f} hit@5 {m['hit5']:.3f} MRR {m['mrr']:.3f}")
                svc.stop()

            proc, url = start_http(db)  # the default server: int8
            try:
                # each mode its own queries: the server keeps the vectors of queries it has seen
                shuffled = [q for q, _ in alf]
                random.Random(3).shuffle(shuffled)
                n = min(args.latency_queries, len(shuffled) // len(MODES))
                for i, mode in enumerate(MODES):
                    http_latency(url, "bench", [f"load the index and the encoder ({mode})"], mode)
                    latency_queries = shuffled[i * n:(i + 1) * n]
                    lat = http_latency(url, "bench", latency_queries, mode)
                    target = "p50 <= 10 ms" if mode == "hybrid" and size >= 10000 else ""
                    table.add(f"top-5 over HTTP, {size} skills, new queries",
                              "bm25 (baseline)" if mode == "bm25" else f"{mode}, int8",
                              f"p50 {pct(lat, 50):.2f} ms  p99 {pct(lat, 99):.2f} ms", target)
                for mode in ("dense", "hybrid"):
                    lat = http_latency(url, "bench", [latency_queries[0]] * 100, mode)
                    table.add(f"top-5 over HTTP, {size} skills, one query again", f"{mode}, int8",
                              f"p50 {pct(lat, 50):.2f} ms  p99 {pct(lat, 99):.2f} ms")
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    print()
    print(table.render())
    print("\n" + machine_line("encoder all-MiniLM-L6-v2 (sentence-transformers, TorchScript, CPU)"))


if __name__ == "__main__":
    main()
