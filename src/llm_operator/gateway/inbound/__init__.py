"""A request as the request path reads it, from either server (``Incoming``).

The lowest floor of the gateway: imports nothing of it.
"""
