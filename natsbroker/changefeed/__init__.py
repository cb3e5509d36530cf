"""changefeed."""
