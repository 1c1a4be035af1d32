"""Platform adapters, one sub-package each: adapter.py (the actor), convert.py, errors.py."""
