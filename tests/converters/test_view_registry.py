"""The view registry: catalog.VIEWS (what the CLI offers without loading the converters)
names exactly the registered views, the seven layers are the summary's, and a name is
registered once."""

from __future__ import annotations

import pytest
from wp_fresh import fresh_python
from wp_mcp.converters import catalog, views

LAYERS = ("compute", "memory", "interconnect", "network", "storage", "control", "data")


def test_the_catalog_names_every_registered_view_in_its_order():
    assert views.names() == catalog.VIEWS


def test_the_layers_are_the_seven_the_summary_lists_each_with_its_top_kinds():
    layers = views.layers()
    assert tuple(view.name for view in layers) == LAYERS
    assert all(view.top and view.legend for view in layers)
    assert not views.REGISTRY["topology"].is_layer


@pytest.mark.parametrize("name", ["compute", "summary", "entity"])
def test_a_view_name_is_registered_once(name):
    with pytest.raises(ValueError, match="registered twice"):
        views.view(name, legend="x")(lambda facts: [])
    assert views.names() == catalog.VIEWS


def test_a_page_of_one_view_loads_that_view_alone_and_the_listing_keeps_the_catalogs_order():
    """A fresh process that shows one view imports its module only; listing the views (the
    summary's layers) then loads the others, each in its catalog place."""
    code = (
        "import sys\n"
        "from wp_mcp.converters import catalog, views\n"
        "views.view_named('network')\n"
        "print(sorted(m for m in sys.modules if m.startswith('wp_mcp.converters.views.')))\n"
        "print(views.names() == catalog.VIEWS)\n"
    )
    alone, in_order = fresh_python(code).splitlines()
    assert alone == "['wp_mcp.converters.views.network']"
    assert in_order == "True"
