"""The gateway's request path as parts, each deciding one thing of an Exchange (see app.py)."""
