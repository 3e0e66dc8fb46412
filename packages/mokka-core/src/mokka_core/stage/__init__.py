"""Surface API, staging, the render engine and the node store."""
