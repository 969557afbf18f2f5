"""The client seam: every wire and client helper the suites, chaos workloads, benchmarks and
replay share (floor 3, above targets/, rules/, reports/, below conformance/ and replay/).

- `wire`: raw protocol requests through `reference_impl.client.raw_client`;
- `txn`: InitProducerId / AddPartitionsToTxn / EndTxn and the other transaction calls;
- `errors`: the retriable error-code sets (coordinator, leader, transaction settling);
- `share`: share-group (KIP-932) requests and acknowledgement helpers;
- `groups`: consumer-group membership under the classic or the KIP-848 consumer protocol
  (ConsumerGroupHeartbeat, member epochs, reconciliation);
- `acl`: ACL grants for authorizer targets;
- `confluent`: confluent-kafka (librdkafka) operations with deadlines;
- `normalize`: protocol observations made comparable across targets;
- `outcomes`: the client outcome table (a call's result -> a history completion).
"""
