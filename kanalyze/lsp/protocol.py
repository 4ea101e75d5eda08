"""The JSON-RPC protocol of the server: pygls's, answering malformed requests
instead of dropping them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pygls.exceptions import JsonRpcException
from pygls.protocol import LanguageServerProtocol


@dataclass
class _BadRequest:
    id: Any
    error: JsonRpcException


class KanalyzeProtocol(LanguageServerProtocol):
    """pygls logs a request whose params do not match the protocol and never
    answers it, which leaves a client waiting; answer with the error instead."""

    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if isinstance(data, dict) and "method" in data and data.get("id") is not None:
                return _BadRequest(data["id"], exc)
            raise

    def handle_message(self, message):
        if isinstance(message, _BadRequest):
            self._send_response(message.id, None, message.error.to_response_error())
            return
        super().handle_message(message)
