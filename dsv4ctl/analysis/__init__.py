"""dsv4ctl.analysis."""
