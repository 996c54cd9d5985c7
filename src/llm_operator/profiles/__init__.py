"""Vendor and engine profiles, operator settings, and the capacity planner."""
