"""Permit: gangs that lack members wait, holding room for them (``holds``), told what they wait for
(``missing``), by the cycle's permit stage (``stage``)."""
