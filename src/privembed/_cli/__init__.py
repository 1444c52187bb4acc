"""Command-line plumbing shared by every sub-command (the commands themselves stay thin)."""
