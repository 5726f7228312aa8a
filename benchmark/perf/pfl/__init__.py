"""fedrepro against pfl-research, Apple's FL simulator, on the same small FedAvg work (issue 45): ``compare``."""
