"""The client seam: how a client call's result becomes a history completion."""

from typing import Any


def config(target: Any, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """librdkafka settings for ``target`` plus ``settings`` (verbatim), logging only
    critical client messages: connection-refused chatter under faults is expected."""
    cfg: dict[str, Any] = dict(target.client_config())
    cfg["log_level"] = 2
    cfg.update(settings or {})
    return cfg
