"""Flow control: bands, fair queues and slots per pool, and how full each engine is.

``bands`` gives a request its band and fairness ID, ``control`` its slot or its turn,
``queue`` the waiting room, ``saturation`` and ``engine_metrics`` how much each replica's
engine may hold (docs/flow-control.md). Imports only the settings: it knows nothing of
routes or requests.
"""
