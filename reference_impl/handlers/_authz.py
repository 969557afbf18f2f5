"""Authorization for handlers (Kafka's AuthHelper over the model's AclStore).

The principal is per connection: User:<name> once SaslAuthenticate succeeded
(sasl_authenticate.py), User:ANONYMOUS otherwise. Without an authorizer every check passes.
"""

from __future__ import annotations

from reference_impl.handlers.registry import RequestContext
from reference_impl.model.acls import CLUSTER_NAME, Operation, ResourceType

PRINCIPAL = "principal"  # connection_state key
ANONYMOUS = "User:ANONYMOUS"

Op, Res = Operation, ResourceType


def principal(ctx: RequestContext) -> str:
    return ctx.connection_state.get(PRINCIPAL, ANONYMOUS)


def authorized(ctx: RequestContext, op: Operation, rtype: ResourceType, name: str) -> bool:
    return ctx.state.acls.authorize(principal(ctx), ctx.client_host, op, rtype, name)


def cluster_action(ctx: RequestContext) -> bool:
    """CLUSTER_ACTION on the cluster: the inter-broker RPCs (WriteTxnMarkers, share state)."""
    return authorized(ctx, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_NAME)
