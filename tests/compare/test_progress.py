"""The compare progress display: a redrawn bar on a terminal, plain lines in logs and pipes."""
import io

from llmchat.tui.cli.compare import ProgressBar


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    bar = ProgressBar(out)
    bar.update(0, 40, "loading a")
    bar.update(0, 40, "loading a")              # unchanged: not repeated
    for done in range(1, 9):
        bar.update(done, 40, "generating a")    # printed once per tenth of the work
    bar.update(40, 40, "done")
    bar.close()
    assert out.getvalue() == ("compare: 0/40 loading a\ncompare: 1/40 generating a\n"
                              "compare: 4/40 generating a\ncompare: 8/40 generating a\ncompare: 40/40 done\n")


def test_bar_redrawn_in_place_on_a_terminal():
    out = FakeTerminal()
    bar = ProgressBar(out, width=10)
    bar.update(1, 4, "generating a")
    bar.update(4, 4, "done")
    bar.close()
    text = out.getvalue()
    assert text.startswith("\r[##--------] 1/4 generating a")
    assert "\r[##########] 4/4 done" in text
    assert text.endswith("\n") and text.count("\n") == 1
