"""The web console at /ui/: what runs, what it costs, and a chat to try it.

A room of its own: the gateway's request path never imports it. `llmop up` and the router
add its routes to the gateway's application (``Gateway.app(more=...)``) and hand it a
source of models (console.views.Source); it reads the gateway's Prometheus registry in
its own process for the live figures (console.series), every few seconds and only while
a page is open. Pages are rendered on the server (jinja2 templates); the browser gets
htmx and uPlot from the package itself (static/vendor, tools/console_vendor.py), never
from a CDN.

It may import api, profiles (the planner) and prometheus_client; nothing of the gateway,
the operator or `llmop up`.
"""
