"""Optional SDK extensions (computer use)."""
