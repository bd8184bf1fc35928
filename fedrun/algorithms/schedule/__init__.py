"""Schedules: how many local steps each client takes per round (fixed, GIFT, AFL, AdaComm)."""
