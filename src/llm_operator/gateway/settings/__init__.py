"""The gateway's configuration file: its pydantic models, flow control's, how it is read.

Imports nothing else of the gateway.
"""
