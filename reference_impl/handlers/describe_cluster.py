"""DescribeCluster (key 60): live brokers (fenced ones on request, v2+), controller,
cluster id. Only the BROKER endpoint type is served, as by a Kafka broker."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from reference_impl.handlers.registry import RequestContext, handles
from reference_impl.model.topics import CLUSTER_AUTHORIZED_OPERATIONS
from reference_impl.protocol import payloads
from reference_impl.protocol.api_keys import ApiKey

API_KEY = ApiKey.DESCRIBE_CLUSTER
NO_THROTTLE = datetime.timedelta(0)
ENDPOINT_BROKER = 1
ENDPOINT_CONTROLLER = 2
UNSET_AUTHORIZED_OPERATIONS = -(2**31)


@handles(API_KEY, 0, 2)
def handle_describe_cluster(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    endpoint_type = int(payloads.get(request, "endpoint_type", ENDPOINT_BROKER))
    if endpoint_type not in (ENDPOINT_BROKER, ENDPOINT_CONTROLLER):
        return ctx.response(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.invalid_request if version == 0 else ErrorCode.unsupported_endpoint_type,
            error_message=f"Unsupported endpoint type {endpoint_type}",
            cluster_id="",
            controller_id=-1,
            brokers=(),
        )
    if endpoint_type != ENDPOINT_BROKER:
        return ctx.response(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.invalid_request if version == 0 else ErrorCode.mismatched_endpoint_type,
            error_message="The request was sent to a broker endpoint but asked for the controller endpoint type",
            cluster_id="",
            controller_id=-1,
            brokers=(),
        )
    state = ctx.state
    include_fenced = bool(payloads.get(request, "include_fenced_brokers", False))
    brokers = []
    for node_id, ep in sorted(state.nodes.items()):
        fenced = node_id not in state.alive
        if fenced and not include_fenced:
            continue
        brokers.append(
            ctx.nested(
                "DescribeClusterBroker",
                broker_id=node_id,
                host=ep.host,
                port=ep.port,
                rack=ep.rack,
                is_fenced=fenced,
            )
        )
    listed = {b.broker_id for b in brokers}
    controller = state.controller_id if state.controller_id in listed else -1
    ops = (
        CLUSTER_AUTHORIZED_OPERATIONS
        if payloads.get(request, "include_cluster_authorized_operations", False)
        else UNSET_AUTHORIZED_OPERATIONS
    )
    return ctx.response(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=ENDPOINT_BROKER,
        cluster_id=state.config.cluster_id,
        controller_id=controller,
        brokers=tuple(brokers),
        cluster_authorized_operations=ops,
    )
