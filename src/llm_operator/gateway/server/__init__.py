"""The gateway's HTTP front: its own server, and the endpoints beside the request path.

Owns the httptools server the proxied POSTs are served on (``http``), and what answers
outside the request path or around it: ``/v1/moderations``, the Batch and Files APIs,
``/openapi.json``. May import the request path and everything below it; only ``app``
imports it.
"""
