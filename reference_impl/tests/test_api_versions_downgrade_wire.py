"""ApiVersions of a version the reference does not know is answered as Kafka 4.4.0 answers it
(checked on kafka-native: v999 -> v0 body, UNSUPPORTED_VERSION, ApiKeys = [(18, 0, 5)]): only
ApiVersions' own range. franz-go sends ApiVersions v5 first and retries with ApiKeys[0]'s max
version; a full list starting with Produce made it drop the connection, so its KIP-848 probe
never saw ConsumerGroupHeartbeat and its regex consumers fell back to the classic protocol."""

from __future__ import annotations

import struct

from kio.schema.errors import ErrorCode

from reference_impl.client.raw_client import ClusterClient
from reference_impl.protocol import framing
from reference_impl.protocol.api_keys import ApiKey


def test_unknown_api_versions_version_lists_only_api_versions(client: ClusterClient) -> None:
    client_id = b"kipcheck"
    header = struct.pack(">hhih", ApiKey.API_VERSIONS, 999, 11, len(client_id)) + client_id + b"\x00"
    raw = client.bootstrap.send_frame(framing.size_prefixed(header + b"\x00\x00\x00"))
    correlation_id, body = framing.decode_response(raw, ApiKey.API_VERSIONS, 0)
    assert correlation_id == 11 and body.error_code == ErrorCode.unsupported_version
    supported = client.bootstrap.api_versions()[ApiKey.API_VERSIONS]
    assert [(int(k.api_key), int(k.min_version), int(k.max_version)) for k in body.api_keys] == [
        (ApiKey.API_VERSIONS, *supported)]
