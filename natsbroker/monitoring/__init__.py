"""monitoring."""
