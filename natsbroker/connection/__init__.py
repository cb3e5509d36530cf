"""connection."""
