"""Hostile strings planted in a run to check that reports render them as text."""

PAYLOAD = "<script>alert('pwned')</script>"
IMG_PAYLOAD = "<img src=x onerror=alert(1)>"
