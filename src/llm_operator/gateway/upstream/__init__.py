"""Calling upstreams: the HTTP/1.1 client, egress proxies, upstream credentials.

Imports only the settings.
"""
