"""OCI images written without Docker: docker-archive tars (model images, the test images)."""
