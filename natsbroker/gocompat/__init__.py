"""gocompat."""
