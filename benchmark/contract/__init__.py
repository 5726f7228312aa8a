"""The algorithm contract: the generic checks every registered algorithm must pass, built-in or plugin
(``checks``), and the tests the pytest plugin (``benchmark.pytest_plugin``) collects to run them on a plugin's
algorithms (``plugin_tests``)."""
