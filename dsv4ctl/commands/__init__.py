"""One module per command group; `dsv4ctl.cli` wires them together."""
