"""The socket only: the wire protocol, its encoder, the endpoint and the per-socket connection."""
