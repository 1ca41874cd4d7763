"""dsv4ctl.campaign."""
