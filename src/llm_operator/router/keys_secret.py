"""The router's client keys as a Secret (the one its keys file is mounted from), for the console.

Read and written through the API server: a write carries the resourceVersion it read, so
an edit made meanwhile (another administrator, `kubectl edit`) is never overwritten: the
API server answers 409 and the console applies its change again to the newer keys. The
kubelet brings every router replica's mounted file up to date, usually within a minute.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import aiohttp

from llm_operator.access.keyring import KeyringError
from llm_operator.access.keystore import StaleKeys, document_text, parse_document
from llm_operator.kube import ApiError, Kube

ITEM = "keys.yaml"


class SecretKeyStore:
    """The keys file ``item`` of Secret ``namespace/name`` (created by the first write)."""

    def __init__(self, kube: Kube, namespace: str, name: str, item: str = ITEM) -> None:
        self.kube, self.namespace, self.name, self.item = kube, namespace, name, item
        self.where = f"Secret {namespace}/{name} ({item})"

    def _refused(self, exc: ApiError, verb: str) -> KeyringError:
        if exc.status == 403:
            return KeyringError(f"{self.where}: the router may not {verb} it: its Role needs "
                                f"get and patch on the Secret {self.name} "
                                "(config/router-admin)")
        return KeyringError(f"{self.where}: the API server refused to {verb} it: "
                            f"HTTP {exc.status} {exc.reason}")

    def _unreachable(self, exc: Exception, verb: str) -> KeyringError:
        return KeyringError(f"{self.where}: the API server could not be reached to {verb} it "
                            f"({type(exc).__name__}); nothing was changed: try again")

    async def read(self) -> tuple[object, str]:
        try:
            secret = await self.kube.get("v1", "secrets", self.namespace, self.name)
        except ApiError as exc:
            raise self._refused(exc, "read") from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._unreachable(exc, "read") from None
        if secret is None:
            return None, ""
        encoded = (secret.get("data") or {}).get(self.item)
        try:
            text = base64.b64decode(encoded, validate=True).decode() if encoded else ""
        except (binascii.Error, UnicodeDecodeError):
            raise KeyringError(f"{self.where}: not base64-encoded UTF-8") from None
        return (parse_document(text, self.where),
                str(secret["metadata"].get("resourceVersion", "")))

    async def write(self, document: dict[str, Any], version: str) -> None:
        encoded = base64.b64encode(document_text(document).encode()).decode()
        try:
            if not version:
                await self.kube.request(
                    "POST", f"/api/v1/namespaces/{self.namespace}/secrets", body={
                        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "data": {self.item: encoded}})
            else:
                await self.kube.merge_patch(
                    "v1", "secrets", self.namespace, self.name, body={
                        "metadata": {"resourceVersion": version},
                        "data": {self.item: encoded}})
        except ApiError as exc:
            if exc.status in (404, 409):  # deleted or changed since it was read
                raise StaleKeys from None
            raise self._refused(exc, "write") from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._unreachable(exc, "write") from None
