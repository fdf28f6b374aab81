"""The small core every service shares: consumer loop, settings, errors, dead letters, metrics."""
