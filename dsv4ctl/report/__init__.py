"""dsv4ctl.report."""
