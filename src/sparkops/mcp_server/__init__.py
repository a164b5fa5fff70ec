"""Serve the checks to coding agents over the Model Context Protocol (issue 9)."""
