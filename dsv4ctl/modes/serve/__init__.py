"""dsv4ctl.modes.serve."""
