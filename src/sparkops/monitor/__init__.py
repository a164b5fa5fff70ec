"""Watching long runs: sample thermals, power, clocks and memory; judge the samples into events.

Same flow as preflight, over time: ``sampler`` collects rows (impure, bounded), ``analyze`` judges
a sequence of rows into :class:`~sparkops.monitor.events.Event` s (pure, streaming), ``daemon``
and ``watch`` are the front ends (a background sampler; a wrapper around the user's command).
"""
