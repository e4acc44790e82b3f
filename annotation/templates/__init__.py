"""Jinja2 templates of the annotation app (a package so that setuptools ships them)."""
