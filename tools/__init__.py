"""Development tools of the privembed repository (not part of the package or its wheel)."""
