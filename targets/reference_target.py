"""The embedded reference broker as a target (default): no Java, no Docker."""

from __future__ import annotations

import secrets
import time

from targets.target import (
    ACL_USERS, AUTHORIZER_SETTING, AUTHORIZERS, SUPER_USER, AclPrincipals, NotSupportedByTarget, Target, TargetError,
    TargetSpec, wait_until_ready,
)
from reference_impl.model.acls import AuthorizerConfig
from reference_impl.model.broker_state import BrokerConfig
from reference_impl.model.seeded_bugs import NO_BUGS, SeededBugs
from reference_impl.model.share_partition_config import SharePartitionConfig
from reference_impl.model.transaction_coordinator import TransactionConfig
from reference_impl.server.broker_server import ThreadedReferenceCluster

SHARE_MIN_RECORD_LOCK_DURATION_MS = 1000


def reference_target_config(
    txn_id_expiration_ms: int | None = None, seeded_bugs: SeededBugs = NO_BUGS, authorizer: AuthorizerConfig | None = None,
) -> BrokerConfig:
    """Kafka's defaults, except (as the kafka-native provider configures its brokers) the
    timed-out-transaction scan runs every second (Kafka's default is 10 s) and
    group.share.min.record.lock.duration.ms is 1000 (Kafka: 15000), so that a share group's
    `share.record.lock.duration.ms` can be set low enough to observe lock expiry in a test.

    `txn_id_expiration_ms` (spec option, e.g. ``reference:txn_id_expiration_ms=2000``) sets
    transactional.id.expiration.ms, and the expired-id scan
    (transaction.remove.expired.transaction.cleanup.interval.ms, default 1 h) then runs every
    second so that expiry can be observed in a test.

    `seeded_bugs` (spec option ``reference:bug=NAME[,NAME]``, reference_impl/model/seeded_bugs.py)
    switches deliberate semantic bugs on, to prove that the suite catches them.

    `authorizer` (spec option ``reference:authorizer=standard``) turns on the SASL/PLAIN
    listener and ACL checks, as kafka-native's authorizer=standard does: the super user
    SUPER_USER and the unprivileged ACL_USERS, allow.everyone.if.no.acl.found=false."""
    txn = TransactionConfig(transaction_abort_timed_out_transaction_cleanup_interval_ms=1000, seeded_bugs=seeded_bugs)
    if txn_id_expiration_ms is not None:
        txn.transactional_id_expiration_ms = txn_id_expiration_ms
        txn.transaction_remove_expired_transaction_cleanup_interval_ms = 1000
    share = SharePartitionConfig(min_record_lock_duration_ms=SHARE_MIN_RECORD_LOCK_DURATION_MS,
                                 release_on_close_decrements_delivery_count=False, seeded_bugs=seeded_bugs)
    return BrokerConfig(transaction=txn, share_partition=share, seeded_bugs=seeded_bugs,
                        authorizer=authorizer or AuthorizerConfig())


class ReferenceTarget(Target):
    def __init__(self, spec: TargetSpec) -> None:
        super().__init__(spec)
        self._cluster: ThreadedReferenceCluster | None = None
        port = spec.option("port", "0")
        if not port.isdigit() or int(port) > 65535:
            raise ValueError(f"reference target: port must be a number in 0..65535, got {port!r}")
        self._port = int(port)
        expiration = spec.option("txn_id_expiration_ms")
        if expiration is not None and (not expiration.isdigit() or int(expiration) <= 0):
            raise ValueError(f"reference target: txn_id_expiration_ms must be a positive number, got {expiration!r}")
        self._txn_id_expiration_ms = None if expiration is None else int(expiration)
        self.seeded_bugs = SeededBugs.parse(spec.option("bug"))  # ValueError names the known bugs
        self.authorizer = spec.option(AUTHORIZER_SETTING, "none")
        if self.authorizer not in AUTHORIZERS:
            raise ValueError(f"reference target: authorizer must be one of {', '.join(AUTHORIZERS)}, got {self.authorizer!r}")
        # name -> SASL/PLAIN password; SUPER_USER is the suite's own clients.
        self._passwords = {u: secrets.token_urlsafe(12) for u in (SUPER_USER, *ACL_USERS)} if self.authorized else {}
        self._advertised_ports: dict[int, int] = {}
        self._request_hook = None

    @property
    def authorized(self) -> bool:
        """authorizer=standard: a SASL_PLAINTEXT (PLAIN) listener and ACLs (model/acls.py)."""
        return self.authorizer != "none"

    def _authorizer_config(self) -> AuthorizerConfig:
        if not self.authorized:
            return AuthorizerConfig()
        return AuthorizerConfig(enabled=True, super_users=frozenset({AclPrincipals.principal(SUPER_USER)}),
                                users=dict(self._passwords))

    def client_config(self) -> dict[str, str]:
        return self.client_config_as(SUPER_USER) if self.authorized else super().client_config()

    def acl_principals(self) -> AclPrincipals:
        if not self.authorized:
            return super().acl_principals()
        return AclPrincipals(self.authorizer, SUPER_USER, ACL_USERS)

    def client_config_as(self, user: str) -> dict[str, str]:
        """SASL_PLAINTEXT / PLAIN settings as `user` (the super user or an ACL user)."""
        self.acl_principals()
        if user not in self._passwords:
            raise ValueError(f"reference target: no user {user!r}; users are {', '.join(ACL_USERS)}")
        return {"bootstrap.servers": self.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": self._passwords[user]}

    def install_request_hook(self, hook: object) -> None:
        """Per-request faults (chaos.nemesis.request_faults.RequestFaultHook; None removes):
        the broker asks the hook about every request before serving it."""
        self._request_hook = hook
        if self._cluster is not None:
            self._cluster.cluster.request_hook = hook

    advertises_client_ports = True

    def advertise_client_ports(self, ports: dict[int, int]) -> None:
        """Before start: node id -> the port Metadata advertises for it (a fault proxy in
        front of the node, which forwards to ``node_bind_address``)."""
        if self._cluster is not None:
            raise TargetError("reference target: advertised ports are set before start")
        self._advertised_ports = dict(ports)

    def node_bind_address(self, node_id: int) -> tuple[str, int]:
        return self.cluster.cluster.host, self.cluster.cluster.bound_port(node_id)

    @property
    def version(self) -> str:
        return "reference"

    @property
    def bootstrap_servers(self) -> str:
        if self._cluster is None:
            raise TargetError("reference target is not started")
        return self._cluster.bootstrap_servers

    @property
    def cluster(self) -> ThreadedReferenceCluster:
        if self._cluster is None:
            raise TargetError("reference target is not started")
        return self._cluster

    def start(self) -> None:
        t0 = time.monotonic()
        self._cluster = ThreadedReferenceCluster(
            brokers=self.spec.nodes, port=self._port, config=reference_target_config(self._txn_id_expiration_ms, self.seeded_bugs, self._authorizer_config()),
            advertised_ports=self._advertised_ports,
        ).start()
        self._cluster.cluster.request_hook = self._request_hook
        wait_until_ready(self._cluster.cluster.bound_servers, 10, "reference broker", security=self.raw_security())
        self.startup_seconds = time.monotonic() - t0

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.stop()
            self._cluster = None

    def kill_node(self, node_id: int) -> None:
        """A crash: the node's listener and connections close and every in-memory cache it
        owned (coordinators, share-partition leaders, share sessions) is lost; whoever owns
        them next rebuilds them from the persisted records (ReferenceState.on_node_crash)."""
        self.cluster.stop_node(node_id, crash=True)

    def stop_node(self, node_id: int) -> None:
        """Same as kill on the in-process broker: a clean shutdown also loses what is only in
        memory (acquired share records, sessions)."""
        self.cluster.stop_node(node_id, crash=True)

    def isolate_node(self, node_id: int) -> None:
        """The node becomes unreachable (listener and connections closed, its coordinators
        and partitions fail over) but keeps its memory; `rejoin_node` ends it."""
        self.cluster.stop_node(node_id, crash=False)

    def rejoin_node(self, node_id: int) -> None:
        self.cluster.start_node(node_id)

    def restart_node(self, node_id: int) -> None:
        self.cluster.stop_node(node_id, crash=True)
        self.cluster.start_node(node_id)

    def pause_node(self, node_id: int) -> None:
        """Not supported: a SIGSTOP'd Kafka broker stops its sockets *and* its timers, but the
        reference's nodes share one model whose timers (transaction timeouts, marker sends,
        session and lock expiry) fire from one cluster-wide ticker, so one node's timers
        cannot be frozen alone; freezing only its sockets would be a network cut (use
        ``partition`` / ``blackhole``), and freezing the ticker would stall the live nodes."""
        raise NotSupportedByTarget(
            "reference cannot pause a node: its nodes share one model whose timers run on one cluster-wide "
            "ticker, so one node cannot be frozen alone (use partition or blackhole for a silent node)")
