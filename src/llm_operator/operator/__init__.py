"""The Kubernetes operator: kopf handlers, applying children, observing status (I/O)."""
