"""dsv4ctl.store."""
