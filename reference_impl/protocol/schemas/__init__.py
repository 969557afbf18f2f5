"""Message schemas kio does not have: KIP-1289's TxnShareAcknowledge (api key 93).

`json/` holds the message-schema JSON in Kafka's format (with a note of the KIP section it
comes from), `generated/` the classes `codegen.py` makes from it. `lookup()` is the one
registry function `framing.request_schema` / `response_schema` fall back to when kio does
not know an api key, so the raw client, the reference broker and the trace decoder all
find these classes the same way.
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
    return getattr(module, f"{stem}{kind.capitalize()}")
