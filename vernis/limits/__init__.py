"""Limits: rate limits per connection and per member, token quotas, and the usage they count."""
