"""Message schemas kio does not have: KIP-1289's TxnShareAcknowledge (api key 93), and
tolerant versions of kio schemas that refuse values Kafka really sends.

`json/` holds the message-schema JSON in Kafka's format (with a note of the KIP section it
comes from), `generated/` the classes `codegen.py` makes from it. `lookup()` is the one
registry function `framing.request_schema` / `response_schema` fall back to when kio does
not know an api key, so the raw client, the reference broker and the trace decoder all
find these classes the same way; `framing.decode_tolerant_response` reads a frame with a
tolerant class.
"""

from __future__ import annotations

import importlib

# api key -> (generated package, class name stem, valid versions)
EXTRA_APIS: dict[int, tuple[str, str, range]] = {
    93: ("txn_share_acknowledge", "TxnShareAcknowledge", range(0, 1)),
}


def lookup(api_key: int, api_version: int, kind: str) -> type | None:
    """The generated request/response class for (api_key, api_version), or None."""
    entry = EXTRA_APIS.get(api_key)
    if entry is None or api_version not in entry[2] or kind not in ("request", "response"):
        return None
    package, stem, _ = entry
    module = importlib.import_module(f"{__name__}.generated.{package}.v{api_version}.{kind}")
    return getattr(module, f"{stem}{kind.capitalize()}")  # probe: a generated module imported by name


# api key -> (generated package, class name stem, valid versions) of responses kio knows but
# refuses as Kafka sends them: DescribeTransactions v0's TransactionStartTimeMs is -1 for an
# id with no transaction started, which kio's timestamp type rejects.
TOLERANT_RESPONSES: dict[int, tuple[str, str, range]] = {
    65: ("describe_transactions", "DescribeTransactions", range(0, 1)),
}


def tolerant_response(api_key: int, api_version: int) -> type | None:
    """The generated tolerant response class for (api_key, api_version), or None."""
    entry = TOLERANT_RESPONSES.get(api_key)
    if entry is None or api_version not in entry[2]:
        return None
    package, stem, _ = entry
    module = importlib.import_module(f"{__name__}.generated.{package}.v{api_version}.response")
    return getattr(module, f"{stem}Response")  # probe: a generated module imported by name

