"""µs a bulk line takes to read and check (`_bulk_line` and `from_fields`, as `read_ndjson` does) and its blob
(`blob_of`), over 20,000 lines of scenario 6's corpus, and the raw tokens a skill has there (as a bulk write
splits them: `_folded_texts`): `PYTHONPATH=. .venv/bin/python <this file>`."""
import time

from bench.chaos_million import batches
from services.skillrepo.search import _folded_texts
from services.skillrepo.serving import _bulk_line
from services.skillrepo.store import blob_of
from skillos.skills import from_fields

data = batches(20_000, 5000)
t = time.perf_counter()
docs = []
for chunk in data:
    for line in chunk.split(b"\n"):
        if line.strip():
            obj = _bulk_line(line)
            docs.append(from_fields(obj["name"], obj.get("description"), obj.get("body", ""), obj.get("metadata")))
read = time.perf_counter() - t
t = time.perf_counter()
blobs = [blob_of(d) for d in docs]
made = time.perf_counter() - t
print(f"read and checked {read / len(docs) * 1e6:.2f} µs a line, blob {made / len(docs) * 1e6:.2f} µs")
folded = _folded_texts([f"{d.name} {d.description}" for d in docs] + [d.body for d in docs])
print(f"{(len(folded.split()) - (2 * len(docs) - 1)) / len(docs):.1f} raw tokens a skill")  # less the marks
