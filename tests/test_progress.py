"""goodput_jax._progress.ProgressBar: draws on a terminal, stays silent when redirected."""

import io

from goodput_jax._progress import ProgressBar


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_silent_on_a_redirected_stream():
    out = io.StringIO()
    bar = ProgressBar(10, label="x", stream=out)
    bar.update(3)
    bar(10, 10, 3600.0)
    bar.close()
    assert out.getvalue() == "" and not bar.enabled and bar.done == 10


def test_draws_in_place_on_a_terminal(capsys):
    out = Tty()
    bar = ProgressBar(4, label="sim", stream=out, min_interval=0.0)
    bar(2, 4, 7200.0)
    assert "\r" in out.getvalue() and "sim" in out.getvalue() and "t=  2.00 h" in out.getvalue()
    bar.message("hello")
    assert capsys.readouterr().out == "hello\n"
    bar.update(2)
    bar.close()
    assert out.getvalue().endswith("\n") and "4/4" in out.getvalue()
    disabled = Tty()
    ProgressBar(4, stream=disabled, enabled=False).update(4)
    assert disabled.getvalue() == ""
