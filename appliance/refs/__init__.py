"""Time references beyond the first GNSS receiver, and the selector that picks the one driving the clock."""
