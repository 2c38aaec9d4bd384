"""HTTP gateways (Falcon ASGI under gunicorn): authenticate, validate, forward over ZeroMQ.

- `ssp_app`: the SSP listener, `create_app()` for gunicorn; routes forwarded to the hub per
  the contract in `ipc.messages`.
- `auth`: bearer middleware; `body`: body size/content type/JSON; `errors`: `{error, message}`
  answers; `hub`: the per-worker link to the hub; `sse`: `GET /logs` streaming.
- `serve`: the gunicorn command line the hub runs.
- `testing`: a fake hub (in-process or `python -m gateway.testing`) and `GatewayUnderTest`.
"""
