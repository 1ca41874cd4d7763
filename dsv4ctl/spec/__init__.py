"""dsv4ctl.spec."""
