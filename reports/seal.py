"""The evidence seal: a digest over every file of a results directory that the report is
built from, written by `kipcheck certify` when the run ends (``results/seal.json``) and named
in the certification statement, so that `kipcheck report` and `kipcheck verify` can refuse
a folder whose rows were deleted, added, edited or trimmed, or whose run.json was edited.

Each worker's rows file is a SHA-256 hash chain over its canonical rows (the JSON object
with sorted keys and no spaces; a line that is not JSON is taken byte for byte); every other
input (run.json, session.json, targets-*.json, expected.json) is one SHA-256 over its
canonical JSON. The root is the SHA-256 of the canonical seal body (chain heads, row counts
per worker and per target, the file digests and run.json's counts); the per-row index only
helps name the row that changed, and its own chain must give the sealed head. With a
vendor's Ed25519 key the root is signed: a hash shows that nothing changed after the seal,
a signature also shows who sealed it.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from reports.usage import UsageError
from reports.verdicts import NO_TARGET

SEAL_FILE = "seal.json"
SCHEMA = "kipcheck-evidence-seal"
VERSION = 1
ALGORITHM = "sha256 chain per rows file over canonical JSON rows; sha256 of canonical JSON per other file"
SIGNATURE = "ed25519"
# What the report reads from a results directory (reports/results.py), besides the seal.
ROW_PATTERNS = ("*.jsonl", "*.ndjson")
DOC_PATTERNS = ("targets*.json", "session.json", "run.json", "expected.json")
# run.json's counts, named in the seal and in the statement so an edit is named precisely.
RUN_COUNTS = ("status", "expected_tests", "finished_tests", "timed_out", "worker_crashes", "interrupted",
              "unreachable_targets")


class SealError(UsageError):
    """The folder does not match its seal (or has none): one line naming what differs, exit 2
    from any command that reads it."""


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _row_digest(line: str) -> str:
    try:
        return _sha(canonical(json.loads(line)))
    except ValueError:
        return _sha(line.encode())


def _chain_start(name: str) -> str:
    return _sha(f"{SCHEMA}/{VERSION}\0{name}".encode())


def chain(name: str, digests: list[str]) -> str:
    """The head of one rows file's hash chain: h0 from the file name, h_i = sha256(h_(i-1) | d_i)."""
    head = _chain_start(name)
    for d in digests:
        head = _sha(bytes.fromhex(head) + bytes.fromhex(d))
    return head


class _RowsFile:
    """One worker's rows: each non-blank line's digest, test id and target."""

    def __init__(self, path: Path) -> None:
        self.name = path.name
        self.digests: list[str] = []
        self.ids: list[tuple[str, str]] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            self.digests.append(_row_digest(line.strip()))
            self.ids.append(_row_id(line))

    @property
    def head(self) -> str:
        return chain(self.name, self.digests)


def _row_id(line: str) -> tuple[str, str]:
    try:
        row = json.loads(line)
    except ValueError:
        return ("(not JSON)", "")
    if not isinstance(row, dict):
        return ("(not a row)", "")
    return (str(row.get("nodeid") or row.get("test") or "?"), str(row.get("target") or NO_TARGET))


def _files(results_dir: Path, patterns: tuple[str, ...]) -> list[Path]:
    found = {p for pat in patterns for p in results_dir.glob(pat) if p.is_file() and p.name != SEAL_FILE}
    return sorted(found, key=lambda p: p.name.encode())


def _doc_digest(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    try:
        return _sha(canonical(json.loads(text)))
    except ValueError:
        return _sha(text.encode())


def run_counts(results_dir: Path) -> dict[str, Any]:
    """The counts of run.json that decide completeness (reports/outcome.py)."""
    try:
        run = json.loads((results_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(run, dict):
        return {}
    out = {k: run.get(k) for k in RUN_COUNTS}
    for k in ("timed_out", "worker_crashes"):
        out[k] = len(out[k]) if isinstance(out[k], list) else out[k]
    return out


def _body(results_dir: Path) -> tuple[dict[str, Any], dict[str, list[list[str]]]]:
    """The sealed body (what the root covers) and the per-row index of each rows file."""
    workers, index, targets = {}, {}, {}
    for path in _files(results_dir, ROW_PATTERNS):
        rows = _RowsFile(path)
        workers[rows.name] = {"rows": len(rows.digests), "head": rows.head}
        index[rows.name] = [[d, nodeid, target] for d, (nodeid, target) in zip(rows.digests, rows.ids)]
        for _, target in rows.ids:
            targets[target] = targets.get(target, 0) + 1
    counts = run_counts(results_dir)
    body = {
        "schema": SCHEMA, "version": VERSION, "algorithm": ALGORITHM,
        "rows": sum(w["rows"] for w in workers.values()),
        "workers": workers,
        "targets": dict(sorted(targets.items())),
        "files": {p.name: _doc_digest(p) for p in _files(results_dir, DOC_PATTERNS)},
        "run_counts": counts,
        "run_counts_sha256": _sha(canonical(counts)),
    }
    return body, index


def _root(body: Mapping[str, Any]) -> str:
    return _sha(canonical({k: body[k] for k in sorted(body) if k not in ("root", "index", "signature")}))


def write(results_dir: Path, sign_key: bytes | None = None) -> dict[str, Any]:
    """Seal the results directory as it is now; sign the root with an Ed25519 private key
    (PEM bytes) when one is given. Returns the seal."""
    body, index = _body(results_dir)
    seal = {**body, "root": _root(body), "index": index}
    if sign_key is not None:
        key = load_private_key(sign_key)
        seal["signature"] = {
            "algorithm": SIGNATURE,
            "public_key": _public_pem(key.public_key()),
            "value": base64.b64encode(key.sign(seal["root"].encode())).decode(),
        }
    tmp = results_dir / (SEAL_FILE + ".tmp")
    tmp.write_text(json.dumps(seal, indent=1) + "\n", encoding="utf-8")
    tmp.replace(results_dir / SEAL_FILE)
    return seal


def load_private_key(pem: bytes) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise SealError(f"the signing key is not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SealError(f"the signing key is {type(key).__name__.removeprefix('_')}, not an Ed25519 key")
    return key


def load_public_key(pem: bytes) -> Ed25519PublicKey:
    """The receiver's trusted key: an Ed25519 public key (a private key gives its public half)."""
    try:
        key = serialization.load_pem_public_key(pem)
    except ValueError:
        return load_private_key(pem).public_key()
    if not isinstance(key, Ed25519PublicKey):
        raise SealError(f"the key is {type(key).__name__.removeprefix('_')}, not an Ed25519 public key")
    return key


def _public_pem(key: Ed25519PublicKey) -> str:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def fingerprint(public_pem: str) -> str:
    """A short name for a public key: the SHA-256 of its PEM text, first 16 hex digits."""
    return _sha(public_pem.strip().encode())[:16]


def statement(seal: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the certification statement says about the evidence (no per-row index)."""
    if not seal:
        return {"sealed": False, "text": "not sealed: the rows cannot be checked against the run"}
    sig = seal.get("signature") or {}
    return {
        "sealed": True, "root": seal.get("root"), "algorithm": seal.get("algorithm"), "rows": seal.get("rows"),
        "workers": {name: w.get("rows") for name, w in (seal.get("workers") or {}).items()},
        "targets": seal.get("targets"), "run_counts_sha256": seal.get("run_counts_sha256"),
        "signature": ({"algorithm": sig.get("algorithm"), "key_fingerprint": fingerprint(sig.get("public_key", ""))}
                      if sig else None),
        "text": f"{seal.get('rows')} rows in {len(seal.get('workers') or {})} worker file(s), sealed"
                + (f" and signed ({sig.get('algorithm')}, key {fingerprint(sig.get('public_key', ''))})" if sig else ""),
    }


def load(results_dir: Path) -> dict[str, Any] | None:
    """The seal of a results directory, None when it has none; a seal that is not a JSON
    object, or whose root does not match its body, is refused."""
    path = results_dir / SEAL_FILE
    if not path.exists():
        return None
    try:
        seal = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SealError(f"{SEAL_FILE} is unreadable ({exc})") from None
    if not isinstance(seal, dict) or seal.get("schema") != SCHEMA:
        raise SealError(f"{SEAL_FILE} is not a kipcheck evidence seal")
    if seal.get("version") != VERSION:
        raise SealError(f"{SEAL_FILE} has version {seal.get('version')!r}; this kipcheck reads version {VERSION}")
    try:
        root = _root(seal)
    except KeyError as exc:
        raise SealError(f"{SEAL_FILE} lacks {exc}") from None
    if root != seal.get("root"):
        raise SealError(f"{SEAL_FILE} was edited: its root does not match its contents")
    return seal


def check(results_dir: Path, seal: Mapping[str, Any]) -> None:
    """Refuse (SealError) the first difference between the folder and its seal."""
    body, index = _body(results_dir)
    for name, sealed in seal["workers"].items():
        if name not in body["workers"]:
            raise SealError(f"{name} is missing (sealed with {sealed['rows']} rows)")
        if body["workers"][name] != sealed:
            raise SealError(_row_difference(name, seal.get("index", {}).get(name) or [], index[name], sealed))
    for name, w in body["workers"].items():
        if name not in seal["workers"]:
            raise SealError(f"{name} is not in the seal: {w['rows']} rows were added")
    for name, digest in seal["files"].items():
        if name not in body["files"]:
            raise SealError(f"{name} is missing (it was sealed)")
        if body["files"][name] != digest:
            raise SealError(_file_difference(name, seal, body))
    for name in body["files"]:
        if name not in seal["files"]:
            raise SealError(f"{name} is not in the seal: it was added after the run")


def _row_difference(name: str, sealed_index: list[list[str]], now: list[list[str]], sealed: Mapping[str, Any]) -> str:
    """Name the first row of `name` that differs from the seal (deleted, added, changed, trimmed)."""
    sealed_digests = [r[0] for r in sealed_index]
    if len(sealed_index) != sealed["rows"] or chain(name, sealed_digests) != sealed["head"]:
        return f"{SEAL_FILE}'s row index of {name} was edited (it does not give the sealed chain head)"
    for i in range(max(len(sealed_index), len(now))):
        old = sealed_index[i] if i < len(sealed_index) else None
        new = now[i] if i < len(now) else None
        if old is not None and new is not None and old[0] == new[0]:
            continue
        if new is None:
            return (f"{name} was trimmed: {len(now)} of {sealed['rows']} sealed rows; row {i + 1} "
                    f"({_test(old)}) and the {len(sealed_index) - i - 1} after it are missing")
        if old is None:
            return f"{name} has {len(now) - len(sealed_index)} row(s) more than sealed: row {i + 1} ({_test(new)}) was added"
        if i + 1 < len(sealed_index) and sealed_index[i + 1][0] == new[0]:
            return f"row {i + 1} of {name} ({_test(old)}) was deleted"
        if i + 1 < len(now) and now[i + 1][0] == old[0]:
            return f"row {i + 1} of {name} ({_test(new)}) was added"
        return f"row {i + 1} of {name} ({_test(old)}) was changed"
    return f"{name} does not match its seal"


def _test(entry: list[str] | None) -> str:
    return f"test {entry[1]} on {entry[2]}" if entry else "?"


def _file_difference(name: str, seal: Mapping[str, Any], body: Mapping[str, Any]) -> str:
    if name == "run.json" and body["run_counts"] != seal.get("run_counts"):
        old, new = seal.get("run_counts") or {}, body["run_counts"]
        changed = [f"{k} {new.get(k)!r} (sealed {old.get(k)!r})" for k in RUN_COUNTS if old.get(k) != new.get(k)]
        return "run.json's counts were edited: " + ", ".join(changed)
    return f"{name} changed after the run was sealed"


def check_signature(seal: Mapping[str, Any], public_pem: bytes) -> str:
    """Check the seal's signature against the receiver's trusted key; the key's fingerprint."""
    key = load_public_key(public_pem)
    sig = seal.get("signature")
    if not sig:
        raise SealError(f"{SEAL_FILE} is not signed, but a key was given")
    if sig.get("algorithm") != SIGNATURE:
        raise SealError(f"{SEAL_FILE} is signed with {sig.get('algorithm')!r}; this kipcheck checks {SIGNATURE}")
    try:
        key.verify(base64.b64decode(str(sig.get("value", "")), validate=True), str(seal["root"]).encode())
    except (InvalidSignature, ValueError):
        raise SealError(f"the signature of {SEAL_FILE} does not match the given key "
                        f"(sealed by key {fingerprint(sig.get('public_key', ''))})") from None
    return fingerprint(_public_pem(key))


def verified(results_dir: Path) -> dict[str, Any] | None:
    """The folder's seal after checking every sealed file; None when it has no seal."""
    seal = load(results_dir)
    if seal is not None:
        check(results_dir, seal)
    return seal
