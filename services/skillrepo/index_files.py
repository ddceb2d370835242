"""Persisted BM25 indexes: a replica's index of a big repo saved to a file, so that a restart reads it
instead of re-tokenizing every skill (a million skills: seconds instead of minutes).

Where: ``SKILLOS_INDEX_DIR``, a folder of the replica's own (an emptyDir or a volume in Kubernetes); empty
turns persistence off. A local file rather than a table: it is derived data every replica can rebuild, as
big as the index (hundreds of MB per million skills), and a restart reads it at disk speed without putting
that traffic on the database.

Never served wrong: a file records what it reflects (the format, the tokenizer and scoring parameters, the
database's repo: id, name and creation time, the repo seq, and the version written at that seq), and a
loader checks all of it against the database before using it, then applies `Store.changes_since(seq)`: a
stale file is caught up. A file of another format or tokenizer, another database or repo, a history the
database does not have (restored from a backup, say) or with corrupt contents (zip CRC) is refused, and the
index is rebuilt from the database as if there were none.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from services.skillrepo import search
from services.skillrepo.search import BM25Index, Compacted, compact_state

FORMAT = 1
# bump TOKENIZER when `search.tokenize` or `document_tokens` changes what they produce
TOKENIZER = 1
SCORING = hashlib.sha256(json.dumps([TOKENIZER, search.K1, search.B, search.FIELD_WEIGHTS,
                                     sorted(search.STOPWORDS), search._SPLIT.pattern]).encode()).hexdigest()[:16]


_HASH = re.compile(".{64}", re.DOTALL)


class Refused(Exception):
    """A file that must not be used; the message says why."""


def _text(items: list[str]) -> np.ndarray:
    return np.frombuffer("\0".join(items).encode("utf-8"), np.uint8)


def _items(blob: np.ndarray, n: int) -> list[str]:
    out = blob.tobytes().decode("utf-8").split("\0") if n else []
    if len(out) != n:
        raise Refused(f"{len(out)} strings where the header says {n}")
    return out


class IndexFiles:
    """One file per repo id in ``folder``: ``repo-<id>.bm25.npz`` (numpy arrays, uncompressed zip)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        for part in self.folder.glob("repo-*.part"):  # a save cut by a crash: up to a GB each, never read
            part.unlink(missing_ok=True)

    def path(self, repo_id: int) -> Path:
        return self.folder / f"repo-{repo_id}.bm25.npz"

    def repo_ids(self) -> list[int]:
        ids = []
        for p in self.folder.glob("repo-*.bm25.npz"):
            try:
                ids.append(int(p.name.split("-")[1].split(".")[0]))
            except ValueError:
                continue
        return sorted(ids)

    def save(self, repo_id: int, identity: dict, state: dict | Compacted, last: list | None) -> int:
        """Write ``state`` (`BM25Index.export_state`, or its `compact_state`; payloads (version, blob hash))
        atomically: a crash mid-write leaves the previous file. Returns the bytes written."""
        c = state if isinstance(state, Compacted) else compact_state(state)
        names, payload, terms, built = c.names, c.payload, c.term_str, c.built
        meta = {"format": FORMAT, "scoring": SCORING, "repo_id": repo_id, **identity, "seq": c.seq,
                "last": last, "docs": len(names), "terms": len(terms)}
        arrays = {"meta": np.frombuffer(json.dumps(meta).encode(), np.uint8), "names": _text(names),
                  "terms": _text(terms), "versions": np.array([p[0] for p in payload], np.int32),
                  "hashes": np.frombuffer(bytes.fromhex("".join(p[1] for p in payload)), np.uint8),
                  "dl": c.dl}
        arrays.update({k: built[k] for k in ("fwd_ptr", "fwd_terms", "fwd_tfs", "base_ptr", "base_slots",
                                             "base_tfs", "df")})
        target = self.path(repo_id)
        # a name of its own per save: two savers (a periodic save and the one at shutdown, or two replicas
        # sharing a folder, pid 1 both) must never write one inode
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f"repo-{repo_id}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return target.stat().st_size

    def load(self, repo_id: int, identity: dict, db_seq: int, version_at) -> BM25Index:
        """The file's index, checked against the database (``identity``: the repo's name and creation time;
        ``version_at(seq)``: [name, version, blob hash] written at that seq, or None). Raises `Refused`."""
        path = self.path(repo_id)
        if not path.exists():
            raise Refused("no file")
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(z["meta"].tobytes())
                want = {"format": FORMAT, "scoring": SCORING, "repo_id": repo_id, **identity}
                for key, value in want.items():
                    if meta.get(key) != value:
                        raise Refused(f"{key} is {meta.get(key)!r}, not {value!r}")
                seq = int(meta["seq"])
                if seq > db_seq:
                    raise Refused(f"it reflects seq {seq}, past the database's {db_seq}")
                if seq and meta.get("last") != version_at(seq):
                    raise Refused(f"the database's version at seq {seq} is not the file's {meta.get('last')}")
                n = int(meta["docs"])
                names, terms = _items(z["names"], n), _items(z["terms"], int(meta["terms"]))
                versions, hashes = z["versions"].tolist(), z["hashes"].tobytes().hex()
                built = {k: z[k] for k in ("fwd_ptr", "fwd_terms", "fwd_tfs", "base_ptr", "base_slots", "base_tfs",
                                           "df")}
                dl = z["dl"]
        except Refused:
            raise
        except (OSError, ValueError, KeyError, TypeError, AttributeError, zipfile.BadZipFile, EOFError,
                UnicodeDecodeError) as e:  # TypeError / AttributeError: a meta of the wrong shape
            raise Refused(f"unreadable: {type(e).__name__}: {e}") from None
        lengths = {"versions": len(versions), "hashes": len(hashes) // 64, "dl": len(dl),
                   "fwd_ptr": len(built["fwd_ptr"]) - 1, "df": len(built["df"]) if n else 0,
                   "base_ptr": len(built["base_ptr"]) - 1 if n else 0}
        expect = {"versions": n, "hashes": n, "dl": n, "fwd_ptr": n, "df": len(terms), "base_ptr": len(terms)}
        if lengths != expect or len(built["base_slots"]) != len(built["fwd_terms"]):
            raise Refused(f"inconsistent arrays: {lengths} for {expect}")
        payload = list(zip(versions, _HASH.findall(hashes), strict=True))
        return BM25Index.from_built(names, payload, dl, terms, built, seq)

    def discard(self, repo_id: int) -> None:
        self.path(repo_id).unlink(missing_ok=True)
