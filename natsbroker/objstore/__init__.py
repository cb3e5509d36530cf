"""objstore."""
