"""UpdateFeatures (key 57), v0-v2: raise or lower finalized feature levels online.

In Kafka the controller quorum decides (FeatureControlManager) and brokers learn the new
levels from the metadata log; the reference's single BrokerConfig is that log, so every node
sees the change at once (KIP-1289's "online metadata propagation"). All or nothing; v2
answers only the top-level error (KIP-1022), v0/v1 also per feature. ValidateOnly changes
nothing. Lowering share.version below 2 is refused while records are TX_PENDING (KIP-1289
"Downgrade").
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model import feature_levels as fl
from reference_impl.model import share_txn
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.UPDATE_FEATURES
NO_THROTTLE = datetime.timedelta(0)


def _updates(request: Any, version: int) -> list[fl.FeatureUpdate]:
    out = []
    for u in request.feature_updates:
        if version == 0:
            kind = fl.SAFE_DOWNGRADE if u.allow_downgrade else fl.UPGRADE
        else:
            kind = int(u.upgrade_type)
        out.append(fl.FeatureUpdate(u.feature, int(u.max_version_level), kind))
    return out


@handles(API_KEY, 0, 2)
def handle_update_features(ctx: RequestContext, request: Any) -> Any:
    cfg = ctx.state.config
    blockers = [share_txn.downgrade_blocker(ctx.state.share_partitions.txn_pending_count)]
    results, new = fl.plan(_updates(request, ctx.api_version), cfg.finalized_features, cfg.supported_features, blockers)
    failed = next((r for r in results if r.error_code != ErrorCode.none), None)
    if new is not None and not payloads.get(request, "validate_only", False) and new != cfg.finalized_features:
        cfg.finalized_features = new
        cfg.finalized_features_epoch += 1
    top = (failed.error_code, failed.message) if failed is not None else (ErrorCode.none, None)
    per_feature = () if ctx.api_version >= 2 else tuple(  # v2 has no per-feature results
        ctx.nested("UpdatableFeatureResult", feature=r.feature, error_code=r.error_code, error_message=r.message)
        for r in results
    )
    return ctx.response(throttle_time=NO_THROTTLE, error_code=top[0], error_message=top[1], results=per_feature)
