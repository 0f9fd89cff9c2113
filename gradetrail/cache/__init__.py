"""The response cache: storage, in-flight claims, responses pending a write."""
