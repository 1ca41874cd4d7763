"""dsv4ctl.modes."""
