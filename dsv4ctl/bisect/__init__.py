"""dsv4ctl.bisect."""
