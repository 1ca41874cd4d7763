"""dsv4ctl.modes.align."""
