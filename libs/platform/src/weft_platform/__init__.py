"""Shared runtime of Weft's services: settings, logging, Kafka bus, health, service app."""
