"""The resolved node: resolve, identities, the inputs it is resolved from."""
