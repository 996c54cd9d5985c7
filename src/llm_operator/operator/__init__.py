"""The Kubernetes operator: watch caches, a reconcile queue, applying children, status (I/O)."""
