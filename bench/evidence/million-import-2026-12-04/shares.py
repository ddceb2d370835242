"""Shares of a py-spy raw profile (`profile_import.py`; .gz read as is): each frame's share of the busy samples
(threads waiting in select, a lock or a socket left out), inclusive, then by the innermost frame.

    python bench/evidence/million-import-2026-12-04/shares.py profiles/after-fold.raw.gz [rows]"""
import collections
import gzip
import re
import sys

IDLE = re.compile(r"\b(wait|select|_worker|accept|sleep|poll|recv_into|_recv)\b")
path, rows = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
inclusive, innermost, busy = collections.Counter(), collections.Counter(), 0
with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
    for line in f:
        stack, _, count = line.rstrip().rpartition(" ")
        frames = [re.sub(r":\d+\)", ")", fr) for fr in stack.split(";")]
        if IDLE.search(frames[-1]) and "psycopg" not in stack:
            continue
        busy += int(count)
        for fr in set(frames):
            inclusive[fr] += int(count)
        innermost[frames[-1]] += int(count)
print(f"busy samples {busy}")
for title, counts in (("inclusive", inclusive), ("innermost", innermost)):
    print(f"--- {title}")
    for frame, count in counts.most_common(rows):
        print(f"{100 * count / busy:5.1f}% {frame[:150]}")
