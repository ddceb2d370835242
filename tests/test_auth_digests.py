"""Token lists that hold no usable token (issue 51): a SKILLOS_AUTH_TOKENS entry may name its token by its
SHA-256 digest (`sha256:<hex>:scope[:prefix[:label]]`, `skillos.auth`), `skillos token digest` and
`digest-list` write such entries, and an env server given only digests lets the same callers in."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import httpx
import pytest
from conftest import ROOT, free_port, run_service

from skillos.auth import Authenticator, caller_id, digest_entry, digest_tokens, parse_tokens, token_digest
from skillos.errors import APIError

SECRET = "s3cret-token-of-acme"
HEX = hashlib.sha256(SECRET.encode()).hexdigest()


def _bearer(token: str) -> str:
    return f"Bearer {token}"


def test_a_digest_entry_grants_what_the_token_entry_grants():
    plain = parse_tokens(f"{SECRET}:rw:acme:acme-ci")
    by_digest = parse_tokens(f"sha256:{HEX}:rw:acme:acme-ci")
    assert plain == by_digest                              # the same digest and the same grant
    assert by_digest[0][1].caller_id == caller_id(SECRET)   # a trajectory's owner stays its owner
    auth = Authenticator("tokens", f"sha256:{HEX.upper()}:rw:acme:acme-ci,other:read")   # hex in either case
    grant = auth.authenticate(_bearer(SECRET))
    assert (grant.scope, grant.prefix, grant.token_label) == ("rw", "acme", "acme-ci")
    assert auth.authenticate(_bearer("other")).token_label == "token#2"   # plain and digest entries mix
    for wrong in (HEX, f"sha256:{HEX}", SECRET + "x"):     # the digest itself is no token
        with pytest.raises(APIError) as e:
            auth.authenticate(_bearer(wrong))
        assert e.value.status == 401
    assert auth.grant_of(caller_id(SECRET)) == grant


BAD_DIGEST, BAD_ENTRY = "SHA-256 digest (64 hex digits)", "is not 'token:read|rw"


@pytest.mark.parametrize(("entry", "says"), [
    ("sha256:abc123:rw", BAD_DIGEST),                  # too short
    (f"sha256:{'g' * 64}:rw", BAD_DIGEST),             # not hex
    (f"sha256:{HEX}0:rw", BAD_DIGEST),                 # too long
    ("sha256:", BAD_DIGEST),
    (f"sha256:{HEX}", BAD_ENTRY),                      # no scope
    (f"sha256:{HEX}:admin", BAD_ENTRY),                # no such scope
    (f"sha256:{HEX}:rw:acme:not a label", "label"),
])
def test_a_malformed_digest_entry_is_refused_without_echoing_it(entry, says):
    with pytest.raises(ValueError) as e:
        Authenticator("tokens", f"fine:rw,{entry}")
    assert "entry 2" in str(e.value) and says in str(e.value)
    assert entry.split(":")[1] not in str(e.value) or entry == "sha256:"


def test_the_digest_of_the_templates_placeholder_is_refused():
    for placeholder in ("CHANGE-ME", "change-me"):
        with pytest.raises(ValueError, match="digest of the deployment template's placeholder"):
            Authenticator("tokens", f"sha256:{token_digest(placeholder)}:rw")
    with pytest.raises(ValueError, match="placeholder"):
        digest_entry("CHANGE-ME", "rw")


def test_a_whole_list_rewritten_as_digests_keeps_every_grant():
    spec = f"{SECRET}:rw:acme,,reader:read::dash,sha256:{token_digest('x')}:rw::ops,last:read"
    digested = digest_tokens(spec)
    assert SECRET not in digested and "reader" not in digested.split(",")[2].split(":")[0]
    assert parse_tokens(digested) == parse_tokens(spec)   # labels by position (token#1, token#5) included
    assert digest_entry(SECRET, "read", "acme", "acme-r") == f"sha256:{HEX}:read:acme:acme-r"
    assert digest_entry(SECRET, "rw", label="ci") == f"sha256:{HEX}:rw::ci"
    assert digest_entry(SECRET, "rw") == f"sha256:{HEX}:rw"
    with pytest.raises(ValueError):
        digest_tokens("broken")


def _cli(args: list[str], stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "skillos.cli", "token", *args], input=stdin, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_skillos_token_digest_reads_the_token_from_stdin_and_writes_entries():
    out = _cli(["digest"], SECRET + "\n")
    assert out.returncode == 0 and out.stdout.strip() == f"sha256:{HEX}", out.stderr
    assert _cli(["digest", SECRET]).stdout.strip() == f"sha256:{HEX}"
    entry = _cli(["digest", "-", "--scope", "read", "--prefix", "acme", "--label", "acme-r"], SECRET).stdout.strip()
    assert entry == f"sha256:{HEX}:read:acme:acme-r"
    assert Authenticator("tokens", entry).authenticate(_bearer(SECRET)).token_label == "acme-r"
    listed = _cli(["digest-list"], f"{SECRET}:rw,other:read:bob\n")
    assert listed.returncode == 0 and listed.stdout.strip() == f"sha256:{HEX}:rw,sha256:{token_digest('other')}:read:bob"
    for bad in (["digest", "--scope", "admin", SECRET], ["digest", "CHANGE-ME"], ["digest", "--label", "x", SECRET],
                ["digest-list", "no-scope"]):
        failed = _cli(bad)
        assert failed.returncode == 1 and failed.stderr.startswith("error: "), (bad, failed.stderr)


def test_an_env_server_holding_only_digests_lets_the_same_callers_in(tmp_path):
    tokens = f"sha256:{HEX}:read::acme,sha256:{token_digest('op-token')}:rw"
    env = {"SKILLOS_AUTH_MODE": "tokens", "SKILLOS_AUTH_TOKENS": tokens}
    with run_service(["reasoning"], env=env, tmp_path=tmp_path) as svc:
        url = f"{svc.url}/v1/splits"
        assert httpx.get(url, timeout=10).status_code == 401
        assert httpx.get(url, headers={"Authorization": _bearer(HEX)}, timeout=10).status_code == 401
        assert httpx.get(url, headers={"Authorization": _bearer(SECRET)}, timeout=10).status_code == 200
        assert httpx.get(url, headers={"Authorization": _bearer("op-token")}, timeout=10).status_code == 200


def test_a_malformed_digest_stops_the_service_at_start_with_the_reason(tmp_path):
    env = {**os.environ, "SKILLOS_AUTH_MODE": "tokens", "SKILLOS_AUTH_TOKENS": f"sha256:{HEX[:40]}:rw",
           "SKILLOS_LOG_FORMAT": "json"}
    proc = subprocess.run([sys.executable, "-m", "skillos.cli", "serve", "reasoning", "--host", "127.0.0.1",
                           "--port", str(free_port())], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 1
    assert "SKILLOS_AUTH_TOKENS entry 1" in proc.stderr and "64 hex digits" in proc.stderr, proc.stderr[-2000:]
    assert HEX[:40] not in proc.stderr
