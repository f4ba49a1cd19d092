"""Webhooks (SPEC §22): events the host's receivers hear of, without holding a socket.

`outbox` turns an event into rows of the `webhook_delivery` table, written by the code that makes
the change, in its own transaction; `delivery` sends them: signed JSON POSTs, retried with backoff,
each sent by one instance at a time (a lease on its row); `log` lists and retries them (the CLI).
"""
