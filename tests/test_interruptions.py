"""A Ctrl-C or SIGTERM that comes while a checkpoint and its epochs' metrics are logged waits
for both: the resumed run must not start after epochs whose metrics were never logged."""

import os
import signal

import pytest

from pipeline.tracking.errors import Terminated, interruptions_held, raise_terminated


@pytest.fixture
def sigterm_raises():
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    yield
    signal.signal(signal.SIGTERM, previous)


SIGNALS = [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)]


@pytest.mark.parametrize(("sig", "raised"), SIGNALS)
def test_a_signal_during_the_block_is_acted_on_when_it_ends(sigterm_raises, sig, raised):
    done = []
    with pytest.raises(raised), interruptions_held():
        os.kill(os.getpid(), sig)
        done.append("first")
        done.append("second")
    assert done == ["first", "second"]
    assert signal.getsignal(signal.SIGTERM) is raise_terminated


def test_a_block_without_a_signal_ends_quietly_and_restores_the_handlers(sigterm_raises):
    before = signal.getsignal(signal.SIGINT)
    with interruptions_held():
        pass
    assert signal.getsignal(signal.SIGTERM) is raise_terminated
    assert signal.getsignal(signal.SIGINT) is before
