"""A thin adapter over toxiproxy-python 0.1.1, one Toxiproxy server per adapter.

The library keeps the server's host and port as class attributes of ``APIConsumer``
(one server per process) and passes no request timeout. Every call here runs under one
module lock with ``APIConsumer`` pointed at this adapter's server, and the library's
``requests`` is wrapped so each HTTP call carries a timeout. Toxic update, which the
library lacks, is ``POST /proxies/{proxy}/toxics/{toxic}`` on the server's HTTP API.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

import requests
import toxiproxy.api as _api
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.proxy import Proxy

DEFAULT_TIMEOUT_S = 10.0
_LOCK = threading.RLock()


class _TimedRequests:
    """Stands in for ``requests`` inside toxiproxy.api: same calls, a timeout on each."""

    timeout_s = DEFAULT_TIMEOUT_S

    def get(self, **kw: Any) -> requests.Response:
        return requests.get(timeout=self.timeout_s, **kw)

    def post(self, **kw: Any) -> requests.Response:
        return requests.post(timeout=self.timeout_s, **kw)

    def delete(self, **kw: Any) -> requests.Response:
        return requests.delete(timeout=self.timeout_s, **kw)


_TIMED = _TimedRequests()
_api.requests = _TIMED  # type: ignore[assignment]


class ToxiproxyClient:
    """Proxies and toxics on one Toxiproxy server (``host:port``)."""

    def __init__(self, host: str, port: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self._tp = Toxiproxy()

    @contextmanager
    def _bound(self) -> Iterator[Toxiproxy]:
        with _LOCK:
            saved = (APIConsumer.host, APIConsumer.port, _TIMED.timeout_s)
            APIConsumer.host, APIConsumer.port, _TIMED.timeout_s = self.host, self.port, self.timeout_s
            try:
                yield self._tp
            finally:
                APIConsumer.host, APIConsumer.port, _TIMED.timeout_s = saved

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def version(self) -> str:
        with self._bound():
            return str(requests.get(f"{self.url}/version", timeout=self.timeout_s).json()["version"])

    def create(self, name: str, upstream: str, listen: str = "127.0.0.1:0") -> Proxy:
        with self._bound() as tp:
            return tp.create(upstream=upstream, name=name, listen=listen)

    def proxy(self, name: str) -> Proxy:
        with self._bound() as tp:
            proxy = tp.get_proxy(name)
        if proxy is None:
            raise KeyError(f"toxiproxy: no proxy {name!r}")
        return proxy

    def proxies(self) -> dict[str, Proxy]:
        with self._bound() as tp:
            return tp.proxies()

    def listen_address(self, name: str) -> tuple[str, int]:
        host, _, port = self.proxy(name).listen.rpartition(":")
        return host, int(port)

    def add_toxic(self, proxy: str, type: str, name: str | None = None, stream: str = "downstream",
                  toxicity: float = 1.0, **attributes: Any) -> str:
        name = name or f"{type}_{stream}"
        with self._bound():
            self.proxy(proxy).add_toxic(type=type, name=name, stream=stream, toxicity=toxicity, attributes=attributes)
        return name

    def update_toxic(self, proxy: str, name: str, toxicity: float | None = None, **attributes: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"attributes": attributes}
        if toxicity is not None:
            body["toxicity"] = toxicity
        resp = requests.post(f"{self.url}/proxies/{proxy}/toxics/{name}", json=body, timeout=self.timeout_s)
        resp.raise_for_status()
        return resp.json()

    def update_upstream(self, proxy: str, upstream: str) -> None:
        """Point a proxy at another upstream (the server's ``POST /proxies/{name}``)."""
        resp = requests.post(f"{self.url}/proxies/{proxy}", json={"upstream": upstream}, timeout=self.timeout_s)
        resp.raise_for_status()

    def toxics(self, proxy: str) -> dict[str, Any]:
        with self._bound():
            return {n: t.attributes for n, t in self.proxy(proxy).toxics().items()}

    def remove_toxic(self, proxy: str, name: str) -> None:
        with self._bound():
            self.proxy(proxy).destroy_toxic(name)

    def disable(self, proxy: str) -> None:
        with self._bound():
            self.proxy(proxy).disable()

    def enable(self, proxy: str) -> None:
        with self._bound():
            self.proxy(proxy).enable()

    def reset(self) -> None:
        """Every proxy enabled, every toxic removed."""
        with self._bound() as tp:
            tp.reset()

    def destroy_all(self) -> None:
        with self._bound() as tp:
            tp.destroy_all()
