"""Conformance suites, one per port. Each is a class of behaviour tests that uses one fixture
(named after the port) which a backend's test module provides by subclassing; every backend of
a port runs the same suite."""
