"""Fixtures: a fresh stream (random key, a random multicast port on
loopback) per test, so tests never hear each other (nor other jobs on the
machine)."""

import os
import random

import pytest


class Stream:
    def __init__(self):
        self.key = os.urandom(32).hex()
        self.group = f"239.255.42.{random.randint(1, 254)}:{random.randint(20000, 60000)}"
        self.interface = "127.0.0.1"

    def kw(self):
        return {"key": self.key, "group": self.group, "interface": self.interface}


@pytest.fixture
def stream():
    return Stream()
