"""Integrations of ctxcache with model libraries (optional extras; each module imports its library on import)."""
