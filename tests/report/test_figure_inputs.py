"""figure() names the input a figure needs when it is missing (a one-line ValueError)."""

import pytest

from goodput_jax.report import figures


@pytest.mark.parametrize(("which", "name"), [("timeline", "timeline"), ("breakdown", "details"),
                                             ("batch", "curves"), ("replicas", "curves")])
def test_figure_without_its_input_names_it(which, name):
    with pytest.raises(ValueError, match=rf"^{name} \(None\) is needed for figure '{which}'$"):
        figures.figure(which)
