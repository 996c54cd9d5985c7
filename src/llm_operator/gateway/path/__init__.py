"""A request's path: the Exchange it carries, the parts that decide it, guarded streams.

``request_path`` runs the parts (``parts/``, one module each) in order around one
``exchange``; ``answers`` are the gateway's own kinds of answer; ``guarded_stream`` checks a
stream as it comes; ``judging`` asks guard models as any request is sent. May import
routing, flow, providers, upstream, telemetry, settings and the errors; not the server.
"""
