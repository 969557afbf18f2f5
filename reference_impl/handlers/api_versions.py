"""ApiVersions (key 18): advertise exactly the handlers this broker registered."""

from __future__ import annotations

import datetime

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode

from reference_impl.handlers.registry import HANDLERS, RequestContext, handles
from reference_impl.protocol import framing
from reference_impl.protocol.api_keys import ApiKey

NO_THROTTLE = datetime.timedelta(0)
API_KEY = ApiKey.API_VERSIONS


def advertised_versions(config=None) -> list[tuple[int, int, int]]:
    """Registered apis; a feature-gated one only when `config` enables it."""
    return sorted((h.api_key, h.min_version, h.max_version) for h in HANDLERS.values() if h.enabled_for(config))


@handles(API_KEY, 0, 4)
def handle_api_versions(ctx: RequestContext, request) -> object:
    cfg = ctx.state.config
    features = {}
    if ctx.api_version >= 3:  # feature fields are tagged fields of v3+
        features = dict(
            supported_features=tuple(
                ctx.nested("SupportedFeatureKey", name=name, min_version=lo, max_version=hi)
                for name, (lo, hi) in sorted(cfg.supported_features.items())
            ),
            finalized_features_epoch=cfg.finalized_features_epoch if cfg.finalized_features else -1,
            finalized_features=tuple(
                ctx.nested("FinalizedFeatureKey", name=name, max_version_level=lvl, min_version_level=lvl)
                for name, lvl in sorted(cfg.finalized_features.items())
            ),
        )
    return ctx.response(
        error_code=ErrorCode.none,
        api_keys=tuple(
            ctx.nested("ApiVersion", api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in advertised_versions(cfg)
        ),
        throttle_time=NO_THROTTLE,
        **features,
    )


def unsupported_version_response(correlation_id: int) -> bytes:
    """Kafka's answer to an ApiVersions version it does not know (KIP-511,
    ApiVersionsRequest.getErrorResponse): a v0 body with UNSUPPORTED_VERSION listing only
    ApiVersions' own range, the version the client retries with (franz-go reads the first
    entry as that version and refuses a list that starts with another api)."""
    body = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(
            ApiVersionV0(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in advertised_versions() if k == API_KEY
        ),
    )
    return framing.encode_response(body, correlation_id, API_KEY, 0)
